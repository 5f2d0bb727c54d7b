"""Research baselines: the mechanisms the papers compare dpgate's with, run by the benches (and
checked by tests) beside the served ones in ``mechanisms/``. Never served: several are not
differentially private as dpgate defines it, or use floating-point noise.

* :mod:`.mean` -- AVG by independent noise addition (Algorithm 1; SmartNoise's method).
* :mod:`.metric_ldp` -- eps-LDP range-query baselines (OUE, HH_B, HaarHRR, HIO).
* :mod:`.multitier` -- independent and gradual release across tiers; ideal Subset.
* :mod:`.per_record` -- naive global minimum and personalized-truncation PDP.
* :mod:`.svt` -- SVT-Lap / SVT-Gum / SVT-Gau and the exponential variants of Table 3.
"""
