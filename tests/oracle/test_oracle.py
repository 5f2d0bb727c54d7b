"""Differential semantic oracle: for every generated statement the rewriter
accepts, the exact measures of its one-scan rewrite (before any noise) equal the backend's
own answer to the analyst's SQL — on DuckDB and on Postgres — and two statements whose
exact answers differ never share a release key (``Plan.canonical``). Each accepted statement
is also asked over a derived table, a CTE and as ``SELECT * FROM (…) q``: the same release.

The reference is the oracle's own SQL: the analyst's WHERE as written (Postgres; DuckDB
spelled with Postgres semantics, see :mod:`grammar`), ``GROUP BY`` the analyst's columns,
and per measure COUNT(*), COUNT(col) or SUM of col clamped to its declared bounds (SUM/AVG of
arithmetic: the expression on the clamped columns, ``EXPRS``); the
domain cells (empty cells 0, rows with a NULL or out-of-domain group value dropped) are
filled in Python. A statement the backend itself cannot run (integer overflow,
``round(double precision, int)`` on Postgres) is skipped; the rewrite must never fail.

Fixed seed (derandomized); DPGATE_ORACLE_EXAMPLES sets the number of statements per
backend (default 2000; nightly: e.g. 50000).
"""

from __future__ import annotations

import math
import os
from decimal import Decimal

from fixture import COLUMNS, TABLE, UNIT_TABLE
from grammar import AGGS, EXPRS, statement
from hypothesis import HealthCheck, given, settings
from sqlglot import exp

import rewriter
from rewriter.errors import Refusal
from support.bound import duck_rows, pg_rows

EXAMPLES = int(os.environ.get("DPGATE_ORACLE_EXAMPLES", "2000"))
REFUSED_MARKERS = (
    "SIMILAR TO",
    " ~ ",
    "ESCAPE '!'",
    "DISTINCT i",
    "SUM(t)",
    "SUM(g)",
    "SUM(i / 2)",
    "SUM(i + t)",
    "SUM(i / f)",
    "% 0)",
    "% 2.5)",
    "/ 0)",
    "/ i)",
    "'a\\')",
)


def _clamp_sql(col: str) -> str:
    spec = COLUMNS[col][1]
    lo, hi = spec["lower"], spec["upper"]
    return f"SUM(CASE WHEN {col} < {lo} THEN {lo} WHEN {col} > {hi} THEN {hi} ELSE {col} END)"


def _clamped(col: str) -> str:
    spec = COLUMNS[col][1]
    lo, hi = spec["lower"], spec["upper"]
    return f"(CASE WHEN {col} < {lo} THEN {lo} WHEN {col} > {hi} THEN {hi} ELSE {col} END)"


def _expr_sql(text: str) -> str:
    """An arithmetic argument on the clamped columns, written independently."""
    return EXPRS[text][0].replace("CI", _clamped("i")).replace("CF", _clamped("f"))


def _measure_sql(kind: str, col: str | None) -> str:
    if col in EXPRS:
        return f"{'COUNT' if kind == 'count' else 'SUM'}({_expr_sql(col)})"
    return {"count_rows": "COUNT(*)", "count": f"COUNT({col})"}.get(kind) or _clamp_sql(col)


def reference_sql(where: str | None, groups: list[str], measures: list[tuple], unit: bool = False) -> str:
    """The analyst's own query; with ``unit``, over the rows of fxu whose unit is known."""
    items = groups + [_measure_sql(k, c) for k, c in measures]
    sql = f"SELECT {', '.join(items)} FROM {UNIT_TABLE if unit else TABLE}"
    if unit:
        sql += " WHERE u IS NOT NULL" + (f" AND ({where})" if where is not None else "")
    elif where is not None:
        sql += f" WHERE {where}"
    if groups:
        sql += f" GROUP BY {', '.join(groups)}"
    return sql


def _norm(v, kind: str, col: str | None):
    if kind == "sum" and col in EXPRS:
        return float(v) if EXPRS[col][1] == "float" else int(v)
    if kind == "sum" and COLUMNS[col][1]["type"] == "float":
        return float(v)
    assert not isinstance(v, float), v
    return int(v) if isinstance(v, (int, Decimal)) else v


