"""The ledger is never silently new.

A ledger carries an identity written once: a random ledger id and its creation
time, stored in three places —

* a marker row in the ledger itself (``meta`` key ``ledger_id``; SQLite file or
  Postgres schema),
* a small file in the state dir, ``ledger.id`` (JSON: id, created, and the
  spend high-water mark last seen),
* for a backend whose data lives in the state dir (the embedded DuckDB file), a row
  beside the data (``Backend.ledger_marker``: DuckDB's ``dpgate_ledger_identity`` table).

The high-water mark is the ε settled for stored releases (total spend minus
open reservations, in nano-ε) and the largest release id: both only grow
(a refund lowers a spend and its reservation together), so a ledger whose
marks went down was truncated or replaced by an older copy.

:func:`verify_at_start` runs when a proxy (or ``dpgate ledger check``) opens
the ledger: a first start with no state at all creates everything; a ledger
that is missing, empty, replaced, without its marker or with another id than
the state dir or the DuckDB file remember raises :class:`LedgerLost` — one
line saying what happened and how to recover. While serving,
:class:`Guard` is called before each charge and each release look-up: it
compares the SQLite file's (st_dev, st_ino) with the one opened (a stat, every
call) and re-reads the marker and the marks every ``interval`` seconds; once
lost, the proxy answers no DP statement until it is restarted.

``dpgate ledger init --i-know`` (:func:`init_identity`) writes a new identity
into whatever ledger is there (empty, or a restored older copy) and logs it.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import uuid
from pathlib import Path

from .errors import NO_WRITE, LedgerUnavailable, cannot_write
from .ledger import open_ledger
from .ledger_store import store_of

log = logging.getLogger("dpgate.ledger")

ID_FILE = "ledger.id"
RECOVER = (
    "restore the ledger file (and its -wal) from a backup, or run `dpgate ledger init --i-know` "
    "to start afresh with a new ledger identity"
)


class LedgerLost(LedgerUnavailable):
    """The ledger is not the one this state dir charged into: no answer is released."""

    sqlstate = "55000"

    def __init__(self, what: str) -> None:
        super().__init__(f"ledger integrity: {what}; {RECOVER}")
        self.line = str(self)


def where(ledger) -> str:
    return str(ledger.path) if ledger.dsn is None else f"Postgres ledger schema {ledger.schema!r}"


# -- the three markers ----------------------------------------------------------
def ledger_marker(ledger) -> dict | None:
    """The identity row of the ledger (None: no marker)."""
    with ledger._rlock:
        row = ledger._rdb.execute("SELECT value FROM meta WHERE key='ledger_id'").fetchone()
    return json.loads(row[0]) if row else None


def marks(ledger) -> tuple[int, int, int]:
    """(nano-ε ever charged, settled nano-ε, largest release id): the high-water
    marks. The first is written with each charge's fsync and is the one kept in
    ``ledger.id``; the other two (settled = spend minus open reservations, which a
    refund lowers together) are watched while serving."""
    with ledger._rlock:
        db = ledger._rdb
        # one statement: one snapshot (a reserve between two reads would look like a drop)
        charged, settled, top = db.execute(
            "SELECT (SELECT COALESCE(MAX(CAST(value AS BIGINT)),0) FROM meta WHERE key='charged_nano'), "
            "(SELECT COALESCE(SUM(spent_nano),0) FROM spend) - "
            "(SELECT COALESCE(SUM(epsilon_nano),0) FROM reservations), "
            "(SELECT COALESCE(MAX(id),0) FROM releases)"
        ).fetchone()
    return int(charged), int(settled), int(top)


def has_history(ledger) -> bool:
    with ledger._rlock:
        db = ledger._rdb
        return any(db.execute(f"SELECT 1 FROM {t} LIMIT 1").fetchone() for t in ("spend", "releases"))


def read_state_file(state_dir: Path) -> dict | None:
    p = Path(state_dir) / ID_FILE
    try:
        return json.loads(p.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        raise LedgerLost(f"{p} is unreadable") from None


def write_state_file(state_dir: Path, ident: dict, hwm: tuple) -> None:
    p = Path(state_dir) / ID_FILE
    p.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp = p.with_name(f".{ID_FILE}.{os.getpid()}.{threading.get_ident()}.tmp")  # proxies sharing the dir
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump({**ident, "charged_nano": hwm[0]}, f)
        os.replace(tmp, p)
    except BaseException:  # (a full disk): no half-written file is left behind
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def backend_marker(backend) -> tuple[bool, dict | None]:
    """(whether the backend keeps the ledger's identity beside its data, that identity or
    None): :meth:`proxy.backends.base.Backend.ledger_marker`."""
    return (False, None) if backend is None else backend.ledger_marker()


def _write_ledger_marker(ledger, ident: dict, *, replace: bool = True) -> None:
    """The marker row; ``replace=False``: only if none (proxies starting together: the first wins)."""
    verb = "INSERT OR REPLACE" if replace else "INSERT OR IGNORE"
    with ledger._lock:
        ledger._db.execute(f"{verb} INTO meta VALUES ('ledger_id', ?)", (json.dumps(ident),))


def _new_identity() -> dict:
    return {"id": uuid.uuid4().hex, "created": time.time()}


# -- start ----------------------------------------------------------------------
def verify_at_start(
    ledger, state_dir: Path, backend=None, *, existed: bool = True, write: bool = True
) -> dict | None:
    """Check (or, on a first start, create) the ledger identity; returns it.
    ``existed``: the SQLite file was there, non-empty, before it was opened.
    ``write=False`` (``dpgate ledger check``): check only; None if no identity yet."""
    state_dir = Path(state_dir)
    remembered = read_state_file(state_dir)
    has_backend, in_backend = backend_marker(backend)
    mine = ledger_marker(ledger)
    here = where(ledger)
    if mine is None:
        known = remembered or in_backend
        if known is not None:
            what = (
                "is missing or empty"
                if ledger.dsn is None and not existed
                else "has no identity marker (truncated or re-created)"
            )
            raise LedgerLost(
                f"{here} {what}, but this state holds ledger {known['id']} created {_when(known['created'])}"
            )
        if not write:
            return None
        _write_ledger_marker(ledger, _new_identity(), replace=False)  # a first start (or an older ledger)
        mine = ledger_marker(ledger)
        log.warning(
            "ledger %s: new ledger identity %s%s",
            here,
            mine["id"],
            " (adopted: it predates ledger identities)" if has_history(ledger) else "",
        )
    else:
        for name, other in (
            ("the state dir's " + ID_FILE, remembered),
            ("the backend's data file", in_backend),
        ):
            if other is not None and other["id"] != mine["id"]:
                raise LedgerLost(
                    f"{here} is ledger {mine['id']} but {name} holds ledger {other['id']} "
                    "(the ledger was replaced)"
                )
    now = marks(ledger)
    if (
        remembered is not None
        and remembered.get("id") == mine["id"]
        and now[0] < remembered.get("charged_nano", 0)
    ):
        raise LedgerLost(
            f"{here} has charged ε {now[0] / 1e9:g} in all, less than the "
            f"{remembered['charged_nano'] / 1e9:g} this state dir saw: an older copy"
        )
    if now[0] > 0 and not has_history(ledger):
        raise LedgerLost(
            f"{here} has charged ε {now[0] / 1e9:g} but holds no spend and no release: "
            "its tables were truncated"
        )
    if not write:
        return mine
    try:
        write_state_file(state_dir, mine, now)
    except OSError as e:
        if e.errno not in NO_WRITE:
            raise
        if remembered is None or remembered.get("id") != mine["id"]:  # the identity must be kept
            raise cannot_write(state_dir / ID_FILE, NO_WRITE[e.errno]) from None
        # the state file only lags the ledger's high-water mark (the ledger is the record):
        # the service starts, and the guard writes the mark once the disk takes it
        log.warning(
            "%s: %s; its high-water mark is written once the disk takes it",
            state_dir / ID_FILE,
            NO_WRITE[e.errno],
        )
    if has_backend and in_backend is None:
        backend.write_ledger_marker(mine)
    return mine


def init_identity(ledger, state_dir: Path, backend=None) -> dict:
    """``dpgate ledger init --i-know``: a new identity for the ledger as it is now."""
    ident = _new_identity()
    _write_ledger_marker(ledger, ident)
    with ledger._lock:  # the high-water mark restarts from the spend the ledger holds now
        spend = ledger._db.execute("SELECT COALESCE(SUM(spent_nano),0) FROM spend").fetchone()[0]
        ledger._db.execute("INSERT OR REPLACE INTO meta VALUES ('charged_nano', ?)", (str(int(spend)),))
    write_state_file(Path(state_dir), ident, marks(ledger))
    if backend_marker(backend)[0]:
        backend.write_ledger_marker(ident)
    log.warning(
        "ledger %s: NEW ledger identity %s written by `dpgate ledger init --i-know`; ε charged so far: %g",
        where(ledger),
        ident["id"],
        marks(ledger)[0] / 1e9,
    )
    return ident


def _when(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(float(t)))


# -- while serving --------------------------------------------------------------
class Guard:
    """Called (``guard()``) by the ledger before each charge and release look-up."""

    def __init__(self, ledger, state_dir: Path, ident: dict, *, interval: float = 2.0) -> None:
        self.ledger, self.state_dir, self.ident, self.interval = ledger, Path(state_dir), ident, interval
        self.lost: LedgerLost | None = None
        self._file = None
        if ledger.dsn is None:
            st = os.stat(ledger.path)
            self._file = (st.st_dev, st.st_ino)
        self._hwm = marks(ledger)
        self._next = time.monotonic() + interval
        self._check_lock = threading.Lock()

    def __call__(self) -> None:
        if self.lost is not None:
            raise self.lost
        if self._file is not None:
            try:
                st = os.stat(self.ledger.path)
                same = (st.st_dev, st.st_ino) == self._file
                ok = same and st.st_size > 0
                what = (
                    ""
                    if ok
                    else (
                        "was emptied while serving"
                        if same
                        else "was replaced while serving (another file at its path)"
                    )
                )
            except FileNotFoundError:
                ok, what = False, "was deleted while serving"
            if not ok:
                self._lose(f"{self.ledger.path} {what}")
        if time.monotonic() >= self._next:
            self.check_now()

    def check_now(self) -> None:
        """The marker row and the high-water marks (a few small reads)."""
        if not self._check_lock.acquire(blocking=False):
            return  # another thread is checking
        try:
            self._next = time.monotonic() + self.interval
            try:
                mine = ledger_marker(self.ledger)
                now = marks(self.ledger)
            except LedgerLost:
                raise
            except LedgerUnavailable:
                return  # the ledger server is down: an outage, not a loss
            except Exception as e:  # e.g. the Postgres schema or a table was dropped
                self._lose(f"{where(self.ledger)} cannot be read ({str(e).splitlines()[0]})")
            if mine is None or mine.get("id") != self.ident["id"]:
                self._lose(
                    f"{where(self.ledger)} lost its identity marker (expected ledger {self.ident['id']})"
                )
            if any(n < h for n, h in zip(now, self._hwm)):
                self._lose(
                    f"{where(self.ledger)}'s spend went down (charged ε {now[0] / 1e9:g}, "
                    f"settled ε {now[1] / 1e9:g}, last release {now[2]}; it was "
                    f"{self._hwm[0] / 1e9:g}, {self._hwm[1] / 1e9:g}, {self._hwm[2]}): truncated"
                )
            if now != self._hwm:
                saved, self._hwm = self._hwm, now
                try:
                    if now[0] != saved[0]:
                        write_state_file(self.state_dir, self.ident, now)
                except OSError:
                    pass
        finally:
            self._check_lock.release()

    def _lose(self, what: str) -> None:
        if self.lost is None:
            self.lost = LedgerLost(what)
            log.error("%s", self.lost)
        raise self.lost


def install(ledger, state_dir: Path, backend=None, *, interval: float = 2.0) -> Guard:
    """Verify the identity at start and the fast integrity check (every spend row's MAC:
    a spend lowered outside dpgate refuses the start), then guard every charge and look-up."""
    ident = verify_at_start(ledger, state_dir, backend, existed=getattr(ledger, "existed", True))
    problems = ledger.integrity_problems(full=False)
    if problems:
        raise LedgerLost(
            f"{where(ledger)}: " + "; ".join(problems) + " — run `dpgate ledger check` for the full list"
        )
    ledger.guard = Guard(ledger, state_dir, ident, interval=interval)
    return ledger.guard


def precheck(config, state_dir: Path) -> None:
    """Before the SQLite ledger is opened (opening creates it): a missing or empty
    file the state dir's ``ledger.id`` remembers raises :class:`LedgerLost`."""
    path = store_of(config).file(state_dir)
    if path is None:  # on a server: nothing is created by opening it
        return
    if path.exists() and path.stat().st_size > 0:
        return
    known = read_state_file(Path(state_dir))
    if known is not None:
        raise LedgerLost(
            f"{path} is missing or empty, but this state holds ledger {known['id']} "
            f"created {_when(known['created'])}"
        )


