"""The statement pipeline (see ARCHITECTURE.md): :mod:`.orchestrator` takes a statement
from the wire session through route -> plan -> budget -> scan -> noise -> ledger, and
hands each table mode to its release kind (:mod:`.release` + :mod:`.multitier` central,
ladder and SVT; :mod:`.per_record`; :mod:`.extreme` MAX/MIN; :mod:`.local` metric LDP;
:mod:`.local_subset` LDP Subset)."""