def _key(v):
    """A group key as both backends' rows compare it (a float NaN equals NaN; int/float keys alike)."""
    if isinstance(v, float) and math.isnan(v):
        return "NaN"
    if isinstance(v, (Decimal, float)) and float(v).is_integer():
        return int(v)
    return v


def _same(a, b) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)
    return a == b


class Oracle:
    def __init__(self, config, run, dialect: str, unit: bool = False):
        self.config, self.run, self.dialect, self.unit = config, run, dialect, unit
        self.keys: dict[str, tuple[str, dict]] = {}
        self.stats = {"accepted": 0, "refused": 0, "reference_error": 0}

    def check(self, case) -> None:
        sql, (where_duck, where_pg), groups, aggs = case
        try:
            plan = rewriter.build_plan(rewriter.parse(sql), self.config)
        except Refusal:
            self.stats["refused"] += 1
            return
        assert not any(m in sql for m in REFUSED_MARKERS), f"accepted a refused construct: {sql}"
        measures = [(m.kind, m.column) for m in plan.measures]
        want = set().union(*(AGGS[a] for a in aggs))
        assert set(measures) == want, (sql, measures)
        if plan.selected:  # GROUP BY a column without a domain: keys come from the data
            return self._check_selected(sql, plan, where_duck, where_pg, groups, measures)
        got_rows = rewriter.complete(plan, self.run(rewriter.to_sql(plan, self.dialect)))  # must never fail
        where = where_pg if self.dialect == "postgres" else where_duck
        try:
            ref_rows = self.run(reference_sql(where, groups, measures, self.unit))
        except Exception:  # the backend cannot run the analyst's SQL itself
            self.stats["reference_error"] += 1
            return
        self.stats["accepted"] += 1
        k = len(plan.group_by)
        order = [g.column for g in plan.group_by]  # the plan sorts its keys
        perm = [groups.index(c) for c in order]
        cells = {c: [0] * len(measures) for c in plan.cells}
        for row in ref_rows:
            key = tuple(row[p] for p in perm)
            if key in cells and all(
                v is not None and type(v) is type(d) for v, d in zip(key, next(c for c in cells if c == key))
            ):
                cells[key] = [_norm(v if v is not None else 0, *m) for v, m in zip(row[k:], measures)]
        assert len(got_rows) == len(cells), sql
        answer = {}
        for row in got_rows:
            key = tuple(row[:k])
            got = [_norm(v, *m) for v, m in zip(row[k:], measures)]
            exp_ = cells[key]
            assert all(_same(a, b) for a, b in zip(got, exp_)), (
                f"{self.dialect}: {sql}\ncell {key}: rewrite {got} != reference {exp_}\n"
                f"rewrite SQL: {rewriter.to_sql(plan, self.dialect)}"
            )
            for m, v in zip(measures, exp_):
                answer[(key, m)] = v
        self._check_params(sql, plan, k, cells, measures)
        self._check_derived(sql, plan, where_pg, groups, aggs, got_rows)
        key = plan.canonical()
        seen = self.keys.get(key)
        if seen is not None:
            other_sql, other = seen
            common = set(other) & set(answer)
            assert all(_same(other[c], answer[c]) for c in common), (
                f"release key shared by statements with different answers:\n{other_sql}\n{sql}\n{key}"
            )
        else:
            self.keys[key] = (sql, answer)

    def _check_selected(self, sql, plan, where_duck, where_pg, groups, measures) -> None:
        """Partition selection's scan: one row per key the data has (NULL included), its
        measures equal the reference's (the selection itself is the mechanism's)."""
        got = self.run(rewriter.to_sql(plan, self.dialect))
        where = where_pg if self.dialect == "postgres" else where_duck
        try:
            ref = self.run(reference_sql(where, groups, measures, self.unit))
        except Exception:
            self.stats["reference_error"] += 1
            return
        self.stats["accepted"] += 1
        self.stats["selected"] = self.stats.get("selected", 0) + 1
        k = len(plan.group_by)
        perm = [groups.index(g.column) for g in plan.group_by]  # the plan sorts its keys
        ref = [tuple(r[p] for p in perm) + tuple(r[k:]) for r in ref]
        norm = lambda rows: sorted(
            (
                tuple(_key(v) for v in r[:k])
                + tuple(_norm(v if v is not None else 0, *m) for v, m in zip(r[k:], measures))
                for r in rows
            ),
            key=repr,
        )
        a, b = norm(got), norm(ref)
        assert len(a) == len(b) and all(
            x[:k] == y[:k] and all(_same(p, q) for p, q in zip(x[k:], y[k:])) for x, y in zip(a, b)
        ), f"{self.dialect}: {sql}\n{a}\n{b}"

    def _check_params(self, sql, plan, k, cells, measures) -> None:
        """The same statement with its integer and string literals sent as $n parameters
        (extended protocol) plans to the same release key and the same answers."""
        tree = rewriter.parse(sql)
        where = tree.args.get("where")
        params = []
        for lit in list(where.find_all(exp.Literal)) if where is not None else []:
            if isinstance(lit.parent, exp.Cast):  # a client sends CAST($1 AS t)'s value as t
                continue
            if lit.is_string:
                params.append(lit.this)
            elif lit.is_int:
                params.append(int(lit.this))
            else:
                continue
            lit.replace(exp.Parameter(this=exp.Literal.number(len(params))))
        if not params:
            return
        try:
            pplan = rewriter.build_plan(tree, self.config, params)
        except Refusal:
            self.stats["param_refused"] = self.stats.get("param_refused", 0) + 1
            return
        self.stats["param_checked"] = self.stats.get("param_checked", 0) + 1
        assert pplan.canonical() == plan.canonical(), (sql, params)
        for row in rewriter.complete(pplan, self.run(rewriter.to_sql(pplan, self.dialect))):
            got = [_norm(v, *m) for v, m in zip(row[k:], measures)]
            assert all(_same(a, b) for a, b in zip(got, cells[tuple(row[:k])])), (sql, params)

    def _check_derived(self, sql, plan, where, groups, aggs, got_rows) -> None:
        """The statement over a derived table or a CTE (the filter inside or outside)
        and wrapped whole in ``SELECT * FROM (…) q`` is the same release (release key, backend
        SQL, exact answers, output columns)."""
        items = ", ".join(groups + aggs)
        group = f" GROUP BY {', '.join(groups)}" if groups else ""
        outer_where = f" WHERE {where}" if where is not None else ""
        variants = [
            f"SELECT {items} FROM (SELECT * FROM {TABLE}{outer_where}) s{group}",
            f"WITH x AS (SELECT * FROM {TABLE}) SELECT {items} FROM x{outer_where}{group}",
            f"SELECT * FROM ({sql}) q",
        ]
        for v in variants:
            vplan = rewriter.build_plan(rewriter.parse(v), self.config)  # never refused
            assert vplan.canonical() == plan.canonical(), (sql, v)
            vsql = rewriter.to_sql(vplan, self.dialect)
            assert vsql == rewriter.to_sql(plan, self.dialect), (sql, v)
            assert [(o.name, o.type) for o in vplan.outputs] == [(o.name, o.type) for o in plan.outputs]
        self.stats["derived_checked"] = self.stats.get("derived_checked", 0) + 1


