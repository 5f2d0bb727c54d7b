"""Query-time options of local tables (metric-LDP spec §8, §3.12): edge-bucket policy, the
percentile_disc bucket point, isotonic CDF and clipping — each moves the answer the way
the spec says on constructed data; column > table and session > config precedence; bad
values refused (config: one line naming file and field; SET: 22023); NOTICE and EXPLAIN
name the options. All are post-processing: the same stored reports answer every variant."""

from __future__ import annotations

import duckdb
import numpy as np
import psycopg
import pytest

from config import parse_config
from config.load import ConfigError, load_config
from mechanisms import SeededSource
from mechanisms.metric_ldp import isotonic, pava
from proxy.ingest.ldp_load import Encoder, ensure_duckdb, write_duckdb
from proxy.pipeline.local import local_answer
from proxy.pipeline.local_bind import scan, weights_of
from rewriter import parse
from rewriter.errors import Refusal
from rewriter.local import layout, plan_local
from rewriter.local_options import session_overrides

N = 3000


def local_cfg(**over):
    """x: int [0, 20), 5 buckets of 4 integers; y: float [0, 10), 5 buckets of width 2;
    z: float [0, 100), 50 buckets at small ε (noisy prefixes, for isotonic / clip)."""
    local = {
        "estimator": "known_n",
        "joint": [["x", "y"]],
        "columns": {
            "x": {"lo": 0, "hi": 20, "buckets": 5, "epsilon": 1.0},
            "y": {"lo": 0, "hi": 10, "buckets": 5, "epsilon": 1.0},
            "z": {"lo": 0, "hi": 100, "buckets": 50, "epsilon": 0.1},
        },
    }
    cols = over.pop("columns", {})
    for c, extra in cols.items():
        local["columns"][c].update(extra)
    local.update(over)
    return {
        "mode": "local",
        "columns": {
            "x": {"type": "int"},
            "y": {"type": "float"},
            "z": {"type": "float"},
            "g": {"type": "int", "domain": [1, 2]},
        },
        "local": local,
    }


def parse_cfg(table: dict):
    return parse_config(
        {
            "server": {"auth": "trust"},
            "tiers": {"t": {"epsilon": 1, "budget": 1}},
            "roles": {"a": {"tier": "t"}},
            "tables": {"tl": table},
        }
    )


def raw_data(n=N, seed=11):
    rng = np.random.default_rng(seed)
    # z lives in [0, 40): buckets 21..50 are empty, so their true counts are 0
    return {
        "x": rng.integers(0, 20, n),
        "y": rng.uniform(0, 10, n),
        "z": rng.uniform(0, 40, n),
        "g": rng.integers(1, 3, n),
    }


@pytest.fixture(scope="module")
def reports():
    """The reports of raw_data() under local_cfg(), encoded ONCE (seeded): every option below
    is answered from this same table (post-processing)."""
    cfg = parse_cfg(local_cfg())
    lay = layout("tl", cfg.tables["tl"])
    con = duckdb.connect()
    ensure_duckdb(con, lay)
    write_duckdb(con, lay, Encoder(lay, SeededSource(5)).encode(raw_data(), N))
    yield con
    con.close()


def answer(con, sql, table=None, overrides=()):
    cfg = parse_cfg(table or local_cfg())
    plan = plan_local(parse(sql), cfg, [], overrides)
    rows, notice = local_answer(plan, con.execute(scan(plan, "duckdb")[0]).fetchall())
    return rows[0], notice, plan


def count(con, sql, **kw):
    return answer(con, sql, **kw)[0][0]


# ------------------------------------------------------------------------------ edges
def test_whole_equals_interpolated_over_the_widened_range(reports):
    whole = local_cfg(edges="whole")
    # y < 5 cuts bucket [4, 6): whole counts it entirely = the range widened to y < 6
    assert count(reports, "SELECT COUNT(*) FROM tl WHERE y < 5", table=whole) == count(
        reports, "SELECT COUNT(*) FROM tl WHERE y < 6"
    )
    # x BETWEEN 5 AND 9 cuts [4, 8) and [8, 12) → whole = x BETWEEN 4 AND 11 interpolated
    a = count(reports, "SELECT COUNT(*) FROM tl WHERE x BETWEEN 5 AND 9", table=whole)
    assert a == count(reports, "SELECT COUNT(*) FROM tl WHERE x BETWEEN 4 AND 11")
    # ... and differs from the interpolated answer of the cut range (the check can fail):
    # interpolation drops 1/4 of [4, 8) and 2/4 of [8, 12), ≈ 0.75·N/5 = 450 true reports
    b = count(reports, "SELECT COUNT(*) FROM tl WHERE x BETWEEN 5 AND 9")
    assert a - b > 200
    # weights: 1 on every touched bucket, 0 elsewhere (not the fractions 0.75, 0.5)
    _, _, p = answer(reports, "SELECT COUNT(*) FROM tl WHERE x BETWEEN 5 AND 9", table=whole)
    assert weights_of(p.private["x"], p.layout).tolist() == [0, 1, 1, 0, 0]
    _, _, p = answer(reports, "SELECT COUNT(*) FROM tl WHERE x BETWEEN 5 AND 9")
    assert weights_of(p.private["x"], p.layout).tolist() == [0, 0.75, 0.5, 0, 0]


