"""Heavy units kept across statements (``Backend.frozen``, ``rewriter.unit.heavy_set``,
``rewriter.unit.heavy_rows``): on a DuckDB file opened read-only, the privacy unit's heavy units of
a base table, and their rows where they are few enough, are made once per connection and read by
every later scan of that table. The premise (no process writes the file while it is held
read-only), which relations count as frozen, that a relation is made once for all the worker
cursors and is gone with its connection, and, through the service, that the scan reading it gives
the cells of the scan that computes them (the cells themselves are the one-pass plan's:
``test_unit_heavy_apart.py::test_a_kept_heavy_set_is_the_one_pass_plan``)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time

import duckdb
import pytest

import rewriter
from proxy.backends.duckdb import KEPT_CATALOG, WORKERS, DuckDBBackend, keep_relation
from proxy.pipeline.central import scan_sql
from proxy.pipeline.common import unit_salt
from rewriter.params import needs
from rewriter.unit import KEPT_CELLS, KEPT_HEAVY, KEPT_ROWS
from support.service import ask

from .test_unit_heavy_apart import unit_config


def _file(tmp_path):
    path = tmp_path / "data.duckdb"
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE t AS SELECT i % 50 AS u, i % 6 + 1 AS g FROM range(0, 3000) AS r(i)")
    con.execute("CREATE VIEW v AS SELECT * FROM t")
    con.close()
    return path


def test_a_file_held_read_only_takes_no_writer(tmp_path):
    """The premise: while the backend holds the file read-only, a read-write open by another
    process fails (DuckDB's file lock), and a reader still opens it."""
    path = _file(tmp_path)
    b = DuckDBBackend(path, read_only=True)
    try:
        write = (
            "import duckdb, sys; c = duckdb.connect(sys.argv[1]); c.execute('DELETE FROM t'); print('wrote')"
        )
        out = subprocess.run([sys.executable, "-c", write, str(path)], capture_output=True, text=True)
        assert out.returncode != 0 and "wrote" not in out.stdout and "lock" in out.stderr
        read = "import duckdb, sys; print(duckdb.connect(sys.argv[1], read_only=True).execute('SELECT COUNT(*) FROM t').fetchone()[0])"
        out = subprocess.run([sys.executable, "-c", read, str(path)], capture_output=True, text=True)
        assert out.stdout.strip() == "3000"
    finally:
        b.discard()


def test_only_a_base_table_of_a_file_held_read_only_is_frozen(tmp_path):
    path = _file(tmp_path)
    writable = DuckDBBackend(path)
    try:
        assert not writable.frozen("t")  # another statement of this process may write it
        writable.reopen_read_only()
        assert writable.frozen("t") and writable.frozen("main.t") and writable.frozen("T")
        assert not writable.frozen("v")  # a view may read files that change
        assert not writable.frozen("missing") and not writable.frozen("other.t")
        assert writable.frozen("t", 3000) and not writable.frozen("t", 2999)  # its rows, if bounded
    finally:
        writable.discard()
    memory = DuckDBBackend(None, read_only=True)
    try:
        assert not memory.frozen("t")
    finally:
        memory.discard()


def _plan():
    return rewriter.build_plan(
        rewriter.parse("SELECT g, COUNT(*) FROM t WHERE u < 40 GROUP BY g"), unit_config(6, 20, "total")
    )


def test_a_kept_relation_is_made_once_for_every_cursor_and_goes_with_its_connection(tmp_path):
    """Each kept relation is made once for all worker cursors, in an in-memory catalog of its own
    stored compressed (a checkpoint of a catalog no other cursor reads yet: made while the others
    read another relation, it succeeds)."""
    path = _file(tmp_path)
    plan = _plan()
    units = rewriter.to_sql(plan, "duckdb", "0a1b", frozen=True)
    rows = rewriter.to_sql(plan, "duckdb", "0a1b", frozen=True, rows=True)
    plain = rewriter.to_sql(plan, "duckdb", "0a1b")
    assert needs(units) and needs(rows) and not needs(plain)
    b = DuckDBBackend(path)
    try:
        b.reopen_read_only()

        async def go():
            return await asyncio.gather(*(b.fetch(t, 30) for _ in range(2 * WORKERS) for t in (units, rows)))

        got = asyncio.run(go())
        want = sorted(asyncio.run(b.fetch(plain, 30)))
        assert all(sorted(g) == want for g in got)
        assert b.kept_made == 2  # once each, for every worker cursor
        assert len(want) == 6 and sum(n for _, n in want) < 2400  # 40 units of 60 rows bounded to 20
        [(rows_name, _)] = needs(rows)
        kept = b.kept_relation(rows_name)
        assert kept and kept.startswith(KEPT_CATALOG)
        catalog = kept.split(".")[0]
        stored = asyncio.run(
            b.fetch(f"SELECT DISTINCT compression FROM pragma_storage_info('{catalog}.main.{rows_name}')", 30)
        )
        assert not {c for (c,) in stored} & {"Uncompressed", None}  # stored as the file's columns are
    finally:
        b.discard()


def test_kept_cells_are_made_after_the_rows_and_count_against_the_bound(tmp_path):
    """A total-mode statement without a WHERE on a frozen table (``held``: its rows kept, and the
    backend keeping fewer than ``[backend] kept_rows`` rows of (unit, cell) relations) reads its
    heavy units' (unit, cell) rows from a relation made from the kept rows, once for every worker
    cursor: the cells of the scan that computes them. The relation's rows count against the bound."""
    from types import SimpleNamespace

    from proxy.pipeline.central import held
    from proxy.pipeline.explain import explain_lines

    path = _file(tmp_path)
    cfg = unit_config(6, 20, "total")
    plan = rewriter.build_plan(rewriter.parse("SELECT g, COUNT(*) FROM t GROUP BY g"), cfg)
    b = DuckDBBackend(path)
    try:
        assert not b.keeps_cells(10**9)  # a file this process may write: nothing is kept
        b.reopen_read_only()
        gw = SimpleNamespace(backend=b, config=cfg)
        deadline = time.time() + 30
        while not (facts := held(gw, plan))["rows"] and time.time() < deadline:
            time.sleep(0.05)  # the premises are answered on a scan thread
        assert facts["rows"] and facts["cells"]
        text = rewriter.to_sql(plan, "duckdb", "0a1b", **facts)
        [(rows_name, _), (cells_name, _)] = needs(text)
        assert rows_name.startswith(KEPT_ROWS) and cells_name.startswith(KEPT_CELLS)

        async def go():
            return await asyncio.gather(*(b.fetch(text, 30) for _ in range(2 * WORKERS)))

        got = asyncio.run(go())
        want = sorted(asyncio.run(b.fetch(rewriter.to_sql(plan, "duckdb", "0a1b"), 30)))
        assert all(sorted(g) == want for g in got)
        assert b.kept_made == 2  # the rows, then the cells made from them: once each
        [(n,)] = asyncio.run(b.fetch(f"SELECT COUNT(*) FROM {b.kept_relation(cells_name)}", 30))
        [(pairs,)] = asyncio.run(b.fetch("SELECT COUNT(*) FROM (SELECT DISTINCT u, g FROM t)", 30))
        assert n == pairs  # every unit heavy (60 rows > 20): one row per (unit, cell) it is in
        assert b.keeps_cells(n + 1) and not b.keeps_cells(n)
        said = "\n".join(explain_lines(plan, [], text, "duckdb"))
        assert f"are read from {rows_name}" in said and f"are read from {cells_name}" in said
    finally:
        b.discard()


def test_a_relation_that_fails_to_be_made_leaves_nothing_attached():
    """``keep_relation``: a select that fails (as an interrupted one does) leaves no catalog behind,
    so its name is free and the next relation is made; a made one is stored compressed."""
    con = duckdb.connect()
    try:
        with pytest.raises(duckdb.Error):
            keep_relation(
                con,
                "__dpgate_kept_1",
                "__dpgate_rows_x",
                "SELECT CAST('x' || i AS INTEGER) AS v FROM range(10) AS r(i)",
            )
        assert "__dpgate_kept_1" not in {
            d for (d,) in con.execute("SELECT database_name FROM duckdb_databases()").fetchall()
        }
        where = keep_relation(
            con, "__dpgate_kept_1", "__dpgate_rows_x", "SELECT i % 3 AS v FROM range(1000) AS r(i)"
        )
        assert con.execute(f"SELECT COUNT(*), SUM(v) FROM {where}").fetchall() == [(1000, 999)]
    finally:
        con.close()


def test_a_backend_that_keeps_no_relations_refuses_a_text_that_needs_one(postgres):
    """Postgres is never frozen (another client may write): a text with a kept relation is refused
    before it runs (0A000), nothing read."""
    from proxy.backends import BackendRefused, PostgresBackend

    b = PostgresBackend(postgres.dsn)

    async def go():
        await b.connect()
        try:
            with pytest.raises(BackendRefused) as e:
                await b.fetch(rewriter.to_sql(_plan(), "postgres", "0a1b", frozen=True), 5)
            return e.value.sqlstate
        finally:
            await b.close()

    assert not b.frozen("t")
    assert asyncio.run(go()) == "0A000"


SQLS = [
    "SELECT store, COUNT(*), SUM(amount) FROM purchases GROUP BY store",
    "SELECT store, COUNT(*) FROM purchases WHERE amount < 20 GROUP BY store",
    "SELECT COUNT(*), AVG(amount) FROM purchases WHERE item <= 3",
]


@pytest.mark.parametrize("sql", SQLS)
def test_the_served_scan_reads_the_kept_heavy_units_and_gives_the_same_cells(served, sql):
    gw = served.gw
    plan = gw.plan(sql, None)
    assert gw.backend.frozen(plan.source)
    text = rows_scan(gw, plan)
    [(name, _)] = needs(text)
    assert name.startswith(KEPT_ROWS)
    salt = unit_salt(gw, plan)
    units = rewriter.to_sql(plan, gw.backend.dialect, salt, frozen=True)  # before the premise is answered
    [(units_name, _)] = needs(units)
    assert units_name.startswith(KEPT_HEAVY)
    plain = rewriter.to_sql(plan, gw.backend.dialect, salt)
    want = sorted(served._call(gw.backend.fetch(plain)))
    for q in (text, units):
        got = sorted(served._call(gw.backend.fetch(q)))
        assert len(got) == len(want)
        for a, b in zip(got, want):  # counts exactly; a double sum up to the order of its additions
            assert all(
                x == y if isinstance(x, int) else abs(x - y) <= 1e-9 * max(1.0, abs(y)) for x, y in zip(a, b)
            )
    rows, notes = ask(served, sql)
    assert rows and notes
    explained = "\n".join(r[0] for r in ask(served, "EXPLAIN " + sql)[0])
    assert f"the units above the bound and their rows are read from {name}" in explained, explained


def rows_scan(gw, plan):
    """The scan text once the backend has answered its premises (on a scan thread: until then
    the scan reads less from kept relations): the heavy units' rows kept."""
    deadline = time.time() + 30
    while True:
        text = scan_sql(gw, plan)
        if any(n.startswith(KEPT_ROWS) for n, _ in needs(text)) or time.time() > deadline:
            return text
        time.sleep(0.05)


def test_heavy_units_with_too_many_rows_keep_the_units_alone(served, monkeypatch):
    """The heavy units' rows are kept only where they number at most ``[backend] kept_rows`` (the
    premise, asked once): above it the scan joins the table to the kept units; exactly at it, the
    rows; ``kept_rows = 0`` asks nothing and keeps the units alone."""
    from proxy.pipeline import central
    from rewriter import unit

    gw = served.gw
    plan = gw.plan(SQLS[0], None)
    [(name, _)] = needs(rows_scan(gw, plan))
    assert name.startswith(KEPT_ROWS)
    kept = gw.backend.kept_relation(name)  # made once, read by every cursor through its own view
    heavy_rows = served._call(gw.backend.fetch(f"SELECT COUNT(*) FROM {kept}"))[0][0]
    assert heavy_rows > 0
    premise = rewriter.dialects.get("duckdb").sql
    for bound, holds in ((heavy_rows, True), (heavy_rows - 1, False)):
        got = served._call(gw.backend.fetch(premise(unit.rows_premise(plan, bound))))
        assert got == [(holds,)]
    monkeypatch.setattr(
        central, "kept_rows_bound", lambda gw: heavy_rows - 1
    )  # another premise: not answered yet
    [(name, _)] = needs(scan_sql(gw, plan))
    assert name.startswith(KEPT_HEAVY)
    time.sleep(1.0)  # answered meanwhile, and false
    [(name, _)] = needs(scan_sql(gw, plan))
    assert name.startswith(KEPT_HEAVY)
    monkeypatch.setattr(central, "kept_rows_bound", lambda gw: 0)
    monkeypatch.setattr(gw.backend, "holds", lambda sql: pytest.fail("kept_rows = 0 asks no premise"))
    [(name, _)] = needs(scan_sql(gw, plan))
    assert name.startswith(KEPT_HEAVY)


def test_a_table_whose_heavy_units_could_be_too_many_to_keep_computes_them(served, monkeypatch):
    """A kept relation holds at most KEPT_UNITS_MAX units per worker cursor: a table with more
    than KEPT_UNITS_MAX·(T + 1) rows could have more units above T, so its scans compute them."""
    from proxy.pipeline import central

    gw = served.gw
    plan = gw.plan(SQLS[0], None)
    assert needs(scan_sql(gw, plan))
    monkeypatch.setattr(central, "KEPT_UNITS_MAX", 1)
    assert not needs(scan_sql(gw, plan))


def test_dpgate_serve_on_a_file_no_role_writes_reads_the_kept_heavy_units(tmp_path):
    """``dpgate serve`` holds a file no role writes to read-only once it serves, so a per-person
    scan reads the table's kept heavy units (EXPLAIN shows the relation) and is answered."""
    import psycopg

    from bench.workers import dsn, prepare, start
    from support.pg import free_port

    port = free_port()
    cfg = prepare(tmp_path, port)
    con = duckdb.connect(str(tmp_path / "data.duckdb"))
    con.execute("CREATE TABLE t AS SELECT i % 50 AS u, i % 6 AS g FROM range(0, 3000) AS r(i)")
    con.close()
    with open(cfg, "a") as f:
        f.write(
            '[tables.t]\nprivacy_unit = "u"\nmax_groups_per_unit = 6\nmax_rows_per_unit = 20\n'
            'max_rows_scope = "total"\n[tables.t.columns]\nu = { type = "int" }\n'
            'g = { type = "int", domain = [0, 1, 2, 3, 4, 5] }\n'
        )
    proc = start(cfg)
    try:
        with psycopg.connect(dsn(port), autocommit=True) as c:
            plan = "\n".join(
                r[0] for r in c.execute("EXPLAIN SELECT g, COUNT(*) FROM t GROUP BY g").fetchall()
            )
            assert "__dpgate_heavy_" in plan or "__dpgate_rows_" in plan, plan
            assert len(c.execute("SELECT g, COUNT(*) FROM t WHERE u < 40 GROUP BY g").fetchall()) == 6
    finally:
        proc.terminate()
        proc.wait(timeout=30)
