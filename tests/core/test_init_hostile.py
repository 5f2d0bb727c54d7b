"""`dpgate init` writes names and values read from the data (table, column and ENUM type names,
domain values, file paths, the schema) into a config that is then served. Whatever those
names hold — newlines, quotes, `]`, `#`, `=`, NUL, carriage returns, Unicode line separators
(U+2028, U+2029, U+0085), bidi controls, characters outside the BMP — the file must parse
(tomllib and `config.load_config`) to exactly the tables, columns, tiers and roles the data
has: a name can never add a key, a table or a role. Names that are not lower-case identifiers
are left out with a quoted reason; tables with such names are declared under a sanitized name
whose `source` quotes the backend's name, and a query through the served config reads them."""

from __future__ import annotations

import asyncio
import re
import threading
import tomllib

import duckdb
import psycopg
import pytest

from config import load_config
from mechanisms import SeededSource
from proxy.cli import main
from proxy.gateway import Gateway
from proxy.wire.server import Server

# A column named like this turned a table public and keyed it; the second one added an admin role.
INJECT_PUBLIC = 'x\npublic = true\nkey = "id"\n#'
INJECT_ROLE = (
    'y\n[roles.evil]\ntier = "owner"\nadmin = true\nscram = "SCRAM-SHA-256$4096:AAAA$AAAA:AAAA"\n'
    "[tables.z]\n#"
)
HOSTILE = [
    INJECT_PUBLIC,
    INJECT_ROLE,
    "q\"uo'te",
    "br]acket",
    "ha#sh",
    "e=q",
    "back\\slash",
    "cr\rx",
    "ls\u2028x",
    "ps\u2029x",
    "nel\x85x",
    "vt\x0bx",
    "ff\x0cx",
    "fs\x1cx",
    "bidi\u202ex",
    "emoji\U0001f600",
    "del\x7fx",
    "tab\tx",
]
HOSTILE_DUCK = HOSTILE + ["nu\x00l"]  # Postgres names and text cannot hold NUL


