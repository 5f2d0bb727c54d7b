"""Error bars in the rows over the wire (psycopg): ``dp_interval_low/high(agg[, level])`` and
``SET dpgate.intervals``, from the same release (free), with the names, Describe and the
extended protocol agreeing with the executed result."""

from __future__ import annotations

import psycopg
import pytest


def _run(svc, sql, role="other", params=None, setup=(), prepare=None):
    notes: list[str] = []
    with psycopg.connect(svc.dsn(role), autocommit=True) as c:
        c.add_notice_handler(lambda d: notes.append(d.message_primary))
        for s in setup:
            c.execute(s)
        cur = c.execute(sql, params, prepare=prepare)
        rows = cur.fetchall()
        names = [d.name for d in cur.description]
        oids = [d.type_code for d in cur.description]
    return rows, names, oids, notes


def _spent(svc, role="other"):
    return svc.gw.ledger.spent(role, "day")


def test_interval_items_are_free_and_hold_the_value(duck_service):
    svc = duck_service
    plain, _, _, _ = _run(svc, "SELECT educ, COUNT(*) FROM pums GROUP BY educ")
    spent = _spent(svc)
    counts, names, oids, notes = _run(
        svc,
        "SELECT educ, COUNT(*), dp_interval_low(COUNT(*)), dp_interval_high(COUNT(*)) FROM pums GROUP BY educ",
    )
    assert names == ["educ", "count", "dp_interval_low", "dp_interval_high"] and oids[1:] == [20, 20, 20]
    assert [r[1] for r in counts] == [r[1] for r in plain]  # the same release, read again: free
    assert "repeat" in notes[0] and _spent(svc) == spent
    assert all(0 <= lo <= n <= hi for _, n, lo, hi in counts)
    assert "error bars (dp_interval_low/high) at 0.95" in notes[0]
    assert "clamped to the column's bounds" in notes[0]
    rows, names, oids, notes = _run(
        svc,
        "SELECT educ, AVG(income) AS m, dp_interval_low(AVG(income), 0.9) AS m_lo, "
        "dp_interval_high(AVG(income), 0.9) AS m_hi, "
        "dp_interval_high(AVG(income)) - dp_interval_low(AVG(income)) AS width FROM pums GROUP BY educ",
    )
    assert names == ["educ", "m", "m_lo", "m_hi", "width"] and oids[1:] == [701] * 4
    for _, m, mlo, mhi, width in rows:
        assert 0 <= mlo <= m <= mhi <= 500_000 and width >= mhi - mlo - 1e-9  # 95% ⊇ 90%
    # the AVG's interval reads the COUNT(income) released with it (one draw): charged once
    assert _spent(svc) - spent == pytest.approx(1.0)
    again, _, _, notes2 = _run(
        svc, "SELECT educ, dp_interval_low(AVG(income)), AVG(income) FROM pums GROUP BY educ ORDER BY 1"
    )
    assert "repeat" in notes2[0] and _spent(svc) - spent == pytest.approx(1.0)
    assert [r[2] for r in again] == [r[1] for r in rows]


def test_set_intervals_adds_columns_describe_and_prepared_agree(duck_service):
    svc = duck_service
    sql = "SELECT educ, COUNT(*) AS n, ROUND(AVG(income), 1), SUM(age) FROM pums WHERE age > %s GROUP BY educ"
    on = ["SET dpgate.intervals = on"]
    rows, names, oids, _ = _run(svc, sql, params=(20,), setup=on)
    assert names == [
        "educ",
        "n",
        "n_low",
        "n_high",
        "round",
        "round_low",
        "round_high",
        "sum",
        "sum_low",
        "sum_high",
    ]
    spent = _spent(svc)
    prepared, pnames, poids, notes = _run(svc, sql, params=(20,), setup=on, prepare=True)
    assert (prepared, pnames, poids) == (rows, names, oids) and "repeat" in notes[0]
    assert _spent(svc) == spent
    for r in rows:
        assert r[2] <= r[1] <= r[3] and r[5] <= r[4] <= r[6] and r[8] <= r[7] <= r[9]
    with psycopg.connect(svc.dsn("other"), autocommit=True) as c:
        c.execute("SET dpgate.intervals = 0.8")
        assert c.execute("SHOW dpgate.intervals").fetchone() == ("0.8",)
        cur = c.execute("SELECT COUNT(*) FROM pums")
        assert [d.name for d in cur.description] == ["count", "count_low", "count_high"]
        ((n, lo80, hi80),) = cur.fetchall()
        c.execute("SET dpgate.intervals = off")
        assert [d.name for d in c.execute("SELECT COUNT(*) FROM pums").description] == ["count"]
        with pytest.raises(psycopg.Error) as e:
            c.execute("SET dpgate.intervals = 2")
        assert e.value.sqlstate == "22023"


