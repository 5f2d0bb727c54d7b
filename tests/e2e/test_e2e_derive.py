"""Answers derived from earlier releases (proxy/pipeline/derive.py), through the wire on DuckDB.

The oracle: a derived answer equals the same post-processing — sums over the rolled-up keys,
the WHERE on a key, SUM/COUNT, clamping to the public range, HAVING, ORDER BY, LIMIT — of
the stored release's raw noisy cells, read back from the ledger; and nothing is charged.
Derivation never crosses a WHERE on a non-key column, a role, a data version or a ladder."""

from __future__ import annotations

import datetime
import math
from contextlib import contextmanager

import psycopg
import pytest

from support.service import HELPER

FINE = (
    "SELECT store, date_trunc('month', ts) AS m, amount > 100 AS big, COUNT(*) AS n, SUM(amount) AS s, "
    "COUNT(amount) AS na FROM purchases WHERE amount > 10 GROUP BY 1, 2, 3"
)
MONTH = "date_trunc('month', ts)"


@contextmanager
def session(svc, role="other", derive="on"):
    notes: list[str] = []
    with psycopg.connect(svc.dsn(role, application_name=HELPER), autocommit=True) as c:
        c.add_notice_handler(lambda d: notes.append(d.message_primary))
        if derive is not None:
            c.execute(f"SET dpgate.derive = {derive}")

        def run(sql):
            notes.clear()
            return c.execute(sql).fetchall(), list(notes)

        yield run


def _spent(svc, role="other"):
    return svc.gw.ledger.spent(role, "day")


def _stored(svc, role, text):
    return _stored_in(svc, role, text, "table=purchases;")


def _stored_in(svc, role, text, prefix):
    """(id, stored answer) of ``role``'s release of ``text`` (the newest), from the ledger."""
    dv = svc.gw.ledger.data_version()
    for rid, key, _canonical, statement in svc.gw.ledger.releases_like(role, dv, prefix, 1000):
        if statement == text:
            return rid, svc.gw.ledger.lookup(role, key, dv).answer
    raise AssertionError(f"no release of {text!r}")


def _month(v):
    return datetime.datetime.fromisoformat(v) if isinstance(v, str) else v


def _cells(ans):
    """(store, month, big, [count, sum, count(amount)]) per stored cell (raw noisy values), the
    keys found by position in the release's signature, the values by label."""
    names = [k[0] for k in ans["derive"]["keys"]]
    i = names.index("store")
    j = next(n for n, k in enumerate(names) if "DATE_TRUNC" in k)
    b = next(n for n, k in enumerate(names) if "amount" in k)
    at = [ans["labels"].index(lab) for lab in ("count(*)", "sum(amount)", "count(amount)")]
    return [
        (key[i], _month(key[j]), key[b], [vals[a] for a in at])
        for key, vals in zip(ans["keys"], ans["values"])
    ]


def _hw(ans, label):
    return ans["half_width"][ans["labels"].index(label)]


@pytest.fixture(scope="module")
def fine(duck_service):
    with session(duck_service) as run:
        run(FINE)
    return _stored(duck_service, "other", FINE)


def test_key_subset_rolled_up_equals_the_stored_cells_summed(duck_service, fine):
    rid, ans = fine
    before = _spent(duck_service)
    with session(duck_service) as run:
        rows, notes = run(
            f"SELECT {MONTH} AS m, COUNT(*), SUM(amount) FROM purchases "
            "WHERE store IN (2, 5) AND amount > 10 GROUP BY 1 ORDER BY 1"
        )
    assert _spent(duck_service) == before  # ε 0
    want: dict = {}
    for store, m, _big, (n, s, _na) in _cells(ans):
        if store in (2, 5):
            acc = want.setdefault(m, [0, 0.0])
            acc[0] += n
            acc[1] += s
    expect = [(m, max(n, 0), max(s, 0.0)) for m, (n, s) in sorted(want.items())]
    assert rows == expect and len(rows) == 12
    assert (
        f"#{rid}" in notes[0]
        and "ε charged 0" in notes[0]
        and "cells chosen by the WHERE on store" in notes[0]
    )
    # two stores × (amount > 100: false, true, NULL) = 6 cells: variance 6·v
    assert f"count ±{_hw(ans, 'count(*)') * math.sqrt(6):.4g}" in notes[0]