def _qi(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _init(capsys, *argv) -> tuple[str, dict[str, str]]:
    assert main(["init", *argv]) == 0
    cap = capsys.readouterr()
    return cap.out, dict(re.findall(r"role (\w+): password (\S+) ", cap.err))


def _check_exact(text: str, tables: dict[str, set[str]], path=None) -> dict:
    """The file is plain lines (no line break but LF, no control character but LF), and parses to
    exactly the skeleton's server/tiers/roles and ``tables``: {source: set of column names}."""
    assert text.splitlines() == text.split("\n")[:-1], "a line break other than LF in the file"
    assert not [c for c in text if (ord(c) < 32 and c != "\n") or c == "\x7f"], (
        "a control character in the file"
    )
    assert not [c for c in text if not c.isprintable() and c != "\n"], "an unprintable character in the file"
    data = tomllib.loads(text)
    assert set(data) == {"server", "backend", "tiers", "roles", "tables"}
    assert set(data["server"]) == {"host", "port", "database", "auth", "state_dir"}
    assert set(data["tiers"]) == {"analysts", "owner"}
    assert data["roles"].keys() == {"analyst", "admin"}
    assert (
        data["roles"]["analyst"].keys() == {"tier", "scram"}
        and data["roles"]["analyst"]["tier"] == "analysts"
    )
    assert data["roles"]["admin"].keys() == {"tier", "admin", "scram"}
    got = {}
    for name, t in data["tables"].items():
        assert set(t) <= {"source", "columns", "key"}, (name, t)
        assert t.get("key", "id") == "id"  # proposed from a column named id (all present, distinct)
        for c, spec in t.get("columns", {}).items():
            assert set(spec) <= {"type", "domain", "lower", "upper", "nullable"}, (name, c, spec)
        got[t["source"]] = set(t.get("columns", {}))
    assert got == tables
    if path is not None:
        cfg = load_config(path)
        assert set(cfg.roles) == {"analyst", "admin"} and [r for r, s in cfg.roles.items() if s.admin] == [
            "admin"
        ]
        assert {t.source: set(t.columns) for t in cfg.tables.values()} == tables
        assert not any(t.public for t in cfg.tables.values())
    return data


def _duck_fixture(con):
    """`people`: an id, a text column whose values are the hostile strings (a proposed domain),
    an ENUM column whose type spells them, one int column per hostile name; one table per
    hostile name (k rows for the k-th)."""
    con.execute(
        "CREATE TYPE mood AS ENUM (" + ", ".join("'" + h.replace("'", "''") + "'" for h in HOSTILE_DUCK) + ")"
    )
    cols = ", ".join(f"i AS {_qi(h)}" for h in HOSTILE_DUCK)
    vals = "[" + ", ".join("'" + h.replace("'", "''") + "'" for h in HOSTILE_DUCK) + "]"
    con.execute(
        f'CREATE TABLE people AS SELECT i AS id, i % 7 AS "order", '
        f"{vals}[i % {len(HOSTILE_DUCK)} + 1] AS region, "
        f"{vals}[i % {len(HOSTILE_DUCK)} + 1]::mood AS m, {cols} FROM range(200) t(i)"
    )
    for k, h in enumerate(HOSTILE_DUCK, 1):
        con.execute(f"CREATE TABLE {_qi(h)} AS SELECT i AS v FROM range({k}) t(i)")


def test_duckdb_file_hostile_names(tmp_path, capsys):
    db = tmp_path / "evil.duckdb"
    con = duckdb.connect(str(db))
    _duck_fixture(con)
    con.close()
    cfg = tmp_path / "dpgate.toml"
    _init(capsys, str(db), "--exact-bounds", "-o", str(cfg))  # 200 rows: too few for DP bounds at ε 0.1
    text = cfg.read_text()
    expect = {"people": {"id", "order", "region", "m"}} | {_qi(h): {"v"} for h in HOSTILE_DUCK}
    data = _check_exact(text, expect, cfg)
    people = next(t for t in data["tables"].values() if t["source"] == "people")
    assert sorted(people["columns"]["region"]["domain"]) == sorted(HOSTILE_DUCK)  # values round-trip exactly
    assert sorted(people["columns"]["m"]["domain"]) == sorted(HOSTILE_DUCK)
    assert "# left out: " + '"x\\npublic = true\\nkey = \\"id\\"\\n#"' in text  # the name, quoted
    assert main(["check-config", "--backend", str(cfg)]) == 0
    # Each sanitized table reads its own backend table through the served config: k rows for the k-th.
    c = load_config(cfg)
    queries = {name: f"SELECT COUNT(*) FROM {name}" for name in c.tables if name != "people"}
    queries["groups"] = 'SELECT region, COUNT(*), SUM("order") FROM people GROUP BY region'
    got = _serve(c, tmp_path, queries)
    for name, t in c.tables.items():
        if name != "people":
            k = HOSTILE_DUCK.index(t.source[1:-1].replace('""', '"')) + 1
            assert abs(got[name][0][0] - k) < 60, (
                name,
                got[name],
                k,
            )  # Laplace(1): |noise| < 60 w.p. 1-1e-26
    assert sorted(r[0] for r in got["groups"]) == sorted(HOSTILE_DUCK)  # the domain's values, as group keys


def _serve(cfg, tmp_path, queries: dict[str, str]) -> dict[str, list]:
    """The rows of each query through a dpgate serving ``cfg`` (its own Gateway and wire server)."""
    from proxy.wire.auth import make_verifier

    roles = {
        r: s.model_copy(update={"scram": make_verifier("pw", iterations=4096)}) for r, s in cfg.roles.items()
    }
    tiers = {n: t.model_copy(update={"budget": 1000.0}) for n, t in cfg.tiers.items()}
    cfg = cfg.model_copy(
        update={
            "roles": roles,
            "tiers": tiers,
            "server": cfg.server.model_copy(update={"port": 0, "state_dir": tmp_path / "state"}),
        }
    )
    loop = asyncio.new_event_loop()
    th = threading.Thread(target=loop.run_forever, daemon=True)
    th.start()

    async def start():
        gw = Gateway(cfg, tmp_path / "state", source=SeededSource(35))
        await gw.start()
        srv = Server(gw.handler_factory, authenticator=gw, host="127.0.0.1", port=0)
        await srv.start()
        return gw, srv

    gw, srv = asyncio.run_coroutine_threadsafe(start(), loop).result(120)
    try:
        out = {}
        with psycopg.connect(
            f"host=127.0.0.1 port={srv.port} dbname=dpgate user=analyst password=pw sslmode=disable",
            autocommit=True,
        ) as con:
            for name, sql in queries.items():
                out[name] = con.execute(sql).fetchall()
        return out
    finally:

        async def stop():
            await srv.stop()
            await gw.close()

        asyncio.run_coroutine_threadsafe(stop(), loop).result(60)
        loop.call_soon_threadsafe(loop.stop)
        th.join(10)


def test_parquet_and_csv_hostile_names(tmp_path, capsys):
    con = duckdb.connect()
    _duck_fixture(con)
    pq = tmp_path / "people.parquet"
    con.execute(f"COPY (SELECT * EXCLUDE (m) FROM people) TO '{pq}' (FORMAT parquet)")
    csv = tmp_path / "we'ird\n[roles.evil]\n#.csv"  # a file name is a name too
    con.execute(
        f"COPY (SELECT id, region FROM people) TO '{str(csv).replace(chr(39), chr(39) * 2)}' (HEADER)"
    )
    csv2 = tmp_path / "cols.csv"
    csv2.write_text(
        ",".join('"' + h.replace('"', '""') + '"' for h in HOSTILE if h not in ("cr\rx",))
        + ",id\n"
        + ",".join(["1"] * len(HOSTILE))
        + "\n"
    )
    con.close()
    cfg = tmp_path / "files.toml"
    _init(capsys, str(pq), str(csv), str(csv2), "-o", str(cfg))
    text = cfg.read_text()
    lit = lambda p: "'" + str(p).replace("'", "''") + "'"
    expect = {
        f"read_parquet({lit(pq)})": {"id", "order", "region"},
        f"read_csv({lit(csv)})": {"id", "region"},
        f"read_csv({lit(csv2)})": {"id"},
    }
    data = _check_exact(text, expect, cfg)
    for t in data["tables"].values():
        if "region" in t.get("columns", {}):
            assert sorted(t["columns"]["region"]["domain"]) == sorted(HOSTILE_DUCK)
    assert main(["check-config", "--backend", str(cfg)]) == 0


def test_postgres_schema_hostile_names(tmp_path, capsys, postgres):
    schema = 'init"evil\n[roles.evil]\n#'
    with psycopg.connect(postgres.dsn, autocommit=True) as con:
        con.execute(f"DROP SCHEMA IF EXISTS {_qi(schema)} CASCADE; CREATE SCHEMA {_qi(schema)}")
        cols = ", ".join(f"i AS {_qi(h)}" for h in HOSTILE)
        vals = "ARRAY[" + ", ".join("'" + h.replace("'", "''") + "'" for h in HOSTILE) + "]"
        con.execute(
            f"CREATE TABLE {_qi(schema)}.people AS SELECT i AS id, ({vals})[i % {len(HOSTILE)} + 1] "
            f"AS region, {cols} FROM generate_series(1, 200) i"
        )
        for k, h in enumerate(HOSTILE, 1):
            con.execute(
                f"CREATE TABLE {_qi(schema)}.{_qi(h[:60])} AS SELECT i AS v FROM generate_series(1, {k}) i"
            )
    cfg = tmp_path / "pg.toml"
    _init(capsys, "--dsn", postgres.dsn, "--schema", schema, "-o", str(cfg))
    text = cfg.read_text()
    expect = {f"{_qi(schema)}.people": {"id", "region"}} | {
        f"{_qi(schema)}.{_qi(h[:60])}": {"v"} for h in HOSTILE
    }
    data = _check_exact(text, expect, cfg)
    people = next(t for t in data["tables"].values() if t["source"].endswith(".people"))
    assert sorted(people["columns"]["region"]["domain"]) == sorted(HOSTILE)
    assert main(["check-config", "--backend", str(cfg)]) == 0


@pytest.mark.parametrize(
    "value",
    ["plain", 'q"\\', "a\nb", "\x00", "\u2028\x85\u2029", "\U0001f600", "é", "\x7f", "\u202e", "\ud800"],
)
def test_toml_quote_round_trips_or_refuses(value):
    """The one quoting function: its output is one printable line that tomllib reads back as the
    value; a lone surrogate (not a Unicode scalar value, no TOML spelling) is refused."""
    from proxy.cli.init import InitError, toml_quote

    if value == "\ud800":
        with pytest.raises(InitError):
            toml_quote(value)
        return
    q = toml_quote(value)
    assert q.isprintable() and tomllib.loads(f"k = {q}")["k"] == value
