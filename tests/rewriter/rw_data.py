"""Test data for the rewriter tests: a pums-like config and a few rows."""

CONFIG = {
    "tiers": {"default": {"epsilon": 1, "budget": 10}},
    "roles": {"analyst": {"tier": "default"}},
    "server": {"auth": "trust"},
    "tables": {
        "pums": {
            "columns": {
                "age": {"type": "int", "lower": 0, "upper": 100},
                "sex": {"type": "int", "domain": [0, 1]},
                "educ": {"type": "int", "domain_range": [1, 16]},
                "race": {"type": "int", "domain_range": [1, 6]},
                "income": {"type": "float", "lower": 0, "upper": 500000},
                "married": {"type": "int", "domain": [0, 1]},
                "name": {"type": "text"},
                "state": {"type": "text", "domain": ["ca", "ny", "tx"]},
                "big": {"type": "int", "domain_range": [0, 99]},
                "flag": {"type": "bool", "domain": [True, False]},
                "hours": {"type": "float", "lower": 10, "upper": 60},
                "score": {"type": "int", "lower": 10, "upper": 20},
            }
        }
    },
}

# (age, sex, educ, race, income, married, name, state, big, flag, hours, score)
ROWS = [
    (25, 0, 12, 1, 30000.0, 1, "alice", "ca", 3, True, 40.0, 15),
    (40, 1, 16, 2, 85000.5, 1, "bob", "ny", 50, False, None, None),
    (150, 1, 16, 2, 900000.0, 0, "carol", "ca", 50, True, 5.0, 25),  # above both bounds
    (-5, 0, 9, 3, -100.0, 0, "dave", "tx", 99, None, float("nan"), 12),  # below both bounds
    (None, 1, 12, 1, None, None, None, None, None, None, None, None),
    (33, 2, 12, 1, 1000.0, 1, "erin", "zz", 200, True, float("inf"), 3),  # out of domain
    (61, None, None, 6, 42000.0, 0, "frank", "ny", 0, False, -float("inf"), None),  # NULL groups
    (70, 0, 1, 6, 1e300, 1, "a_b\\c", "tx", 64, True, 35.5, 20),  # huge float
    (18, 1, 3, 4, 1e-300, 0, "gina", "ca", 1, False, 12.0, 10),  # tiny float
]
