"""Core benchmark: what does DP cost on top of the database?

    python -m bench.core [--quick]

One run on the demo's 1,000,000-row `people` table (embedded DuckDB) prints, side
by side: the raw DuckDB time of the analyst's query and of dpgate's one-scan
rewrite, dpgate end to end over the wire (p50/p95, psycopg, fresh queries so each
is a real release), the fixed DP overhead per query (p50 end to end minus p50 of
the rewritten scan), a wire round trip (`SELECT 1`), and queries/s for 8
concurrent clients. Goal: overhead ≤ 2 ms p50.
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

QUERY = ("SELECT region, COUNT(*), AVG(income) FROM people "
         "WHERE age BETWEEN {lo} AND 60 GROUP BY region")
RAW = ("SELECT region, COUNT(*), AVG(LEAST(GREATEST(income, 0), 500000)) FROM people "
       "WHERE age BETWEEN {lo} AND 60 GROUP BY region")
PASSWORD = "bench-pw"


def _config(state: Path, port: int) -> Path:
    from proxy.wire.auth import make_verifier
    from proxy.demo import demo_config_path
    import tomllib
    base = tomllib.loads(demo_config_path().read_text())
    ver = make_verifier(PASSWORD)
    lines = [
        "demo = true",
        "[server]", 'host = "127.0.0.1"', f"port = {port}", 'database = "demo"', f'state_dir = "{state}"',
        "[server.limits]", "max_statements_per_role = 64",
        "[backend]", 'kind = "duckdb"', f'path = "{state / "demo.duckdb"}"',
        "[tiers.bench]", "epsilon = 1.0", "budget = 1000000000", 'period = "never"',
        "[roles.bench]", 'tier = "bench"', f'scram = "{ver}"',
    ]
    for tname in ("people",):
        lines.append(f"[tables.{tname}.columns]")
        for cname, col in base["tables"][tname]["columns"].items():
            kv = ", ".join(f"{k} = {_toml(v)}" for k, v in col.items())
            lines.append(f"{cname} = {{ {kv} }}")
    path = state / "bench.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def _toml(v) -> str:
    if isinstance(v, str):
        return f'"{v}"'
    if isinstance(v, list):
        return "[" + ", ".join(_toml(x) for x in v) + "]"
    return repr(v)


def _pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def _raw_times(db: Path, n: int) -> tuple[list[float], list[float], str]:
    import duckdb
    from config import parse_config
    from rewriter import build_plan, parse, to_sql
    from proxy.backends import DuckDBBackend
    from proxy import demo
    b = DuckDBBackend(db)
    demo.load_duckdb(b)
    b._con.close()
    con = duckdb.connect(str(db))
    import tomllib
    from proxy.demo import demo_config_path
    data = tomllib.loads(demo_config_path().read_text())
    data["server"]["auth"] = "trust"
    cfg = parse_config(data)
    raw, rewritten = [], []
    for i in range(n):
        lo = 20 + i % 10
        t = time.perf_counter()
        con.execute(RAW.format(lo=lo)).fetchall()
        raw.append(time.perf_counter() - t)
        sql = to_sql(build_plan(parse(QUERY.format(lo=lo)), cfg), "duckdb")
        t = time.perf_counter()
        con.execute(sql).fetchall()
        rewritten.append(time.perf_counter() - t)
    con.close()
    return raw, rewritten, sql


def _wait_port(port: int, proc, timeout: float = 120) -> None:
    import socket
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"dpgate exited: {proc.stdout.read()}")
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError("dpgate did not start")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer queries (< 50 s)")
    args = ap.parse_args(argv)
    n = 200 if args.quick else 2000
    conc_seconds = 3 if args.quick else 15
    import psycopg
    with tempfile.TemporaryDirectory(prefix="dpgate-bench-") as tmp:
        state = Path(tmp)
        raw, rewritten, _ = _raw_times(state / "demo.duckdb", max(50, n // 4))
        import socket
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        cfg = _config(state, port)
        proc = subprocess.Popen([sys.executable, "-m", "proxy.cli", "serve", "--config", str(cfg)],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            _wait_port(port, proc)
            dsn = f"host=127.0.0.1 port={port} dbname=demo user=bench password={PASSWORD} sslmode=disable"
            conn = psycopg.connect(dsn, autocommit=True)
            ping = []
            for _ in range(n):
                t = time.perf_counter()
                conn.execute("SELECT 1").fetchall()
                ping.append(time.perf_counter() - t)
            e2e = []
            for i in range(n):
                # A fresh measurement every time (different predicate), so each is a real release.
                q = QUERY.format(lo=f"{20 + i % 40} + {i // 40}.0 / 1000000")
                t = time.perf_counter()
                conn.execute(q).fetchall()
                e2e.append(time.perf_counter() - t)
            repeat = []
            for i in range(min(n, 200)):
                q = QUERY.format(lo=f"{20 + i % 40} + {i // 40}.0 / 1000000")
                t = time.perf_counter()
                conn.execute(q).fetchall()
                repeat.append(time.perf_counter() - t)
            conn.close()
            count = [0] * 8
            stop = time.time() + conc_seconds

            def client(k: int) -> None:
                with psycopg.connect(dsn, autocommit=True) as c:
                    j = 0
                    while time.time() < stop:
                        c.execute(QUERY.format(lo=f"{20 + j % 40} + {k * 10_000_000 + 1_000_000 + j}.0 / 1e9")).fetchall()
                        j += 1
                    count[k] = j

            threads = [threading.Thread(target=client, args=(k,)) for k in range(8)]
            t0 = time.time()
            for th in threads:
                th.start()
            for th in threads:
                th.join()
            qps = sum(count) / (time.time() - t0)
        finally:
            proc.terminate()
            proc.wait(10)
    ms = lambda xs, p: 1000 * _pct(xs, p)  # noqa: E731
    overhead = ms(e2e, 50) - ms(rewritten, 50)
    rows = [
        ("raw DuckDB, analyst query (no DP)", ms(raw, 50), ms(raw, 95)),
        ("raw DuckDB, dpgate's one-scan rewrite", ms(rewritten, 50), ms(rewritten, 95)),
        ("dpgate end to end, fresh release", ms(e2e, 50), ms(e2e, 95)),
        ("dpgate end to end, repeat (release store)", ms(repeat, 50), ms(repeat, 95)),
        ("wire round trip (SELECT 1)", ms(ping, 50), ms(ping, 95)),
    ]
    print(f"\ndpgate core benchmark — people (1,000,000 rows), embedded DuckDB, {n} queries"
          f"{' (quick)' if args.quick else ''}")
    print(f"query: {QUERY.format(lo='<varies>')}\n")
    print(f"{'measurement':<44} {'p50 ms':>8} {'p95 ms':>8}")
    for name, p50, p95 in rows:
        print(f"{name:<44} {p50:>8.2f} {p95:>8.2f}")
    print(f"{'fixed DP overhead (e2e p50 − rewrite p50)':<44} {overhead:>8.2f}")
    print(f"{'8 concurrent clients, fresh releases':<44} {qps:>8.0f} queries/s")
    verdict = "PASS" if overhead <= 2.0 else "MISS"
    print(f"HEADLINE: fixed DP overhead {overhead:.2f} ms p50 per query (goal ≤ 2 ms) {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
