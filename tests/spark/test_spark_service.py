"""dpgate served from Spark, end to end over the wire.

Every release kind's scans on Spark return the same rows as on DuckDB over the same data
(the demo tables made by the DuckDB loader, mirrored to Parquet): central, per-record
levels (the float-exact level CASE, Chen et al. 2025), per-record MAX (its second, level-filtered
scan), MAX/MIN/median histograms, ladder tiers, HAVING/top-c. The two services draw from
the same seeded source, so equal first scans give equal second scans. Over psycopg: a DP
answer with its NOTICE, a repeat served free, ``statement_timeout`` interrupting a slow
Spark job (charged: it ran), a CancelRequest interrupting one (57014). (Local tables on
Spark: test_spark_local.py; a lost and restarted cluster: test_spark_reconnect.py.)
"""

from __future__ import annotations

import math
import threading
import time

import psycopg
import pytest

from mechanisms import SeededSource
from proxy.backends import Columns
from support.service import Service, make_config
from support.spark import mirror_demo

PEOPLE = 2000
TIMEOUT_MS = 4000  # the timeout test's statement_timeout
LIMIT_MS = 60000  # the service's: a cold Spark query on a loaded 2-core machine can take over 8 s
#: a Spark view whose scan runs for minutes on local[2] (10^11 rows)
SLOW = "SELECT CAST(id % 3 AS INT) AS g FROM range(100000000000)"

#: (role, statement): every kind the demo config serves
KINDS = [
    ("analyst", "SELECT sex, COUNT(*), AVG(income) FROM pums WHERE age > 30 GROUP BY sex"),
    ("analyst", "SELECT region, SUM(hours), COUNT(*) FROM people GROUP BY region"),
    ("analyst", "SELECT COUNT(*) FROM accounts WHERE branch = 1"),  # per-record levels
    ("analyst", "SELECT kind, SUM(balance) FROM accounts GROUP BY kind"),
    ("analyst", "SELECT MAX(balance) FROM accounts WHERE kind = 'checking'"),  # per-record MAX: 2 scans
    ("analyst", "SELECT sex, MAX(age) FROM pums GROUP BY sex"),  # histogram scans
    ("analyst", "SELECT MIN(income) FROM pums WHERE educ >= 9"),
    ("analyst", "SELECT median(age) FROM pums"),
    ("bronze", "SELECT educ, COUNT(*) FROM pums GROUP BY educ"),  # ladder tier
    ("analyst", "SELECT item FROM purchases GROUP BY item HAVING COUNT(*) > 500 LIMIT 10"),
    # (the HAVING above is a filter over the released cells: a second HAVING over the same
    # COUNT by item would be a free repeat of that release, so this one counts other rows)
    (
        "analyst",
        "SELECT item, COUNT(*) FROM purchases WHERE amount > 10 GROUP BY item HAVING COUNT(*) > 200 "
        "ORDER BY COUNT(*) DESC LIMIT 5",
    ),
    (
        "analyst",
        "SELECT store, COUNT(*), AVG(amount), COUNT(DISTINCT customer_id) FROM purchases GROUP BY store",
    ),
    (
        "analyst",
        "SELECT s.area, COUNT(*) FROM purchases p JOIN stores s ON p.store = s.store_id GROUP BY s.area",
    ),
    (
        "analyst",
        "SELECT o.priority, SUM(i.quantity) FROM order_items i JOIN orders o ON i.order_id = o.order_id "
        "GROUP BY o.priority",
    ),  # unit through a reference
    (
        "analyst",
        "SELECT c.segment, COUNT(*), SUM(i.quantity) FROM order_items i JOIN orders o "
        "ON i.order_id = o.order_id JOIN customers c ON o.customer_id = c.customer_id GROUP BY c.segment",
    ),
    (
        "analyst",
        "SELECT city, COUNT(*) FROM purchases GROUP BY city HAVING COUNT(*) > 20",
    ),  # SVT over selected keys
]


def _same_cells_everywhere(cfg: dict) -> dict:
    """Each customer keeps all their cells (G ≥ cells): which cells a unit keeps when it has too
    many is a keyed hash, a different function on each engine; rows per cell are
    bounded by counts, the same on both."""
    for name in ("purchases", "orders", "order_items"):
        cfg["tables"][name]["max_groups_per_unit"] = 1000
    return cfg


def _spark_config(remote: str) -> dict:
    cfg = _same_cells_everywhere(
        make_config({"kind": "spark", "remote": remote}, limits={"statement_timeout_ms": LIMIT_MS})
    )
    cfg["demo"] = False  # the demo loader writes DuckDB/Postgres
    del cfg["tables"]["trips"]  # a local table: test_spark_local.py
    for role in cfg["roles"].values():
        role.pop("insert", None)
    cfg["tables"]["slow"] = {"columns": {"g": {"type": "int", "domain": [0, 1, 2]}}}
    return cfg


def _recording(svc: Service) -> list:
    """Record the rows of every scan the service's backend runs."""
    log: list = []
    backend = svc.gw.backend
    orig = backend.fetch

    async def fetch(sql, timeout_s=None, cancel=None, then=None, **kw):
        def capture(rows):
            as_rows = rows.rows() if isinstance(rows, Columns) else rows  # a columnar fetch (DuckDB)
            log.append(sorted((tuple(_norm(v) for v in r) for r in as_rows), key=repr))
            return rows if then is None else then(rows)

        return await orig(sql, timeout_s, cancel, then=capture, **kw)

    backend.fetch = fetch
    return log


