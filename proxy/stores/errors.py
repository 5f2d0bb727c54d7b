"""Errors of the stores, below both the SQLite code (:mod:`.ledger`, :mod:`.ladder_store`)
and the Postgres connection that runs it (:mod:`.pgstore`)."""
from __future__ import annotations


class LedgerUnavailable(Exception):
    """The ledger's database cannot be reached (a shared Postgres ledger that is
    down): the statement fails, no answer is released."""
