"""The ledger's keyed MAC: HMAC-SHA256 over each spend row, each stored release and each
multi-tier ladder's row.

A ledger row changed outside dpgate — a spend lowered to give budget back, one digit
of a stored answer changed — no longer matches its MAC, and the ledger refuses that
row (:class:`proxy.stores.errors.LedgerDamaged`, XX001): a tampered answer is never
returned, a lowered spend never charged from. The key (32 random bytes, hex) is kept
apart from the rows, in a file of its own (mode 0600) created with the ledger:
``<state dir>/ledger.key`` beside ``ledger.sqlite3``; for a Postgres ledger the key
file lives in each proxy's state dir, and proxies sharing one ledger need the same
file (copy it). The ledger stores only a check value (the MAC of a fixed text), so
a wrong or missing key is found when the ledger is opened.

The message of a MAC is its fields, each preceded by its length, so no two rows
share one.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from pathlib import Path

KEY_BYTES = 32
_CHECK = "dpgate ledger key check"


def read_key(path: Path) -> bytes | None:
    """The key in ``path``, or None if there is no such file."""
    try:
        text = Path(path).read_text().strip()
    except FileNotFoundError:
        return None
    try:
        key = bytes.fromhex(text)
    except ValueError:
        key = b""
    if len(key) != KEY_BYTES:
        raise ValueError(f"{path} is not a ledger key ({KEY_BYTES} bytes, hex)")
    return key


def create_key(path: Path) -> bytes:
    """A new key in ``path`` (0600, fsync-ed), or the one another process created first."""
    path = Path(path)
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    key = os.urandom(KEY_BYTES)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        theirs = read_key(path)
        if theirs is None:  # created and removed again between the two calls
            raise FileNotFoundError(f"{path} vanished while the ledger key was being created") from None
        return theirs
    try:
        os.write(fd, key.hex().encode() + b"\n")
        os.fsync(fd)
    finally:
        os.close(fd)
    return key


def _message(fields) -> bytes:
    """Each field as text preceded by its length in characters and a colon: no two
    different rows give one message."""
    return "".join([f"{len(t)}:{t}" for t in map(str, fields)]).encode()


def _unit(unit: str) -> tuple[str, ...]:
    """The unit as a last field of a message, absent for ε (the unit of every row written before
    rows named one): an ε row's message is unchanged, a ρ row's has one field more."""
    return () if unit == "eps" else ("unit", unit)


class Mac:
    """The MACs of one key."""

    def __init__(self, key: bytes) -> None:
        # HMAC-SHA256 (RFC 2104) with its two keyed states computed once: each MAC is then
        # two copies and three short hashes (a key shorter than the block is zero-padded)
        k = key.ljust(64, b"\0")
        self._inner = hashlib.sha256(bytes(b ^ 0x36 for b in k))
        self._outer = hashlib.sha256(bytes(b ^ 0x5C for b in k))

    def _mac(self, *fields) -> str:
        inner = self._inner.copy()
        inner.update(_message(fields))
        outer = self._outer.copy()
        outer.update(inner.digest())
        return outer.hexdigest()

    def check_value(self) -> str:
        """What the ledger keeps to recognise its key."""
        return self._mac(_CHECK)

    def spend(self, role: str, period: str, spent_nano: int, delta_femto: int, unit: str = "eps") -> str:
        """A spend row: its amount in nano-units of ``unit`` (ε, or ρ of a zCDP tier); a row in ε
        has the message it had before amounts named their unit, so its MAC still holds."""
        return self._mac("spend", role, period, int(spent_nano), int(delta_femto), *_unit(unit))

    def release(
        self,
        role: str,
        key: str,
        data_version: int,
        epsilon_nano: int,
        delta_femto: int,
        mechanism: str,
        answer: str,
        period: str,
        unit: str = "eps",
    ) -> str:
        """A stored release: its identity, charge (nano-units of ``unit``, as :meth:`spend`) and text."""
        return self._mac(
            "release",
            role,
            key,
            int(data_version),
            int(epsilon_nano),
            int(delta_femto),
            mechanism,
            answer,
            period,
            *_unit(unit),
        )

    def bound(self, data_version: int, table: str, field: str, value: str, epsilon_nano: int) -> str:
        """A bound dpgate chose (``"auto"``): its identity, value and ε."""
        return self._mac("bound", int(data_version), table, field, value, int(epsilon_nano))

    def derived(self, purpose: str) -> str:
        """A secret for ``purpose`` derived from the key: never stored in the ledger nor
        sent to any database, so no statement log can hold it."""
        return self._mac("derived secret", purpose)

    def ladder(
        self,
        ladder: str,
        qkey: str,
        data_version: int,
        canonical: str,
        statement: str,
        version: str,
        levels: str,
        body: str,
    ) -> str:
        """A multi-tier ladder's row (:mod:`proxy.stores.ladder_store`): its identity and the
        stored texts of its ε set, levels and raw chain values."""
        return self._mac(
            "ladder", ladder, qkey, int(data_version), canonical, statement, version, levels, body
        )

    @staticmethod
    def same(a: str | None, b: str) -> bool:
        return a is not None and hmac.compare_digest(a, b)
