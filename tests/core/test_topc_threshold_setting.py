"""``SET dpgate.topc_threshold``: a non-finite or non-numeric value is refused (22023) and
changes nothing; any finite number, or DEFAULT, is accepted."""

from __future__ import annotations

import pytest

from proxy.pipeline.statements import SessionState
from rewriter.errors import Refusal


@pytest.mark.parametrize(
    "value", ["'nan'", "'NaN'", "'-inf'", "'inf'", "'Infinity'", "'-Infinity'", "'abc'", "'1e999'"]
)
def test_set_topc_threshold_refuses_non_finite(value):
    s = SessionState("u", "demo", {})
    s.match("SET dpgate.topc_threshold = 20")
    with pytest.raises(Refusal) as e:
        s.match(f"SET dpgate.topc_threshold = {value}")
    assert e.value.sqlstate == "22023" and "dpgate.topc_threshold" in e.value.message
    assert s.settings["dpgate.topc_threshold"] == "20"  # a refused SET changes nothing


def test_set_topc_threshold_accepts_numbers():
    s = SessionState("u", "demo", {})
    for v in ("20", "'2.5'", "-3", "'1e3'"):
        assert s.match(f"SET dpgate.topc_threshold = {v}")[0] == "SET"
    assert s.match("SET dpgate.topc_threshold = DEFAULT")[0] == "SET"  # back to unset
