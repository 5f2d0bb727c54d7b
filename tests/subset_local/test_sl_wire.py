"""Categorical Subset columns through the wire (multi-tier spec §10 "LDP categorical columns"),
on DuckDB and on a real Postgres: `SELECT zone, COUNT(*) FROM trips GROUP BY zone` answers the
role's tier from its own level's bits with the matched template's (t, f) — unbiased within the
template variance; a tier added after ingestion reads the nearest LOWER stored level; roles off
the ladder are refused; INSERT through the proxy stores bits only; nothing is charged."""

from __future__ import annotations

import copy
import math

import numpy as np
import psycopg
import pytest

from config import parse_config
from mechanisms import SeededSource
from mechanisms.multitier import optimal_k
from proxy.demo import trips as demo_trips
from proxy.ingest.ldp_load import _ddl
from proxy.ingest.subset_ingest import ladder_of
from rewriter.local import layout

D6 = ["a", "b", "c", "d", "e", "f"]
LATER = {
    "copper": {"epsilon": 0.3, "budget": 5.0, "ladder": "market"},  # added after sl2
    "platinum": {"epsilon": 5.0, "budget": 50.0, "ladder": "market"},
}  # was ingested
SL = {
    "mode": "local",
    "columns": {"c": {"type": "text", "domain": D6}, "g": {"type": "int", "domain": [1, 2]}},
    "local": {"categories": {"c": {"ladder": "market"}}},
}
TRIPS_N = 20_000
N2 = 600


def t_f(level: float, k: int, d: int):
    """The multi-tier spec §4.2: t = P(x ∈ S), f = P(j ∈ S), j ≠ x, for Subset(k) at e^level."""
    r = math.exp(level)
    return k * r / (k * r + d - k), k * ((k - 1) * r + d - k) / ((d - 1) * (k * r + d - k))


def crafted_bits(i: int) -> dict:
    """Row i of sl2's reports: DIFFERENT subsets per level (k = 1, 3, 3 for ε 2, 0.5, 0.1)."""
    return {2.0: {i % 6 if i < 300 else 0}, 0.5: {0, 1, 2} if i % 3 == 0 else {3, 4, 5}, 0.1: {1, 2, 3}}


def crafted_counts(level: float, rows=range(N2)) -> np.ndarray:
    c = np.zeros(6)
    for i in rows:
        c[list(crafted_bits(i)[level])] += 1
    return c


def _sql_exec(svc, sql: str) -> None:
    if svc.kind == "duckdb":
        svc.gw.backend.query(sql)
    else:
        with psycopg.connect(svc.pg.dsn, autocommit=True) as c:
            c.execute(sql)


@pytest.fixture(scope="module", params=["duckdb", "postgres"])
def slsvc(request, tmp_path_factory):
    from support.service import Service, make_config

    pg = request.getfixturevalue("postgres") if request.param == "postgres" else None
    backend = (
        {"kind": "postgres", "dsn": pg.dsn, "pool_size": 4}
        if pg
        else {"kind": "duckdb", "path": str(tmp_path_factory.mktemp("duck") / "d.duckdb")}
    )
    before = make_config(backend)
    before["tables"]["sl2"] = copy.deepcopy(SL)
    data = make_config(backend, tiers=LATER)
    data["roles"]["other"]["tier"] = "copper"
    data["roles"]["tiny"]["tier"] = "platinum"
    data["tables"]["sl"] = copy.deepcopy(SL)
    data["tables"]["sl2"] = copy.deepcopy(SL)
    data["roles"]["producer"].update(insert=["trips", "sl", "sl2"], insert_rows_per_minute=10_000)
    tables = ("trips_reports", "sl_reports", "sl2_reports")
    if pg:
        with psycopg.connect(pg.dsn, autocommit=True) as c:
            for t in tables:
                c.execute(f'DROP TABLE IF EXISTS "{t}"')
    svc = Service(
        data,
        tmp_path_factory.mktemp("state"),
        people_rows=1000,
        trips_rows=TRIPS_N,
        source=SeededSource(5005),
    ).start()
    svc.kind, svc.pg = request.param, pg
    # sl2's reports were made before copper and platinum existed: ladder {2, 0.5, 0.1}
    cfg0 = parse_config(before)
    lay0 = layout("sl2", cfg0.tables["sl2"], cfg0.tiers)
    svc.sl2_levels = lay0.categories[0]
    _sql_exec(svc, _ddl(lay0))
    cols = [c for c, _ in lay0.report_schema()]
    vals = []
    for i in range(N2):
        bits = crafted_bits(i)
        row = [1 if i < 200 else 2] + [int(j in bits[e]) for e in (2.0, 0.5, 0.1) for j in range(6)]
        vals.append("(" + ", ".join(map(str, row)) + ")")
    _sql_exec(svc, f"INSERT INTO sl2_reports ({', '.join(cols)}) VALUES {', '.join(vals)}")
    yield svc
    svc.close()
    if pg:
        with psycopg.connect(pg.dsn, autocommit=True) as c:
            for t in tables:
                c.execute(f'DROP TABLE IF EXISTS "{t}"')


