"""A state dir that cannot be written (a full disk, a read-only mount), on a real small file
system (tmpfs; root mounts it, else these tests are skipped).

Promise: a DP statement whose ledger write the disk refuses — the charge, or the record of
its answer — gets ``53100`` and no answer (nothing released without its record); every
process stays up (a worker or the heavy-statement lane restarted while the disk is full
starts); the service answers again by itself once the disk has room; no half-written
``.ledger.id.*.tmp`` is left; a state dir that cannot hold a ledger at start is one line on
stderr, never a traceback."""

from __future__ import annotations

import errno
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import psycopg
import pytest

from bench.workers import dsn, free_port, prepare, start
from proxy.pipeline import central
from support.service import Service, make_config

HEAVY = "SELECT g, COUNT(*) FROM cells WHERE x > {x} GROUP BY g"  # 2,000 cells: the lane's


def _mount(path: Path, opts: str) -> None:
    path.mkdir(parents=True, exist_ok=True)
    r = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(path)], capture_output=True, text=True
    )
    if r.returncode != 0:
        pytest.skip(f"cannot mount a small file system here: {r.stderr.strip()}")


@pytest.fixture
def small_fs(tmp_path):
    mnt = tmp_path / "state"
    _mount(mnt, "size=4m,mode=0700")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=False)


