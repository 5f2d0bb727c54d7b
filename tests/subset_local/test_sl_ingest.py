"""Bulk ingestion of a categorical Subset column (multi-tier spec §10 "LDP categorical
columns"): `dpgate ldp-load` from a CSV and from a backend table, `ldp-perturb` + `ldp-load
--reports`, and the Postgres table source. The reports table holds d 0/1 columns per tier level
— every row exactly k ones at each level (k of that level's matched template, Alg. 4) — and
never the raw value; a value outside the domain (22023) or a NULL (23502) loads nothing."""

from __future__ import annotations

import asyncio
import csv

import duckdb
import numpy as np
import psycopg
import pytest

from config import load_config
from mechanisms import SeededSource
from proxy.ingest.ldp_load import IngestError, load_rows_postgres, pg_table_batches
from proxy.ingest.subset_ingest import ladder_of
from rewriter.local import layout
from support.ldp import run_cli
from support.ldp import write_csv as support_write_csv

ZONES = ["n", "s", "e", "w", "c", "x"]
CONFIG = """
[server]
auth = "trust"
[backend]
kind = "duckdb"
path = "{db}"
[tiers.bronze]
epsilon = 0.1
budget = 5.0
ladder = "market"
[tiers.silver]
epsilon = 0.5
budget = 5.0
ladder = "market"
[tiers.gold]
epsilon = 2.0
budget = 5.0
ladder = "market"
[roles.gold]
tier = "gold"
[tables.sl]
mode = "local"
[tables.sl.columns]
zone = {{ type = "text", domain = ["n", "s", "e", "w", "c", "x"] }}
g = {{ type = "int", domain = [1, 2] }}
h = {{ type = "int" }}
[tables.sl.local]
[tables.sl.local.columns]
h = {{ lo = 0, hi = 24, buckets = 24, epsilon = 1.0 }}
[tables.sl.local.categories]
zone = {{ ladder = "market" }}
"""


def raw(n, seed):
    rng = np.random.default_rng(seed)
    return {
        "zone": np.array(ZONES)[rng.choice(6, n, p=[0.4, 0.2, 0.15, 0.1, 0.1, 0.05])],
        "g": rng.integers(1, 3, n),
        "h": rng.integers(0, 24, n),
    }


def write_csv(path, data, cols=("zone", "g", "h")):
    support_write_csv(path, data, cols)


def check_reports(cols: list[str], rows: list[tuple], lay, n: int) -> None:
    """Only bits: public g, metric h bits, d bits per level with exactly k ones per row."""
    assert cols == [c for c, _ in lay.report_schema()]
    assert "zone" not in cols and "h" not in cols
    assert len(rows) == n
    (cat,) = lay.categories
    arr = np.array(rows, dtype=np.int64)
    for eps in cat.levels:
        block = arr[:, [cols.index(c) for c in cat.columns(eps)]]
        assert set(np.unique(block)) <= {0, 1}
        assert (block.sum(axis=1) == ladder_of(cat).match[eps].k).all(), eps


@pytest.fixture()
def setup(tmp_path):
    f = tmp_path / "dpgate.toml"
    f.write_text(CONFIG.format(db=str(tmp_path / "d.duckdb")))
    cfg = load_config(f)
    return tmp_path, str(f), cfg, layout("sl", cfg.tables["sl"], cfg.tiers)


def read(db):
    con = duckdb.connect(db, read_only=True)
    try:
        cols = [r[0] for r in con.execute("DESCRIBE sl_reports").fetchall()]
        return cols, con.execute("SELECT * FROM sl_reports").fetchall()
    finally:
        con.close()


def test_csv_and_table_source(setup, capsys):
    tmp, cfgfile, cfg, lay = setup
    data = raw(3000, 1)
    write_csv(tmp / "raw.csv", data)
    assert run_cli("ldp-load", "-c", cfgfile, "--table", "sl", str(tmp / "raw.csv"), "-q") == 0
    err = capsys.readouterr().err
    assert "Subset column zone (d = 6, ladder market: levels 2, 0.5, 0.1" in err
    db = str(tmp / "d.duckdb")
    cols, rows = read(db)
    check_reports(cols, rows, lay, 3000)
    assert sorted(r[0] for r in rows) == sorted(data["g"])  # public column as-is
    con = duckdb.connect(db)
    con.execute(f"CREATE TABLE staging AS SELECT * FROM read_csv('{tmp / 'raw.csv'}')")
    con.close()
    assert run_cli("ldp-load", "-c", cfgfile, "--table", "sl", "--from-table", "staging", "-q") == 0
    cols, rows = read(db)
    check_reports(cols, rows, lay, 6000)