def ask(svc, role, sql, params=None):
    notices: list[str] = []
    with psycopg.connect(svc.dsn(role), autocommit=True, connect_timeout=10) as c:
        c.add_notice_handler(lambda d: notices.append(d.message_primary))
        rows = c.execute(sql, params).fetchall()
    return rows, notices


def refused(svc, role, sql):
    with pytest.raises(psycopg.Error) as e:
        ask(svc, role, sql)
    return e.value.sqlstate, str(e.value)


def test_demo_zone_each_tier_unbiased(slsvc):
    cfg = slsvc.gw.config
    cat = layout("trips", cfg.tables["trips"], cfg.tiers).category("zone")
    zone = demo_trips.trips_rows(TRIPS_N)["zone"]
    truth = {z: int((zone == z).sum()) for z in cat.domain}
    widths = {}
    for role, eps in (("bronze", 0.1), ("silver", 0.5), ("gold", 2.0), ("tiny", 5.0)):
        rows, notices = ask(
            slsvc, role, "SELECT zone, COUNT(*) AS n FROM trips GROUP BY zone ORDER BY n DESC"
        )
        assert len(rows) == 6 and [r[1] for r in rows] == sorted((r[1] for r in rows), reverse=True)
        tpl = ladder_of(cat).match[eps]
        t, f = t_f(tpl.level, tpl.k, cat.d)
        for z, est in rows:
            # Var(ĉ_j) = (n_j t(1−t) + (n − n_j) f(1−f)) / (t − f)²   (multi-tier spec §4.2)
            sd = math.sqrt(truth[z] * t * (1 - t) + (TRIPS_N - truth[z]) * f * (1 - f)) / (t - f)
            assert abs(est - truth[z]) <= 4 * sd + 0.5, (role, z, est, truth[z], sd)
        msg = notices[0]
        assert "ε charged 0" in msg and f"{TRIPS_N:,} reports" in msg
        assert f"reads level ε {eps:g} of" in msg and f"k = {tpl.k} of d = 6" in msg
        hw = float(msg.split("n ±")[1].split(";")[0])
        # the stated 95% half-width bounds every category: 1.96·sd_j ≤ hw ≤ 1.96·√(n/4)/(t − f)
        sds = [math.sqrt(m * t * (1 - t) + (TRIPS_N - m) * f * (1 - f)) / (t - f) for m in range(TRIPS_N + 1)]
        assert 1.96 * max(sds) * 0.999 <= hw <= 1.96 * math.sqrt(TRIPS_N / 4) / (t - f) * 1.001
        widths[role] = hw
    assert widths["tiny"] < widths["gold"] < widths["silver"] < widths["bronze"]
    # a public predicate: the same estimator over the matching reports only
    rows, _ = ask(
        slsvc, "gold", "SELECT zone, COUNT(*) FROM trips WHERE payment = %s GROUP BY zone", ("card",)
    )
    pay = demo_trips.trips_rows(TRIPS_N)["payment"] == "card"
    tpl = ladder_of(cat).match[2.0]
    t, f = t_f(tpl.level, tpl.k, 6)
    m = int(pay.sum())
    for z, est in rows:
        nz = int(((zone == z) & pay).sum())
        sd = math.sqrt(nz * t * (1 - t) + (m - nz) * f * (1 - f)) / (t - f)
        assert abs(est - nz) <= 4 * sd + 0.5


