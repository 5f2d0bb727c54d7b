"""`dpgate init` proposes a commented config from the data that `check-config
--backend` and `dpgate serve --config` accept as is; values read from the rows are marked;
--round widens bounds to the public grid; --dp-bounds draws them ε-DP and records ε."""

from __future__ import annotations

import base64
import re
import subprocess
import sys
import time
import tomllib
import urllib.request

import duckdb
import psycopg
import pytest

from config import load_config
from mechanisms import SeededSource
from proxy.cli import init as init_mod
from proxy.cli import init_bounds as ib
from proxy.cli import main

N = 5000


def _fixture(tmp_path):
    db = tmp_path / "d.duckdb"
    con = duckdb.connect(str(db))
    con.execute(f"""CREATE TABLE people AS SELECT (i % 90)::INTEGER AS age,
        CASE WHEN i % 2 = 0 THEN 'n' ELSE 's' END AS region, (i * 37.5 % 100000)::DOUBLE AS income,
        DATE '2024-01-03' + (i % 500)::INTEGER AS day, (i % 3 = 0) AS flag, 'u' || i AS name,
        TIMESTAMP '2024-05-01 10:00:00' + to_seconds(i) AS ts, i::VARCHAR::BLOB AS raw FROM range({N}) t(i)""")
    con.execute(f"COPY people TO '{tmp_path / 'p.parquet'}' (FORMAT parquet)")
    con.execute(f"COPY (SELECT age, region FROM people) TO '{tmp_path / 'q.csv'}'")
    con.close()
    return db


@pytest.fixture(autouse=True)
def _seeded(monkeypatch):
    """init's DP draws from a fixed seed, so that each test sees one outcome of them."""
    monkeypatch.setattr(init_mod, "default_source", lambda: SeededSource(5))


def _init(capsys, *argv) -> tuple[str, dict[str, str]]:
    assert main(["init", *argv]) == 0
    cap = capsys.readouterr()
    pw = dict(re.findall(r"role (\w+): password (\S+) ", cap.err))
    return cap.out, pw


def test_init_duckdb_file_serves_as_is(tmp_path, capsys):
    """init -> check-config --backend passes -> serve -> a query answers, with the printed password."""
    db = _fixture(tmp_path)
    cfg = tmp_path / "dpgate.toml"
    _, pw = _init(capsys, str(db), "-o", str(cfg))
    assert set(pw) == {"analyst", "admin"}
    assert main(["check-config", "--backend", str(cfg)]) == 0
    assert "matches the backend" in capsys.readouterr().out
    c = load_config(cfg).tables["people"]
    assert c.source == "people" and "raw" not in c.columns  # BLOB: left out, said so
    assert "# left out: raw (BLOB)" in cfg.read_text()
    assert c.columns["age"].type == "int" and (c.columns["age"].lower, c.columns["age"].upper) == (0, 100)
    assert c.columns["region"].public_domain == ("n", "s") and c.columns["name"].public_domain is None
    assert c.columns["flag"].public_domain == (False, True)
    assert [b.isoformat() for b in c.columns["day"].time_bounds] == [
        "2024-01-01",
        "2025-12-31",
    ]  # whole years
    from support.pg import free_port

    port, aport = free_port(), free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "proxy.cli",
            "serve",
            "--config",
            str(cfg),
            "--port",
            str(port),
            "--admin-http",
            f"127.0.0.1:{aport}",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline, out = time.time() + 60, []
        while time.time() < deadline and not any("owner page on" in x for x in out):
            line = proc.stdout.readline()
            if not line:
                break
            out.append(line)
        assert any("listening on" in x for x in out), "".join(out)
        with psycopg.connect(
            f"postgresql://analyst:{pw['analyst']}@127.0.0.1:{port}/dpgate",
            sslmode="disable",
            autocommit=True,
        ) as con:
            n = con.execute("SELECT COUNT(*) FROM people").fetchone()[0]
            groups = dict(con.execute("SELECT region, COUNT(*) FROM people GROUP BY region").fetchall())
        assert abs(n - N) < 60 and set(groups) == {"n", "s"}  # Laplace(1) at ε 1: |noise| < 60 w.p. 1-1e-26
        assert f"owner page on http://127.0.0.1:{aport}/ (sign in as admin)" in "".join(out)
        auth = base64.b64encode(f"admin:{pw['admin']}".encode()).decode()  # the owner page, admin's password
        req = urllib.request.Request(f"http://127.0.0.1:{aport}/", headers={"Authorization": f"Basic {auth}"})
        with urllib.request.urlopen(req, timeout=30) as r:
            html = r.read().decode()
        assert r.status == 200 and "<h3>people " in html and "SELECT COUNT(*) FROM people" in html
    finally:
        proc.terminate()
        proc.wait(20)