def test_coarser_group_by_with_having_order_limit(duck_service, fine):
    rid, ans = fine
    before = _spent(duck_service)
    with session(duck_service) as run:
        rows, notes = run(
            f"SELECT store, {MONTH} AS m, COUNT(*) AS c FROM purchases WHERE amount > 10 "
            "GROUP BY 1, 2 HAVING COUNT(*) > 1200 ORDER BY c DESC, store LIMIT 4"
        )
    assert _spent(duck_service) == before
    totals: dict = {}
    for store, m, _big, (n, _s, _na) in _cells(ans):
        totals[(store, m)] = totals.get((store, m), 0) + n
    passing = [(k[0], k[1], max(v, 0)) for k, v in totals.items() if max(v, 0) > 1200]
    expect = sorted(passing, key=lambda r: (-r[2], r[0]))[:4]
    assert rows == expect
    assert f"#{rid}" in notes[0] and 'summed over "amount" > 100' in notes[0]
    assert f"c ±{_hw(ans, 'count(*)') * math.sqrt(3):.4g}" in notes[0]  # false, true, NULL: variance 3·v


def test_avg_is_the_ratio_of_the_summed_sum_and_count(duck_service, fine):
    _rid, ans = fine
    before = _spent(duck_service)
    with session(duck_service) as run:
        rows, notes = run(
            f"SELECT store, {MONTH} AS m, AVG(amount), SUM(amount) AS s FROM purchases "
            "WHERE amount > 10 GROUP BY 1, 2 ORDER BY 1, 2"
        )
    assert _spent(duck_service) == before
    sums: dict = {}
    for store, m, _big, (n, s, na) in _cells(ans):
        acc = sums.setdefault((store, m), [0, 0.0, 0])
        acc[0] += n
        acc[1] += s
        acc[2] += na
    # AVG = SUM / COUNT(amount) within [0, 500]; the bounds' midpoint where the count is not positive
    expect = [
        (*k, min(max(s / na, 0.0), 500.0) if na > 0 else 250.0, max(s, 0.0))
        for k, (_n, s, na) in sorted(sums.items())
    ]
    assert rows == expect
    assert "its SUM over its COUNT" in notes[0]


def test_a_time_range_that_cuts_no_month_picks_months(duck_service, fine):
    rid, ans = fine
    before = _spent(duck_service)
    with session(duck_service) as run:
        rows, notes = run(
            f"SELECT store, {MONTH} AS m, COUNT(*) FROM purchases WHERE amount > 10 "
            "AND ts >= TIMESTAMP '2025-11-01' GROUP BY 1, 2 ORDER BY 1, 2"
        )
        _, split = run(
            f"SELECT store, {MONTH} AS m, COUNT(*) FROM purchases WHERE amount > 10 "
            "AND ts >= TIMESTAMP '2025-11-15' GROUP BY 1, 2 ORDER BY 1, 2"
        )  # cuts November: released fresh
    totals: dict = {}
    for store, m, _big, (n, _s, _na) in _cells(ans):
        if m >= datetime.datetime(2025, 11, 1):
            totals[(store, m)] = totals.get((store, m), 0) + n
    assert rows == [(*k, max(v, 0)) for k, v in sorted(totals.items())] and f"#{rid}" in notes[0]
    assert "derived" not in split[0] and _spent(duck_service) == pytest.approx(before + 1)


def test_a_declared_domain_is_not_summed_over(duck_service, fine):
    """A purchase whose store is outside 1..10 is in no cell of the release; the SQL's
    COUNT by month counts it: no derivation."""
    before = _spent(duck_service)
    with session(duck_service) as run:
        _, notes = run(f"SELECT {MONTH} AS m, COUNT(*) FROM purchases WHERE amount > 10 GROUP BY 1")
        _, named = run(
            f"SELECT {MONTH} AS m, COUNT(*) FROM purchases WHERE amount > 10 AND store <> 3 GROUP BY 1"
        )
    assert "derived" not in notes[0] and "derived" not in named[0]
    assert _spent(duck_service) == pytest.approx(before + 2)


def test_error_bars_of_a_derived_value_are_null_not_an_error(duck_service, fine):
    with session(duck_service) as run:
        rows, notes = run(
            f"SELECT store, {MONTH}, COUNT(*), dp_interval_low(COUNT(*)), dp_interval_high(COUNT(*)) "
            "FROM purchases WHERE amount > 10 AND store = 2 GROUP BY 1, 2"
        )
    assert "derived from earlier" in notes[0] and len(rows) == 12
    assert all(r[3] is None and r[4] is None for r in rows)  # measured by no one mechanism


def test_a_where_on_another_column_is_not_derived(duck_service, fine):
    before = _spent(duck_service)
    with session(duck_service) as run:
        _, notes = run("SELECT store, COUNT(*) FROM purchases WHERE amount > 20 GROUP BY store")
        _, notes2 = run(
            "SELECT store, COUNT(*) FROM purchases WHERE amount > 10 AND item = 3 GROUP BY store"
        )  # item is not a key of the release
    assert _spent(duck_service) == pytest.approx(before + 2)
    assert "derived" not in notes[0] and "derived" not in notes2[0]


