"""The no-DP baseline for ``bench.core``: the same Postgres wire server
(proxy/wire) and the same DuckDB backend (worker threads, warm cursors) that
dpgate uses, but each statement goes straight to DuckDB and its rows straight
back — no parse, plan, noise, ledger or NOTICE. What dpgate costs on top of
this, per query, is its DP overhead.

    python -m bench.plainwire --db FILE --port N      (benchmarks only: it returns raw rows)

Prints ``{"fingerprint": …, "backend_ms": …}`` per statement on stdout (after the
reply is written), keyed like dpgate's statement log.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import sys

_OIDS = {str: 25, int: 20, float: 701, bool: 16}


class _Trust:
    def method(self, user: str) -> str:
        return "trust"

    def scram_verifier(self, user: str):
        return None


class _Handler:
    def __init__(self, backend) -> None:
        self.backend = backend

    def split(self, sql: str) -> list[str]:
        return [sql.strip().rstrip(";")] if sql.strip() else []

    async def describe(self, sql: str, param_type_oids: list[int]):
        from proxy.wire.api import SqlError

        raise SqlError("0A000", "the baseline server speaks the simple protocol only")

    async def execute(self, sql: str, params: list[object]):
        from proxy.gateway.statement_log import statement_fingerprint
        from proxy.wire.api import Column, Result

        timing: dict = {}
        rows = await self.backend.fetch(sql, timing=timing)
        cols = [Column(f"c{i}", _OIDS.get(type(v), 25)) for i, v in enumerate(rows[0])] if rows else []
        asyncio.get_running_loop().call_soon(
            functools.partial(_log, statement_fingerprint(sql), timing.get("backend_ms"))
        )
        return Result(f"SELECT {len(rows)}", cols, rows)

    def cancel(self) -> None:
        return None

    async def close(self) -> None:
        return None


def _log(fp: str, backend_ms) -> None:
    print(json.dumps({"fingerprint": fp, "backend_ms": backend_ms}), flush=True)


async def _serve(db: str, port: int) -> None:
    from proxy.backends import DuckDBBackend
    from proxy.wire.server import Server

    backend = DuckDBBackend(db)

    async def factory(user, database, params):
        return _Handler(backend)

    server = Server(factory, authenticator=_Trust(), host="127.0.0.1", port=port)
    await server.start()
    print("ready", flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        await backend.close()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--db", required=True)
    ap.add_argument("--port", type=int, required=True)
    args = ap.parse_args(argv)
    try:
        asyncio.run(_serve(args.db, args.port))
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
