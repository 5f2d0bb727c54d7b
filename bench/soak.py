"""Soak benchmark: many clients, mixed traffic and faults, for minutes on end.

    python -m bench.soak --minutes N [--quick] [--clients K] [--kill-every S]

Starts dpgate (embedded DuckDB, a `people` table, a temporary state dir) as a
subprocess and runs K psycopg clients on loopback for N minutes, each sending a
seeded mix: fresh DP queries (each a new release), repeats of earlier releases
(which must come back identical), refusals (raw rows: 42501), catalog queries
and reads of dpgate's views (with a bound parameter). Half of the roles have a
small daily budget, so they run out under concurrency (53400 is expected there,
and the budget's edge is where an overspend would show). Every ``--kill-every``
seconds the proxy is killed (SIGKILL) and restarted on the same state dir; the
clients reconnect.

Reported per minute (``--quick``: per 5 s): statements, errors, p50 / p99
latency of answered statements, the proxy's RSS and open descriptors (the parent
and its children: workers and the heavy-statement lane); errors by SQLSTATE
(expected or not); per process (each worker by index, the lane, the parent) its
CPU seconds and largest RSS over the run (summed over the processes that held
that place across restarts), and the ratio of the busiest worker's CPU to the
idlest's (goal ≤ 1.5: connections spread over the workers); at the end the
ledger's integrity (spend = stored releases + open reservations) and no
overspend: Σ ε charged ≤ budget per role per period, from the ledger and from
the NOTICEs the clients received. HEADLINE: no unexpected error class, no
overspend, every repeat identical, the p99 drift from the first window to the
last, and the workers' CPU ratio. ``--quick`` takes < 50 s.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path

from bench.core import columns_toml

PASSWORD = "soak-pw"
WIDE = [f"wide{i}" for i in range(4)]  # ε 0.1, a budget never reached
EDGE = [f"edge{i}" for i in range(4)]  # ε 1, 25 per day: exhausted during the run
EDGE_EPS, EDGE_BUDGET = 1.0, 25.0
MIX = (("fresh", 35), ("repeat", 30), ("refusal", 10), ("catalog", 10), ("view", 15))
CPU_RATIO_GOAL = 1.5  # busiest worker's CPU / idlest's
EXPECTED = {
    "42501": "refusal (raw rows)",
    "53400": "budget exhausted (edge roles)",
    "conn": "connection lost to a kill -9 (pre-fault connection)",
    "08006": "ledger unavailable, during a ledger stop",
}


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _config(state: Path, port: int, ledger_dsn: str | None = None) -> Path:
    import tomllib

    from proxy.demo import demo_config_path
    from proxy.wire.auth import make_verifier

    base = tomllib.loads(demo_config_path().read_text())
    ver = make_verifier(PASSWORD, iterations=4096)
    lines = [
        "[server]",
        'host = "127.0.0.1"',
        f"port = {port}",
        'database = "demo"',
        f'state_dir = "{state}"',
        "[server.limits]",
        "max_statements_per_role = 64",
        "max_connections = 256",
        "[backend]",
        'kind = "duckdb"',
        f'path = "{state / "soak.duckdb"}"',
        *(["[ledger]", 'kind = "postgres"', f'dsn = "{ledger_dsn}"'] if ledger_dsn else []),
        "[tiers.wide]",
        "epsilon = 0.1",
        "budget = 1000000",
        'period = "day"',
        "[tiers.edge]",
        f"epsilon = {EDGE_EPS}",
        f"budget = {EDGE_BUDGET}",
        'period = "day"',
        "[tiers.owner]",
        "epsilon = 1.0",
        "budget = 1000000",
        'period = "day"',
    ]
    for r in WIDE + EDGE + ["admin"]:
        tier = "wide" if r in WIDE else "edge" if r in EDGE else "owner"
        lines += [f"[roles.{r}]", f'tier = "{tier}"', f'scram = "{ver}"'] + (
            ["admin = true"] if r == "admin" else []
        )
    lines += columns_toml(base, "people")
    path = state / "soak.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def _make_data(db: Path, rows: int) -> None:
    import duckdb

    from proxy.demo import people_select

    con = duckdb.connect(str(db))
    con.execute(f"CREATE TABLE people AS {people_select(rows, f'range(0, {rows}) AS t(i)')}")
    con.close()


class Proxy:
    """dpgate as a subprocess on a fixed port; ``kill()`` is SIGKILL, ``start()`` waits for its
    listening line (every worker ready: a TCP probe could reach a dying worker of the run
    before)."""

    def __init__(self, cfg: Path, port: int, log: Path):
        self.cfg, self.port, self.log = cfg, port, log
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 60) -> None:
        self.log_from = self.log.stat().st_size if self.log.exists() else 0  # this run's lines start here
        out = open(self.log, "a")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "proxy.cli", "serve", "--config", str(self.cfg)],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=str(Path(__file__).resolve().parent.parent),
        )
        out.close()
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("dpgate exited:\n" + self.log.read_text()[-3000:])
            with open(self.log, "rb") as f:
                f.seek(self.log_from)
                if b"dpgate: listening on" in f.read():
                    return
            time.sleep(0.05)
        raise RuntimeError("dpgate did not start")

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()

    def sample(self) -> tuple[float, int] | None:
        """(RSS MB, open descriptors) of the running proxy: its processes together."""
        try:
            procs = self.processes()
            rss = sum(proc_rss_mb(pid) for pid in procs.values())
            return rss, sum(len(os.listdir(f"/proc/{pid}/fd")) for pid in procs.values())
        except (OSError, AttributeError, ValueError):
            return None

    def processes(self) -> dict[str, int]:
        """Label -> pid of the proxy's processes: ``parent``, ``worker<i>`` (index order, from
        the latest listening line: a restarted worker keeps its index), ``lane``."""
        pid = self.proc.pid
        kids = [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
        out = {"parent": pid}
        with open(self.log, "rb") as f:  # this run's listening line names the workers
            f.seek(self.log_from)
            m = re.search(r"\d+ workers: pids ([\d, ]+)\)", f.read().decode(errors="replace"))
        if m is None:
            return out if kids else {"worker0": pid}  # starting (children not labelled yet); one process
        index = {int(x): i for i, x in enumerate(m.group(1).split(", "))}
        rest = [p for p in kids if p not in index]
        for p in kids:
            if p in index:
                out[f"worker{index[p]}"] = p
            elif len(rest) == 1:
                out["lane"] = p
        return out


def proc_rss_mb(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"VmRSS:\s+(\d+)", status).group(1)) / 1024


def proc_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class PerProcess:
    """CPU seconds and largest RSS per process label over the run: a label's CPU is the sum,
    over every pid that held it (restarts), of the last CPU time seen for that pid."""

    def __init__(self) -> None:
        self.cpu: dict[tuple[str, int], float] = {}
        self.rss: dict[str, float] = defaultdict(float)

    def sample(self, procs: dict[str, int]) -> None:
        for label, pid in procs.items():
            try:
                self.cpu[(label, pid)] = proc_cpu_s(pid)
                self.rss[label] = max(self.rss[label], proc_rss_mb(pid))
            except (OSError, ValueError, IndexError):
                pass

    def totals(self) -> dict[str, tuple[float, float]]:
        cpu: dict[str, float] = defaultdict(float)
        for (label, _), s in self.cpu.items():
            cpu[label] += s
        return {label: (cpu[label], self.rss[label]) for label in sorted(cpu)}

    def worker_ratio(self) -> float:
        """Busiest worker's CPU / idlest worker's (nan with fewer than two workers)."""
        cpus = [c for label, (c, _) in self.totals().items() if label.startswith("worker")]
        if len(cpus) < 2:
            return float("nan")
        return max(cpus) / min(cpus) if min(cpus) > 0 else float("inf")


class Soak:
    """The shared record: latencies, errors, answers (for the repeat check), charges."""

    def __init__(self, proxy: Proxy, deadline: float, window: float, seed: int, ledger=None):
        self.proxy, self.deadline, self.window, self.seed = proxy, deadline, window, seed
        self.ledger = ledger  # a Postgres ledger server (TempPostgres) to stop, or None
        self.outages: list[list[float]] = []  # ledger down: [from, to] (time.time())
        self.t0 = time.time()
        self.lock = threading.Lock()
        self.epoch = 0  # incremented at each kill
        self.restarting = False  # between a kill and the restarted proxy's open port
        self.lat: dict[int, list[float]] = defaultdict(list)
        self.count: Counter = Counter()  # per window: statements sent
        self.errors: Counter = Counter()  # (sqlstate, op) -> n
        self.err_window: Counter = Counter()
        self.answers: dict[tuple[str, str], list] = {}
        self.released: dict[str, list[str]] = defaultdict(list)
        self.charged: Counter = Counter()  # (role, period) -> ε from NOTICEs
        self.repeats = self.mismatches = 0
        self.samples: dict[int, list[tuple[float, int]]] = defaultdict(list)
        self.per_process = PerProcess()
        self.connect_why: Counter = Counter()  # what a failed connect said
        self.kills: list[float] = []

    def w(self) -> int:
        return int((time.time() - self.t0) // self.window)

    def dsn(self, role: str) -> str:
        return (
            f"host=127.0.0.1 port={self.proxy.port} dbname=demo user={role} password={PASSWORD} "
            "sslmode=disable connect_timeout=5"
        )

    # -- one client ---------------------------------------------------------
    def client(self, k: int, role: str) -> None:
        import psycopg

        rng = random.Random(self.seed * 1000 + k)
        ops, weights = zip(*MIX)
        conn, conn_epoch = None, -1
        notes: list[str] = []
        while time.time() < self.deadline:
            if conn is None:
                try:
                    conn = psycopg.connect(self.dsn(role), autocommit=True)
                    conn.add_notice_handler(lambda d: notes.append(d.message_primary))
                    conn_epoch = self.epoch
                except psycopg.OperationalError as e:
                    if not self.restarting:  # refused while up: counted (never silently retried)
                        with self.lock:
                            self.errors[("connect", "connect")] += 1
                            self.connect_why[str(e).strip().splitlines()[-1][:120]] += 1
                    time.sleep(0.05)  # down (being restarted): bounded by the deadline
                    continue
            op = rng.choices(ops, weights)[0]
            op, sql, params, key = self._statement(op, role, rng)
            notes.clear()
            t, t0 = time.perf_counter(), time.time()
            win = self.w()
            try:
                rows = conn.execute(sql, params).fetchall()
            except psycopg.Error as e:
                state = getattr(e, "sqlstate", None)
                if state == "53400" and role not in EDGE:
                    state = "53400 (ample budget)"
                if state == "08006" and not self._outage(t0):
                    state = "08006 (ledger up)"
                if state is None or conn.closed or conn.broken:
                    state = "conn" if conn_epoch < self.epoch else "conn-unexpected"
                    try:
                        conn.close()
                    except Exception:
                        pass
                    conn = None
                with self.lock:
                    self.count[win] += 1
                    self.err_window[win] += 1
                    self.errors[(state, op)] += 1
                continue
            dt = (time.perf_counter() - t) * 1000
            with self.lock:
                self.count[win] += 1
                self.lat[win].append(dt)
                if key is not None:
                    self._check(key, rows, notes, role)

    def _statement(self, op: str, role: str, rng: random.Random):
        """(the op as sent, SQL, parameters, the answer's key for the repeat check or None)."""
        if op == "repeat":
            with self.lock:
                done = self.released[role]
                sql = done[rng.randrange(len(done))] if done else None
            if sql is not None:
                return op, sql, None, (role, sql)
            op = "fresh"
        if op == "fresh":
            lo, hi, h = rng.randrange(0, 50), rng.randrange(50, 100), rng.randrange(0, 80)
            if rng.random() < 0.5:
                sql = f"SELECT COUNT(*) FROM people WHERE age BETWEEN {lo} AND {hi} AND hours > {h}"
            else:
                sql = f"SELECT region, COUNT(*) FROM people WHERE age BETWEEN {lo} AND {hi} GROUP BY region"
            return op, sql, None, (role, sql)
        if op == "refusal":
            return op, "SELECT income FROM people WHERE age > 30", None, None
        if op == "catalog":
            return (
                op,
                rng.choice(
                    [
                        "SELECT 1",
                        "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'",
                    ]
                ),
                None,
                None,
            )
        sql, params = rng.choice(
            [
                ("SELECT * FROM dpgate.budget", None),
                (
                    "SELECT statement, epsilon FROM dpgate.releases WHERE role = %s "
                    "ORDER BY released_at DESC LIMIT 5",
                    (role,),
                ),
            ]
        )
        return op, sql, params, None

    def _check(self, key, rows, notes, role) -> None:
        """A first answer is kept; any later one (a repeat, or a concurrent twin) must equal it."""
        from proxy.stores.ledger import period_key

        charged = [float(m.group(1)) for n in notes for m in [re.search(r"ε charged ([0-9.e-]+)", n)] if m]
        if charged and charged[0] > 0:
            self.charged[(role, period_key("day"))] += charged[0]
        prev = self.answers.get(key)
        if prev is None:
            self.answers[key] = rows
            self.released[role].append(key[1])
        else:
            self.repeats += 1
            self.mismatches += prev != rows

    # -- faults and resources --------------------------------------------------
    def _outage(self, t: float) -> bool:
        """Did a statement started at ``t`` meet a ledger outage (or its first 3 s after)?"""
        return any(a - 5 <= t <= (b or time.time()) + 3 for a, b in self.outages)

    def faults(self, every: float) -> None:
        """kill -9 of the proxy and restart; with a Postgres ledger, every other fault is
        a ledger stop instead (2 s down, then started again)."""
        nxt, n = self.t0 + every, 0
        while time.time() < self.deadline - 2:
            time.sleep(0.25)
            if time.time() >= nxt and self.ledger is not None and n % 2 == 1:
                n += 1
                self.outages.append([time.time(), None])
                self.ledger.kill_and_wait()
                self.kills.append(time.time() - self.t0)
                time.sleep(2)
                self.ledger.resume()
                self.outages[-1][1] = time.time()
                nxt = time.time() + every
            elif time.time() >= nxt:
                n += 1
                with self.lock:
                    self.epoch += 1
                    self.restarting = True
                self.proxy.kill()
                self.kills.append(time.time() - self.t0)
                self.proxy.start()
                self.restarting = False
                nxt = time.time() + every

    def sampler(self) -> None:
        while time.time() < self.deadline:
            s = self.proxy.sample()
            if s is not None:
                self.samples[self.w()].append(s)
            try:
                self.per_process.sample(self.proxy.processes())
            except (OSError, AttributeError, ValueError):
                pass  # between a kill and the restart
            time.sleep(0.5)


def ledger_check(
    path: Path | None, budgets: dict[str, float], dsn: str | None = None
) -> tuple[bool, list[str]]:
    """Integrity (spend = releases + open reservations, per role and period) and
    no overspend (spend ≤ budget), straight from the ledger (SQLite file or Postgres)."""
    from proxy.stores.ledger import NANO, Ledger

    led = Ledger(path, dsn=dsn)
    ok = led.integrity_check()
    db = led._db
    spend = {(r, p): s for r, p, s in db.execute("SELECT role, period, spent_nano FROM spend").fetchall()}
    held = Counter()
    for table in ("releases", "reservations"):
        for r, p, s in db.execute(
            f"SELECT role, period, SUM(epsilon_nano) FROM {table} GROUP BY role, period"
        ).fetchall():
            held[(r, p)] += s
    led.close()
    over = []
    for (r, p), s in sorted(spend.items()):
        if s != held[(r, p)]:
            ok = False
        if s > round(budgets[r] * NANO):
            over.append(f"{r} {p}: {s / NANO:g} > {budgets[r]:g}")
    return ok, over


def _pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))] if xs else float("nan")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=10.0, help="how long the traffic runs")
    ap.add_argument("--quick", action="store_true", help="25 s of traffic, 5 s windows (< 50 s in all)")
    ap.add_argument("--clients", type=int, default=None, help="concurrent clients (default 16; quick 8)")
    ap.add_argument(
        "--kill-every", type=float, default=None, help="seconds between faults (default 60; quick 8)"
    )
    ap.add_argument("--seed", type=int, default=24)
    ap.add_argument(
        "--ledger",
        choices=("sqlite", "postgres"),
        default="sqlite",
        help="postgres: a throwaway Postgres ledger (initdb), stopped as every other fault",
    )
    args = ap.parse_args(argv)
    seconds = 25.0 if args.quick else args.minutes * 60
    window = 5.0 if args.quick else 60.0
    clients = args.clients or (8 if args.quick else 16)
    every = args.kill_every or (8.0 if args.quick else 60.0)
    with tempfile.TemporaryDirectory(prefix="dpgate-soak-") as tmp:
        state = Path(tmp)
        _make_data(state / "soak.duckdb", 200_000 if args.quick else 1_000_000)
        port = _port()
        pg = None
        if args.ledger == "postgres":
            sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
            from support.pg import TempPostgres

            pg = TempPostgres().start()
        proxy = Proxy(_config(state, port, pg.dsn if pg else None), port, state / "dpgate.log")
        try:
            proxy.start()
            soak = Soak(proxy, time.time() + seconds, window, args.seed, ledger=pg)
            budgets, intact, over, tracebacks = _run(soak, proxy, clients, every, seconds, state, pg)
        finally:
            proxy.stop()
            if pg is not None:
                pg.stop()
    return _report(soak, args, clients, every, seconds, window, budgets, intact, over, tracebacks)