def test_the_repeat_path_is_unchanged(duck_service, fine):
    before = _spent(duck_service)
    with session(duck_service) as run:
        _, notes = run(FINE.replace("SELECT store,", "select  store ,"))
    assert "repeat of an earlier release" in notes[0] and _spent(duck_service) == before


def test_another_roles_releases_are_not_used(duck_service, fine):
    before = _spent(duck_service, "half")
    with session(duck_service, role="half") as run:
        _, notes = run(f"SELECT store, {MONTH}, COUNT(*) FROM purchases WHERE amount > 10 GROUP BY 1, 2")
    assert "derived" not in notes[0] and _spent(duck_service, "half") == pytest.approx(before + 0.5)


def test_auto_derives_only_within_its_error_ratio_and_off_never(duck_service, fine):
    ten = ", ".join(str(i) for i in range(1, 11))
    before = _spent(duck_service)
    with session(duck_service, derive=None) as run:  # auto: the default
        # one store's cells with the same aggregates: sums of 3 cells, √3 times one cell's error
        _, near = run(
            f"SELECT store, {MONTH}, COUNT(*), SUM(amount), COUNT(amount) FROM purchases "
            "WHERE amount > 10 AND store = 7 GROUP BY 1, 2"
        )
        # COUNT by month over every store: 30 cells at ε/300 each against one at ε/100
        far_sql = (
            f"SELECT {MONTH} AS m, COUNT(*) FROM purchases WHERE amount > 10 AND store IN ({ten}) GROUP BY 1"
        )
        explained, _ = run("EXPLAIN " + far_sql)
        _, far = run(far_sql)
    assert "ε charged 1" in far[0] and "derived" not in far[0]
    assert (
        explained[0][0].startswith("derivable from earlier release(s)")
        and "released fresh" in explained[0][0]
    )
    assert "derived" in near[0] and _spent(duck_service) == pytest.approx(before + 1)
    with session(duck_service) as run:  # on: derived whatever its error
        _, on = run(far_sql.replace(", 10)", ")"))  # nine stores: 27 cells
    assert "derived" in on[0] and _spent(duck_service) == pytest.approx(before + 1)
    with session(duck_service, derive="off") as run:
        _, off = run(
            f"SELECT store, {MONTH}, COUNT(*) FROM purchases WHERE amount > 10 AND store = 3 GROUP BY 1, 2"
        )
    assert "derived" not in off[0]
    with session(duck_service, derive="sometimes") as run, pytest.raises(psycopg.Error) as bad:
        run(f"SELECT store, {MONTH}, COUNT(*) FROM purchases WHERE amount > 10 AND store = 4 GROUP BY 1, 2")
    assert bad.value.sqlstate == "22023"  # refused before anything runs


def test_explain_says_derived(duck_service, fine):
    rid, _ = fine
    with session(duck_service) as run:
        rows, _ = run(
            f"EXPLAIN SELECT store, {MONTH}, SUM(amount) FROM purchases WHERE amount > 10 GROUP BY 1, 2"
        )
    assert rows[0][0].startswith(f"answered from earlier release(s) #{rid} at ε 0")


def test_an_avg_only_release_answers_its_own_cells_not_a_coarser_group_by(duck_service):
    before = _spent(duck_service)
    with session(duck_service) as run:
        run("SELECT store, amount > 100 AS big, AVG(amount) FROM purchases WHERE amount > 30 GROUP BY 1, 2")
        _, coarse = run("SELECT store, AVG(amount) FROM purchases WHERE amount > 30 GROUP BY store")
        rows, same = run(
            "SELECT store, amount > 100 AS big, AVG(amount) FROM purchases WHERE amount > 30 AND store = 4 GROUP BY 1, 2"
        )
    assert "derived" not in coarse[0] and "derived" in same[0] and len(rows) == 3
    assert _spent(duck_service) == pytest.approx(before + 2)


def test_ladder_tiers_are_never_derived(duck_service):
    before = _spent(duck_service, "bronze")
    with session(duck_service, role="bronze") as run:
        run("SELECT store, date_trunc('month', ts), COUNT(*) FROM purchases GROUP BY 1, 2")
        _, notes = run("SELECT store, COUNT(*) FROM purchases WHERE store = 2 GROUP BY store")
    assert "derived" not in notes[0] and _spent(duck_service, "bronze") > before