def test_range_on_bucket_edges_same_under_both(reports):
    whole = local_cfg(edges="whole")
    for sql in (
        "SELECT COUNT(*) FROM tl WHERE y >= 2 AND y < 6",
        "SELECT COUNT(*) FROM tl WHERE x BETWEEN 4 AND 11 AND y < 4",
        "SELECT SUM(x) FROM tl WHERE y >= 8",
    ):
        assert count(reports, sql, table=whole) == count(reports, sql)


def test_column_beats_table_and_session_beats_config(reports):
    sql = "SELECT COUNT(*) FROM tl WHERE x BETWEEN 5 AND 9 AND y < 5"
    mixed = local_cfg(edges="whole", columns={"y": {"edges": "interpolate"}})
    _, notice, p = answer(reports, sql, table=mixed)
    assert weights_of(p.private["x"], p.layout).tolist() == [0, 1, 1, 0, 0]  # table: whole
    assert weights_of(p.private["y"], p.layout).tolist() == [1, 1, 0.5, 0, 0]  # column: interpolate
    assert "edge buckets x whole, y interpolated" in notice
    _, notice, p = answer(reports, sql, table=mixed, overrides=(("edges", "interpolate"),))
    assert (
        weights_of(p.private["x"], p.layout).tolist() == [0, 0.75, 0.5, 0, 0]
        and "edge buckets interpolated" in notice
    )
    _, notice, p = answer(reports, sql, overrides=(("edges", "whole"),))
    assert weights_of(p.private["y"], p.layout).tolist() == [1, 1, 1, 0, 0] and "edge buckets whole" in notice


# ------------------------------------------------------------------------------ quantiles
def test_midpoint_and_upper_differ_by_half_a_bucket(reports):
    sql = (
        "SELECT percentile_disc(0.3) WITHIN GROUP (ORDER BY y), "
        "percentile_disc(0.7) WITHIN GROUP (ORDER BY x) FROM tl"
    )
    (ymid, xmid), _, _ = answer(reports, sql, table=local_cfg(quantile_point="midpoint"))
    (yup, xup), notice, _ = answer(reports, sql, table=local_cfg(quantile_point="upper"))
    (yauto, xauto), _, _ = answer(reports, sql)
    assert yup - ymid == pytest.approx(1.0, abs=1e-9)  # g/2 = (10 − 0)/5/2
    assert (yauto, xauto) == (ymid, xmid)  # default = the midpoint (as before)
    # int column: the upper edge 4x̂ belongs to the next bucket; "upper" is the bucket's
    # largest integer 4x̂ − 1, one above the (rounded) midpoint 4x̂ − 2
    assert xup % 4 == 3 and xup - xmid == 1
    assert "quantile_point upper" in notice


def noisy_prefixes(con):
    _, _, p = answer(con, "SELECT percentile_disc(0.5) WITHIN GROUP (ORDER BY z) FROM tl")
    row = con.execute(scan(p, "duckdb")[0]).fetchall()[0]
    _, sc = scan(p, "duckdb")
    return np.array([row[j] for j in sc.slots[0]["prefix"]], float)


def first_crossing(prefix, n, p):
    """min{x : σ(x) ≥ p} over σ = (0, prefix/n, 1): the quantile of a monotone CDF (§3.10)."""
    sig = np.concatenate([[0.0], np.asarray(prefix) / n, [1.0]])
    return int(np.argmax(sig >= p))


