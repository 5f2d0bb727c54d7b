"""Per-record DP tables — placeholder until the seed-003 integration lands."""
from __future__ import annotations

from .wire.api import SqlError


async def answer_per_record(conn, sql: str, params: list):
    raise SqlError("0A000", "queries on per-record DP tables are not available yet")