def test_an_avg_rolled_up_from_the_sum_and_count_released_beside_it(duck_service):
    with session(duck_service) as run:
        run(
            "SELECT store, amount > 100 AS big, AVG(amount), SUM(amount), COUNT(amount) "
            "FROM purchases WHERE amount > 40 GROUP BY 1, 2"
        )
        before = _spent(duck_service)
        rows, notes = run("SELECT store, AVG(amount) FROM purchases WHERE amount > 40 GROUP BY store")
    assert "its SUM over its COUNT, each summed over up to 3 cells" in notes[0] and len(rows) == 10
    assert _spent(duck_service) == before


def test_derived_from_another_proxys_release_on_a_postgres_ledger(postgres, tmp_path_factory):
    """Two proxies on one Postgres ledger: a release made through one answers a derived
    statement through the other (the ledger's candidate query on Postgres)."""
    import uuid

    from mechanisms import SeededSource
    from support.service import Service, make_config

    ledger = {
        "kind": "postgres",
        "dsn": postgres.dsn,
        "schema": "derive_" + uuid.uuid4().hex[:8],
        "key_file": str(tmp_path_factory.mktemp("key") / "ledger.key"),
    }
    svcs = []
    try:
        for name, seed in (("a", 1), ("b", 2)):
            cfg = make_config({"kind": "duckdb", "path": str(tmp_path_factory.mktemp(name) / "d.duckdb")})
            cfg["ledger"] = ledger
            svcs.append(
                Service(cfg, tmp_path_factory.mktemp(f"st_{name}"), source=SeededSource(seed)).start()
            )
        a, b = svcs
        fine = "SELECT sex, educ, COUNT(*) FROM pums GROUP BY 1, 2"
        with session(a) as run:
            run(fine)
        rid, ans = _stored_in(a, "other", fine, "table=pums;")
        with session(b) as run:
            rows, notes = run("SELECT sex, COUNT(*) FROM pums WHERE educ = 9 GROUP BY sex ORDER BY sex")
        names = [k[0] for k in ans["derive"]["keys"]]
        i, j = names.index("sex"), names.index("educ")
        expect = [(k[i], max(v[0], 0)) for k, v in zip(ans["keys"], ans["values"]) if k[j] == 9]
        assert rows == sorted(expect) and f"#{rid}" in notes[0] and "ε charged 0" in notes[0]
        assert b.gw.ledger.spent("other", "day") == pytest.approx(1.0)
    finally:
        for s in svcs:
            s.close()


def test_on_a_zcdp_tier_the_sum_of_discrete_gaussian_cells(tmp_path_factory):
    """A zCDP tier (ρ per statement, the discrete Gaussian): a key subset summed from its
    release's raw cells, ρ 0 charged, the NOTICE's head in ρ."""
    from mechanisms import SeededSource
    from support.service import Service, make_config

    tiers = {"half": {"accounting": "zcdp", "rho": 0.05, "budget": 1.0, "period": "day"}}
    cfg = make_config({"kind": "duckdb", "path": str(tmp_path_factory.mktemp("z") / "d.duckdb")}, tiers=tiers)
    svc = Service(cfg, tmp_path_factory.mktemp("zst"), source=SeededSource(7)).start()
    try:
        with session(svc, role="half") as run:
            run(FINE)
            rid, ans = _stored(svc, "half", FINE)
            before = _spent(svc, "half")
            rows, notes = run(
                f"SELECT store, {MONTH} AS m, COUNT(*) FROM purchases WHERE amount > 10 AND store = 6 "
                "GROUP BY 1, 2 ORDER BY 1, 2"
            )
        totals: dict = {}
        for store, m, _big, (n, _s, _na) in _cells(ans):
            if store == 6:
                totals[(store, m)] = totals.get((store, m), 0) + n
        assert rows == [(*k, max(v, 0)) for k, v in sorted(totals.items())], notes[0]
        assert (
            notes[0].startswith("dpgate: ρ charged 0 (zCDP")
            and f"derived from earlier release(s) #{rid}" in notes[0]
        )
        assert _spent(svc, "half") == before
    finally:
        svc.close()


def test_not_across_data_versions(duck_service, fine):
    with session(duck_service) as run:  # derivable now …
        _, now = run(
            f"SELECT store, {MONTH}, COUNT(amount) FROM purchases WHERE amount > 10 AND store = 9 GROUP BY 1, 2"
        )
    assert "derived" in now[0]
    duck_service.gw.ledger.advance_data_version()
    before = _spent(duck_service)
    with session(duck_service) as run:  # … not once the data changed
        _, notes = run(
            f"SELECT store, {MONTH}, COUNT(*) FROM purchases WHERE amount > 10 AND store = 8 GROUP BY 1, 2"
        )
    assert "derived" not in notes[0] and _spent(duck_service) == pytest.approx(before + 1)
