"""Local (metric-LDP) tables — placeholder until the seed-002 integration lands."""
from __future__ import annotations

from .wire.api import SqlError


async def answer_local(conn, sql: str, params: list):
    raise SqlError("0A000", "queries on local (metric-LDP) tables are not available yet")


async def insert_local(conn, sql: str, params: list):
    raise SqlError("42501", "INSERT is only accepted into local (metric-LDP) tables, which are not "
                   "available yet; dpgate is otherwise read-only")
