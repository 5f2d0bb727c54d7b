"""The oracle's fixture: a small table with NULLs in every column, values outside the
declared bounds and domains, text with trailing spaces and mixed case, and its config."""

from __future__ import annotations

TABLE = "fx"
COLUMNS = {  # name: (SQL type, config spec)
    "i": ("integer", {"type": "int", "lower": 0, "upper": 10}),
    "f": ("double precision", {"type": "float", "lower": -1.5, "upper": 2.5}),
    "t": ("text", {"type": "text"}),
    "g": ("integer", {"type": "int", "domain": [0, 1, 2]}),
    "s": ("text", {"type": "text", "domain": ["x", "X", "x "]}),
    "b": ("boolean", {"type": "bool", "domain": [True, False]}),
}
CONFIG = {
    "tiers": {"default": {"epsilon": 1, "budget": 10}},
    "roles": {"analyst": {"tier": "default"}},
    "server": {"auth": "trust"},
    "tables": {TABLE: {"columns": {k: v[1] for k, v in COLUMNS.items()}}},
}

_I = [None, -7, 0, 3, 10, 15, 1000, -1, 5, 2, 11]
_F = [None, -3.25, -1.5, 0.0, 0.5, 2.5, 4.75, 100.125, -0.25, float("inf"), float("-inf"), float("nan")]
_T = [None, "abc", "ABC", "abc ", "a_b", "a%b", "a\\b", "", "Ab", " x", "x"]
_G = [None, 0, 1, 2, 5, -1, 1]
_S = [None, "x", "X", "x ", "y"]
_B = [None, True, False]


def rows(n: int = 60) -> list[tuple]:
    """Deterministic rows: each column cycles through its values with its own stride, so
    every NULL meets every other column's values somewhere."""
    out = []
    for k in range(n):
        out.append(
            (
                _I[k % len(_I)],
                _F[(k * 2) % len(_F)],
                _T[(k * 3) % len(_T)],
                _G[(k * 5) % len(_G)],
                _S[(k * 7) % len(_S)],
                _B[(k // 2) % len(_B)],
            )
        )
    return out


def create_sql() -> str:
    cols = ", ".join(f"{k} {v[0]}" for k, v in COLUMNS.items())
    return f"CREATE TABLE {TABLE} ({cols})"


# The privacy-unit variant: the same rows with a unit column ``u`` (NULL for some
# rows, several rows and cells per unit), declared as table fx over source fxu, with bounds
# that bind nothing: the bounded scan's exact measures must equal the analyst's own query
# over the rows whose unit is known.
UNIT_TABLE = "fxu"
_U = [None, 1, 2, 3, 1, 4, 2, 5, 1]
UNIT_CONFIG = {
    **CONFIG,
    "tables": {
        TABLE: {
            "source": UNIT_TABLE,
            "privacy_unit": "u",
            "max_groups_per_unit": 1000,
            "max_rows_per_unit": 1000,
            "columns": {**{k: v[1] for k, v in COLUMNS.items()}, "u": {"type": "int"}},
        }
    },
}


def unit_rows(n: int = 60) -> list[tuple]:
    return [(*r, _U[(k * 4) % len(_U)]) for k, r in enumerate(rows(n))]


def create_unit_sql() -> str:
    cols = ", ".join(f"{k} {v[0]}" for k, v in COLUMNS.items())
    return f"CREATE TABLE {UNIT_TABLE} ({cols}, u integer)"
