"""Ladder lifecycle on one DuckDB service: data-version change, a crash between the
ladder commit and the charge, two tiers racing, tiers added later (nearest lower
level / exact bridge / below the lowest level), budget refusal."""

from __future__ import annotations

import threading

import psycopg
import pytest
from mte_helpers import TIER_EPS, ask, expected_rows, ladder_row, same_rows

from config.models import Role, Tier
from proxy.pipeline.multitier import coalition_rows
from proxy.stores.ladder_store import store_for
from proxy.wire.auth import make_verifier
from support.service import PASSWORDS, Service, make_config


@pytest.fixture(scope="module")
def svc(tmp_path_factory):
    from mechanisms import SeededSource

    d = tmp_path_factory.mktemp("mte")
    s = Service(
        make_config({"kind": "duckdb", "path": str(d / "d.duckdb")}, limits={"max_statements_per_role": 64}),
        d / "state",
        people_rows=2000,
        source=SeededSource(5),
    ).start()
    yield s
    s.close()


def _coalition(svc, statement):
    cols, rows = coalition_rows(svc.gw, "admin")
    names = [c for c, _ in cols]
    return [dict(zip(names, r)) for r in rows if r[1] == statement]


def test_data_version_change_starts_new_chains(svc):
    q = "SELECT region, COUNT(*), AVG(hours) FROM people GROUP BY region"
    dv1 = svc.gw.data_version
    old = ask(svc, "gold", q)[0]
    ask(svc, "bronze", q)
    _, row1 = ladder_row(svc, q)
    spent = svc.gw.ledger.spent("gold", "day")
    svc.gw.ledger.advance_data_version()
    new, notices = ask(svc, "gold", q)
    assert "ε charged 2;" in notices[0] and svc.gw.ledger.spent("gold", "day") == spent + 2
    assert new != old
    _, row2 = ladder_row(svc, q)
    assert row2.id != row1.id and row2.data_version == dv1 + 1
    assert store_for(svc.gw.ledger).count(row2.qkey) == 2
    assert same_rows(new, expected_rows(svc, q, 2.0, 2.0))
    # the old chain is untouched; the owner sees one row per data version
    assert same_rows(old, expected_rows(svc, q, 2.0, 2.0, data_version=dv1))
    rows = sorted(_coalition(svc, q), key=lambda r: r["data_version"])
    assert [(r["data_version"], r["coalition_loss"], r["independent_loss"]) for r in rows] == [
        (dv1, 2.0, pytest.approx(2.1)),
        (dv1 + 1, 2.0, 2.0),
    ]


def test_ladder_committed_before_the_answer(svc, monkeypatch):
    """A crash right after the ladder commit (recording the answer fails) sends nothing;
    the scan had run, so the reserved ε stays charged (charge what ran); the ladder
    stays and every later request of ANY tier is served from it — also after a
    restart — so nothing is ever drawn twice."""
    q = "SELECT sex, SUM(hours), COUNT(*) FROM people WHERE age BETWEEN 30 AND 40 GROUP BY sex"
    led = svc.gw.ledger
    real = led.record

    def crash(*a, **kw):
        raise RuntimeError("simulated crash after the ladder commit")

    monkeypatch.setattr(led, "record", crash)
    spent = led.spent("silver", "day")
    with pytest.raises(psycopg.Error) as e:
        ask(svc, "silver", q)
    assert e.value.sqlstate == "XX000"
    assert (
        led.spent("silver", "day") == pytest.approx(spent + 0.5)
        and led.lookup("silver", _key(svc, q, 0.5), svc.gw.data_version) is None
    )
    plan, row = ladder_row(svc, q)
    assert row is not None and row.levels == [2.0, 0.5, 0.1]  # committed before answering
    body_before = row.body
    monkeypatch.setattr(led, "record", real)
    svc.restart()
    gold = ask(svc, "gold", q)[0]
    silver = ask(svc, "silver", q)[0]
    plan, row = ladder_row(svc, q)
    assert row.body == body_before and store_for(svc.gw.ledger).count(row.qkey) == 1
    assert same_rows(gold, expected_rows(svc, q, 2.0, 2.0))
    assert same_rows(silver, expected_rows(svc, q, 0.5, 0.5))
    assert svc.gw.ledger.spent("silver", "day") == pytest.approx(spent + 1.0)
    assert svc.gw.ledger.integrity_check()


def _key(svc, q, eps):
    return f"{svc.gw.plan(q, None).fingerprint()}:eps={eps!r}"


def test_racing_tiers_end_with_one_ladder(svc):
    queries = [f"SELECT COUNT(*), SUM(age) FROM people WHERE hours > {h}" for h in range(20, 26)]
    out: dict = {}
    errors: list = []

    def one(role, q, barrier):
        barrier.wait()
        try:
            out[(role, q)] = ask(svc, role, q)[0]
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    for q in queries:
        barrier = threading.Barrier(3)
        ts = [threading.Thread(target=one, args=(r, q, barrier)) for r in ("bronze", "silver", "gold")]
        for t in ts:
            t.start()
        for t in ts:
            t.join(30)
    assert not errors
    for q in queries:
        plan, row = ladder_row(svc, q)
        assert store_for(svc.gw.ledger).count(row.qkey) == 1
        for role in ("bronze", "silver", "gold"):
            assert same_rows(out[(role, q)], expected_rows(svc, q, TIER_EPS[role], TIER_EPS[role]))