def test_producer_reports_loaded_as_is(setup):
    tmp, cfgfile, cfg, lay = setup
    write_csv(tmp / "raw.csv", raw(500, 2))
    assert (
        run_cli(
            "ldp-perturb", "-c", cfgfile, "--table", "sl", str(tmp / "raw.csv"), "-o", str(tmp / "rep.csv")
        )
        == 0
    )
    with open(tmp / "rep.csv", newline="") as f:
        rd = csv.reader(f)
        header, first = next(rd), next(rd)
    assert header == ["g", "h_bits", "zone_bits"]
    assert len(first[2]) == 3 * 6 and set(first[2]) <= {"0", "1"}  # levels × d, no raw value
    assert run_cli("ldp-load", "-c", cfgfile, "--table", "sl", "--reports", str(tmp / "rep.csv"), "-q") == 0
    cols, rows = read(str(tmp / "d.duckdb"))
    check_reports(cols, rows, lay, 500)
    by_level = np.array(rows)[
        :, [cols.index(c) for e in lay.categories[0].levels for c in lay.categories[0].columns(e)]
    ]
    with open(tmp / "rep.csv", newline="") as f:
        got = sorted(r[2] for r in list(csv.reader(f))[1:])
    assert sorted("".join(map(str, r)) for r in by_level) == got  # bit for bit


@pytest.mark.parametrize(
    "bad, state, words",
    [
        ("moon", "22023", "value 'moon' for categorical column zone is not in its declared domain"),
        ("", "23502", "NULL in private categorical column zone"),
    ],
)
def test_bad_value_loads_nothing(setup, capsys, bad, state, words):
    tmp, cfgfile, cfg, lay = setup
    data = raw(300, 3)
    data["zone"] = data["zone"].astype(object)
    data["zone"][200] = bad
    write_csv(tmp / "bad.csv", data)
    assert run_cli("ldp-load", "-c", cfgfile, "--table", "sl", str(tmp / "bad.csv"), "--batch", "100") == 1
    assert words in capsys.readouterr().err
    assert read(str(tmp / "d.duckdb"))[1] == []  # one transaction: nothing stored
    from proxy.ingest.ldp_load import Encoder

    with pytest.raises(IngestError) as e:
        Encoder(lay, SeededSource(1)).encode({"zone": [None if bad == "" else bad], "h": [3]}, 1)
    assert e.value.sqlstate == state


def test_postgres_table_source(postgres, tmp_path):
    from proxy.backends import PostgresBackend

    f = tmp_path / "pg.toml"
    f.write_text(
        CONFIG.format(db="x").replace(
            'kind = "duckdb"\npath = "x"', f'kind = "postgres"\ndsn = "{postgres.dsn}"'
        )
    )
    cfg = load_config(f)
    lay = layout("sl", cfg.tables["sl"], cfg.tiers)
    data = raw(2000, 4)
    with psycopg.connect(postgres.dsn, autocommit=True) as c:
        c.execute("DROP TABLE IF EXISTS sl_reports")
        c.execute("DROP TABLE IF EXISTS sl_staging")
        c.execute("CREATE TABLE sl_staging (zone TEXT, g BIGINT, h BIGINT)")
        with c.cursor().copy("COPY sl_staging FROM STDIN") as cp:
            for r in zip(data["zone"], data["g"], data["h"]):
                cp.write_row([str(r[0]), int(r[1]), int(r[2])])

    async def go():
        be = PostgresBackend(postgres.dsn, 2)
        await be.connect()
        try:
            return await load_rows_postgres(
                be, lay, pg_table_batches(be, lay, "sl_staging", 700), source=SeededSource(5)
            )
        finally:
            await be.close()

    assert asyncio.run(go()) == 2000
    with psycopg.connect(postgres.dsn, autocommit=True) as c:
        cur = c.execute("SELECT * FROM sl_reports")
        cols, rows = [d.name for d in cur.description], cur.fetchall()
        c.execute("DROP TABLE sl_reports")
        c.execute("DROP TABLE sl_staging")
    check_reports(cols, rows, lay, 2000)
