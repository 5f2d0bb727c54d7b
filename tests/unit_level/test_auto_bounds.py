"""Bounds written "auto" (proxy/pipeline/auto_bounds.py, mechanisms/auto_bounds.py,
rewriter/contributions.py): chosen once per data version by an ε-DP quantile of one value per
unit, kept in the ledger, used by every planner, shown in \\d+, NOTICE and EXPLAIN with the
composed guarantee, reused by a restart, chosen again for a new data version, and refused
(55000, with what to write) when they cannot be chosen — over the wire on DuckDB and Postgres.

Tolerances (discrete Laplace of scale 1/ε on every bin, p = e^(−ε)): P[|Z| ≥ k] = 2p^k/(1+p).
At ε = 2 that is 8·10⁻⁵ for k = 5, so over the 441 bins of a value grid every bin's noise is
within ±4 with probability ≥ 0.96 (union bound), and the quantile read from the support moves
by at most (4 + τ) units per bin holding data (τ = ⌈ln(B/β)/ε⌉ = 5): a share ≤ 9·bins/n.
"""

from __future__ import annotations

import asyncio
import math
import shutil
import subprocess
import threading
import uuid
from collections import Counter
from fractions import Fraction
from pathlib import Path

import duckdb
import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from config import parse_config
from mechanisms import SeededSource
from mechanisms.auto_bounds import LogHistogramBound, count_edges, value_edges
from proxy.cli.main import main as cli_main
from proxy.gateway import Gateway
from proxy.stores.errors import LedgerDamaged
from proxy.stores.ledger import ChosenBound, Ledger
from proxy.wire.server import Server
from support.service import config_toml

N = 3000  # customers
EPS = 2.0
Q = 0.85
TABLES_SQL = {
    "customers": "SELECT i AS c_id, CAST(((i * 7919) % 2001) - 500 AS DOUBLE PRECISION) AS c_bal FROM {s}",
    "orders": (
        "SELECT i * 10 + j AS o_id, i AS o_cust, "
        "CASE (i + j) % 3 WHEN 0 THEN 'F' WHEN 1 THEN 'O' ELSE 'P' END AS o_status, "
        "CAST(((i * 31 + j * 17) % 900) + 100 AS DOUBLE PRECISION) AS o_total "
        "FROM {s} CROSS JOIN {js} WHERE j < 1 + i % 10"
    ),
    "few": "SELECT i AS f_id FROM {s} WHERE i < 20",  # 20 units: too few for ε 0.1
    "items": (  # 1 to 3 lines per order: reaches its customer through orders
        "SELECT o_id AS i_order, CAST((o_id % 50) + 1 AS DOUBLE PRECISION) AS i_qty "
        "FROM orders CROSS JOIN {ks} WHERE k < 1 + o_id % 3"
    ),
}


def _config(backend: dict, *, epsilon=EPS, budget=20.0, quantile=Q) -> dict:
    return {
        "server": {"auth": "trust", "port": 0},
        "backend": backend,
        "tiers": {"t": {"epsilon": 1, "budget": 100}},
        "roles": {"a": {"tier": "t"}},
        "auto_bounds": {"epsilon": epsilon, "budget": budget, "quantile": quantile},
        "tables": {
            "customers": {
                "privacy_unit": "c_id",
                "key": "c_id",
                "columns": {
                    "c_id": {"type": "int"},
                    "c_bal": {"type": "float", "lower": "auto", "upper": "auto"},
                },
            },
            "orders": {
                "privacy_unit": "o_cust",
                "key": "o_id",
                "max_rows_per_unit": "auto",
                "max_groups_per_unit": "auto",
                "columns": {
                    "o_id": {"type": "int"},
                    "o_cust": {"type": "int"},
                    "o_status": {"type": "text", "domain": ["F", "O", "P"]},
                    "o_total": {"type": "float", "lower": 0, "upper": "auto"},
                },
            },
        },
    }