def test_forced_race_loser_uses_the_winners_ladder(svc, monkeypatch):
    """Both tiers draw a full ladder before either commits (a barrier in front of
    the store's insert): exactly one ladder is kept and BOTH answers come from it."""
    q = "SELECT sex, COUNT(*) FROM people WHERE hours < 30 GROUP BY sex"
    store = store_for(svc.gw.ledger)
    real, barrier, created = store.create, threading.Barrier(2, timeout=20), []

    def create(**kw):
        barrier.wait()
        row, new = real(**kw)
        created.append(new)
        return row, new

    monkeypatch.setattr(store, "create", create)
    out = {}
    ts = [
        threading.Thread(target=lambda r=r: out.__setitem__(r, ask(svc, r, q)[0])) for r in ("bronze", "gold")
    ]
    for t in ts:
        t.start()
    for t in ts:
        t.join(30)
    assert sorted(created) == [False, True]
    _, row = ladder_row(svc, q)
    assert store.count(row.qkey) == 1
    for role in ("bronze", "gold"):
        assert same_rows(out[role], expected_rows(svc, q, TIER_EPS[role], TIER_EPS[role]))


def _add_tier(svc, name, eps, insert):
    """A config change at run time: a new tier of ladder 'market' and a role in it."""
    cfg = svc.gw.config

    class _T(Tier):  # works with or without the ladder_insert config patch
        ladder_insert: str = "nearest"

    cfg.tiers[name] = _T(epsilon=eps, budget=50.0, ladder="market", ladder_insert=insert)
    cfg.roles[name] = Role(tier=name, scram=make_verifier(f"{name}-pw", iterations=4096))
    PASSWORDS[name] = f"{name}-pw"


def test_tiers_added_later(svc):
    q = "SELECT sex, COUNT(*), AVG(income) FROM pums GROUP BY sex"
    gold = ask(svc, "gold", q)[0]
    bronze = ask(svc, "bronze", q)[0]
    _, row = ladder_row(svc, q)
    body0 = row.body
    _add_tier(svc, "platinum", 1.0, "nearest")  # between 2 and 0.5: nearest lower level (0.5)
    _add_tier(svc, "copper", 1.2, "bridge")  # between 2 and 0.5: exact bridge, persisted
    _add_tier(svc, "tin", 0.05, "nearest")  # below the lowest: one more residual (§9a)
    _add_tier(svc, "diamond", 3.0, "bridge")  # above the root: the root (no data access)
    plat, n1 = ask(svc, "platinum", q)
    assert "ε charged 1;" in n1[0]
    assert same_rows(plat, expected_rows(svc, q, 0.5, 1.0))
    _, row = ladder_row(svc, q)
    assert row.levels == [2.0, 0.5, 0.1]  # nearest lower adds nothing
    copper = ask(svc, "copper", q)[0]
    _, row = ladder_row(svc, q)
    assert row.levels == [2.0, 1.2, 0.5, 0.1] and row.version == [2.0, 0.5, 0.1]
    for lk in (repr(2.0), repr(0.5), repr(0.1)):  # stored levels never change
        assert all(
            c["raw"][s][lk] == c0["raw"][s][lk]
            for c, c0 in zip(row.body["cells"], body0["cells"])
            for s in c["raw"]
        )
    assert same_rows(copper, expected_rows(svc, q, 1.2, 1.2))
    tin = ask(svc, "tin", q)[0]
    _, row = ladder_row(svc, q)
    assert row.levels == [2.0, 1.2, 0.5, 0.1, 0.05]
    assert same_rows(tin, expected_rows(svc, q, 0.05, 0.05))
    diamond = ask(svc, "diamond", q)[0]
    assert same_rows(diamond, gold)  # never above the root
    # the chain's existing tiers are unaffected; silver now asks and gets its level
    assert same_rows(ask(svc, "gold", q)[0], gold) and same_rows(ask(svc, "bronze", q)[0], bronze)
    c = _coalition(svc, q)[0]
    assert c["coalition_loss"] == 2.0  # diamond paid 3 but holds the root (2)
    assert c["independent_loss"] == pytest.approx(2.0 + 0.1 + 1.0 + 1.2 + 0.05 + 3.0)
    assert (
        c["tiers_released"] == "diamond 2 (ε 3), gold 2, copper 1.2, platinum 0.5 (ε 1), bronze 0.1, tin 0.05"
    )


def test_budget_refusal_keeps_the_ladder_unreleased(svc):
    _add_tier(svc, "poor", 0.5, "nearest")
    svc.gw.config.tiers["poor"] = svc.gw.config.tiers["poor"].model_copy(update={"budget": 0.5})
    q1 = "SELECT COUNT(*) FROM pums WHERE income > 1000"
    q2 = "SELECT COUNT(*) FROM pums WHERE income > 2000"
    ask(svc, "poor", q1)
    with psycopg.connect(svc.dsn("poor"), autocommit=True) as conn:
        with pytest.raises(psycopg.Error) as e:
            conn.execute(q2).fetchall()
    assert e.value.sqlstate == "53400"
    _, row = ladder_row(svc, q2)
    assert row is None  # refused before the scan: nothing drawn


def test_config_option_ladder_insert():
    if "ladder_insert" not in Tier.model_fields:
        pytest.skip("config patch (Tier.ladder_insert) not applied yet")
    from pydantic import ValidationError

    assert Tier(epsilon=1.0, budget=2.0, ladder="market", ladder_insert="bridge").ladder_insert == "bridge"
    assert Tier(epsilon=1.0, budget=2.0, ladder="market").ladder_insert == "nearest"
    with pytest.raises(ValidationError):
        Tier(epsilon=1.0, budget=2.0, ladder_insert="bridge")  # needs a ladder
    with pytest.raises(ValidationError):
        Tier(epsilon=1.0, budget=2.0, ladder="market", ladder_insert="loosen")
