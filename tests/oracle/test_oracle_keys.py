"""The semantic oracle for derived group keys: for generated statements grouped
by numeric bins, width_bucket, CASE labels and boolean predicates (:func:`grammar.derived_statement`),
the exact measures of the one-scan rewrite equal the backend's own answer to the analyst's
SQL, cell by cell over the key's public domain (cells no row reaches are 0; rows whose key
falls outside the domain — out-of-bounds values, NaN, ±inf — reach no cell), and the domain
is complete: every key value of a row inside the declared bounds has its cell; on DuckDB and
Postgres. Fixed seed; DPGATE_ORACLE_EXAMPLES sets the count (default 2000, here a quarter).
"""

from __future__ import annotations

import os
from decimal import Decimal

from grammar import AGGS, derived_statement
from hypothesis import HealthCheck, given, settings
from test_oracle import _norm, _same, reference_sql

import rewriter
from rewriter.errors import Refusal

EXAMPLES = int(os.environ.get("DPGATE_ORACLE_EXAMPLES", "2000")) // 4


def _key(v):
    if isinstance(v, bool) or v is None or isinstance(v, str):
        return v
    return float(v) if isinstance(v, (int, float, Decimal)) else v


class KeyOracle:
    def __init__(self, config, run, dialect: str):
        self.config, self.run, self.dialect = config, run, dialect
        self.stats = {"accepted": 0, "refused": 0, "reference_error": 0, "cells": 0}
        self._canon: dict[str, str] = {}

    def canonical(self, key_sql: str) -> str:
        if key_sql not in self._canon:
            plan = rewriter.build_plan(
                rewriter.parse(f"SELECT COUNT(*) FROM fx GROUP BY {key_sql}"), self.config
            )
            self._canon[key_sql] = plan.group_by[0].column
        return self._canon[key_sql]

    def check(self, case) -> None:
        sql, (where_duck, where_pg), keys, aggs = case
        try:
            plan = rewriter.build_plan(rewriter.parse(sql), self.config)
        except Refusal:
            self.stats["refused"] += 1
            return
        measures = [(m.kind, m.column) for m in plan.measures]
        assert set(measures) == set().union(*(AGGS[a] for a in aggs)), (sql, measures)
        got_rows = rewriter.complete(plan, self.run(rewriter.to_sql(plan, self.dialect)))  # must never fail
        spelled = [k.pg if self.dialect == "postgres" else k.duck for k in keys]
        where = where_pg if self.dialect == "postgres" else where_duck
        try:
            ref_rows = self.run(reference_sql(where, spelled, measures))
        except Exception:  # e.g. Postgres's width_bucket of NaN raises: the rewrite must not
            self.stats["reference_error"] += 1
            return
        self.stats["accepted"] += 1
        k = len(plan.group_by)
        order = [g.column for g in plan.group_by]
        canon = [self.canonical(key.pg) for key in keys]
        perm = [canon.index(c) for c in order]
        cells = {tuple(_key(v) for v in c): [0] * len(measures) for c in plan.cells}
        for row in ref_rows:
            key = tuple(_key(row[p]) for p in perm)
            if key in cells:
                cells[key] = [_norm(v if v is not None else 0, *m) for v, m in zip(row[k:], measures)]
        # completeness: every key value of a row inside the declared bounds that the WHERE keeps is
        # in the domain (a WHERE on a group key restricts its cells: rewriter.keyfilter)
        inside = "(i BETWEEN 0 AND 10 OR i IS NULL) AND (f BETWEEN -1.5 AND 2.5 OR f IS NULL)"
        if where:
            inside = f"({where}) AND {inside}"
        declared = {"g": "g IN (0, 1, 2)", "b": "b IS NOT NULL", "s": "s IN ('x', 'X', 'x ')"}
        declared.update(
            {"CAST(g AS TEXT)": declared["g"], "s::text": declared["s"], "CAST(b AS TEXT)": declared["b"]}
        )
        for key in keys:  # a declared column's own domain
            if key.pg.strip("()") in declared:
                inside += " AND " + declared[key.pg.strip("()")]
            elif key.pg in declared:
                inside += " AND " + declared[key.pg]
        for row in self.run(reference_sql(inside, spelled, [("count_rows", None)])):
            key = tuple(_key(row[p]) for p in perm)
            assert key in cells, f"{self.dialect}: {sql}\nkey {key} of an in-bounds row has no cell"
        assert len(got_rows) == len(cells), sql
        for row in got_rows:
            key = tuple(_key(v) for v in row[:k])
            got = [_norm(v, *m) for v, m in zip(row[k:], measures)]
            assert all(_same(a, b) for a, b in zip(got, cells[key])), (
                f"{self.dialect}: {sql}\ncell {key}: rewrite {got} != reference {cells[key]}\n"
                f"rewrite SQL: {rewriter.to_sql(plan, self.dialect)}"
            )
            self.stats["cells"] += 1


def _drive(oracle: KeyOracle) -> None:
    @settings(
        max_examples=EXAMPLES,
        derandomize=True,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(derived_statement())
    def run(case):
        oracle.check(case)

    run()
    s = oracle.stats
    print(f"\nkey oracle {oracle.dialect}: {s}")
    assert s["accepted"] >= EXAMPLES // 3, s


def test_key_oracle_duckdb(oracle_config, oracle_duck):
    _drive(KeyOracle(oracle_config, lambda q: oracle_duck.execute(q).fetchall(), "duckdb"))


def test_key_oracle_postgres(oracle_config, oracle_pg):
    _drive(KeyOracle(oracle_config, lambda q: oracle_pg.execute(q).fetchall(), "postgres"))
