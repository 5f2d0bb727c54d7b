"""A toy Handler used by the wire tests (no SQL engine, keyword-driven)."""

from __future__ import annotations

import asyncio
import re
from decimal import Decimal

from proxy.wire import types as t
from proxy.wire.api import Column, Description, Result, SqlError
from proxy.wire.auth import StaticAuthenticator, make_verifier

CASTS = {
    "int": t.INT4,
    "int4": t.INT4,
    "int2": t.INT2,
    "int8": t.INT8,
    "bigint": t.INT8,
    "float8": t.FLOAT8,
    "float4": t.FLOAT4,
    "numeric": t.NUMERIC,
    "text": t.TEXT,
    "bool": t.BOOL,
    "date": t.DATE,
    "varchar": t.VARCHAR,
}
PARAM = re.compile(r"\$(\d+)(?:::(\w+))?")
PASSWORD = "s3cret"
VERIFIER = make_verifier(PASSWORD)


def authenticator() -> StaticAuthenticator:
    return StaticAuthenticator(users={"alice": VERIFIER}, trust={"trusty"})


class ToyHandler:
    instances: list[ToyHandler] = []

    def __init__(self, user: str, database: str, params: dict[str, str]):
        self.user, self.database, self.params = user, database, params
        self._cancel = asyncio.Event()
        self.closed = False
        ToyHandler.instances.append(self)

    def split(self, sql: str) -> list[str]:
        out = []
        for part in sql.split(";"):
            part = re.sub(r"--[^\n]*", "", part).strip()
            if part:
                out.append(part)
        return out

    def _params(self, sql: str, oids: list[int]) -> list[int]:
        n = max([int(g) for g, _ in PARAM.findall(sql)] + [len(oids)])
        types = [oids[i] if i < len(oids) else 0 for i in range(n)]
        for num, cast in PARAM.findall(sql):
            i = int(num) - 1
            if not types[i]:
                types[i] = CASTS.get(cast, 0)
        return [o or t.TEXT for o in types]

    def _columns(self, sql: str, oids: list[int]) -> list[Column] | None:
        low = sql.lower()
        if PARAM.search(sql):
            return [Column(f"p{i + 1}", o) for i, o in enumerate(self._params(sql, oids))]
        if low.startswith("rows"):
            return [
                Column("i", t.INT4),
                Column("s", t.TEXT),
                Column("f", t.FLOAT8),
                Column("n", t.NUMERIC),
                Column("b", t.BOOL),
                Column("big", t.INT8),
            ]
        if low.startswith(("select", "notice", "sleep", "nap")):
            return [Column("?column?", t.INT4)]
        return None

    async def describe(self, sql: str, param_type_oids: list[int]) -> Description:
        if "fail" in sql.lower():
            raise SqlError("42P01", 'relation "fail" does not exist', detail="toy detail", hint="toy hint")
        return Description(self._params(sql, param_type_oids), self._columns(sql, param_type_oids))

    async def execute(self, sql: str, params: list[object]) -> Result:
        low = sql.lower()
        first = low.split()[0]
        if "fail" in low:
            raise SqlError("42P01", 'relation "fail" does not exist', detail="toy detail", hint="toy hint")
        if "boom" in low:
            raise RuntimeError("unexpected")
        if first in ("begin", "commit", "rollback"):
            return Result(first.upper())
        if first == "set":
            name, _, value = sql[3:].partition("=")
            return Result("SET", parameter_status={name.strip(): value.strip().strip("'")})
        if first == "sleep":
            self._cancel.clear()
            try:
                await asyncio.wait_for(self._cancel.wait(), 10)
            except TimeoutError:
                return Result("SELECT 1", [Column("?column?", t.INT4)], [(1,)])
            raise SqlError("57014", "canceling statement due to user request")
        if first == "nap":  # a statement that takes the given seconds
            await asyncio.sleep(float(low.split()[1]))
            return Result("SELECT 1", [Column("?column?", t.INT4)], [(1,)])
        if first == "rows":
            n = int(low.split()[1])
            rows = [(i, f"s{i}", i / 4, Decimal(i) / 8, i % 2 == 0, i * 10**12) for i in range(n)]
            return Result(f"SELECT {n}", self._columns(sql, []), rows)
        if PARAM.search(sql):
            return Result("SELECT 1", self._columns(sql, []), [tuple(params)])
        if first == "notice":
            return Result("SELECT 1", [Column("?column?", t.INT4)], [(1,)], notices=["hello from toy"])
        if first == "select":
            return Result("SELECT 1", [Column("?column?", t.INT4)], [(1,)])
        return Result(first.upper())

    def cancel(self) -> None:
        self._cancel.set()

    async def close(self) -> None:
        self.closed = True


async def factory(user: str, database: str, params: dict[str, str]) -> ToyHandler:
    if database == "nodb":
        raise SqlError("3D000", f'database "{database}" does not exist')
    return ToyHandler(user, database, params)
