"""Errors of the stores, below both the SQLite code (:mod:`.ledger`, :mod:`.ladder_store`)
and the Postgres connection that runs it (:mod:`.pgstore`)."""
from __future__ import annotations


class LedgerUnavailable(Exception):
    """The ledger's database cannot be reached (a shared Postgres ledger that is
    down): the statement fails, no answer is released."""

    sqlstate = "08006"
    line: str | None = None        # the client's one-line message (None: the generic one)


class LedgerFault(LedgerUnavailable):
    """The ledger cannot write: disk full (53100) or locked too long (55P03)."""

    def __init__(self, sqlstate: str, line: str) -> None:
        super().__init__(line)
        self.sqlstate, self.line = sqlstate, line


class LedgerDamaged(LedgerUnavailable):
    """A ledger row fails its keyed MAC (altered outside dpgate), or the MAC key is
    missing or not the ledger's: that row is never used (a stored answer is not
    returned, a spend is not charged from), and ``dpgate serve`` does not start."""

    sqlstate = "XX001"

    def __init__(self, line: str) -> None:
        super().__init__(line)
        self.line = line
