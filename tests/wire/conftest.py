import asyncio
import threading

import pytest

from proxy.wire.server import Server

from .toy import authenticator, factory


class ThreadedServer:
    """Runs a Server on a private event loop in a background thread."""

    def __init__(self, **kw):
        self.loop = asyncio.new_event_loop()
        self.server = Server(
            factory, authenticator=kw.pop("authenticator", authenticator()), host="127.0.0.1", port=0, **kw
        )
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self.server.start(), self.loop).result(5)
        self.port = self.server.port

    def dsn(self, user="alice", password="s3cret", **extra) -> str:
        parts = [f"host=127.0.0.1 port={self.port} user={user} dbname=db connect_timeout=5"]
        if password is not None:
            parts.append(f"password={password}")
        parts += [f"{k}={v}" for k, v in extra.items()]
        return " ".join(parts)

    def close(self):
        asyncio.run_coroutine_threadsafe(self.server.stop(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()


@pytest.fixture
def make_server():
    servers = []

    def make(**kw):
        s = ThreadedServer(**kw)
        servers.append(s)
        return s

    yield make
    for s in servers:
        s.close()


@pytest.fixture
def server(make_server):
    return make_server()
