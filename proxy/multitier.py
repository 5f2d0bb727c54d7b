"""Multi-tier release — placeholder until the seed-000 integration lands."""
from __future__ import annotations

from .wire.api import SqlError


async def release_multitier(conn, plan, cells, tier, key, data_version, sql):
    raise SqlError("0A000", "multi-tier ladders are not available yet")