def test_isotonic_cdf_gives_the_quantiles_of_a_monotone_cdf(reports):
    raw = noisy_prefixes(reports)
    assert np.any(np.diff(raw) < 0)  # premise: the estimated CDF is not monotone
    fit = isotonic(raw, N)
    assert np.all(np.diff(fit) >= 0) and fit.min() >= 0 and fit.max() <= N
    ps = [i / 40 for i in range(1, 40)]
    sql = "SELECT " + ", ".join(f"percentile_disc({p}) WITHIN GROUP (ORDER BY z)" for p in ps) + " FROM tl"
    plain, _, _ = answer(reports, sql)
    iso, notice, _ = answer(reports, sql, table=local_cfg(isotonic_cdf=True))
    bucket = [int(v // 2) + 1 for v in iso]  # midpoints of buckets of width 2 from 0
    # with the option, x̂ is the generalized inverse of the fitted CDF at every p ...
    assert bucket == [first_crossing(fit, N, p) for p in ps]
    # ... which the raw search is not (it may stop at any crossing of σ̂, spec §7.11)
    assert plain != iso
    # the invariant search is monotone in p either way (paths split only at σ̂(mid) ∈ [p1, p2))
    assert all(b >= a for a, b in zip(iso, iso[1:])) and all(b >= a for a, b in zip(plain, plain[1:]))
    assert "isotonic_cdf on" in notice


def test_pava_reference():
    # hand-computed: the violators (3, 2) pool to 2.5; (5, 1, 0) pool to 2 and then with
    # the preceding 2.5 block to (2.5+2.5+5+1+0)/5 = 2.2
    assert pava([1, 3, 2, 4]).tolist() == [1, 2.5, 2.5, 4]
    assert np.allclose(pava([1, 3, 2, 5, 1, 0]), [1, 2.2, 2.2, 2.2, 2.2, 2.2])
    assert isotonic([-3, 1, 9], 5).tolist() == [0, 1, 5]  # onto [0, n]


def test_clip_counts_into_0_n(reports):
    # z < 40 always, so z in [70, 100) has true count 0; its estimate P̂_50 − P̂_35 is noise
    # around 0 (std ≈ sqrt(2 N e^ε/(e^ε−1)²) ≈ 775 at ε 0.1, §3.11), negative for this seed
    sql = "SELECT COUNT(*) FROM tl WHERE z >= 70 AND z < 100"
    plain = count(reports, sql)
    assert plain < 0
    clipped, notice, _ = answer(reports, sql, table=local_cfg(clip=True))
    assert clipped[0] == 0 and "clip on" in notice
    sql = "SELECT COUNT(*) FROM tl WHERE z < 50"  # true count N: above N here
    assert count(reports, sql) > N
    assert count(reports, sql, table=local_cfg(clip=True)) == N


# ------------------------------------------------------------------------------ validation
@pytest.mark.parametrize(
    "key, value, field",
    [
        ("edges", "partial", "tables.tl.local.edges"),
        ("quantile_point", "lower", "tables.tl.local.quantile_point"),
        ("isotonic_cdf", "yes", "tables.tl.local.isotonic_cdf"),
        ("clip", 1, "tables.tl.local.clip"),
    ],
)
def test_config_values_refused(tmp_path, key, value, field):
    f = tmp_path / "dpgate.toml"
    v = f'"{value}"' if isinstance(value, str) else value
    f.write_text(
        '[server]\nauth = "trust"\n[tiers.t]\nepsilon = 1\nbudget = 1\n[roles.a]\ntier = "t"\n'
        '[tables.tl]\nmode = "local"\n[tables.tl.columns.x]\ntype = "int"\n'
        f"[tables.tl.local]\n{key} = {v}\n"
        "[tables.tl.local.columns.x]\nlo = 0\nhi = 20\nbuckets = 5\nepsilon = 1\n"
    )
    with pytest.raises(ConfigError) as e:
        load_config(f)
    msg = str(e.value)
    assert msg.startswith(f"{f}: {field}: ") and "\n" not in msg
    f.write_text(f.read_text().replace(f"{key} = {v}\n", ""))
    load_config(f)  # the same file without it loads


def test_column_edges_refused_in_config():
    with pytest.raises(ConfigError, match=r"^cfg: tables\.tl\.local\.columns\.y\.edges: "):
        parse_config(
            {"tiers": {}, "roles": {}, "tables": {"tl": local_cfg(columns={"y": {"edges": "cut"}})}}, "cfg"
        )


@pytest.mark.parametrize(
    "key, value",
    [
        ("dpgate.local_edges", "partial"),
        ("dpgate.local_quantile_point", "lower"),
        ("dpgate.local_clip", "maybe"),
    ],
)
def test_session_values_refused(key, value):
    with pytest.raises(Refusal) as e:
        session_overrides({key: value})
    assert e.value.sqlstate == "22023" and key in e.value.message
    assert session_overrides({key: ""}) == ()  # RESET: back to the config


# ------------------------------------------------------------------------------ through the wire
@pytest.fixture(scope="module", params=["duckdb", "postgres"])
def svc(request, tmp_path_factory):
    """A dpgate whose local table tl (x column override: whole) is filled by INSERTs."""
    from support.service import Service, make_config

    if request.param == "postgres":
        pg = request.getfixturevalue("postgres")
        backend = {"kind": "postgres", "dsn": pg.dsn, "pool_size": 2}
        with psycopg.connect(pg.dsn, autocommit=True) as c:
            c.execute('DROP TABLE IF EXISTS "tl_reports"')
    else:
        backend = {"kind": "duckdb", "path": str(tmp_path_factory.mktemp("duck") / "d.duckdb")}
    data = make_config(backend)
    data["tables"]["tl"] = local_cfg(columns={"x": {"edges": "whole"}})
    data["roles"]["producer"].update(insert=["tl"], insert_rows_per_minute=10_000)
    s = Service(
        data, tmp_path_factory.mktemp("state"), people_rows=500, trips_rows=500, source=SeededSource(77)
    ).start()
    raw = raw_data(1000, 3)
    with psycopg.connect(s.dsn("producer"), autocommit=True) as c:
        vals = ", ".join(
            f"({raw['x'][i]}, {raw['y'][i]:.3f}, {raw['z'][i]:.3f}, {raw['g'][i]})" for i in range(1000)
        )
        c.execute(f"INSERT INTO tl (x, y, z, g) VALUES {vals}")
    yield s
    s.close()


def run(s, *sqls):
    """Run the statements on one connection; (rows of the last, its NOTICEs)."""
    notes = []
    with psycopg.connect(s.dsn(), autocommit=True) as c:
        c.add_notice_handler(lambda d: notes.append(d.message_primary))
        for q in sqls:
            notes.clear()
            cur = c.execute(q)
        return cur.fetchall(), list(notes)


def test_session_override_through_the_wire(svc):
    cut, wide = ("SELECT COUNT(*) FROM tl WHERE y < 5", "SELECT COUNT(*) FROM tl WHERE y < 6")
    base, notes = run(svc, cut)
    assert "edge buckets interpolated" in notes[0]
    whole, notes = run(svc, "SET dpgate.local_edges = 'whole'", cut)
    assert whole == run(svc, wide)[0] != base and "edge buckets whole" in notes[0]
    back, _ = run(svc, "SET dpgate.local_edges = 'whole'", "RESET dpgate.local_edges", cut)
    assert back == base
    # config: column x is "whole"; the session's "interpolate" beats it
    xcut = "SELECT COUNT(*) FROM tl WHERE x BETWEEN 5 AND 9"
    conf, notes = run(svc, xcut)
    assert conf == run(svc, "SELECT COUNT(*) FROM tl WHERE x BETWEEN 4 AND 11")[0]
    assert "edge buckets whole" in notes[0]
    sess, notes = run(svc, "SET dpgate.local_edges = 'interpolate'", xcut)
    assert sess != conf and "edge buckets interpolated" in notes[0]


def test_session_quantile_point_and_explain(svc):
    q = "SELECT percentile_disc(0.5) WITHIN GROUP (ORDER BY y) FROM tl"
    ((mid,),) = run(svc, q)[0]
    ((up,),) = run(svc, "SET dpgate.local_quantile_point = 'upper'", q)[0]
    assert up - mid == pytest.approx(1.0, abs=1e-9)
    plan, _ = run(svc, "SET dpgate.local_isotonic_cdf = on", "EXPLAIN " + q)
    text = "\n".join(r[0] for r in plan)
    assert "edge buckets interpolated, quantile_point auto, isotonic_cdf on, clip off" in text
    plan, _ = run(svc, "EXPLAIN SELECT COUNT(*) FROM tl WHERE x < 5 AND y < 5")
    assert "edge buckets x whole, y interpolated" in "\n".join(r[0] for r in plan)


def test_bad_session_value_is_22023(svc):
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="dpgate.local_edges"):
        run(svc, "SET dpgate.local_edges = 'partial'", "SELECT COUNT(*) FROM tl WHERE y < 5")
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="dpgate.local_clip"):
        run(svc, "SET dpgate.local_clip = 'maybe'", "EXPLAIN SELECT COUNT(*) FROM tl")