def _drive(oracle: Oracle, examples: int = EXAMPLES) -> None:
    @settings(
        max_examples=examples,
        derandomize=True,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(statement())
    def run(case):
        oracle.check(case)

    run()
    s = oracle.stats
    print(f"\noracle {oracle.dialect}: {s}, release keys {len(oracle.keys)}")
    # the oracle must actually compare: most generated statements are accepted and run
    assert s["accepted"] >= examples // 3, s


def test_oracle_duckdb(oracle_config, oracle_duck):
    _drive(Oracle(oracle_config, lambda q: duck_rows(oracle_duck, q), "duckdb"))


def test_oracle_postgres(oracle_config, oracle_pg):
    _drive(Oracle(oracle_config, lambda q: pg_rows(oracle_pg, q), "postgres"))


# On a table with a privacy unit and bounds that bind nothing, the bounded scan
# (keyed row and cell selection, NULL units left out) equals the analyst's own query.
def test_oracle_unit_duckdb(oracle_unit_config, oracle_duck):
    _drive(
        Oracle(oracle_unit_config, lambda q: duck_rows(oracle_duck, q), "duckdb", unit=True), EXAMPLES // 4
    )


def test_oracle_unit_postgres(oracle_unit_config, oracle_pg):
    _drive(Oracle(oracle_unit_config, lambda q: pg_rows(oracle_pg, q), "postgres", unit=True), EXAMPLES // 4)