def test_filters_and_sorts_read_intervals(duck_service):
    rows, names, _, _ = _run(
        duck_service,
        "SELECT educ, COUNT(*) AS n FROM pums GROUP BY educ "
        "HAVING dp_interval_low(COUNT(*)) > 50 ORDER BY dp_interval_high(COUNT(*)) DESC",
    )
    assert (
        names == ["educ", "n"] and rows and [r[1] for r in rows] == sorted((r[1] for r in rows), reverse=True)
    )
    assert all(n > 50 for _, n in rows)  # low > 50 and n ≥ low


def test_ladder_level_intervals(duck_service):
    rows, _, _, notes = _run(
        duck_service,
        "SELECT educ, COUNT(*), dp_interval_low(COUNT(*)), dp_interval_high(COUNT(*)) FROM pums GROUP BY educ",
        role="silver",
    )
    assert rows and all(lo is not None and lo <= n <= hi for _, n, lo, hi in rows)
    assert "ladder market" in notes[0]


@pytest.mark.parametrize(
    ("sql", "state"),
    [
        ("SELECT dp_interval_low(MAX(age)) FROM pums", "0A000"),
        ("SELECT COUNT(*), dp_interval_low(COUNT(*) + 1) FROM pums", "0A000"),
        ("SELECT dp_interval_low(COUNT(*), 1.5) FROM pums", "22023"),
        ("SELECT dp_interval_low(COUNT(*), age) FROM pums", "22023"),
        ("SELECT dp_interval_low() FROM pums", "42883"),
    ],
)
def test_refusals_charge_nothing(duck_service, sql, state):
    spent = _spent(duck_service)
    with pytest.raises(psycopg.Error) as e:
        _run(duck_service, sql)
    assert e.value.sqlstate == state and _spent(duck_service) == spent


def test_sparse_vector_and_selected_keys(duck_service):
    """Top-c by the sparse vector: the selected keys' values and their intervals; keys chosen by
    partition selection (no public domain): their values' intervals."""
    rows, _, _, notes = _run(
        duck_service,
        "SELECT educ, COUNT(*), dp_interval_low(COUNT(*)), dp_interval_high(COUNT(*)) FROM pums "
        "GROUP BY educ ORDER BY COUNT(*) DESC LIMIT 2",
    )
    assert len(rows) == 2 and all(lo <= n <= hi for _, n, lo, hi in rows)
    assert "sparse vector" in notes[0] or "count ±" in notes[0]
    rows, _, _, notes = _run(
        duck_service,
        "SELECT city, COUNT(*), dp_interval_low(COUNT(*)), dp_interval_high(COUNT(*)) FROM purchases "
        "GROUP BY city",
    )
    assert rows and all(lo <= n <= hi and hi - lo == rows[0][3] - rows[0][2] for _, n, lo, hi in rows)
    assert "partition selection" in notes[0] and "rows kept by contribution bounding" in notes[0]


@pytest.fixture(scope="module")
def zcdp_service(tmp_path_factory):
    from mechanisms import SeededSource
    from support.service import Service, make_config

    tiers = {"half": {"accounting": "zcdp", "rho": 0.05, "budget": 1.0, "period": "day"}}
    backend = {"kind": "duckdb", "path": str(tmp_path_factory.mktemp("duck") / "demo.duckdb")}
    s = Service(
        make_config(backend, tiers=tiers), tmp_path_factory.mktemp("state"), source=SeededSource(5)
    ).start()
    yield s
    s.close()


def test_zcdp_tier_intervals(zcdp_service):
    """A zCDP tier: COUNT by the discrete Gaussian, AVG by the hourglass at ε = √(2ρ) over the
    unit's factor; their intervals are of those laws (a wrong law would not match the recorded
    half-widths and give NULL)."""
    from mechanisms.discrete_gaussian import GaussianCount, dgauss_half_width

    rows, names, _, notes = _run(
        zcdp_service,
        "SELECT store, COUNT(*) AS n, AVG(amount) AS a FROM purchases GROUP BY store",
        role="half",
        setup=["SET dpgate.intervals = on"],
    )
    assert names == ["store", "n", "n_low", "n_high", "a", "a_low", "a_high"]
    g = GaussianCount(0.05 / 2, contributions_sq=10 * 10 * 10)  # ρ/2 each; √(min(G, cells))·R = √10·10
    k = dgauss_half_width(g.sigma2, 0.95)
    for _, n, lo, hi, a, alo, ahi in rows:
        assert (lo, hi) == (max(n - k, 0), n + k)
        assert alo is not None and 0 <= alo <= a <= ahi <= 500


def test_set_intervals_leaves_what_has_none(duck_service):
    """MAX/percentiles and the outer aggregates over a derived table's released rows get no
    interval columns; those statements answer as without the setting."""
    on = ["SET dpgate.intervals = on"]
    _, names, _, _ = _run(duck_service, "SELECT sex, COUNT(*), MAX(income) FROM pums GROUP BY sex", setup=on)
    assert names == ["sex", "count", "count_low", "count_high", "max"]
    sql = "SELECT COUNT(*) AS k FROM (SELECT educ, COUNT(*) AS c FROM pums GROUP BY educ) s"
    rows, names, _, _ = _run(duck_service, sql, setup=on)
    assert names == ["k"] and rows == _run(duck_service, sql)[0]


