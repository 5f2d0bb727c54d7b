"""Errors of the stores, below both the SQLite code (:mod:`.ledger`, :mod:`.ladder_store`)
and the Postgres connection that runs it (:mod:`.pgstore`)."""

from __future__ import annotations

import errno
import os
import sqlite3
from pathlib import Path


class LedgerUnavailable(Exception):
    """The ledger's database cannot be reached (a shared Postgres ledger that is
    down): the statement fails, no answer is released."""

    sqlstate = "08006"
    line: str | None = None  # the client's one-line message (None: the generic one)


class LedgerFault(LedgerUnavailable):
    """The ledger cannot write: disk full or read-only (53100) or locked too long (55P03)."""

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


# Why a write to the state dir failed, for the errors that are the file system's state
# (space or a read-only mount), not the ledger's: they pass when the disk does.
NO_WRITE = {
    errno.ENOSPC: "disk full",
    errno.EDQUOT: "disk quota exceeded",
    errno.EROFS: "read-only file system",
    errno.EACCES: "permission denied",
}
_SQLITE_NO_WRITE = {13: "disk full", 8: "read-only file system"}  # SQLITE_FULL, SQLITE_READONLY
_SQLITE_MAYBE = (10, 14)  # SQLITE_IOERR, SQLITE_CANTOPEN: ask the file system why


def no_write_reason(e: BaseException, path: str | Path | None) -> str | None:
    """``disk full`` / ``read-only file system`` / … when ``e`` is a write to ``path`` that the
    file system refused for lack of space or write access; None for any other error."""
    if isinstance(e, OSError):
        return NO_WRITE.get(e.errno) if e.errno is not None else None
    if not isinstance(e, sqlite3.Error) or path is None:
        return None
    code = (getattr(e, "sqlite_errorcode", None) or 0) & 0xFF
    if code in _SQLITE_NO_WRITE:
        return _SQLITE_NO_WRITE[code]
    if "database or disk is full" in str(e):  # SQLITE_FULL's own text
        return "disk full"
    if "attempt to write a readonly database" in str(e):  # SQLITE_READONLY's
        return "read-only file system"
    if code in _SQLITE_MAYBE:
        return file_system_state(Path(path).parent)
    return None


def file_system_state(directory: Path) -> str | None:
    """``read-only file system`` or ``disk full`` if ``directory``'s file system is so."""
    try:
        st = os.statvfs(directory)
    except OSError:
        return None
    if st.f_flag & os.ST_RDONLY:
        return "read-only file system"
    if st.f_bavail == 0 or st.f_favail == 0:
        return "disk full"
    return None


def cannot_write(where: str | Path, reason: str) -> LedgerFault:
    """The 53100 of a ledger write the file system refused: nothing is released without its
    record; the service goes on, and answers again once the disk has room (or is writable)."""
    fix = (
        "make it writable"
        if reason in ("read-only file system", "permission denied")
        else "free space on its disk"
    )
    return LedgerFault(
        "53100", f"the privacy ledger cannot write: {reason} ({where}); no answer was released; {fix}"
    )
