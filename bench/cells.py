"""Per-cell cost of the release step: noise for a 10,000-cell COUNT + AVG.

    python -m bench.cells [--quick] [--cells N] [--repeat R] [--rows N] [--groups N]

Times ``proxy.pipeline.release.noisy_answer`` -- the step from the scan's exact cells to the
released answer (keys, the mechanisms' draws and additions, half-widths) -- on a synthetic
GROUP BY over a public domain of N values (default 10,000), for AVG of an int and of a float
column (and, beside them, a SUM of a float column: discrete Laplace at scale 2^21/ε grid
units, the batch sampler's costliest case), once through the cell-by-cell exact samplers (the path small releases keep) and once
through the batch exact samplers (``Measurement.draw_many``/``apply_many``). CPU time of
this process (``time.process_time``: the machine's other load does not count), best of R,
with the garbage collector as a serving gateway leaves it (``gateway.runtime.settle_gc``: the
start-up heap frozen; without it, collections walking the benchmark's own tables add
about 0.2 µs per cell).
The scan and the empty-cell completion are not included (they are the same on both paths).
HEADLINE: the batch path's µs per cell against the goal, ≤ 1 µs per cell. Beside it, the bytes
the ledger stores for the COUNT + AVG(age) release (``proxy.stores.release_codec``, against
the plain JSON stored before it).

Then the whole query (``--rows``, default 1,000,000; ``--groups``, default 10,000): a generated
DuckDB table ``grid_people(g, age, v)`` with ``g`` over a public domain of N values, and
``SELECT g, COUNT(*), AVG(v) FROM grid_people WHERE age BETWEEN lo AND hi GROUP BY g``
released in process through the pipeline (``Connection.execute``: route, plan, ledger, scan,
completion, measurement, the release stored, rows) against the analyst's same query run raw on
the same DuckDB (``backend.fetch``; beside them dpgate's own scan SQL, fetched as the pipeline
fetches it: numpy columns), alternately on distinct predicates (each a fresh release),
wall time, median of the paired ratios. Beside it, where the time goes: each step timed alone
on one scan's result, taken as the pipeline takes it (the scan fetched as numpy columns, wall;
the completion by positions, ``pipeline.columnar.complete_columns``; ``noisy_answer`` drawing
its noise live, where the pipeline draws it during the scan; storing the release, building
the rows: CPU time of the thread, median of 5). SECOND HEADLINE: the ratio against the goal, ≤ 1.5× raw DuckDB.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import random
import statistics
import tempfile
import time
import tomllib
from pathlib import Path

import proxy.pipeline.release as release
from config import parse_config
from mechanisms import SystemRandomSource
from proxy.backends import Columns
from proxy.demo import demo_config_path
from proxy.gateway import Gateway
from proxy.gateway.runtime import settle_gc
from proxy.pipeline.columnar import complete_columns
from proxy.pipeline.kind import Statement
from proxy.stores.release_codec import encode_answer
from rewriter import build_plan, complete, parse

GOAL_US = 1.0
GOAL_RATIO = 1.5
QUERY = "SELECT g, COUNT(*), AVG(v) FROM grid_people WHERE age BETWEEN {lo} AND {hi} GROUP BY g"


def _plan_and_cells(n: int, column: str, typ, seed: int = 1, agg: str = "AVG"):
    data = tomllib.loads(demo_config_path().read_text())
    t = copy.deepcopy(data["tables"]["pums"])
    t["columns"]["g"] = {"type": "int", "domain_range": [1, n]}
    data["tables"]["bench_cells"] = t
    data["server"].update(auth="trust", host="127.0.0.1")  # never served: no verifiers needed
    cfg = parse_config(data, "bench")
    plan = build_plan(parse(f"SELECT g, COUNT(*), {agg}({column}) FROM bench_cells GROUP BY g"), cfg)
    rnd = random.Random(seed)
    cells = []
    for g in range(1, n + 1):
        k = rnd.randrange(0, 200)
        total = sum(typ(rnd.randrange(0, 100)) for _ in range(k))
        cells.append((g, k, total, k) if agg == "AVG" else (g, k, total))
    return plan, cells


def _best(fn, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.process_time()
        fn()
        best = min(best, time.process_time() - t0)
    return best


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cells", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--rows", type=int, default=1_000_000, help="the whole query's table (0: skip it)")
    ap.add_argument("--groups", type=int, default=10_000)
    ap.add_argument(
        "--queries",
        type=int,
        default=201,
        help="paired fresh releases of the whole query "
        "(21 gave medians from 1.35 to 1.67× run to run; 201: within ±0.01)",
    )
    ap.add_argument("--quick", action="store_true", help="fewer repetitions (best of 3, 41 paired queries)")
    args = ap.parse_args(argv)
    if args.quick:
        args.repeat, args.queries = min(args.repeat, 3), min(args.queries, 41)
    src = SystemRandomSource()
    rows, worst, stored = [], 0.0, None
    settle_gc()  # the collector as a serving gateway leaves it (gateway.runtime.settle_gc)
    for agg, column, typ in (("AVG", "age", int), ("AVG", "income", float), ("SUM", "income", float)):
        plan, cells = _plan_and_cells(args.cells, column, typ, agg=agg)
        answer = release.noisy_answer(plan, cells, 1.0, src)  # tables, memos
        if stored is None:
            stored = (len(encode_answer(answer)), len(json.dumps(answer)))
        batch = _best(lambda: release.noisy_answer(plan, cells, 1.0, src), args.repeat)
        saved = release.BATCH_MIN_CELLS
        release.BATCH_MIN_CELLS = args.cells + 1  # the cell-by-cell path
        try:
            scalar = _best(lambda: release.noisy_answer(plan, cells, 1.0, src), max(1, args.repeat // 3))
        finally:
            release.BATCH_MIN_CELLS = saved
        per_b, per_s = batch / args.cells * 1e6, scalar / args.cells * 1e6
        worst = max(worst, per_b) if agg == "AVG" else worst
        rows.append((f"COUNT + {agg}({column})", per_s, per_b, per_s / per_b))
    print(
        f"{'release of ' + str(args.cells) + ' cells':<28}{'cell by cell':>14}{'batch':>10}{'speed-up':>10}"
    )
    for name, s, b, x in rows:
        print(f"{name:<28}{s:>11.2f} µs{b:>7.2f} µs{x:>9.0f}×")
    print(
        f"stored in the ledger: {stored[0]:,} bytes for the {args.cells}-cell COUNT + AVG(age) release "
        f"({stored[0] / args.cells:.1f} B per cell; plain JSON: {stored[1]:,} bytes)"
    )
    verdict = "met" if worst <= GOAL_US else "NOT met"
    print(
        f"HEADLINE: a {args.cells}-cell COUNT+AVG release adds {worst:.2f} µs per cell "
        f"(CPU) outside the scan; goal ≤ {GOAL_US:.0f} µs: {verdict}"
    )
    if args.rows:
        asyncio.run(_whole_query(args.rows, args.groups, args.queries))
    return 0


def _grid_config(tmp: Path, db: Path, groups: int):
    data = tomllib.loads(demo_config_path().read_text())
    data.pop("demo", None)
    data["server"].update(auth="trust", host="127.0.0.1", state_dir=str(tmp))
    data["backend"] = {"kind": "duckdb", "path": str(db)}
    data["tables"] = {
        "grid_people": {
            "columns": {
                "g": {"type": "int", "domain_range": [1, groups]},
                "age": {"type": "int", "lower": 0, "upper": 120},
                "v": {"type": "float", "lower": 0, "upper": 100},
            }
        }
    }
    data["tiers"] = {"bench": {"epsilon": 1.0, "budget": 1e9, "period": "never"}}
    data["roles"] = {"bench": {"tier": "bench"}}
    return parse_config(data, "bench.cells")


async def _whole_query(rows: int, groups: int, queries: int) -> None:
    with tempfile.TemporaryDirectory(prefix="dpgate-cells-") as tmp:
        tmp = Path(tmp)
        db = tmp / "grid.duckdb"
        cfg = _grid_config(tmp, db, groups)
        gw = Gateway(cfg, tmp)
        gw.backend.execute_script(
            f"CREATE TABLE grid_people AS SELECT CAST(1 + hash(i) % {groups} AS BIGINT) AS g, "
            f"CAST(18 + hash(i + 1) % 70 AS BIGINT) AS age, CAST(hash(i + 2) % 100000 AS DOUBLE) / 1000 AS v "
            f"FROM range({rows}) t(i)"
        )
        await gw.start()
        try:
            conn = await gw.handler_factory("bench", cfg.server.database, {})
            rnd = random.Random(3)
            pairs = [dict(lo=lo, hi=hi) for lo in range(18, 40) for hi in range(60, 90)]
            rnd.shuffle(pairs)
            for q in pairs[:3]:  # warm: caches, plan template
                await conn.execute(QUERY.format(**q), [])
                await gw.backend.fetch(QUERY.format(**q))
            dp, raw, own = [], [], []
            for i, q in enumerate(pairs[3 : 3 + queries]):  # in turn first: paired
                sql = QUERY.format(**q)
                p = await conn.prepare(Statement(sql, gw.route(sql)), [])
                scan_sql = p.kind.scan_sql(conn, p)
                for turn in ((0, 1, 2), (1, 2, 0), (2, 0, 1))[i % 3]:
                    t = time.perf_counter()
                    if turn == 0:
                        await conn.execute(sql, [])
                        dp.append(time.perf_counter() - t)
                    elif turn == 1:
                        await gw.backend.fetch(sql)
                        raw.append(time.perf_counter() - t)
                    else:
                        await gw.backend.fetch(scan_sql, columnar=p.columnar)
                        own.append(time.perf_counter() - t)
            steps = await _steps(gw, conn, QUERY.format(**pairs[-1]))
        finally:
            await gw.close()
    ratio = statistics.median(a / b for a, b in zip(dp, raw))
    ms = lambda x: 1000 * statistics.median(x)  # noqa: E731
    print(
        f"\n{rows:,} rows, {groups:,} groups: {QUERY.format(lo='<lo>', hi='<hi>')} "
        f"({len(dp)} fresh releases, paired)"
    )
    print(f"{'raw DuckDB, the analyst query':<44}{ms(raw):>9.1f} ms")
    print(f"{'raw DuckDB, dpgate' + chr(39) + 's scan SQL':<44}{ms(own):>9.1f} ms")
    print(f"{'dpgate pipeline, fresh release (in process)':<44}{ms(dp):>9.1f} ms")
    print("each step alone, on one scan's rows (the scan: wall time; the others: CPU time):")
    for name, xs in steps:
        print(f"{'  ' + name:<44}{ms(xs):>9.1f} ms")
    verdict = "met" if ratio <= GOAL_RATIO else "NOT met"
    print(
        f"HEADLINE: {rows:,} rows, {groups:,} groups, COUNT+AVG: dpgate {ratio:.2f}× raw DuckDB (median of "
        f"paired ratios, wall time); goal ≤ {GOAL_RATIO}×: {verdict}"
    )


async def _steps(gw, conn, sql: str, repeat: int = 5) -> list[tuple[str, list[float]]]:
    """Each step of one release timed alone on the same scan's rows (median of ``repeat``)."""
    p = await conn.prepare(Statement(sql, gw.route(sql)), [])
    scan_sql = p.kind.scan_sql(conn, p)
    out: dict[str, list[float]] = {}

    def timed(name, fn, *a):  # CPU of this thread: the machine's other load does not count
        t = time.thread_time()
        r = fn(*a)
        out.setdefault(name, []).append(time.thread_time() - t)
        return r

    columnar = p.columnar  # as Central.scan fetches it: numpy columns
    for _ in range(repeat):
        t = time.perf_counter()
        rows = await gw.backend.fetch(scan_sql, columnar=columnar)
        out.setdefault(
            "scan (dpgate's SQL), fetched as columns"
            if columnar
            else "scan (dpgate's SQL) and its rows fetched",
            [],
        ).append(time.perf_counter() - t)
        cells = timed("empty-cell completion (complete_columns)", _completed, p.plan, rows)
        answer = timed(
            "measurement (noisy_answer, batch)",
            release.noisy_answer,
            p.plan,
            cells,
            p.state.mech_eps,
            gw.source,
        )
        timed("the answer encoded (release_codec, part of storing it)", encode_answer, answer)
        res = gw.ledger.reserve(role="bench", epsilon=p.epsilon, budget=1e9, period="never")
        timed(
            "release stored (ledger.record)",
            lambda: gw.ledger.record(
                res,
                key=f"steps-{time.time_ns()}",
                data_version=1,
                canonical=p.canonical,
                statement=sql,
                mechanism="bench",
                answer=answer,
            ),
        )
        timed("rows built (answer_rows)", p.kind.rows, p, answer)
    return list(out.items())


def _completed(plan, scan):
    """The completion ``Central.measure`` does: by positions for a scan fetched as columns."""
    table = complete_columns(plan, scan) if isinstance(scan, Columns) else None
    return table if table is not None else complete(plan, scan.rows() if isinstance(scan, Columns) else scan)


if __name__ == "__main__":
    raise SystemExit(main())