def test_every_value_read_from_the_data_is_marked(tmp_path, capsys):
    db = _fixture(tmp_path)
    text, _ = _init(capsys, str(db))
    assert "publishing them is itself a disclosure" in text.split("[server]")[0]
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith(("lower =", "upper =", "domain =")) and "(public)" not in line:
            above = next(x for x in reversed(lines[:i]) if x.startswith("#"))
            assert "READ FROM THE PRIVATE DATA" in above or "ε-DP (ε 0.1" in above, (line, above)
    exact, _ = _init(capsys, str(db), "--exact-bounds")
    assert "Bounds are the exact extremes (--exact-bounds)" in exact.split("[server]")[0]
    lines = exact.splitlines()
    for i, line in enumerate(lines):
        if line.startswith(("lower =", "upper =", "domain =")) and "(public)" not in line:
            above = next(x for x in reversed(lines[:i]) if x.startswith("#"))
            assert "READ FROM THE PRIVATE DATA" in above, (line, above)


def test_parquet_and_csv_sources(tmp_path, capsys):
    _fixture(tmp_path)
    cfg = tmp_path / "files.toml"
    _init(capsys, str(tmp_path / "p.parquet"), str(tmp_path / "q.csv"), "-o", str(cfg))
    tables = load_config(cfg).tables
    assert tables["p"].source == f"read_parquet('{tmp_path / 'p.parquet'}')"
    assert tables["q"].source == f"read_csv('{tmp_path / 'q.csv'}')"
    assert main(["check-config", "--backend", str(cfg)]) == 0


def test_round_widens_to_the_public_grid(tmp_path, capsys):
    db = _fixture(tmp_path)
    text, _ = _init(capsys, str(db), "--round")
    cols = tomllib.loads(text)["tables"]["people"]["columns"]
    assert (cols["age"]["lower"], cols["age"]["upper"]) == (0, 100)  # 0..89 -> 0..100
    assert (cols["income"]["lower"], cols["income"]["upper"]) == (0.0, 100000.0)  # max 99975
    assert (cols["day"]["lower"], cols["day"]["upper"]) == (
        "2024-01-01",
        "2025-05-31",
    )  # 2024-01-03..2025-05-16
    assert (cols["ts"]["lower"], cols["ts"]["upper"]) == ("2024-05-01 00:00:00", "2024-05-31 23:59:59")
    assert ib.round_down(-3.5) == -5.0 and ib.round_up(0.0031) == 0.005 and ib.round_up(7, True) == 10


def test_dp_bounds_record_epsilon_and_stay_valid(tmp_path, capsys):
    db = _fixture(tmp_path)
    cfg = tmp_path / "dp.toml"
    _init(capsys, str(db), "--dp-bounds", "2", "-o", str(cfg))
    text = cfg.read_text()
    assert "ε = 2 SPENT in all by init on 4 DP proposals (ε 0.5 each" in text
    assert main(["check-config", "--backend", str(cfg)]) == 0