def test_set_intervals_skips_per_record_tables(duck_service):
    """A per-record table's release (Chen et al. 2025) has no error bars: the setting leaves its
    statements as written."""
    sql = "SELECT COUNT(*) FROM accounts"
    _, names, _, _ = _run(duck_service, sql, setup=["SET dpgate.intervals = on"])
    assert names == ["count"]


def test_intervals_in_expressions_and_outer_queries(duck_service):
    svc = duck_service
    rows, names, _, _ = _run(
        svc,
        "SELECT SUM(lo) AS s, MIN(w) AS w FROM (SELECT educ, dp_interval_low(COUNT(*)) AS lo, "
        "dp_interval_high(COUNT(*)) - dp_interval_low(COUNT(*)) AS w FROM pums GROUP BY educ) s",
    )
    cells, _, _, _ = _run(
        svc,
        "SELECT educ, dp_interval_low(COUNT(*)), dp_interval_high(COUNT(*)) - dp_interval_low(COUNT(*)) "
        "FROM pums GROUP BY educ",
    )
    assert names == ["s", "w"] and rows == [(sum(r[1] for r in cells), min(r[2] for r in cells))]
    rows, names, _, _ = _run(
        svc,
        "SELECT dp_interval_low(VAR_POP(age)) AS lo, VAR_POP(age) AS v, dp_interval_high(STDDEV(age)) AS hi, "
        "STDDEV(age) AS sd, dp_interval_low(COUNT(age)) AS n_lo, COUNT(age) AS n FROM pums",
    )
    ((lo, v, hi, sd, n_lo, n),) = rows
    assert 0 <= lo <= v and sd <= hi and n_lo <= n


def test_an_aggregate_only_inside_is_released_with_the_statement(duck_service):
    before = _spent(duck_service)
    rows, names, _, notes = _run(
        duck_service, "SELECT SUM(age) AS s, dp_interval_low(COUNT(*)) AS lo FROM pums"
    )
    assert names == ["s", "lo"] and rows[0][1] is not None
    assert "count(*) ±" in notes[0] and "s ±" in notes[0]
    assert _spent(duck_service) - before == pytest.approx(1.0)  # one statement: its ε, shared


def test_plan_templates_keep_the_intervals(duck_service):
    """Statements differing only in integer literals share a plan template: the intervals and
    their levels are the template's, the literals the statement's."""
    for k in (20, 30, 40):
        rows, names, _, _ = _run(
            duck_service,
            f"SELECT educ, COUNT(*), dp_interval_low(COUNT(*), 0.5), dp_interval_high(COUNT(*)) FROM pums "
            f"WHERE age > {k} GROUP BY educ HAVING dp_interval_high(COUNT(*)) > {k}",
        )
        assert names == ["educ", "count", "dp_interval_low", "dp_interval_high"] and rows
        assert all(lo <= n <= hi and hi > k and hi - n >= n - lo for _, n, lo, hi in rows)


def test_copy_out_with_intervals(duck_service):
    """COPY (query) TO STDOUT under SET dpgate.intervals: the same columns as the query."""
    with psycopg.connect(duck_service.dsn("other"), autocommit=True) as c:
        c.execute("SET dpgate.intervals = on")
        with c.cursor().copy(
            "COPY (SELECT educ, COUNT(*) AS n FROM pums GROUP BY educ) TO STDOUT WITH CSV HEADER"
        ) as cp:
            text = b"".join(bytes(b) for b in cp).decode()
    assert text.splitlines()[0] == "educ,n,n_low,n_high"
    assert all(
        int(lo) <= int(n) <= int(hi) for _, n, lo, hi in (line.split(",") for line in text.splitlines()[1:])
    )


def test_zcdp_variance_intervals(zcdp_service):
    rows, names, _, notes = _run(
        zcdp_service,
        "SELECT store, VAR_POP(amount) AS v, dp_interval_low(VAR_POP(amount)) AS lo, "
        "dp_interval_high(VAR_POP(amount)) AS hi FROM purchases GROUP BY store",
        role="half",
    )
    assert rows and all(lo is not None and 0 <= lo <= v <= hi for _, v, lo, hi in rows)
    assert "discrete_gaussian_variance" in notes[0]


def test_explain_under_set_intervals(duck_service):
    rows, _, _, _ = _run(
        duck_service,
        "EXPLAIN SELECT educ, COUNT(*) AS n FROM pums GROUP BY educ",
        setup=["SET dpgate.intervals = on"],
    )
    text = "\n".join(r[0] for r in rows)
    assert "n_low: computed from the released aggregates (post-processing, no ε)" in text