def test_each_tier_reads_only_its_level_with_the_matched_template(slsvc):
    cat = slsvc.sl2_levels
    answers = {}
    for role, eps in (("gold", 2.0), ("silver", 0.5), ("bronze", 0.1)):
        rows, notices = ask(slsvc, role, "SELECT c, COUNT(*) FROM sl2 GROUP BY c ORDER BY c")
        tpl = ladder_of(cat).match[eps]
        t, f = t_f(tpl.level, tpl.k, 6)
        want = (crafted_counts(eps) - N2 * f) / (t - f)
        assert [r[0] for r in rows] == D6
        assert [r[1] for r in rows] == [int(round(v)) for v in want], role
        answers[role] = [r[1] for r in rows]
        if role == "silver":  # pitfall 10: the template's k = 3, not k*(0.5) = 2
            assert tpl.k != optimal_k(0.5, 6)
            t2, f2 = t_f(0.5, optimal_k(0.5, 6), 6)
            assert [r[1] for r in rows] != [
                int(round(v)) for v in (crafted_counts(0.5) - N2 * f2) / (t2 - f2)
            ]
    assert len({tuple(a) for a in answers.values()}) == 3  # three levels, three answers
    # public predicate and public group key over the same reports
    rows, _ = ask(slsvc, "gold", "SELECT c, g, COUNT(*) FROM sl2 WHERE g = 1 GROUP BY c, g ORDER BY c, g")
    tpl = ladder_of(cat).match[2.0]
    t, f = t_f(tpl.level, tpl.k, 6)
    want1 = (crafted_counts(2.0, range(200)) - 200 * f) / (t - f)
    assert [r[2] for r in rows if r[1] == 1] == [int(round(v)) for v in want1]


def test_tier_added_after_ingestion_reads_the_nearest_lower_level(slsvc):
    q = "SELECT c, COUNT(*) FROM sl2 GROUP BY c ORDER BY c"
    bronze, _ = ask(slsvc, "bronze", q)
    gold, _ = ask(slsvc, "gold", q)
    copper, notices = ask(slsvc, "other", q)  # copper ε 0.3: stored levels 2, 0.5, 0.1
    assert copper == bronze and "nearest lower stored level: ε 0.3 is not stored" in notices[0]
    platinum, notices = ask(slsvc, "tiny", q)  # platinum ε 5 reads the top stored level
    assert platinum == gold and "reads level ε 2 of {2, 0.5, 0.1}" in notices[0]
    # new rows go through the stored program (no level for 0.3 or 5 appears)
    with psycopg.connect(slsvc.dsn("producer"), autocommit=True) as c:
        c.execute("INSERT INTO sl2 (c, g) VALUES ('b', 1), ('e', 2)")
    cols, rows = _read(slsvc, "sl2_reports")
    assert len(rows) == N2 + 2 and not any("e0p3" in c or "e5p0" in c for c in cols)


def _read(svc, table):
    if svc.kind == "duckdb":
        cols = [
            r[0]
            for r in svc.gw.backend.query(
                "SELECT column_name FROM information_schema.columns WHERE table_name = ? "
                "ORDER BY ordinal_position",
                [table],
            )
        ]
        return cols, svc.gw.backend.query(f"SELECT * FROM {table}")
    with psycopg.connect(svc.pg.dsn) as c:
        cur = c.execute(f"SELECT * FROM {table}")
        return [d.name for d in cur.description], cur.fetchall()


