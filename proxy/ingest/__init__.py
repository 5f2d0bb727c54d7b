"""Local (LDP) tables: raw rows -> perturbed reports, client-side randomness from the
CSPRNG (:mod:`.ldp_load` metric LDP, :mod:`.subset_ingest` k-Subset)."""
