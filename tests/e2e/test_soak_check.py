"""bench/soak.py's end-of-run check: it must see an overspend and a broken ledger."""

from __future__ import annotations

from bench.soak import ledger_check
from proxy.stores.ledger import NANO, Ledger


def test_ledger_check_sees_overspend_and_broken_integrity(tmp_path):
    path = tmp_path / "ledger.sqlite3"
    led = Ledger(path)
    for i in range(3):
        led.charge_and_record(
            role="edge0",
            key=f"k{i}",
            data_version=1,
            epsilon=1.0,
            budget=3.0,
            period="day",
            canonical="c",
            statement="s",
            mechanism="laplace",
            answer={},
        )
    led.close()
    assert ledger_check(path, {"edge0": 3.0}) == (True, [])
    ok, over = ledger_check(path, {"edge0": 2.5})  # Σ ε 3 > 2.5
    assert ok and len(over) == 1 and over[0].startswith("edge0 ")
    led = Ledger(path)
    led._db.execute("UPDATE spend SET spent_nano = spent_nano + ?", (NANO,))  # a charge with no release
    led.close()
    ok, over = ledger_check(path, {"edge0": 10.0})
    assert not ok and over == []
