"""PostgreSQL v3 wire protocol: sans-IO codec, session state machine, asyncio server.

Knows nothing about SQL semantics or differential privacy; see :mod:`proxy.wire.api`
for the handler interface the orchestrator implements.
"""

from .api import Authenticator, Column, Description, Handler, HandlerFactory, Result, SqlError

__all__ = ["Authenticator", "Column", "Description", "Handler", "HandlerFactory", "Result", "SqlError"]
