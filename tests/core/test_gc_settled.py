"""A started gateway settles the cyclic garbage collector (issue 21): what exists is frozen
out of its scans (a full collection no longer walks the service's ≈140,000 objects), and
closing it unfreezes them."""
from __future__ import annotations

import asyncio
import gc

from config import parse_config
from proxy.gateway import Gateway
from support.service import make_config


def test_a_started_gateway_settles_the_collector(tmp_path):
    gw = Gateway(parse_config(make_config({"kind": "duckdb", "path": str(tmp_path / "d.duckdb")})),
                 tmp_path / "state")
    try:
        asyncio.run(gw.start())
        assert gc.get_freeze_count() > 0
    finally:
        asyncio.run(gw.close())
    assert gc.get_freeze_count() == 0
