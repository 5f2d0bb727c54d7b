"""TLS for the wire server: the server's context from ``[server.tls]`` (a certificate chain and
its key), or none when no certificate is configured (the server then answers SSLRequest with
``N``, as Postgres does without ``ssl = on``)."""

from __future__ import annotations

import ssl

from config import TLS


def server_context(tls: TLS) -> ssl.SSLContext | None:
    """The server-side context for ``tls``, or None without a certificate."""
    if tls.cert is None:
        return None
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(tls.cert, tls.key)
    return ctx