class Svc:
    """dpgate (Gateway + wire server) in a thread of its own, on a config dict."""

    def __init__(self, cfg: dict, state: Path, seed: int = 11):
        self.cfg, self.state, self.seed = parse_config(cfg, "test-config"), state, seed
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, daemon=True).start()
        self._call(self._start())

    def _call(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(300)

    async def _start(self):
        self.gw = Gateway(self.cfg, self.state, source=SeededSource(self.seed))
        await self.gw.start()
        self.server = Server(self.gw.handler_factory, authenticator=self.gw, host="127.0.0.1", port=0)
        await self.server.start()

    async def _stop(self):
        await self.server.stop()
        await self.gw.close()

    def close(self):
        self._call(self._stop())
        self.loop.call_soon_threadsafe(self.loop.stop)

    def ask(self, sql: str) -> tuple[list, list[str]]:
        notes: list[str] = []
        dsn = f"host=127.0.0.1 port={self.server.port} dbname=demo user=a sslmode=disable"
        with psycopg.connect(dsn, autocommit=True) as c:
            c.add_notice_handler(lambda d: notes.append(d.message_primary))
            return c.execute(sql).fetchall(), notes

    def refused(self, sql: str) -> psycopg.Error:
        with pytest.raises(psycopg.Error) as e:
            self.ask(sql)
        return e.value

    def kept(self) -> list[tuple]:
        """The ledger's auto_bounds rows (data version, table, field, value, ε nano)."""
        return self.gw.ledger._rdb.execute(
            "SELECT data_version, tbl, field, value, epsilon_nano FROM auto_bounds ORDER BY 1, 2, 3"
        ).fetchall()


@pytest.fixture(scope="module", params=["duckdb", "postgres"])
def data(request, tmp_path_factory):
    """The tables on the backend, and a function giving a fresh backend config for them."""
    if request.param == "duckdb":
        path = tmp_path_factory.mktemp("auto") / "data.duckdb"
        con = duckdb.connect(str(path))
        for t, sql in TABLES_SQL.items():
            con.execute(
                f"CREATE TABLE {t} AS "
                + sql.format(s=f"range(0, {N}) t(i)", js="range(0, 10) u(j)", ks="range(0, 3) v(k)")
            )
        run = lambda q: con.execute(q).fetchall()
        counter = iter(range(100))

        def backend():  # a copy per service: the ledger's marker lives in the DuckDB file
            copy = path.with_name(f"copy{next(counter)}.duckdb")
            con.execute("CHECKPOINT")
            copy.write_bytes(path.read_bytes())
            return {"kind": "duckdb", "path": str(copy)}

        yield run, backend
        con.close()
        return
    dsn = request.getfixturevalue("postgres").dsn
    con = psycopg.connect(dsn, autocommit=True)
    con.execute("DROP SCHEMA IF EXISTS auto_b CASCADE; CREATE SCHEMA auto_b; SET search_path TO auto_b")
    for t, sql in TABLES_SQL.items():
        con.execute(
            f"CREATE TABLE {t} AS "
            + sql.format(
                s=f"generate_series(0, {N - 1}) t(i)",
                js="generate_series(0, 9) u(j)",
                ks="generate_series(0, 2) v(k)",
            )
        )
    yield (
        (lambda q: con.execute(q).fetchall()),
        (
            lambda: {
                "kind": "postgres",
                "dsn": make_conninfo(dsn, options="-c search_path=auto_b"),
                "pool_size": 2,
            }
        ),
    )
    con.execute("DROP SCHEMA auto_b CASCADE")
    con.close()


def _covering(edges, v) -> Fraction:
    """The first grid edge at or above v: the bound the release gives when noise moves nothing."""
    return next(e for e in edges if e >= Fraction(str(v)))


def _share_at_or_below(values: list[float], bound: float) -> float:
    return sum(v <= bound for v in values) / len(values)


def _per_unit(run, sql: str) -> list[float]:
    return [float(v) for (v,) in run(sql)]


@pytest.fixture(scope="module")
def served(data, tmp_path_factory):
    run, backend = data
    state = tmp_path_factory.mktemp("state")
    cfg = _config(backend())
    svc = Svc(cfg, state)
    yield svc, run, cfg
    svc.close()


def test_contribution_bounds_are_the_quantile_bins_of_the_data(served):
    """Rows and groups per unit: the data put the 0.85-quantile mid-bin, with hundreds of units
    of margin against ±9 per bin (module doc), so the chosen bound is exactly the grid edge
    covering the data's own quantile."""
    svc, run, _ = served
    rows = sorted(_per_unit(run, "SELECT COUNT(*) FROM orders GROUP BY o_cust"))
    groups = sorted(_per_unit(run, "SELECT COUNT(DISTINCT o_status) FROM orders GROUP BY o_cust"))
    at = math.ceil(Q * N) - 1
    t = svc.gw.config.tables["orders"]
    assert t.max_rows_per_unit == _covering(count_edges(100_000), rows[at])
    assert t.max_groups_per_unit == _covering(count_edges(1000), groups[at])


def test_clamping_bounds_cover_the_quantile_of_units(served):
    """A column's upper (lower) covers about Q of the units' largest (smallest) values: the share
    is Q up to 9 units per bin holding data (module doc), and the bound is within one grid
    step (×1.25) of the data it covers."""
    svc, run, _ = served
    cols = svc.gw.config.tables
    maxes = _per_unit(run, "SELECT MAX(o_total) FROM orders GROUP BY o_cust")
    bal = _per_unit(run, "SELECT MIN(c_bal) FROM customers GROUP BY c_id")
    slack = 9 * 40 / N  # ≤ 40 bins of the value grid hold these values
    upper = cols["orders"].columns["o_total"].upper
    assert isinstance(upper, float) and _share_at_or_below(maxes, upper) >= Q - slack
    assert upper <= 1.25 * max(maxes)
    lower = cols["customers"].columns["c_bal"].lower
    assert isinstance(lower, float) and sum(v >= lower for v in bal) / N >= Q - slack
    assert lower >= 1.25 * min(bal)
    assert cols["orders"].columns["o_total"].lower == 0  # written as a number: kept


def test_answers_use_them_and_say_so(served):
    """The NOTICE and EXPLAIN name the chosen bounds and the composed ε; \\d+ (the catalog's
    comments) shows them; the plan bounds with them."""
    svc, _, cfg = served
    chosen = {(c.table, c.field): c for c in svc.gw.bounds.chosen.values()}
    eps = sum(c.epsilon for (t, _), c in chosen.items() if t == "orders")
    rows, notes = svc.ask("SELECT o_status, COUNT(*), SUM(o_total) FROM orders GROUP BY o_status")
    assert len(rows) == 3
    (note,) = notes
    r = svc.gw.config.tables["orders"].max_rows_per_unit
    assert "bounds chosen by dpgate for data version 1" in note and f"(ε + {eps:g})-DP per unit" in note
    assert f"orders.max_rows_per_unit = {r}" in note and "customers." not in note
    explain, _ = svc.ask("EXPLAIN SELECT SUM(o_total) FROM orders")
    text = "\n".join(line for (line,) in explain)
    assert f"at most {r} row(s)" in text and f"(ε + {eps:g})-DP per unit" in text
    ((comment,),) = svc.ask("SELECT obj_description('orders'::regclass)")[0]
    assert f"max_rows_per_unit = {r}" in comment and "chosen by dpgate" in comment
    ((col,),) = svc.ask("SELECT col_description('orders'::regclass, 4)")[0]
    upper = svc.gw.config.tables["orders"].columns["o_total"].upper
    assert f"upper = {upper:g} chosen by dpgate" in col and f"bounds [0, {upper:g}]" in col
    assert all(c.epsilon == cfg["auto_bounds"]["epsilon"] for c in chosen.values())
    if shutil.which("psql"):  # the client itself: \d+ lists each column's comment
        url = f"postgresql://a@127.0.0.1:{svc.server.port}/demo?sslmode=disable"
        out = subprocess.run(
            ["psql", url, "-X", "-A", "-t", "-c", "\\d+ orders"], capture_output=True, text=True, timeout=60
        )
        assert out.returncode == 0, out.stderr
        assert f"upper = {upper:g} chosen by dpgate" in out.stdout


def test_a_unit_reached_through_a_chain_of_references(data, tmp_path):
    """[units.customer] with items → orders → customers: items' rows per customer are counted
    through the chain (the planner's own path), and the chosen bound covers the Q-quantile of the
    data's per-customer lines up to the noise (a share ≤ 9 units per bin: module doc)."""
    run, backend = data
    cfg = _config(backend())
    cfg["units"] = {"customer": {"table": "customers", "key": "c_id"}}
    cfg["tables"]["customers"].pop("privacy_unit")
    cfg["tables"]["orders"].pop("privacy_unit")
    cfg["tables"]["orders"]["references"] = {"o_cust": "customers"}
    cfg["tables"]["items"] = {
        "references": {"i_order": "orders"},
        "max_rows_per_unit": "auto",
        "columns": {"i_order": {"type": "int"}, "i_qty": {"type": "float", "lower": 0, "upper": "auto"}},
    }
    svc = Svc(cfg, tmp_path)
    try:
        lines = sorted(
            _per_unit(run, "SELECT COUNT(*) FROM items JOIN orders ON i_order = o_id GROUP BY o_cust")
        )
        r = svc.gw.config.tables["items"].max_rows_per_unit
        slack = 9 * 12 / N  # the lines per customer (1 … 30) fill ≤ 12 bins of the count grid
        edges = count_edges(100_000)
        lo = _covering(edges, lines[max(math.ceil((Q - slack) * N) - 1, 0)])
        hi = _covering(edges, lines[min(math.ceil((Q + slack) * N) - 1, N - 1)])
        assert isinstance(r, int) and lo <= r <= hi
        _, notes = svc.ask("SELECT COUNT(*), SUM(i_qty) FROM items")
        assert f"items.max_rows_per_unit = {r}" in notes[0] and "orders." not in notes[0].split("chosen")[1]
    finally:
        svc.close()


def test_a_restart_reuses_them_and_a_new_data_version_chooses_again(data, tmp_path, monkeypatch):
    _, backend = data
    cfg = _config(backend())
    svc = Svc(cfg, tmp_path)
    before, tables = svc.kept(), svc.gw.config.tables
    svc.close()
    assert len(before) == 5 and {r[0] for r in before} == {1}
    again = Svc(cfg, tmp_path, seed=99)  # another noise stream: nothing is drawn again
    try:
        assert again.kept() == before and again.gw.config.tables == tables
        monkeypatch.setattr("proxy.gateway.BOUNDS_CHECK_S", 0.0)
        again.gw.ledger.advance_data_version()
        _, notes = again.ask("SELECT COUNT(*) FROM orders")
        assert "for data version 2" in notes[0]
        kept = again.kept()
        assert [r for r in kept if r[0] == 1] == before and len([r for r in kept if r[0] == 2]) == 5
    finally:
        again.close()


def test_a_bound_the_budget_cannot_pay_for_is_refused_with_what_to_write(data, tmp_path):
    """Budget 2.5 at ε 1: customers' lower and upper fit (declared first), orders' three do
    not — orders is refused (55000) and says what to write; customers is answered."""
    _, backend = data
    svc = Svc(_config(backend(), epsilon=1.0, budget=2.5), tmp_path)
    try:
        assert [r[1:3] for r in svc.kept()] == [
            ("customers", "columns.c_bal.lower"),
            ("customers", "columns.c_bal.upper"),
        ]
        e = svc.refused("SELECT COUNT(*) FROM orders")
        assert e.sqlstate == "55000" and "could not be chosen" in str(e)
        assert "max_groups_per_unit = <an integer>" in (e.diag.message_hint or "")
        rows, _ = svc.ask("SELECT AVG(c_bal) FROM customers")
        assert len(rows) == 1
    finally:
        svc.close()


def test_a_column_whose_bounds_were_not_chosen_refuses_what_needs_them(data, tmp_path):
    """Budget 4.5 at ε 1 pays for four choices in declaration order: o_total's upper is left
    "auto" — COUNT on orders is answered, SUM / AVG / MAX of o_total are refused (55000) with what
    to write."""
    _, backend = data
    svc = Svc(_config(backend(), epsilon=1.0, budget=4.5), tmp_path)
    try:
        assert "columns.o_total.upper" not in {r[2] for r in svc.kept()}
        assert len(svc.ask("SELECT o_status, COUNT(*) FROM orders GROUP BY o_status")[0]) == 3
        for sql in (
            "SELECT SUM(o_total) FROM orders",
            "SELECT AVG(o_total * 2) FROM orders",
            "SELECT MAX(o_total) FROM orders",
        ):
            e = svc.refused(sql)
            assert e.sqlstate == "55000" and "o_total" in str(e), sql
            assert "lower = <a number> and upper = <a number>" in (e.diag.message_hint or ""), sql
    finally:
        svc.close()


def test_too_few_units_is_refused_and_the_failure_is_kept(data, tmp_path):
    """20 units at ε 0.1: τ = ⌈ln(48/0.05)/0.1⌉ = 69 units, so the one bin holding data passes
    only if its noise reaches 49 (P ≤ e^(−4.9) < 0.01) and an empty bin with probability ≤ β:
    the choice fails; it is charged and kept (a restart does not draw again), and refuses."""
    _, backend = data
    cfg = _config(backend(), epsilon=0.1, budget=1.0)
    cfg["tables"] = {
        "few": {"privacy_unit": "f_id", "max_rows_per_unit": "auto", "columns": {"f_id": {"type": "int"}}}
    }
    assert LogHistogramBound(0.1, count_edges(100_000), Fraction(Q)).threshold() == 69
    svc = Svc(cfg, tmp_path)
    try:
        failed = svc.kept()
        assert failed == [(1, "few", "max_rows_per_unit", "", 100_000_000)]
        e = svc.refused("SELECT COUNT(*) FROM few")
        assert e.sqlstate == "55000" and "max_rows_per_unit = <an integer>" in (e.diag.message_hint or "")
    finally:
        svc.close()
    svc = Svc(cfg, tmp_path, seed=5)
    try:
        assert svc.kept() == failed
        assert svc.refused("SELECT COUNT(*) FROM few").sqlstate == "55000"
    finally:
        svc.close()


# -- the mechanism alone --------------------------------------------------------------------


def test_one_unit_moves_one_bin_by_one():
    """The histogram's L1 sensitivity is 1: each unit contributes one value."""
    m = LogHistogramBound(1.0, value_edges(False), Fraction(Q))
    hist = Counter(float(v) for v in range(-40, 400, 7))
    base = m.counts(hist.items())
    for v in (-39.0, 0.0, 123.0, 10.0**18):
        moved = m.counts((hist + Counter([v])).items())
        assert sum(abs(a - b) for a, b in zip(base, moved)) == 1


def test_empty_bins_pass_the_threshold_at_most_beta_of_the_time():
    """No data: a release finds a bin only if some bin's noise reaches τ — probability ≤ β by
    the union bound. Over 400 seeds with β = 0.05 the count is Binomial(400, ≤ 0.05): mean ≤ 20,
    P(> 36) < 10⁻⁴."""
    m = LogHistogramBound(0.5, count_edges(1000), Fraction(Q), beta=0.05)
    found = sum(m.release([], SeededSource(s)).value is not None for s in range(400))
    assert found <= 36


def test_the_lower_bound_mirrors_the_upper():
    """The lower release is the upper one of the negated values: a point mass at 0 gives 0, and
    values in [a, b] give a lower bound at or below their (1 − Q)-quantile's bin."""
    m = LogHistogramBound(2.0, value_edges(True), Fraction(Q), lower=True)
    assert m.release([(0, 500)], SeededSource(1)).value == 0
    hist = [(v, 10) for v in range(100, 1100)]
    lower = m.release(hist, SeededSource(2)).value
    assert lower is not None and 80 <= lower <= 250  # the 15 % quantile (250) or one step below


def test_a_chosen_bound_altered_outside_dpgate_is_never_used(tmp_path):
    """Each kept bound carries the ledger's MAC over (data version, table, field, value, ε): an
    edited value raises LedgerDamaged where it is read, and `dpgate ledger check` names it."""
    led = Ledger(tmp_path / "ledger.sqlite3")
    try:
        kept = led.record_bounds(1, [ChosenBound("t", "max_rows_per_unit", "8", 0.1)], budget=1.0)
        assert [(c.value, c.epsilon) for c in kept] == [("8", 0.1)] and led.integrity_problems() == []
        led._db.execute("UPDATE auto_bounds SET value = '80'")
        with pytest.raises(LedgerDamaged):
            led.chosen_bounds(1)
        assert any("t.max_rows_per_unit" in p for p in led.integrity_problems())
    finally:
        led.close()


@pytest.mark.parametrize("store", ["sqlite", "postgres"])
def test_the_budget_is_checked_in_the_ledger_transaction(store, tmp_path, request):
    """A data version's choices together stay within the budget (nano-ε integers); a field kept
    once is never replaced by a later draw (first writer wins) — on either ledger store."""
    if store == "sqlite":
        led = Ledger(tmp_path / "ledger.sqlite3")
    else:
        dsn = request.getfixturevalue("postgres").dsn
        led = Ledger(None, dsn=dsn, schema="auto_" + uuid.uuid4().hex[:8], key_file=tmp_path / "k")
    try:
        first = [ChosenBound("t", f, "1", 0.4) for f in ("a", "b", "c")]
        assert [c.field for c in led.record_bounds(1, first, budget=1.0)] == ["a", "b"]
        again = led.record_bounds(1, [ChosenBound("t", "a", "99", 0.1)], budget=1.0)
        assert [(c.field, c.value) for c in again] == [("a", "1"), ("b", "1")]
        assert [c.field for c in led.record_bounds(2, first, budget=1.0)] == ["a", "b"]
    finally:
        led.close()


def test_proxies_starting_together_serve_the_same_bounds(data, tmp_path):
    """Two gateways on one ledger starting at once (``serve --workers``, or proxies sharing a
    ledger) each draw the missing bounds; the ledger keeps the first writer's per field and both
    serve those (the loser's draws are discarded unreleased): one row per field, one charge."""
    _, backend = data
    b = backend()
    if b["kind"] == "duckdb":
        pytest.skip("an embedded DuckDB file is opened once per process (serve --workers: one each)")
    cfg = parse_config(_config(b), "test-config")

    async def both():
        gws = [Gateway(cfg, tmp_path, source=SeededSource(s)) for s in (1, 2)]
        await asyncio.gather(*(gw.start() for gw in gws))
        try:
            return [gw.config.tables for gw in gws], gws[0].ledger._rdb.execute(
                "SELECT COUNT(*), SUM(epsilon_nano) FROM auto_bounds"
            ).fetchone()
        finally:
            for gw in gws:
                await gw.close()

    (a, b), (rows, eps) = asyncio.run(both())
    assert a == b and rows == 5 and eps == 5 * round(EPS * 1e9)


@pytest.mark.parametrize("budget,code", [(10.0, 0), (2.5, 2)])
def test_check_config_says_what_the_auto_bounds_cost_and_whether_they_fit(tmp_path, capsys, budget, code):
    """Five bounds at ε 1: a budget of 10 pays for them (exit 0); 2.5 pays for two (exit 2, with
    what to write) — found before serving, not by the analysts' refusals."""
    p = tmp_path / "c.toml"
    p.write_text(config_toml(_config({"kind": "duckdb"}, epsilon=1.0, budget=budget)))
    assert cli_main(["check-config", str(p)]) == code
    out = capsys.readouterr()
    assert '5 bound(s) written "auto": chosen at start, ε 1 each' in out.out + out.err
    if code:
        assert "only 2 fit" in out.err and "raise [auto_bounds] budget to 5" in out.err