def _norm(v):
    if isinstance(v, float) and v.is_integer():
        return int(v)
    # 12 significant digits: a float SUM's last bits depend on the engine's summation order
    return float(f"{v:.12g}") if isinstance(v, float) and math.isfinite(v) else v


@pytest.fixture(scope="module")
def services(spark_connect, tmp_path_factory):
    work = tmp_path_factory.mktemp("spark_demo")
    mirror_demo(spark_connect.session(), work / "mirror.duckdb", work / "parquet", PEOPLE, {"slow": SLOW})
    duck = Service(
        _same_cells_everywhere(make_config({"kind": "duckdb", "path": str(work / "mirror.duckdb")})),
        work / "duck_state",
        people_rows=PEOPLE,
        trips_rows=1000,
        source=SeededSource(22),
    ).start()
    spark = Service(
        _spark_config(spark_connect.remote), work / "spark_state", source=SeededSource(22)
    ).start()
    yield duck, spark
    spark.close()
    duck.close()


def _ask(svc, sql, role="analyst", notices=None):
    with psycopg.connect(svc.dsn(role), autocommit=True, connect_timeout=10) as conn:
        if notices is not None:
            conn.add_notice_handler(lambda d: notices.append(d.message_primary))
        return conn.execute(sql).fetchall()


def test_every_kind_scans_the_same_rows_as_duckdb(services):
    duck, spark = services
    dlog, slog = _recording(duck), _recording(spark)
    for role, sql in KINDS:
        n_d, n_s = len(dlog), len(slog)
        want = _ask(duck, sql, role)
        got = _ask(spark, sql, role)
        assert len(dlog) - n_d == len(slog) - n_s >= 1, sql  # the same scans ran
        for d, s in zip(dlog[n_d:], slog[n_s:]):
            assert s == d and s, f"{sql}: Spark rows differ from DuckDB's"
        assert len(got) == len(want), sql  # same cells released


def test_dp_answer_notice_and_free_repeat(services):
    _, spark = services
    sql = "SELECT sex, COUNT(*) FROM people WHERE hours > 30 GROUP BY sex"
    gw = spark.gw
    before = gw.ledger.spent("other", "day")
    notes: list = []
    rows = _ask(spark, sql, "other", notes)
    assert [r[0] for r in rows] == [0, 1] and all(isinstance(r[1], int) for r in rows)
    assert any(n.startswith("dpgate: ε charged 1") for n in notes), notes
    spent = gw.ledger.spent("other", "day")
    assert spent == before + gw.tier_of("other").epsilon
    notes.clear()
    assert _ask(spark, sql, "other", notes) == rows  # the same release
    assert any("repeat of an earlier release" in n for n in notes), notes
    assert gw.ledger.spent("other", "day") == spent


def test_statement_timeout_interrupts_the_spark_job(services, spark_connect):
    _, spark = services
    gw = spark.gw
    before = gw.ledger.spent("other", "day")
    gw.statement_timeout = TIMEOUT_MS / 1000
    t0 = time.perf_counter()
    try:
        with pytest.raises(psycopg.Error) as e:
            _ask(spark, "SELECT g, COUNT(*) FROM slow GROUP BY g", "other")
    finally:
        gw.statement_timeout = LIMIT_MS / 1000
    elapsed = time.perf_counter() - t0
    assert e.value.sqlstate == "57014", e.value
    assert TIMEOUT_MS / 1000 - 0.1 < elapsed < TIMEOUT_MS / 1000 + 6, elapsed
    assert gw.ledger.spent("other", "day") == before + gw.tier_of("other").epsilon  # it ran: charged
    _no_job_left(spark_connect)


def test_cancel_interrupts_the_spark_job(services, spark_connect):
    _, spark = services
    with psycopg.connect(spark.dsn("analyst"), autocommit=True, connect_timeout=10) as conn:
        # cancel_safe, not cancel(): the blocking PQcancel holds the GIL the in-process server needs
        timer = threading.Timer(1.5, lambda: conn.cancel_safe(timeout=5))
        timer.start()
        t0 = time.perf_counter()
        with pytest.raises(psycopg.Error) as e:
            conn.execute("SELECT g, SUM(0) , COUNT(*) FROM slow WHERE g > 0 GROUP BY g").fetchall()
        timer.join()
        assert e.value.sqlstate == "57014", e.value
        assert time.perf_counter() - t0 < TIMEOUT_MS / 1000, "cancelled before the timeout"
        assert conn.execute("SELECT 1").fetchall() == [(1,)]  # the connection is still usable
    _no_job_left(spark_connect)


def _no_job_left(spark_connect, within_s: float = 10.0) -> None:
    """The interrupted job stopped on the cluster: a small query is answered promptly
    (local[2] has two task slots; a job still scanning 10^11 rows would hold both)."""
    t0 = time.perf_counter()
    s = spark_connect.session()
    assert s.sql("SELECT COUNT(*) FROM range(1000000)").collect()[0][0] == 10**6
    assert time.perf_counter() - t0 < within_s
