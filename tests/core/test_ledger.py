"""The budget ledger / release store: atomic charge, repeat is free, no overspend
under concurrency, durable across reopen."""
from __future__ import annotations

import threading

import pytest

from proxy.ledger import BudgetExceeded, Ledger, period_key


def _charge(ledger, key, eps=1.0, budget=3.0, role="r", dv=1):
    return ledger.charge_and_record(role=role, key=key, data_version=dv, epsilon=eps, budget=budget,
                                    period="day", canonical=key, statement="SELECT …",
                                    mechanism="m", answer={"values": [[key]]})


def test_charge_repeat_and_refuse(tmp_path):
    led = Ledger(tmp_path / "l.db")
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
    assert led.lookup("r", "q4", 1) is None          # a refused query leaves nothing behind
    assert _charge(led, "q2").answer == {"values": [["q2"]]}   # repeats still served at zero budget
    assert led.integrity_check()


def test_exact_accounting_no_float_drift(tmp_path):
    led = Ledger(tmp_path / "l.db")
    for i in range(10):       # 10 × 0.1 must fit a budget of exactly 1.0
        _charge(led, f"q{i}", eps=0.1, budget=1.0)
    assert led.spent("r", "day") == 1.0
    with pytest.raises(BudgetExceeded):
        _charge(led, "q10", eps=0.1, budget=1.0)


def test_data_version_starts_new_releases(tmp_path):
    led = Ledger(tmp_path / "l.db")
    _charge(led, "q", budget=10)
    assert led.advance_data_version() == 2
    assert led.lookup("r", "q", 2) is None
    assert _charge(led, "q", budget=10, dv=2).charged


def test_durable_across_reopen(tmp_path):
    led = Ledger(tmp_path / "l.db")
    first = _charge(led, "q")
    led.close()
    led2 = Ledger(tmp_path / "l.db")
    assert led2.spent("r", "day") == 1.0
    assert led2.lookup("r", "q", 1).answer == first.answer


def test_concurrent_writers_never_overspend(tmp_path):
    """32 threads (two ledger objects on one file, as two proxies would) race for a budget of 5."""
    leds = [Ledger(tmp_path / "l.db"), Ledger(tmp_path / "l.db")]
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