def test_insert_through_the_proxy_stores_bits_only(slsvc):
    cfg = slsvc.gw.config
    lay = layout("sl", cfg.tables["sl"], cfg.tiers)
    (cat,) = lay.categories
    values = [(D6[i % 6], 1 + i % 2) for i in range(120)]
    with psycopg.connect(slsvc.dsn("producer"), autocommit=True) as c:
        c.execute("INSERT INTO sl (c, g) VALUES " + ", ".join(f"('{v}', {g})" for v, g in values))
        c.execute("INSERT INTO sl (g, c) VALUES (%s, %s)", (2, "f"))
    for sql, state in (
        ("INSERT INTO sl (c, g) VALUES ('a', 1), ('moon', 2)", "22023"),
        ("INSERT INTO sl (c, g) VALUES (NULL, 1)", "23502"),
    ):
        assert refused(slsvc, "producer", sql)[0] == state
    assert refused(slsvc, "silver", "INSERT INTO sl (c, g) VALUES ('a', 1)")[0] == "42501"  # no grant
    cols, rows = _read(slsvc, "sl_reports")
    assert cols == [c for c, _ in lay.report_schema()] and "c" not in cols
    assert len(rows) == 121  # refused statements stored nothing
    arr = np.array(rows, dtype=np.int64)
    assert sorted(arr[:, 0]) == sorted([g for _, g in values] + [2])
    for eps in cat.levels:
        block = arr[:, [cols.index(c) for c in cat.columns(eps)]]
        assert (block.sum(axis=1) == ladder_of(cat).match[eps].k).all()


def test_refusals_explain_and_no_budget(slsvc):
    for role in ("analyst", "admin"):  # tiers without a ladder
        state, msg = refused(slsvc, role, "SELECT zone, COUNT(*) FROM trips GROUP BY zone")
        assert state == "42501" and "served only to the tiers of ladder market" in msg
    for sql, state, words in [
        ("SELECT zone FROM trips", "42501", "only served as SELECT zone, COUNT(*)"),
        ("SELECT COUNT(*) FROM trips WHERE zone = 'airport'", "0A000", "only public columns"),
        (
            "SELECT zone, AVG(fare) FROM trips GROUP BY zone",
            "0A000",
            "select zone, public group columns and COUNT(*)",
        ),
        ("SELECT zone, COUNT(*) FROM trips WHERE hour < 9 GROUP BY zone", "0A000", "WHERE on hour"),
        ("SELECT c, COUNT(*) FROM sl GROUP BY c, zone", "42703", "not declared"),
    ]:
        got, msg = refused(slsvc, "gold", sql)
        assert got == state and words in msg, (sql, msg)
    rows, _ = ask(slsvc, "silver", "EXPLAIN SELECT zone, COUNT(*) FROM trips GROUP BY zone")
    text = "\n".join(r[0] for r in rows)
    assert 'SUM("zone_v2_e0p5_0")' in text and "e2p0" not in text and "tier silver reads level ε 0.5" in text
    a, _ = ask(slsvc, "bronze", "SELECT zone, COUNT(*) FROM trips GROUP BY zone ORDER BY zone")
    b, _ = ask(slsvc, "bronze", "SELECT zone, COUNT(*) FROM trips GROUP BY zone ORDER BY zone")
    assert a == b
    for role in ("bronze", "silver", "gold"):
        assert slsvc.gw.ledger.spent(role, "day") == 0.0


def test_coalition_view_shows_max_not_sum(slsvc):
    ask(slsvc, "gold", "SELECT c, COUNT(*) FROM sl2 GROUP BY c")
    rows, _ = ask(
        slsvc,
        "admin",
        "SELECT statement, tiers_released, coalition_loss, independent_loss "
        "FROM dpgate.coalition WHERE statement LIKE 'LDP %' ORDER BY statement",
    )
    by = {r[0].split(":")[0]: r[1:] for r in rows}
    assert by["LDP trips.zone"][1:] == (5.0, pytest.approx(7.9))  # max level, vs Σ of the 5 tiers
    assert by["LDP sl2.c"] == (
        "gold 2, platinum 2 (ε 5), silver 0.5, bronze 0.1, copper 0.1 (ε 0.3)",
        2.0,
        pytest.approx(7.9),
    )
    assert refused(slsvc, "gold", "SELECT * FROM dpgate.coalition")[0] == "42501"
