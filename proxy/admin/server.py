"""``dpgate serve --admin-http HOST:PORT``: the owner page over HTTP.

Off by default. One page, ``GET /``, read-only, for admin roles only: HTTP basic
authentication checked against the role's SCRAM verifier from the config (the same password
as psql; PBKDF2 of the offered password with the verifier's salt and iterations, then
H(HMAC(·, "Client Key")) compared with StoredKey in constant time, RFC 5802 §3), or
``Authorization: Bearer <token>`` when the environment variable ``DPGATE_ADMIN_TOKEN`` is set
(the only way in under ``auth = "trust"``, which has no verifiers). Every refusal is the same
401 after the same work, whatever the user. A wrong password or token counts as a failed sign-in
in the process's failed-login limiter (:class:`proxy.wire.throttle.FailedLogins`, shared with
the wire's logins, per address and per role): while the address or the role is over its limit,
every sign-in — the right password too — gets 429 with ``Retry-After`` before any password is
checked. Responses carry ``Cache-Control: no-store`` and a
``Content-Security-Policy`` that allows no external resource (the page has none).
The page reads the ledger (metadata only: budgets, release times, ε, statements — never a
released value) and the config, in a worker thread.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import logging
import os
import time
from types import SimpleNamespace

from ..catalog.facts import column_comment, table_comment
from ..pipeline.kind import dp_reading
from ..pipeline.multitier import coalition_rows
from ..wire.auth import parse_verifier
from ..wire.throttle import FailedLogins
from .page import render_page

__all__ = ["AdminHttp", "check_password"]

log = logging.getLogger("dpgate.admin")
MAX_HEAD = 8192
READ_TIMEOUT_S = 10
RELEASES_SHOWN = 50
_DUMMY = parse_verifier(
    "SCRAM-SHA-256$4096:"
    + base64.b64encode(b"dpgate-admin-dummy").decode()
    + "$"
    + base64.b64encode(bytes(32)).decode()
    + ":"
    + base64.b64encode(bytes(32)).decode()
)
_CSP = (
    "default-src 'none'; style-src 'unsafe-inline'; img-src data:; frame-ancestors 'none'; form-action 'none'"
)


def check_password(verifier: str | None, password: str) -> bool:
    """Does ``password`` match the SCRAM-SHA-256 ``verifier``? (RFC 5802: StoredKey =
    H(HMAC(SaltedPassword, "Client Key")), SaltedPassword = PBKDF2-HMAC-SHA-256.) With no
    verifier the same work is done against a dummy and the answer is False."""
    v = parse_verifier(verifier) if verifier else _DUMMY
    salted = hashlib.pbkdf2_hmac("sha256", password.encode("utf-8"), v.salt, v.iterations)
    stored = hashlib.sha256(hmac.new(salted, b"Client Key", hashlib.sha256).digest()).digest()
    return hmac.compare_digest(stored, v.stored_key) and verifier is not None


class AdminHttp:
    """A minimal HTTP/1.1 server (one request per connection) for the owner page."""

    def __init__(
        self, gw, host: str, port: int, token: str | None = None, failed_logins: FailedLogins | None = None
    ):
        self.gw, self.host, self.port = gw, host, port
        self.token = token if token is not None else (os.environ.get("DPGATE_ADMIN_TOKEN") or None)
        # the wire server's limiter (one per process), so that both doors count each failure
        self.failed_logins = failed_logins if failed_logins is not None else FailedLogins()
        self._server: asyncio.AbstractServer | None = None

    async def start(self) -> AdminHttp:
        self._server = await asyncio.start_server(self._handle, self.host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    # -- one request ----------------------------------------------------------------
    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        is_head = False
        peer = writer.get_extra_info("peername")
        address = peer[0] if isinstance(peer, tuple) else str(peer)
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), READ_TIMEOUT_S)
            is_head = head.startswith(b"HEAD ")
            status, body, extra = await self._respond(head, address)
        except (TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            writer.close()
            return
        except Exception:  # the page must never take the proxy down
            log.exception("owner page failed")
            status, body, extra = (
                "500 Internal Server Error",
                "the owner page failed; see the proxy's log",
                {},
            )
        data = body.encode("utf-8")
        headers = {
            "Content-Type": "text/html; charset=utf-8"
            if status.startswith("200")
            else "text/plain; charset=utf-8",
            "Content-Length": str(len(data)),
            "Cache-Control": "no-store",
            "Content-Security-Policy": _CSP,
            "X-Frame-Options": "DENY",
            "X-Content-Type-Options": "nosniff",
            "Referrer-Policy": "no-referrer",
            "Connection": "close",
            **extra,
        }
        writer.write(
            (f"HTTP/1.1 {status}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n").encode(
                "latin-1"
            )
            + (b"" if is_head else data)
        )
        try:
            await writer.drain()
        finally:
            writer.close()

    async def _respond(self, head: bytes, address: str = "") -> tuple[str, str, dict]:
        if len(head) > MAX_HEAD:
            return "431 Request Header Fields Too Large", "request head too large", {}
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ")
        if len(parts) != 3 or parts[0] not in ("GET", "HEAD"):
            return "405 Method Not Allowed", "the owner page is read-only: GET /", {"Allow": "GET"}
        if parts[1].split("?", 1)[0] != "/":
            return "404 Not Found", "the owner page is at /", {}
        auth = next(
            (ln.split(":", 1)[1].strip() for ln in lines[1:] if ln.lower().startswith("authorization:")), ""
        )
        if auth:
            role = _claimed_role(auth)
            if (wait := self.failed_logins.retry_after_s(address, role)) > 0:
                return (
                    "429 Too Many Requests",
                    f"too many failed sign-ins from this address or for this role; try again in {wait} s",
                    {"Retry-After": str(wait)},
                )
        user = await asyncio.to_thread(self._authenticate, auth)
        if user is None:
            if auth:  # a wrong password or token (not a first visit)
                self.failed_logins.failed(address, _claimed_role(auth))
            return (
                "401 Unauthorized",
                "sign in with an admin role of the config (its psql password)",
                {"WWW-Authenticate": 'Basic realm="dpgate owner page", charset="UTF-8"'},
            )
        html = await asyncio.to_thread(self.page, user)
        return "200 OK", html, {}

    def _authenticate(self, header: str) -> str | None:
        """The admin role signed in, or None (same work for every wrong answer)."""
        scheme, _, value = header.partition(" ")
        if scheme.lower() == "bearer":
            ok = self.token is not None and hmac.compare_digest(value.strip().encode(), self.token.encode())
            return "token" if ok else None
        user, password = "", ""
        if scheme.lower() == "basic":
            try:
                user, _, password = (
                    base64.b64decode(value.strip(), validate=True).decode("utf-8").partition(":")
                )
            except (ValueError, UnicodeDecodeError):
                pass
        role = self.gw.config.roles.get(user)
        verifier = role.scram if role is not None and role.admin else None
        return user if check_password(verifier, password) else None

    # -- the page's data ----------------------------------------------------------
    def page(self, user: str) -> str:
        return render_page(collect(self.gw.config, self.gw.ledger, user))


def _claimed_role(header: str) -> str | None:
    """The role a basic ``Authorization`` header names (None: a bearer token, or unreadable)."""
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        return base64.b64decode(value.strip(), validate=True).decode("utf-8").partition(":")[0]
    except (ValueError, UnicodeDecodeError):
        return None


def collect(cfg, ledger, user: str, now: float | None = None, days: int = 30) -> dict:
    """Everything the page shows, from the config and the ledger (no data backend)."""
    now = time.time() if now is None else now
    budgets = []
    for role, spec in cfg.roles.items():
        tier = cfg.tiers[spec.tier]
        zcdp = tier.accounting == "zcdp"
        spent, dspent = ledger.spent_both(role, tier.period, "rho" if zcdp else "eps")
        spent = min(spent, tier.budget)  # (spent in the other unit this period: nothing is left)
        budgets.append(
            {
                "role": role,
                "tier": spec.tier,
                "accounting": tier.accounting,  # a zCDP tier's amounts are ρ, read as (ε, δ)
                "reading": dp_reading(tier, spent) if zcdp else "",
                "epsilon": tier.amount,
                "period": tier.period,
                "budget": tier.budget,
                "spent": spent,
                "delta_budget": tier.delta_budget,
                "delta_spent": dspent,
            }
        )
    releases = ledger.releases(limit=20_000)
    series: dict[str, list[tuple[float, float]]] = {r: [] for r in cfg.roles}
    for r in sorted(releases, key=lambda r: r["created"]):
        if r["created"] >= now - days * 86400 and r["role"] in series:
            pts = series[r["role"]]
            pts.append((r["created"], (pts[-1][1] if pts else 0.0) + r["epsilon"]))
    unreleased: dict[str, tuple[float, float]] = {}  # role -> (ε, δ) charged with no answer
    for u in ledger.unreleased(None):
        e, d = unreleased.get(u["role"], (0.0, 0.0))
        unreleased[u["role"]] = (e + u["epsilon"], d + u["delta"])
    _, rows = coalition_rows(SimpleNamespace(config=cfg, ledger=ledger), None)
    coalition = [
        (lad, stmt, dv, tiers, loss, indep) for lad, stmt, dv, _lv, tiers, _r, _n, loss, indep, _s, _t in rows
    ]
    tables = []
    for name, t in cfg.tables.items():
        kind = "local" if t.mode == "local" else "per-record" if t.privacy is not None else "central"
        cols = [(c, spec.type, column_comment(t, c, spec)) for c, spec in t.columns.items()]
        tables.append((name, kind, cfg.source_of(name), table_comment(t), cols))
    return {
        "database": cfg.server.database,
        "now": now,
        "user": user,
        "budgets": budgets,
        "series": series,
        "releases": releases[:RELEASES_SHOWN],
        "unreleased": unreleased,
        "coalition": coalition,
        "tables": tables,
    }
