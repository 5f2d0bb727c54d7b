"""Several aggregates of a per-record statement in ONE backend statement, on DuckDB, Postgres and
Spark: each tagged part of :func:`rewriter.per_record.parts_scan_sql` is exactly its own level
scan (:func:`rewriter.per_record.scan_sql`: COUNT, the sum extension's, the framework sum's
with value buckets, MAX's first round), and :func:`rewriter.per_record.parts_values_sql` is
each MAX/MIN's second round (:func:`rewriter.per_record.values_sql`) tagged."""

from __future__ import annotations

import random
from collections import Counter

import pytest

import rewriter
from config import parse_config
from proxy.pipeline.per_record_policy import compile_policy
from rewriter.per_record import build_pr_plan, parts_scan_sql, parts_values_sql, scan_sql, values_sql
from tests.unit_level.engines import engine

CONFIG = {
    "tiers": {"default": {"epsilon": 1, "budget": 10}},
    "roles": {"r": {"tier": "default"}},
    "server": {"auth": "trust"},
    "tables": {
        "acc": {
            "privacy": {
                "function": "inverse",
                "column": "balance",
                "alpha": 1000.0,
                "eps_min": 1e-6,
                "eps_max": 1.0,
                "value_bound": 1_000_000,
            },
            "columns": {
                "balance": {"type": "int", "lower": 0, "upper": 1_000_000},
                "branch": {"type": "int", "domain": [1, 2, 3]},
            },
        }
    },
}


@pytest.fixture(scope="module", params=["duckdb", "postgres", "spark"])
def run(request):
    rnd = random.Random(9)
    rows = [(int(rnd.paretovariate(1.2) * 100), rnd.randint(1, 4)) for _ in range(400)] + [(None, 1)]
    with engine(request, "pr_parts_sql") as e:
        e.run("CREATE TABLE acc (balance BIGINT, branch INTEGER)")
        e.insert("acc", rows)
        yield e.dialect, e.run


def _norm(rows) -> Counter:
    return Counter(
        tuple(int(v) if isinstance(v, (int, float)) and v == int(v) else v for v in r) for r in rows
    )


def test_each_part_is_its_own_scan(run):
    dialect, go = run
    cfg = parse_config(CONFIG)
    pol = compile_policy("acc", cfg.tables["acc"]).sql
    prp = build_pr_plan(
        rewriter.parse(
            "SELECT branch, COUNT(*), SUM(balance), MAX(balance), MIN(balance) FROM acc GROUP BY branch"
        ),
        cfg,
    )
    subs = [prp.part(i) for i in range(prp.split)]
    assert [s.func for s in subs] == ["count", "sum", "max", "min"]
    specs = [(subs[0], False, False), (subs[1], False, True), (subs[2], False, False), (subs[1], True, False)]
    got = _norm(go(parts_scan_sql(specs, pol, cfg, dialect)))
    want: Counter = Counter()
    for i, (sub, buckets, with_sum) in enumerate(specs):
        for r in go(scan_sql(sub, pol, cfg, dialect, buckets=buckets, with_sum=with_sum)):
            key, rest = r[:1], r[1:]
            lvl, b, cnt, sm = (
                (rest[0], rest[1], rest[2], rest[3])
                if buckets
                else (rest[0], None, rest[1], rest[2])
                if with_sum
                else (rest[0], None, rest[1], None)
            )
            want[next(iter(_norm([(i, *key, lvl, b, cnt, sm)])))] += 1
    assert got == want and any(r[0] == 3 and r[4] is not None for r in got)
    ells = {(1,): 1, (2,): 3, (3,): 2}
    got_v = _norm(go(parts_values_sql([(subs[2], ells), (subs[3], ells)], pol, cfg, dialect)))
    one = _norm(go(values_sql(subs[2], pol, cfg, dialect, ells)))
    want_v = Counter({(j, *r): n for j in (0, 1) for r, n in one.items()})
    assert got_v == want_v and got_v
