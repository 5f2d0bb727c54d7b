"""The privacy unit's salt is never SQL text (rewriter/params.py): every scan that bounds a
unit's contribution by the keyed hash carries the salt as a named parameter bound beside
the text, on DuckDB, Postgres and Spark, and it keeps exactly the rows the salt written as
a string literal keeps.

Kinds that read a unit: central releases (pre-aggregated per (unit, cell), ranked
rows for COUNT(DISTINCT …), total mode), partition selection (the floored scan) and
MAX/MIN and percentiles (the histogram scan, with and without a floor)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

import rewriter
from config import parse_config
from proxy.pipeline.partitions import floor_sql, selection_plan
from rewriter.extreme import build_extreme_plan, histogram_sql
from rewriter.params import marker, needs
from rewriter.unit import SALT_PARAM

from .engines import engine
from .test_unit_bounds import CELLS, ROWS

SALT = "5eedc0ffee0123456789abcdef012345"
DIALECTS = ("duckdb", "postgres", "spark")


def _config(scope: str = "cell"):
    return parse_config(
        {
            "tiers": {"default": {"epsilon": 1, "budget": 10, "delta": 1e-6, "delta_budget": 1e-5}},
            "roles": {"a": {"tier": "default"}},
            "server": {"auth": "trust"},
            "tables": {
                "t": {
                    "privacy_unit": "u",
                    "max_groups_per_unit": 2,
                    "max_rows_per_unit": 3,
                    "max_rows_scope": scope,
                    "columns": {
                        "u": {"type": "int"},
                        "g": {"type": "int", "domain": CELLS},
                        "a": {"type": "float", "lower": 0, "upper": 10},
                    },
                }
            },
        }
    )


CENTRAL = [
    "SELECT COUNT(*) FROM t",
    "SELECT g, COUNT(*), SUM(a) FROM t GROUP BY g",  # per (unit, cell), G < cells
    "SELECT COUNT(DISTINCT g) FROM t WHERE a < 8",  # ranked rows
    "SELECT g, AVG(a), VARIANCE(a) FROM t WHERE a > 2 GROUP BY g",
]
EXTREME = [
    "SELECT MAX(a) FROM t",
    "SELECT g, MIN(a) FROM t GROUP BY g",
    "SELECT g, median(a) FROM t GROUP BY g",
]


def _scans(dialect: str, salt: str = SALT) -> list[tuple[str, str]]:
    """(label, backend SQL) of every unit-reading scan, in both bounding scopes."""
    out = []
    for scope in ("cell", "total"):
        cfg = _config(scope)
        for sql in CENTRAL:
            plan = rewriter.build_plan(rewriter.parse(sql), cfg)
            out.append((f"{scope}: {sql}", rewriter.to_sql(plan, dialect, salt)))
            if plan.group_by:  # keys by partition selection
                gw = SimpleNamespace(
                    backend=SimpleNamespace(dialect=dialect, frozen=lambda *_: False, decimals=lambda *_: {})
                )
                out.append(
                    (f"{scope}: floor {sql}", floor_sql(gw, plan, selection_plan(plan, 1.0, 1e-6), salt))
                )
        for sql in EXTREME:
            xp = build_extreme_plan(rewriter.parse(sql), cfg)
            for floor in (None, 3):
                out.append(
                    (
                        f"{scope}: floor={floor} {sql}",
                        histogram_sql(xp, 0.0, 1.0, 10, False, dialect, salt, floor=floor),
                    )
                )
    return out


@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_scan_reading_kept_heavy_units_holds_no_salt(dialect):
    """The relation of kept heavy units is made without the salt (which units exceed T does not
    depend on it), and the scan that reads it binds the salt beside its text as before."""
    for scope in ("cell", "total"):
        for sql in CENTRAL:
            plan = rewriter.build_plan(rewriter.parse(sql), _config(scope))
            for rows in (False, True):
                frozen = rewriter.to_sql(plan, dialect, SALT, frozen=True, rows=rows)
                for name, select in needs(frozen):
                    assert SALT not in select and SALT_PARAM not in select and SALT not in name, sql
                assert SALT not in frozen and SALT not in getattr(frozen, "template", ""), sql
                assert set((getattr(frozen, "params", None) or {}).values()) <= {SALT}, sql


@pytest.mark.parametrize("dialect", DIALECTS)
def test_no_rewritten_statement_holds_the_salt(dialect):
    scans = _scans(dialect)
    hashed = 0
    for label, sql in scans:
        params = getattr(sql, "params", None)
        assert SALT not in sql and SALT not in getattr(sql, "template", ""), label
        if isinstance(params, dict):
            hashed += 1
            assert list(params.values()) == [SALT], label  # bound beside the text
            assert marker(SALT_PARAM, dialect).sql(dialect=dialect, identify=True) in sql, label
    assert hashed >= len(scans) - 2  # every scan that ranks by the hash (a COUNT(*) of one cell may not)


def _literal(sql, dialect: str) -> str:
    """The scan with the salt written as a string literal, as the text once carried it."""
    (salt,) = sql.params.values()
    return str(sql).replace(marker(SALT_PARAM, dialect).sql(dialect=dialect, identify=True), f"'{salt}'")


@pytest.fixture(scope="module", params=["duckdb", "postgres", "spark"])
def run(request):
    with engine(request, "unit_salt") as e:
        e.run("CREATE TABLE t (u INTEGER, g INTEGER, a DOUBLE PRECISION)")
        e.insert("t", ROWS)
        yield e.dialect, e.run


def test_bound_salt_keeps_the_rows_the_literal_keeps(run):
    dialect, go = run
    pairs = [
        (x, y)
        for x, y in zip(_scans(dialect), _scans(dialect, "0123"))
        if isinstance(getattr(x[1], "params", None), dict)
    ]
    if dialect == "spark":  # a Spark query takes seconds: the two hash shapes
        pairs = [p for p in pairs if p[0][0] in SPARK]
    differs = 0
    for (label, sql), (_, other) in pairs:
        got = sorted(go(sql), key=repr)
        assert got == sorted(go(_literal(sql, dialect)), key=repr), label
        if dialect != "spark":
            differs += got != sorted(go(other), key=repr)
    assert differs >= 4 or dialect == "spark"  # another salt keeps other rows: the salt is what is bound


SPARK = {
    "cell: SELECT g, COUNT(*), SUM(a) FROM t GROUP BY g",
    "cell: SELECT COUNT(DISTINCT g) FROM t WHERE a < 8",
}
