"""The budget ledger / release store: atomic charge, repeat is free, no overspend
under concurrency, durable across reopen."""

from __future__ import annotations

import threading
import uuid

import pytest

from proxy.stores.ledger import BudgetExceeded, Ledger, period_key


@pytest.fixture(params=["sqlite", "postgres"])
def new_ledger(request, tmp_path):
    """Opens a ledger on one store: the state dir's SQLite file, or a fresh schema
    of a real Postgres (``[ledger] kind = "postgres"``: proxies that scale out).
    Each call is another ledger object on the same store (another proxy)."""
    if request.param == "sqlite":

        def target():
            return Ledger(tmp_path / "l.db")
    else:
        dsn, schema = request.getfixturevalue("postgres").dsn, "t_" + uuid.uuid4().hex[:12]

        def target():
            return Ledger(None, dsn=dsn, schema=schema, key_file=tmp_path / "ledger.key")

    made = []

    def new():
        made.append(target())
        return made[-1]

    yield new
    for led in made:
        led.close()


def _charge(ledger, key, eps=1.0, budget=3.0, role="r", dv=1):
    return ledger.charge_and_record(
        role=role,
        key=key,
        data_version=dv,
        epsilon=eps,
        budget=budget,
        period="day",
        canonical=key,
        statement="SELECT …",
        mechanism="m",
        answer={"values": [[key]]},
    )


def test_charge_repeat_and_refuse(new_ledger):
    led = new_ledger()
    a = _charge(led, "q1")
    assert a.charged and led.spent("r", "day") == 1.0
    again = _charge(led, "q1")
    assert not again.charged and again.answer == a.answer and led.spent("r", "day") == 1.0
    _charge(led, "q2")
    _charge(led, "q3")
    with pytest.raises(BudgetExceeded) as e:
        _charge(led, "q4")
    assert e.value.remaining == 0.0
    assert led.spent("r", "day") == 3.0
    assert led.lookup("r", "q4", 1) is None  # a refused query leaves nothing behind
    assert _charge(led, "q2").answer == {"values": [["q2"]]}  # repeats still served at zero budget
    assert led.integrity_check()


def test_exact_accounting_no_float_drift(new_ledger):
    led = new_ledger()
    for i in range(10):  # 10 × 0.1 must fit a budget of exactly 1.0
        _charge(led, f"q{i}", eps=0.1, budget=1.0)
    assert led.spent("r", "day") == 1.0
    with pytest.raises(BudgetExceeded):
        _charge(led, "q10", eps=0.1, budget=1.0)


def test_data_version_starts_new_releases(new_ledger):
    led = new_ledger()
    _charge(led, "q", budget=10)
    assert led.advance_data_version() == 2
    assert led.lookup("r", "q", 2) is None
    assert _charge(led, "q", budget=10, dv=2).charged


def test_durable_across_reopen(new_ledger):
    led = new_ledger()
    first = _charge(led, "q")
    led.close()
    led2 = new_ledger()
    assert led2.spent("r", "day") == 1.0
    assert led2.lookup("r", "q", 1).answer == first.answer


def test_concurrent_writers_never_overspend(new_ledger):
    """32 threads (two ledger objects on one file, as two proxies would) race for a budget of 5."""
    leds = [new_ledger(), new_ledger()]
    ok, refused = [], []

    def worker(i):
        try:
            s = _charge(leds[i % 2], f"q{i}", budget=5.0)
            ok.append(s.charged)
        except BudgetExceeded:
            refused.append(i)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(ok) == 5 and len(refused) == 27
    assert leds[0].spent("r", "day") == 5.0 and leds[0].integrity_check()


def test_period_keys():
    assert period_key("day", 0) == "1970-01-01"
    assert period_key("month", 0) == "1970-01"
    assert period_key("week", 0) == "1970-W01"
    assert period_key("never", 0) == "all"


# -- reserve / record / cancel: the DP pipeline's split (charge fsynced during the scan) --


def _reserve(led, eps=1.0, budget=3.0, role="r"):
    return led.reserve(role=role, epsilon=eps, budget=budget, period="day")


def _record(led, res, key, dv=1):
    return led.record(
        res,
        key=key,
        data_version=dv,
        canonical=key,
        statement="SELECT …",
        mechanism="m",
        answer={"values": [[key]]},
    )


def test_reserve_charges_before_the_answer_and_record_consumes_it(new_ledger):
    led = new_ledger()
    res = _reserve(led)
    assert led.spent("r", "day") == 1.0 and res.spent_nano == 1_000_000_000
    assert len(led.open_reservations()) == 1 and led.integrity_check()
    stored = _record(led, res, "q1")
    assert stored.charged and stored.epsilon == 1.0 and res.state == "recorded"
    assert led.open_reservations() == [] and led.spent("r", "day") == 1.0
    assert led.lookup("r", "q1", 1).answer == {"values": [["q1"]]} and led.integrity_check()
    assert _record(led, res, "q1") is None  # settled exactly once


def test_reserve_refuses_over_budget_and_writes_nothing(new_ledger):
    led = new_ledger()
    for _ in range(3):
        _reserve(led)
    with pytest.raises(BudgetExceeded) as e:
        _reserve(led)
    assert e.value.remaining == 0.0 and led.spent("r", "day") == 3.0
    assert len(led.open_reservations()) == 3
    with pytest.raises(BudgetExceeded):
        _reserve(led, eps=4.0, budget=3.0, role="fresh")  # a first charge larger than the budget
    assert led.spent("fresh", "day") == 0.0


