"""Serving code draws from the CSPRNG: the gateway's default source is the system
one, and released noise differs between two fresh gateways on the same data."""
from __future__ import annotations

from mechanisms import SystemRandomSource
from proxy.release import noisy_answer
from rewriter import build_plan, parse


def test_gateway_uses_system_csprng(tmp_path):
    from proxy.gateway import Gateway
    from support.service import make_config
    from config import parse_config
    cfg = parse_config(make_config({"kind": "duckdb", "path": str(tmp_path / "d.duckdb")}))
    gw = Gateway(cfg, tmp_path / "state")
    assert isinstance(gw.source, SystemRandomSource)
    gw.ledger.close()


def test_noise_is_not_reproducible_without_a_seed():
    from support.service import make_config
    from config import parse_config
    cfg = parse_config(make_config())
    plan = build_plan(parse("SELECT race, COUNT(*), SUM(income) FROM pums GROUP BY race"), cfg)
    cells = [(r, 100, 1_000_000.0) for r in range(1, 7)]
    a = noisy_answer(plan, cells, 1.0, SystemRandomSource())
    b = noisy_answer(plan, cells, 1.0, SystemRandomSource())
    assert a["values"] != b["values"]      # 12 independent draws; equal with probability < 1e-9