def check(config, state_dir: Path, marker=None) -> tuple[bool, list[str]]:
    """``dpgate ledger check``: (ok, one line per problem, or one line saying it is
    whole). Creates nothing: no key, no signature, no identity. A ledger that cannot be
    opened at all (a damaged file header, a missing key) is one line too. ``marker``: the
    backend's identity marker read-only (``Backend.marker_reader``; closed here), or None."""
    state_dir = Path(state_dir)
    try:
        return _check(config, state_dir, marker)
    except LedgerUnavailable as e:
        return False, [str(e).splitlines()[0] if str(e) else type(e).__name__]
    except Exception as e:  # whatever else a damaged file raises: one line, never a traceback
        what = str(e).splitlines()[0] if str(e) else type(e).__name__
        return False, [f"the ledger cannot be read ({what}); {RECOVER}"]
    finally:
        if marker is not None:
            marker.close()


def _check(config, state_dir: Path, backend) -> tuple[bool, list[str]]:
    path = store_of(config).file(state_dir)
    if path is not None:
        if not path.exists() or path.stat().st_size == 0:
            try:
                precheck(config, state_dir)
            except LedgerLost as e:
                return False, [str(e)]
            return True, [f"{path}: no ledger yet (the first `dpgate serve` creates it)"]
    ledger = open_ledger(config, state_dir, sign=False)
    try:
        problems = []
        try:
            ident = verify_at_start(ledger, state_dir, backend, write=False)
        except LedgerLost as e:
            ident, problems = None, [str(e)]
        problems += [f"{where(ledger)}: {p}" for p in ledger.integrity_problems()]
        if problems:
            return False, problems
        charged, settled, _ = marks(ledger)
        unsigned = "" if ledger.signed else "; not yet protected by a MAC (the next `dpgate serve` signs it)"
        if ident is None:
            return True, [f"{where(ledger)}: ok, no identity yet (written at the next start){unsigned}"]
        return True, [
            f"{where(ledger)}: ok, ledger {ident['id']} created {_when(ident['created'])}, "
            f"ε charged {charged / 1e9:g} in all, {settled / 1e9:g} for stored releases{unsigned}"
        ]
    finally:
        ledger.close()