@pytest.mark.parametrize("integral", [True, False])
def test_dp_bounds_meet_their_accuracy(integral):
    """The thresholded histogram (init_bounds): w.p. >= 1 − β no cell without units passes,
    and a cell holding 2t units or more passes w.p. >= 1 − β/k. Data 0..89 (ints) / 0..99.98
    (floats), n = 5000 rows: the cell (50, 100] holds about 2200 > 2t, every positive cell
    above it none, and no value is negative, so upper = 100 and lower = 0 w.p. >= 1 − 2β."""
    g = ib.grid_125(integral)
    xs = [i % 90 for i in range(N)] if integral else [(i * 0.02) for i in range(N)]
    above = [sum(x > v for x in xs) for v in g]
    below = [sum(x < v for x in xs) for v in g]
    src, runs, eps = SeededSource(23), 200, 0.2
    ok = 0
    for _ in range(runs):
        b = ib.dp_numeric_bounds(len(xs), above, below, integral, eps, src)
        assert b.units == 2 * ib.threshold(eps / 2, (len(g) - 1) // 2)
        ok += (b.lower, b.upper) == (0, 100)
    # binomial: P(success) >= 0.9 per run; 200 runs, 4σ below the mean = 0.9 - 4·sqrt(.9·.1/200) = 0.815
    assert ok / runs >= 0.815


def test_dp_bounds_cut_sparse_tails_and_keep_negatives():
    """A cell of fewer units than t rarely passes; a negative cell of many does: 3000 values
    at 1..40 and 30 (< t at ε 0.2) at 4000: upper 50 w.p. >= 1 − β − P[DLap ≥ t − 30]
    (≥ 0.9 here); 500 at −3 make lower −5."""
    xs = [1 + i % 40 for i in range(3000)] + [4000] * 30 + [-3] * 500
    g = ib.grid_125(True)
    above = [sum(x > v for x in xs) for v in g]
    below = [sum(x < v for x in xs) for v in g]
    src = SeededSource(3)
    got = [ib.dp_numeric_bounds(len(xs), above, below, True, 0.2, src) for _ in range(100)]
    assert 30 < ib.threshold(0.1, 48) <= 500  # the tail of 30 is below t, the 500 at −3 above 2t
    assert sum(b.upper == 50 for b in got) >= 90 - 4 * (100 * 0.1 * 0.9) ** 0.5
    assert sum(b.lower == -5 for b in got) >= 95 - 4 * (100 * 0.05 * 0.95) ** 0.5


def test_dp_date_bounds_land_on_the_data_years():
    years = {y: 400 for y in range(1992, 1999)}
    src = SeededSource(7)
    got = [ib.dp_date_bounds(years, years, False, 0.4, src) for _ in range(100)]
    ok = sum(b.lower == "1992-01-01" and b.upper == "1998-12-31" for b in got)
    assert ok >= 100 * (1 - 2 * ib.BETA) - 4 * (100 * 0.1 * 0.9) ** 0.5  # union of two β events, 4σ


def test_dp_contribution_bound_is_a_high_quantile():
    """Rows per unit: 900 units with 1..20 rows (45 each), 180 with 21..60 (4-5 each: 45 in
    each cell (30, 40], (40, 50], (50, 60]), 5 with 1000. At ε 0.5, t = ⌈ln(48/β)/ε⌉ ≤ 25: the
    cells of 45 units and more pass but w.p. P[DLap(2) < t − 45]; the cell of 1000
    (5 units) passes w.p. P[DLap(2) >= 9] < 1%. The 95% quantile of the ~1080 passing units is
    where at most ~54 lie above: 50 (the 45 above it in (50, 60]) or, by the noise, 40 or 60. Never below 20: the cell (15, 20] of 225 units always passes."""
    hist = {r: 45 for r in range(1, 21)} | {r: (5 if r % 2 else 4) for r in range(21, 61)} | {1000: 5}
    src = SeededSource(11)
    got = [ib.dp_contribution_bound(hist, 0.5, src) for _ in range(100)]
    assert ib.threshold(0.5, len(ib.CONTRIBUTION_GRID)) <= 25  # the cells of 45 units reach t
    assert all(r is not None and r >= 20 for r in got)
    assert sum(r in (40, 50, 60) for r in got) >= 98 - 4 * (100 * 0.02 * 0.98) ** 0.5


def test_postgres_schema(tmp_path, capsys, postgres):
    with psycopg.connect(postgres.dsn, autocommit=True) as con:
        con.execute("DROP SCHEMA IF EXISTS initsrc CASCADE; CREATE SCHEMA initsrc")
        con.execute(
            "CREATE TABLE initsrc.visits AS SELECT (i % 7)::int AS dow, (i * 1.5)::float8 AS amount, "
            "(DATE '2025-01-01' + i % 40) AS day, now() AS tz FROM generate_series(1, 300) i"
        )
    cfg = tmp_path / "pg.toml"
    _init(capsys, "--dsn", postgres.dsn, "--schema", "initsrc", "--round", "-o", str(cfg))
    t = load_config(cfg).tables["visits"]
    assert t.source == "initsrc.visits" and "tz" not in t.columns  # timestamptz: no dpgate type
    assert t.columns["dow"].public_domain == tuple(range(7))
    assert (t.columns["amount"].lower, t.columns["amount"].upper) == (1.0, 500.0)
    assert main(["check-config", "--backend", str(cfg)]) == 0


def test_progress_on_big_tables(tmp_path, capsys):
    """Tables of at least --progress-rows rows (default 1,000,000) report each column on stderr."""
    db = _fixture(tmp_path)
    assert main(["init", str(db), "--progress-rows", "1000"]) == 0
    err = capsys.readouterr().err
    assert "table 1/1 people (people)" in err and f"people: {N:,} rows, 7 columns" in err
    assert "people: column 1/7 age" in err and "people: column 7/7 ts" in err


def test_init_refuses_without_input_and_keeps_existing_file(tmp_path, capsys):
    assert main(["init"]) == 2
    f = tmp_path / "x.toml"
    f.write_text("keep")
    assert main(["init", str(_fixture(tmp_path)), "-o", str(f)]) == 2
    assert f.read_text() == "keep" and "--force" in capsys.readouterr().err