def test_cancel_refunds_and_wins_or_loses_against_record(new_ledger):
    led = new_ledger()
    res = _reserve(led)
    led.cancel(res)
    assert led.spent("r", "day") == 0.0 and res.state == "refunded"
    assert _record(led, res, "q") is None and led.lookup("r", "q", 1) is None  # never sent
    done = _reserve(led)
    _record(led, done, "q2")
    led.cancel(done)  # after record: no refund
    assert led.spent("r", "day") == 1.0 and led.integrity_check()


def test_spend_keeps_the_charge_with_no_answer(new_ledger):
    """A scan that started and then timed out / was cancelled: charged, nothing
    released, so a repeat finds no release and is charged again."""
    led = new_ledger()
    res = _reserve(led)
    led.spend(res, "timeout")
    assert res.state == "spent" and led.spent("r", "day") == 1.0
    assert led.open_reservations() == [] and led.lookup("r", "q", 1) is None
    assert [(u["epsilon"], u["reason"]) for u in led.unreleased("r")] == [(1.0, "timeout")]
    assert _record(led, res, "q") is None  # a late answer is never stored
    led.cancel(res)  # nor refunded afterwards
    assert led.spent("r", "day") == 1.0 and led.integrity_check()
    assert led.charge_unreleased(role="r", epsilon=1.0, budget=3.0, period="day")
    assert led.spent("r", "day") == 2.0 and len(led.unreleased()) == 2 and led.integrity_check()
    assert led.charge_unreleased(role="r", epsilon=1.0, budget=3.0, period="day")
    assert not led.charge_unreleased(role="r", epsilon=1.0, budget=3.0, period="day")  # never overspends
    assert led.spent("r", "day") == 3.0 and led.integrity_check()


def test_concurrent_twin_gets_the_first_answer_and_its_charge_back(new_ledger):
    led = new_ledger()
    a, b = _reserve(led), _reserve(led)
    assert led.spent("r", "day") == 2.0
    first = _record(led, a, "same")
    twin = led.record(
        b,
        key="same",
        data_version=1,
        canonical="same",
        statement="SELECT …",
        mechanism="m",
        answer={"values": [["other draw"]]},
    )
    assert not twin.charged and twin.answer == first.answer and b.state == "refunded"
    assert led.spent("r", "day") == 1.0 and led.integrity_check()


def test_a_crash_between_reserve_and_record_stays_charged(new_ledger):
    led = new_ledger()
    _reserve(led)
    led.close()  # no record: as if killed after the fsync
    led = new_ledger()
    assert led.spent("r", "day") == 1.0 and led.integrity_check()
    assert [r["epsilon"] for r in led.open_reservations()] == [1.0]


def test_reserve_soon_and_cancel_soon_run_in_order_on_the_writer(new_ledger):
    led = new_ledger()
    fut = led.reserve_soon(role="r", epsilon=1.0, budget=3.0, period="day")
    led.cancel_soon(fut).result(timeout=10)
    assert fut.result().state == "refunded" and led.spent("r", "day") == 0.0
    over = led.reserve_soon(role="r", epsilon=5.0, budget=3.0, period="day")
    led.cancel_soon(over).result(timeout=10)  # a refused reservation: nothing to refund
    assert isinstance(over.exception(), BudgetExceeded)
    led.close()


def test_concurrent_reservations_never_overspend(new_ledger):
    """32 threads on two ledger objects (two proxies) reserve-then-record against a budget of 5."""
    leds = [new_ledger(), new_ledger()]
    ok, refused = [], []

    def worker(i):
        led = leds[i % 2]
        try:
            res = _reserve(led, budget=5.0)
        except BudgetExceeded:
            refused.append(i)
            return
        if i % 3 == 0:
            led.cancel(res)  # a failed scan gives its charge back
        else:
            ok.append(_record(led, res, f"q{i}").charged)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(ok) + len(refused) + sum(1 for i in range(32) if i % 3 == 0 and i not in refused) == 32
    assert leds[0].spent("r", "day") == float(len(ok)) <= 5.0 and leds[0].integrity_check()
    assert leds[0].open_reservations() == []


def test_snapshot_is_data_version_spend_and_release_in_one_read(new_ledger):
    led = new_ledger()
    assert led.snapshot("r", "q", "day") == (1, 0.0, None)
    first = _charge(led, "q")
    dv, spent, stored = led.snapshot("r", "q", "day")
    assert (dv, spent) == (1, 1.0) and stored.answer == first.answer and not stored.charged
    assert led.snapshot("other", "q", "day") == (1, 0.0, None)  # per role
    led.advance_data_version()
    assert led.snapshot("r", "q", "day") == (2, 1.0, None)  # a new data version: no release


def test_a_postgres_ledger_that_goes_away_fails_clearly_and_reconnects(tmp_path):
    """A shared ledger server restarting: calls raise LedgerUnavailable (nothing is
    charged by the failed call), and the next call after it is back reconnects."""
    from proxy.stores.ledger import LedgerUnavailable
    from support.pg import TempPostgres

    pg = TempPostgres().start()
    try:
        led = Ledger(None, dsn=pg.dsn, schema="outage")
        _record(led, _reserve(led), "before")
        pg.kill_and_wait()
        with pytest.raises(LedgerUnavailable):
            _reserve(led)
        with pytest.raises(LedgerUnavailable):
            led.snapshot("r", "q", "day")
        pg.resume()
        _record(led, _reserve(led), "after")
        assert led.spent("r", "day") == 2.0 and led.integrity_check()  # no charge lost, none added
        assert led.lookup("r", "after", 1) is not None
        # the record before the crash was committed synchronously: the crash kept it
        assert led.lookup("r", "before", 1) is not None and led.open_reservations() == []
        led.close()
    finally:
        pg.stop()
