"""``$1::interval`` where an interval literal is allowed: the bound value (text in Postgres's
interval form, or a client's timedelta sent as interval, text or binary) is read before the
plan decides anything, so the statement is the one the literal ``INTERVAL '…'`` gives (its
release: the literal statement afterwards is a free repeat). Describe types the parameter
interval (1186), so asyncpg binds a ``timedelta``."""

from __future__ import annotations

import asyncio
import datetime as dt

import asyncpg
import psycopg
import pytest

from support.service import ask

from .outcomes import record
from .test_copy import charged

SQL = (
    "SELECT date_trunc('month', ts) AS month, COUNT(*) AS n FROM purchases "
    "WHERE ts >= %s::timestamp - %s::interval GROUP BY 1 ORDER BY 1"
)


def literal(interval: str) -> str:
    return SQL.replace("%s::timestamp", "TIMESTAMP '2025-12-31'", 1).replace(
        "%s::interval", f"INTERVAL '{interval}'"
    )


@pytest.mark.parametrize(
    ("value", "binary", "as_literal"),
    [
        ("3 months", False, "3 months"),
        (dt.timedelta(days=61), False, "61 days"),  # psycopg sends '61 days 0:00:00' typed interval
        (dt.timedelta(days=62), True, "62 days"),  # binary: (µs, days, months)
        ("1 year 2 mons", False, "14 months"),
    ],
)
def test_psycopg_interval_parameter_is_the_literal_release(svc, value, binary, as_literal):
    with psycopg.connect(svc.dsn(), autocommit=True) as c:
        rows = c.cursor(binary=binary).execute(SQL, ("2025-12-31", value)).fetchall()
    hand, notes = ask(svc, literal(as_literal))
    assert charged(notes) == 0 and [tuple(r) for r in hand] == rows
    record("psycopg 3", svc, "$1::interval")


def test_asyncpg_binds_a_timedelta(svc):
    async def main():
        conn = await asyncpg.connect(svc.url())
        try:
            st = await conn.prepare(SQL.replace("%s", "$1", 1).replace("%s", "$2", 1))
            types = [t.name for t in st.get_parameters()]
            return types, [tuple(r) for r in await st.fetch(dt.datetime(2025, 12, 31), dt.timedelta(days=45))]
        finally:
            await conn.close()

    types, rows = asyncio.run(main())
    assert types == ["timestamp", "interval"]
    hand, notes = ask(svc, literal("45 days"))
    assert charged(notes) == 0 and [tuple(r) for r in hand] == rows
    record("asyncpg", svc, "$1::interval as a timedelta")


@pytest.mark.parametrize(
    ("value", "says"),
    [("3 fortnights", "fortnights"), (dt.timedelta(minutes=5), "whole hours"), ("soon", "not understood")],
)
def test_an_interval_it_cannot_read_is_refused(svc, value, says):
    before = svc.gw.ledger.spent("analyst", "day")
    with psycopg.connect(svc.dsn(), autocommit=True) as c:
        with pytest.raises(psycopg.errors.FeatureNotSupported) as e:
            c.execute(SQL, ("2025-12-31", value))
    assert says in str(e.value)
    assert svc.gw.ledger.spent("analyst", "day") == before