def _run(soak, proxy, clients, every, seconds, state, pg):
    """The clients, the fault injector and the sampler, until the deadline; then the ledger's check."""
    roles = WIDE + EDGE
    threads = [
        threading.Thread(target=soak.client, args=(k, roles[k % len(roles)]), daemon=True)
        for k in range(clients - 1)
    ]
    threads.append(threading.Thread(target=soak.client, args=(clients - 1, "admin"), daemon=True))
    threads += [
        threading.Thread(target=soak.faults, args=(every,), daemon=True),
        threading.Thread(target=soak.sampler, daemon=True),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(seconds + 120)
    proxy.stop()
    budgets = {r: 1e6 for r in WIDE} | {r: EDGE_BUDGET for r in EDGE} | {"admin": 1e6}
    intact, over = ledger_check(None if pg else state / "ledger.sqlite3", budgets, pg.dsn if pg else None)
    tracebacks = (state / "dpgate.log").read_text(errors="replace").count("Traceback")
    return budgets, intact, over, tracebacks


def _report(soak, args, clients, every, seconds, window, budgets, intact, over, tracebacks) -> int:
    client_over = [
        f"{r} {p}: {e:g} > {budgets[r]:g}"
        for (r, p), e in sorted(soak.charged.items())
        if e > budgets[r] + 1e-9
    ]
    faults = "kill -9 / ledger stop in turn" if args.ledger == "postgres" else "kill -9"
    print(
        f"\ndpgate soak — {clients} clients, {seconds:g} s, a fault every {every:g} s ({faults}: "
        f"{len(soak.kills)}), people {'200,000' if args.quick else '1,000,000'} rows, "
        f"{'Postgres' if args.ledger == 'postgres' else 'SQLite'} ledger{' (quick)' if args.quick else ''}\n"
    )
    print(
        f"{'window':>8} {'stmts':>7} {'errors':>7} {'p50 ms':>8} {'p99 ms':>8} {'RSS MB':>8} {'fds':>5} {'faults':>6}"
    )
    wins = sorted(set(soak.count) | set(soak.lat))
    for w in wins:
        lat, smp = soak.lat[w], soak.samples[w]
        rss = max((s[0] for s in smp), default=float("nan"))
        fds = max((s[1] for s in smp), default=0)
        label = f"{int(w * window)} s" if args.quick else f"{w + 1} min"
        print(
            f"{label:>8} {soak.count[w]:>7} {soak.err_window[w]:>7} {_pct(lat, 50):>8.2f} {_pct(lat, 99):>8.2f} "
            f"{rss:>8.1f} {fds:>5} {sum(int(k // window) == w for k in soak.kills):>6}"
        )
    print(f"\n{'errors by SQLSTATE':<26} {'op':<9} {'n':>6}  expected?")
    unexpected = []
    for (state_, op), n in sorted(soak.errors.items()):
        exp_ = (
            state_ in EXPECTED
            and not (state_ == "53400" and op != "fresh")
            and not (state_ == "42501" and op != "refusal")
        )
        if not exp_:
            unexpected.append(f"{state_}/{op}")
        print(f"{state_:<26} {op:<9} {n:>6}  {'yes: ' + EXPECTED[state_] if exp_ else 'NO'}")
    for why, n in soak.connect_why.most_common(3):
        print(f"  connect failed ({n}): {why}")
    total = sum(soak.count.values())
    print(
        f"\nstatements {total} ({total / seconds:.0f}/s), answered {sum(len(v) for v in soak.lat.values())}, "
        f"releases kept {len(soak.answers)}, repeats checked {soak.repeats}, differing {soak.mismatches}"
    )
    print(
        f"ledger integrity (spend = releases + open reservations): {'ok' if intact else 'BROKEN'}; "
        f"overspend: ledger {len(over)}, client NOTICEs {len(client_over)}"
    )
    print(f"proxy log: {tracebacks} tracebacks")
    print(f"\n{'process':<10} {'CPU s':>8} {'RSS max MB':>11}")
    for label, (cpu, rss_) in soak.per_process.totals().items():
        print(f"{label:<10} {cpu:>8.1f} {rss_:>11.1f}")
    ratio = soak.per_process.worker_ratio()
    print(f"workers' CPU, busiest / idlest: ×{ratio:.2f} (goal ≤ {CPU_RATIO_GOAL:g})")
    for line in over + client_over:
        print("  OVERSPEND", line)
    full = [w for w in wins if soak.lat[w]]
    first, last = (_pct(soak.lat[full[0]], 99), _pct(soak.lat[full[-1]], 99)) if full else (0.0, 0.0)
    rss = [s[0] for w in wins for s in soak.samples[w]]
    good = (
        not unexpected and not over and not client_over and intact and soak.mismatches == 0 and not tracebacks
    )
    print(
        f"HEADLINE: {'no' if not unexpected else ', '.join(unexpected)} unexpected error class, "
        f"{len(over) + len(client_over)} overspend, {soak.mismatches} of {soak.repeats} repeats differ, "
        f"ledger {'intact' if intact else 'BROKEN'}, p99 {first:.1f} → {last:.1f} ms (first → last window, "
        f"drift ×{(last / first if first else float('nan')):.2f}), RSS max {max(rss, default=0):.0f} MB, "
        f"workers' CPU ×{ratio:.2f} of each other ({'≤' if ratio <= CPU_RATIO_GOAL else 'ABOVE'} "
        f"{CPU_RATIO_GOAL:g}), {len(soak.kills)} faults ({faults}) {'PASS' if good else 'FAIL'}"
    )
    return 0 if good else 1


if __name__ == "__main__":
    sys.exit(main())