def fill(directory: Path) -> Path:
    """Fill ``directory``'s file system to the last byte; the filler's path."""
    f = directory / "filler"
    fd = os.open(f, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        for size in (1 << 20, 1 << 12, 1):
            try:
                while True:
                    os.write(fd, b"\0" * size)
            except OSError as e:
                assert e.errno == errno.ENOSPC
    finally:
        os.close(fd)
    return f


def strays(directory: Path) -> list[str]:
    return [p.name for p in directory.iterdir() if p.name.endswith(".tmp")]


def test_full_disk_in_one_process_is_53100_then_serves_again(small_fs, tmp_path, monkeypatch):
    cfg = make_config({"kind": "duckdb", "path": str(tmp_path / "data.duckdb")})
    svc = Service(cfg, small_fs, people_rows=500).start()
    try:
        with psycopg.connect(svc.dsn("analyst"), autocommit=True) as c:
            first = c.execute("SELECT COUNT(*) FROM pums WHERE age > 20").fetchall()
            filler = fill(small_fs)
            with pytest.raises(psycopg.Error) as e:  # the charge cannot be written
                c.execute("SELECT COUNT(*) FROM pums WHERE age > 21")
            assert e.value.sqlstate == "53100" and "disk full" in str(e.value), e.value
            assert (
                c.execute("SELECT COUNT(*) FROM pums WHERE age > 20").fetchall() == first
            )  # a repeat: no write
            filler.unlink()

            real = central.Central.measure

            def measure_then_fill(self, conn, p, cells):  # the disk fills between the charge and the record
                answer = real(self, conn, p, cells)
                fill(small_fs)
                return answer

            monkeypatch.setattr(central.Central, "measure", measure_then_fill)
            with pytest.raises(psycopg.Error) as e:
                c.execute("SELECT sex, COUNT(*) FROM pums WHERE age > 22 GROUP BY sex")
            assert e.value.sqlstate == "53100" and "disk full" in str(e.value), e.value
            monkeypatch.undo()
            (small_fs / "filler").unlink()
            # space is back: the same statement is answered (a fresh release, its record written)
            rows = c.execute("SELECT sex, COUNT(*) FROM pums WHERE age > 22 GROUP BY sex").fetchall()
            assert len(rows) == 2
        assert strays(small_fs) == []
    finally:
        svc.close()


@pytest.fixture
def workers_on_small_fs(small_fs, tmp_path):
    data = tmp_path / "data"
    port = free_port()
    path = prepare(data, port, timeout_ms=60_000)
    con = duckdb.connect(str(data / "data.duckdb"))
    con.execute(
        "CREATE TABLE cells AS SELECT (i % 2000) + 1 AS g, (i * 7919) % 101 AS x FROM range(20000) t(i)"
    )
    con.close()
    text = path.read_text().replace(f'state_dir = "{data}"', f'state_dir = "{small_fs}"')
    path.write_text(
        text + '[tables.cells.columns]\ng = { type = "int", domain_range = [1, 2000] }\n'
        'x = { type = "int", lower = 0, upper = 100 }\n'
    )
    proc = start(path, workers=2)
    proc.port, proc.state = port, small_fs
    yield proc
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def _children(pid: int) -> list[int]:
    return [int(p) for p in open(f"/proc/{pid}/task/{pid}/children").read().split()]


def test_workers_and_lane_restarted_on_a_full_disk_stay_up(workers_on_small_fs):
    svc = workers_on_small_fs
    with psycopg.connect(dsn(svc.port), autocommit=True) as c:
        assert len(c.execute(HEAVY.format(x=10)).fetchall()) == 2000
    filler = fill(svc.state)
    line = next(x for x in svc.output if x.startswith("dpgate: listening on"))
    workers = [int(p) for p in re.search(r"2 workers: pids (\d+), (\d+)", line).groups()]
    for _ in range(2):  # restarted on the full disk, the lane starts
        lane = next(p for p in _children(svc.pid) if p not in workers)
        os.kill(lane, signal.SIGKILL)
        deadline = time.time() + 60  # until the restarted lane is up
        while time.time() < deadline and (lane in (kids := _children(svc.pid)) or len(kids) != 3):
            time.sleep(0.1)
        assert len(kids) == 3 and svc.poll() is None, "".join(svc.output)
    time.sleep(5)  # a lane that died at start would be gone, restarted, gone …
    assert _children(svc.pid) == kids and svc.poll() is None, "".join(svc.output)
    with psycopg.connect(dsn(svc.port), autocommit=True) as c:
        for sql in (HEAVY.format(x=11), "SELECT sex, COUNT(*) FROM pums WHERE age > 31 GROUP BY sex"):
            with pytest.raises(psycopg.Error) as e:
                c.execute(sql)
            assert e.value.sqlstate == "53100", e.value
        filler.unlink()  # space returns: answered, no restart
        assert len(c.execute(HEAVY.format(x=11)).fetchall()) == 2000
        assert len(c.execute("SELECT sex, COUNT(*) FROM pums WHERE age > 31 GROUP BY sex").fetchall()) == 2
    assert _children(svc.pid) == kids and svc.poll() is None
    assert strays(svc.state) == []
    out = "".join(svc.output)
    assert "Traceback" not in out and "did not start" not in out, out


def _serve_once(config: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "proxy.cli", "serve", "--config", str(config), "--workers", "1"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).resolve().parents[2],
    )


def test_a_state_dir_that_cannot_be_written_at_start_is_one_line(small_fs, tmp_path):
    data = tmp_path / "data"
    path = prepare(data, free_port())
    path.write_text(path.read_text().replace(f'state_dir = "{data}"', f'state_dir = "{small_fs}"'))
    fill(small_fs)  # a first start: the ledger cannot be created
    r = _serve_once(path)
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert len(lines) == 1 and re.search(r"^dpgate: .*cannot write: disk full", lines[0]), r.stderr
    assert strays(small_fs) == []
    (small_fs / "filler").unlink()
    ro = tmp_path / "ro"
    ro.mkdir()
    subprocess.run(["mount", "--bind", str(small_fs), str(ro)], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,ro,bind", str(ro)], check=True)
        path.write_text(path.read_text().replace(f'state_dir = "{small_fs}"', f'state_dir = "{ro}"'))
        r = _serve_once(path)
        lines = [x for x in r.stderr.splitlines() if x.strip()]
        assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
        assert len(lines) == 1 and "cannot write: read-only file system" in lines[0], r.stderr
    finally:
        subprocess.run(["umount", "-l", str(ro)], check=False)
