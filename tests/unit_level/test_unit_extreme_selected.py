"""MAX / MIN / percentiles over keys without a public domain (rewriter/extreme.py
``histogram_sql(floor=…)``, proxy/pipeline/extreme.py) on DuckDB, Postgres and Spark.

The one histogram scan, with bounds that bind nothing, equals the backend-independent
truth computed in Python: per key the histogram of the clamped grid index and the number of
distinct units (rows, on a table without a unit), keys with fewer than the floor absent, NULL
values and NULL units left out, a NULL key kept as a key. With L0 = 1 binding, each unit is
counted in exactly one key. And the privacy accounting of the kind: the selection's ε and
the value mechanism's ε, each times its group-privacy factor k, add up to the tier's ε; the
selection's δ and the scan floor's slack add up to the tier's δ; a tier with δ = 0, a ladder
tier and HAVING are refused (nothing planned, nothing charged).
"""

from __future__ import annotations

import asyncio
import random
import tomllib
from collections import Counter
from fractions import Fraction
from types import SimpleNamespace

import pytest

import rewriter
from config import parse_config
from mechanisms import SeededSource
from proxy.demo import demo_config_path
from proxy.pipeline.extreme import EXTREME
from proxy.pipeline.kind import Statement
from proxy.pipeline.partitions import scan_floor
from proxy.wire.api import SqlError
from rewriter.errors import Refusal
from rewriter.extreme import build_extreme_plan, histogram_sql
from rewriter.route import Route
from rewriter.unit import factor

from .engines import engine

LO, HI = 0, 20  # a: int in [0, 20] -> the grid is step 1, U = 20


def _rows(seed: int = 11) -> list[tuple]:
    rnd = random.Random(seed)
    out = []
    sizes = {"big1": 30, "big2": 12, "mid": 4, "two": 2, "one": 1, None: 5}  # distinct units per key
    u = 0
    for key, units in sizes.items():
        for _ in range(units):
            u += 1
            for _ in range(rnd.randint(1, 6)):
                out.append((u, key, rnd.randint(-3, 25)))  # outside [0, 20]: clamped
    out += [(None, "big1", 7)] * 9 + [(None, "ghost", 3)] * 9  # no known unit: left out
    out += [(u, "big1", None), (u + 1, "ghost2", None)]  # no value: left out
    return out


ROWS = _rows()


def _config(unit: bool, G: int = 1000, R: int = 100_000, scope: str = "cell"):
    t = {
        "columns": {
            "u": {"type": "int"},
            "c": {"type": "text"},
            "a": {"type": "int", "lower": LO, "upper": HI},
        }
    }
    if unit:
        t.update(privacy_unit="u", max_groups_per_unit=G, max_rows_per_unit=R, max_rows_scope=scope)
    return parse_config(
        {
            "tiers": {"default": {"epsilon": 1, "budget": 10, "delta": 1e-6, "delta_budget": 1e-5}},
            "roles": {"a": {"tier": "default"}},
            "server": {"auth": "trust"},
            "tables": {"t": t},
        }
    )


@pytest.fixture(scope="module", params=["duckdb", "postgres", "spark"])
def run(request):
    with engine(request, "unit_extreme_sel") as e:
        e.run("CREATE TABLE t (u INTEGER, c TEXT, a INTEGER)")
        e.insert("t", ROWS)
        yield e.dialect, e.run


def _scan(run, sql: str, cfg, floor: int) -> dict:
    dialect, go = run
    xp = build_extreme_plan(rewriter.parse(sql), cfg)
    assert xp.plan.selected
    out: dict = {}
    for k, v, n, units in go(histogram_sql(xp, LO, 1.0, HI - LO, True, dialect, "0a1b", floor=floor)):
        h, u = out.setdefault(k, [Counter(), set()])
        assert v not in h
        if v is not None:  # v NULL: the key's rows without a value (units only)
            h[int(v)] = int(n)
        u.add(int(units))
    return {k: (h, u.pop()) for k, (h, u) in out.items() if len(u) == 1}  # one units figure per key


def _truth(unit: bool) -> dict:
    """Per key: its histogram, and its units (rows) over every row of a known unit, NULL values
    included (they count a unit, as the partition scan does; a key of NULL values only is a key)."""
    hist: dict = {}
    for u, c, a in ROWS:
        if unit and u is None:
            continue
        h, us, rows = hist.setdefault(c, [Counter(), set(), [0]])
        if a is not None:
            h[min(max(a, LO), HI) - LO] += 1
        us.add(u)
        rows[0] += 1
    return {c: (h, len(us) if unit else rows[0]) for c, (h, us, rows) in hist.items()}


@pytest.mark.parametrize("scope", ["cell", "total"])
@pytest.mark.parametrize("floor", [1, 3, 10])
@pytest.mark.parametrize(
    "sql", ["SELECT c, MAX(a) FROM t GROUP BY c", "SELECT c, median(a) FROM t GROUP BY c"]
)
def test_per_key_histogram_and_units_equal_the_truth(run, sql, floor, scope):
    got = _scan(run, sql, _config(True, scope=scope), floor)
    want = {c: hu for c, hu in _truth(True).items() if hu[1] >= floor}
    assert got == want
    assert "ghost" not in got  # a key of no known unit
    assert ("ghost2" in got) == (floor == 1) and (
        "ghost2" not in got or not got["ghost2"][0]
    )  # no value: a key
    assert (None in got) == (floor <= 5)  # a NULL key is a key like any other
    assert len(got) < len(_truth(True)) or floor == 1  # the floor drops keys


