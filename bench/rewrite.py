"""What the rewrite costs the backend on small tables: dpgate's one scan against the
analyst's own query, straight on DuckDB, from 1k to 100k rows.

    python -m bench.rewrite [--quick]

Per table size and query shape, the median time of the analyst's query and of
dpgate's backend SQL for it plus the proxy's empty-cell completion
(:func:`rewriter.complete`) — both in-process on the same DuckDB connection, timed
alternately. dpgate's SQL clamps every SUM input to its declared bounds and computes
every aggregate in one scan; the empty cells of the public domain are added by the
proxy from the rows returned (no domain join in the backend). The tables hold the
demo's ``pums`` columns with random values (the demo config's bounds and domains).
HEADLINE: the largest ratio (goal ≤ 1.2×, issue 21).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
import tomllib

QUERIES = [
    "SELECT race, COUNT(*), AVG(income) FROM pums WHERE age > 30 GROUP BY race",
    "SELECT sex, educ, COUNT(*) FROM pums WHERE age BETWEEN 20 AND 60 GROUP BY sex, educ",
    "SELECT COUNT(*), SUM(income) FROM pums WHERE married = 1",
    "SELECT married, SUM(age) FROM pums GROUP BY married",
]


def _time(fn, k: int) -> list[float]:
    out = []
    for _ in range(k):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def main(argv=None) -> int:
    import duckdb
    from config import parse_config
    from proxy.demo import demo_config_path
    from rewriter import build_plan, complete, parse, to_sql
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer repetitions (< 50 s)")
    args = ap.parse_args(argv)
    reps = 400 if args.quick else 2000
    data = tomllib.loads(demo_config_path().read_text())
    data["server"]["auth"] = "trust"
    cfg = parse_config(data)
    con = duckdb.connect()
    print(f"dpgate's backend SQL (+ the proxy's empty-cell completion) vs the analyst's query, DuckDB "
          f"in-process, median of {reps} alternating runs")
    print(f"{'rows':>7}  {'analyst ms':>10} {'dpgate ms':>10} {'ratio':>6}  query")
    worst = (0.0, None)
    for n in (1_000, 10_000, 100_000):
        con.execute(
            "CREATE OR REPLACE TABLE pums AS SELECT (random() * 100)::INT AS age, (random())::INT AS sex, "
            "(1 + random() * 15)::INT AS educ, (1 + random() * 5)::INT AS race, random() * 500000 AS income, "
            f"(random())::INT AS married FROM range({n})")
        for q in QUERIES:
            plan = build_plan(parse(q), cfg)
            sql = to_sql(plan, "duckdb")
            own = lambda: con.execute(q).fetchall()                    # noqa: E731
            dp = lambda: complete(plan, con.execute(sql).fetchall())   # noqa: E731
            _time(own, 20), _time(dp, 20)                              # warm
            a, b = [], []
            for _ in range(reps):
                a += _time(own, 1)
                b += _time(dp, 1)
            ma, mb = statistics.median(a) * 1000, statistics.median(b) * 1000
            ratio = mb / ma
            worst = max(worst, (ratio, (n, q)))
            print(f"{n:>7}  {ma:>10.3f} {mb:>10.3f} {ratio:>6.2f}  {q}")
    ratio, (n, q) = worst
    print(f"HEADLINE: dpgate's scan SQL at most {ratio:.2f}× the analyst's own query on DuckDB from 1k to "
          f"100k rows (worst: {n:,} rows, {q!r}) (goal ≤ 1.2×) {'PASS' if ratio <= 1.2 else 'MISS'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
