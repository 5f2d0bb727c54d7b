"""Authentication: SCRAM-SHA-256 (stored Postgres-format verifiers) and trust.

Verifier format (as in pg_authid.rolpassword)::

    SCRAM-SHA-256$<iterations>:<b64 salt>$<b64 StoredKey>:<b64 ServerKey>
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
from dataclasses import dataclass, field
from typing import Literal

from scramp import ScramException, ScramMechanism

MECHANISM = "SCRAM-SHA-256"
INVALID_PASSWORD = "28P01"
_MOCK_SECRET = os.urandom(32)  # per-process; makes unknown-role salts stable but unguessable


class AuthFailed(Exception):
    """Authentication failed; always reported as 28P01 with a user-agnostic message."""

    def __init__(self, user: str):
        super().__init__(f'password authentication failed for user "{user}"')
        self.sqlstate = INVALID_PASSWORD
        self.message = str(self)


@dataclass(frozen=True)
class Verifier:
    iterations: int
    salt: bytes
    stored_key: bytes
    server_key: bytes

    def __str__(self) -> str:
        def b(x: bytes) -> str:
            return base64.b64encode(x).decode("ascii")

        return f"{MECHANISM}${self.iterations}:{b(self.salt)}${b(self.stored_key)}:{b(self.server_key)}"


def parse_verifier(text: str) -> Verifier:
    """Parse a Postgres SCRAM verifier; raises ValueError if malformed."""
    try:
        mech, rest = text.split("$", 1)
        iter_salt, keys = rest.split("$", 1)
        iters, salt = iter_salt.split(":", 1)
        stored, server = keys.split(":", 1)
        v = Verifier(
            int(iters),
            base64.b64decode(salt, validate=True),
            base64.b64decode(stored, validate=True),
            base64.b64decode(server, validate=True),
        )
    except (ValueError, TypeError) as e:
        raise ValueError("malformed SCRAM verifier") from e
    if mech != MECHANISM or v.iterations < 1 or len(v.stored_key) != 32 or len(v.server_key) != 32:
        raise ValueError("malformed SCRAM verifier")
    return v


def make_verifier(password: str, iterations: int = 4096, salt: bytes | None = None) -> str:
    """Create a Postgres-format SCRAM-SHA-256 verifier for ``password``."""
    salt, stored, server, i = ScramMechanism(MECHANISM).make_auth_info(
        password, iteration_count=iterations, salt=salt
    )
    return str(Verifier(i, salt, stored, server))


def _mock_verifier(user: str) -> Verifier:
    """Deterministic fake verifier so unknown roles look like wrong passwords."""
    seed = hmac.new(_MOCK_SECRET, user.encode("utf-8"), hashlib.sha256).digest()
    return Verifier(4096, seed[:16], os.urandom(32), os.urandom(32))


class ScramExchange:
    """Sans-IO server side of one SCRAM-SHA-256 exchange.

    ``first(mechanism, client_first) -> server_first``; ``final(client_final) -> server_final``.
    Both raise :class:`AuthFailed`.
    """

    def __init__(self, user: str, verifier: str | None):
        self.user = user
        v = None
        if verifier is not None:
            try:
                v = parse_verifier(verifier)
            except ValueError:
                v = None
        self.known = v is not None
        self._v = v or _mock_verifier(user)
        info = (self._v.salt, self._v.stored_key, self._v.server_key, self._v.iterations)
        self._server = ScramMechanism(MECHANISM).make_server(lambda _username: info)

    def first(self, mechanism: str, client_first: bytes | None) -> bytes:
        if mechanism != MECHANISM or client_first is None:
            raise AuthFailed(self.user)
        try:
            text = client_first.decode("utf-8")
            # libpq/asyncpg send an empty "n=" (the user comes from the startup packet);
            # scramp rejects empty attributes, so parse a placeholder and restore the
            # original bare message, which is what the client's proof covers.
            gs2, sep, bare = text.partition(",n=,") if ",n=," in text else ("", "", "")
            self._server.set_client_first(f"{gs2},n=*,{bare}" if sep else text)
            if sep:
                self._server.client_first_bare = "n=," + bare
            first: str = self._server.get_server_first()
            return first.encode("utf-8")
        except (ScramException, UnicodeDecodeError):
            raise AuthFailed(self.user) from None

    def final(self, client_final: bytes) -> bytes:
        try:
            self._server.set_client_final(client_final.decode("utf-8"))
            if not self.known:
                raise AuthFailed(self.user)
            final: str = self._server.get_server_final()
            return final.encode("utf-8")
        except (ScramException, UnicodeDecodeError):
            raise AuthFailed(self.user) from None


@dataclass
class StaticAuthenticator:
    """Simple Authenticator: ``users`` maps role -> verifier; ``trust`` roles skip passwords."""

    users: dict[str, str] = field(default_factory=dict)
    trust: set[str] = field(default_factory=set)
    trust_all: bool = False

    def method(self, user: str) -> Literal["trust", "scram"]:
        return "trust" if self.trust_all or user in self.trust else "scram"

    def scram_verifier(self, user: str) -> str | None:
        return self.users.get(user)
