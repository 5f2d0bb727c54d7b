"""A throwaway PostgreSQL server for tests: initdb + pg_ctl in a temp dir, on loopback.

Postgres refuses to run as root; when the tests run as root the server runs as
the ``postgres`` (or ``nobody``) system user via ``runuser``.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path


def pg_bin(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    cands = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    return cands[-1] if cands else None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class TempPostgres:
    def __init__(self, options: str = ""):
        """``options``: more ``-c name=value`` server settings (e.g. a long ``wal_writer_delay``,
        so an asynchronous commit is still unflushed when the server is stopped)."""
        self.options = options
        self.initdb, self.pg_ctl = pg_bin("initdb"), pg_bin("pg_ctl")
        if not (self.initdb and self.pg_ctl):
            raise RuntimeError("initdb/pg_ctl not found: install postgresql (apt-get install -y postgresql)")
        self.dir = Path(tempfile.mkdtemp(prefix="dpgate-pg-"))
        self.data = self.dir / "data"
        self.port = free_port()
        self.user = None
        if os.geteuid() == 0:
            for cand in ("postgres", "nobody"):
                try:
                    pwd.getpwnam(cand)
                    self.user = cand
                    break
                except KeyError:
                    pass
            shutil.chown(self.dir, self.user)
            os.chmod(self.dir, 0o700)

    def _run(self, *cmd: str) -> None:
        if self.user:
            cmd = ("runuser", "-u", self.user, "--", *cmd)
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=120)

    def start(self) -> TempPostgres:
        self._run(
            self.initdb, "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync"
        )
        return self.resume()

    def resume(self) -> TempPostgres:
        """Start the (initialised) server again."""
        opts = (
            f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.dir} -c fsync=off "
            f"-c full_page_writes=off -c synchronous_commit=off {self.options}"
        ).strip()
        self._run(
            self.pg_ctl,
            "-D",
            str(self.data),
            "-o",
            opts,
            "-l",
            str(self.dir / "log"),
            "-w",
            "-t",
            "60",
            "start",
        )
        return self

    @property
    def dsn(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def stop(self) -> None:
        try:
            self._run(self.pg_ctl, "-D", str(self.data), "-m", "immediate", "stop")
        except Exception:
            pass
        shutil.rmtree(self.dir, ignore_errors=True)

    def kill_and_wait(self) -> None:
        """Stop the server (to simulate a backend outage)."""
        self._run(self.pg_ctl, "-D", str(self.data), "-m", "immediate", "stop")
        time.sleep(0.2)