def test_row_level_table_counts_rows(run):
    got = _scan(run, "SELECT c, MIN(a) FROM t GROUP BY c", _config(False), 9)
    want = {c: hu for c, hu in _truth(False).items() if hu[1] >= 9}
    assert got == want and "ghost" in got  # no unit: 9 rows of c = 'ghost' count


def test_one_key_per_unit_when_l0_binds(run):
    got = _scan(run, "SELECT c, MAX(a) FROM t GROUP BY c", _config(True, G=1), 1)
    # each unit in exactly one key (its kept cell), even unit u + 1 (only a NULL value, in 'ghost2')
    assert sum(units for _, units in got.values()) == len({u for u, _, _ in ROWS if u is not None})
    truth = _truth(True)
    assert all(
        units <= truth[c][1] and sum(h.values()) <= sum(truth[c][0].values()) for c, (h, units) in got.items()
    )


# -- the kind's privacy accounting (no backend) -------------------------------------------------


def _demo(delta: float):
    raw = tomllib.loads(demo_config_path().read_text())
    raw["server"] = {"auth": "trust"}
    for r in raw["roles"].values():
        r.pop("scram", None)
    raw["tiers"]["default"].update(delta=delta, delta_budget=max(delta, 1e-9) * 10)
    cfg = parse_config(raw)
    return SimpleNamespace(
        gw=SimpleNamespace(
            config=cfg, tier_of=lambda role: cfg.tiers[cfg.roles[role].tier], source=SeededSource(3)
        ),
        role="analyst",
    )


def _plan(conn, sql):
    return asyncio.run(EXTREME.plan(conn, Statement(sql, Route("dp", "purchases", planner="extreme")), []))


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT city, MAX(amount) FROM purchases GROUP BY city",
        "SELECT city, median(amount) FROM purchases GROUP BY city",
        "SELECT city, percentile_disc(0.9) WITHIN GROUP (ORDER BY amount) FROM purchases GROUP BY city",
        "SELECT city, store, MIN(amount) FROM purchases GROUP BY city, store",  # L0 = 10: k differs
    ],
)
def test_epsilon_and_delta_split_add_up_to_the_tier(sql):
    conn = _demo(1e-6)
    tier = conn.gw.tier_of("analyst")
    p = _plan(conn, sql)
    sel, m, k = p.state.sel.sel, p.state.m, factor(p.plan.plan)
    check = p.state.check  # the row check: each key's row count at 1/20 of ε, first
    count = check.m.privacy_map_exact(k)
    per_key_sel = Fraction(sel.eps) / sel.k  # each key's selection runs at ε_s/k_s
    assert per_key_sel * sel.k + Fraction(m.epsilon) * k + count == pytest.approx(
        Fraction(tier.epsilon), abs=1e-12
    )
    assert float(count) == pytest.approx(tier.epsilon / 20)
    assert float(per_key_sel * sel.k) == pytest.approx(check.rest / 2)  # half the rest to the selection
    slack = Fraction(tier.delta) / 2 / sel.k  # the scan floor's δ per key
    assert sel.delta + float(slack * sel.k) == pytest.approx(tier.delta, rel=1e-12)
    assert p.epsilon == tier.epsilon and p.delta == tier.delta  # charged once by the pipeline
    f = p.state.sel.floor
    assert f == scan_floor(sel, slack) and sel.keep_probability(f - 1 if f > 1 else 0) <= slack
    assert f"delta={tier.delta!r}" in p.key  # another δ is another release


def test_measure_selects_by_units_and_keeps_keys_without_values():
    """A key whose rows all lack a value (v NULL) is selected by its units like any other (its
    value from an empty histogram): dropping it would let one unit with a value make it appear.
    Keys at or past n1 (π = 1) are always kept, keys below the floor never (π ≤ δ/2k)."""
    conn = _demo(1e-6)
    p = _plan(conn, "SELECT city, MAX(amount) FROM purchases GROUP BY city")
    sel = p.state.sel.sel
    big = sel.n_one
    rows = [
        ("a", None, 40, big),
        ("b", 1000, 3, big),
        ("b", None, 2, big),
        ("c", 5, 1, 1),
    ]  # c: π(1) = δ/2 ≈ 0
    answer = EXTREME.measure(conn, p, rows)
    assert answer["keys"] == [["a"], ["b"]] and len(answer["values"]) == 2
    assert answer["partitions"]["kept"] == 2 and answer["partitions"]["delta"] == 1e-6
    assert EXTREME.mechanism(answer) == "capped_rank_max, partition_selection"
    text = EXTREME.notice_body(p, answer)
    assert "2 key(s) released" in text and "values at ε 0.475" in text and "(δ 1e-06 per release)" in text


def test_public_keys_are_unchanged():
    p = _plan(_demo(1e-6), "SELECT store, MAX(amount) FROM purchases GROUP BY store")
    assert p.state.sel is None and p.delta == 0.0 and p.epsilon == 1.0


def test_refusals_where_not_sound():
    with pytest.raises(SqlError) as e:  # δ = 0: no partition selection
        _plan(_demo(0.0), "SELECT city, MAX(amount) FROM purchases GROUP BY city")
    assert e.value.sqlstate == "0A000" and "needs a δ" in e.value.message and e.value.hint
    conn = _demo(1e-6)
    with pytest.raises(Refusal):  # COUNT beside MAX over selected keys
        _plan(conn, "SELECT city, MAX(amount), COUNT(*) FROM purchases GROUP BY city")
    conn.role = "bronze"  # a ladder tier: its chain only
    with pytest.raises(SqlError) as e:
        _plan(conn, "SELECT city, MAX(amount) FROM purchases GROUP BY city")
    assert e.value.sqlstate == "0A000"
