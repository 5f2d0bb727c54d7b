"""``COPY (SELECT …) TO STDOUT`` through real clients: psql's ``\\copy`` and COPY, and
psycopg's ``cursor.copy`` in text, CSV and binary, on DuckDB and on Postgres.

The query inside COPY is the same release as the same SELECT: the first of the two pays
what a fresh SELECT of that shape pays, the other is a repeat (ε charged 0) with the same
values. Every other COPY is refused with a SQLSTATE and a hint showing the COPY (SELECT …)
form, and charges nothing.
"""

from __future__ import annotations

import csv
import io
import re

import psycopg
import pytest

from support.service import ask

from .outcomes import record
from .test_psql import PSQL, psql

CHARGED = re.compile(r"ε charged ([0-9.e+-]+)[ ;]")


def charged(notices: list[str]) -> float:
    """The ε a statement's NOTICE says it charged (0 for a repeat)."""
    (m,) = [CHARGED.search(n) for n in notices if "ε charged" in n]
    return float(m.group(1))


def copy_out(svc, sql: str) -> tuple[bytes, list[str]]:
    """The COPY stream's bytes (psycopg's Copy, unparsed) and the NOTICEs."""
    notes: list[str] = []
    with psycopg.connect(svc.dsn(), autocommit=True) as c:
        c.add_notice_handler(lambda d: notes.append(d.message_primary))
        with c.cursor().copy(sql) as cp:
            data = b"".join(bytes(b) for b in cp)
    return data, notes


def test_copy_csv_is_the_same_release_as_the_select(svc):
    inner = (
        "SELECT sex, COUNT(*) AS n, AVG(age) AS mean_age FROM pums WHERE age BETWEEN 23 AND 57 GROUP BY sex"
    )
    data, notes = copy_out(svc, f"COPY ({inner}) TO STDOUT WITH (FORMAT csv, HEADER true)")
    fresh = charged(
        ask(
            svc,
            "SELECT sex, COUNT(*) AS n, AVG(age) AS mean_age FROM pums "
            "WHERE age BETWEEN 24 AND 57 GROUP BY sex",
        )[1]
    )
    assert charged(notes) == fresh > 0  # what the same SELECT shape costs
    rows, again = ask(svc, inner)
    assert charged(again) == 0 and "repeat" in again[0]  # the SELECT is the COPY's repeat
    table = list(csv.reader(io.StringIO(data.decode())))
    assert table[0] == ["sex", "n", "mean_age"]
    assert [(int(s), int(n), float(a)) for s, n, a in table[1:]] == [tuple(r) for r in rows]
    assert charged(copy_out(svc, f"COPY ({inner}) TO STDOUT CSV")[1]) == 0  # a repeat COPY


def test_copy_after_the_select_is_free_in_text_and_binary(svc):
    inner = (
        "SELECT sex, COUNT(*), SUM(income) FROM pums WHERE age BETWEEN 19 AND 61 GROUP BY sex ORDER BY sex"
    )
    rows, notes = ask(svc, inner)
    assert charged(notes) > 0
    text, tnotes = copy_out(svc, f"COPY ({inner}) TO STDOUT")
    assert charged(tnotes) == 0
    assert [tuple(line.split("\t")) for line in text.decode().splitlines()] == [
        (str(s), str(n), repr(t).removesuffix(".0")) for s, n, t in rows
    ]
    notes2: list[str] = []
    with psycopg.connect(svc.dsn(), autocommit=True) as c:
        c.add_notice_handler(lambda d: notes2.append(d.message_primary))
        with c.cursor().copy(f"COPY ({inner}) TO STDOUT (FORMAT binary)") as cp:
            cp.set_types(["int8", "int8", "float8"])  # psycopg parses PostgreSQL's binary COPY
            got = list(cp.rows())
    assert charged(notes2) == 0 and got == [tuple(r) for r in rows]
    record("psycopg 3", svc, "COPY")


def test_copy_csv_options(svc):
    inner = "SELECT sex, COUNT(*) AS n FROM pums WHERE age BETWEEN 27 AND 49 GROUP BY sex ORDER BY sex"
    rows, _ = ask(svc, inner)
    data, _ = copy_out(
        svc, f"COPY ({inner}) TO STDOUT WITH (FORMAT csv, DELIMITER ';', FORCE_QUOTE (n), HEADER)"
    )
    assert data.decode().splitlines() == ["sex;n"] + [f'{s};"{n}"' for s, n in rows]
    old, _ = copy_out(svc, f"COPY ({inner}) TO STDOUT WITH CSV HEADER DELIMITER AS '|' FORCE QUOTE *")
    assert old.decode().splitlines() == ["sex|n"] + [f'"{s}"|"{n}"' for s, n in rows]


def test_copy_of_the_catalog(svc):
    data, notes = copy_out(
        svc,
        "COPY (SELECT relname FROM pg_catalog.pg_class WHERE relkind = 'r' "
        "ORDER BY relname) TO STDOUT (FORMAT csv)",
    )
    assert data.decode().split() == sorted(svc.cfg.tables) and not notes


@pytest.mark.parametrize(
    "sql, state",
    [
        ("COPY pums TO STDOUT", "42501"),
        ("COPY pums (age) TO STDOUT WITH CSV", "42501"),
        ("COPY pums FROM STDIN", "42501"),
        ("COPY (SELECT COUNT(*) FROM pums) TO '/tmp/dpgate-copy.csv'", "42501"),
        ("COPY (SELECT COUNT(*) FROM pums) TO PROGRAM 'cat'", "42501"),
        ("COPY (SELECT COUNT(*) FROM pums) TO STDOUT (FORMAT xml)", "22023"),
        ("COPY (SELECT COUNT(*) FROM pums) TO STDOUT (FORMAT binary, HEADER)", "42601"),
        ("COPY (SELECT COUNT(*) FROM pums) TO STDOUT (FORCE_NULL (a))", "0A000"),
        ("COPY (SELECT * FROM pums) TO STDOUT", "42501"),  # the SELECT's own refusal
        ("COPY (INSERT INTO pums VALUES (1)) TO STDOUT", None),
    ],
)
def test_other_copies_are_refused_and_charge_nothing(svc, sql, state):
    before = svc.gw.ledger.spent("analyst", "day")
    with psycopg.connect(svc.dsn(), autocommit=True) as c:
        with pytest.raises(psycopg.Error) as e:
            with c.cursor().copy(sql) as cp:
                list(cp)
    assert e.value.sqlstate is not None and (state is None or e.value.sqlstate == state), e.value
    if not sql.startswith("COPY (SELECT * "):
        assert "COPY (SELECT" in (e.value.diag.message_hint or ""), e.value.diag.message_hint
    assert svc.gw.ledger.spent("analyst", "day") == before


@pytest.mark.skipif(PSQL is None, reason="psql not installed (apt-get install postgresql-client)")
def test_psql_backslash_copy_to_a_file(svc, tmp_path):
    inner = "SELECT sex, COUNT(*) FROM pums WHERE age BETWEEN 31 AND 44 GROUP BY sex ORDER BY sex"
    out = tmp_path / "f.csv"
    r = psql(svc, "-c", f"\\copy ({inner}) TO '{out}' CSV HEADER")
    assert r.returncode == 0, r.stderr
    assert "COPY 2" in r.stdout and charged(re.findall(r"NOTICE:.*", r.stderr)) > 0
    rows, notes = ask(svc, inner)
    assert charged(notes) == 0
    assert list(csv.reader(out.open())) == [["sex", "count"]] + [[str(s), str(n)] for s, n in rows]
    r = psql(svc, "-c", f"COPY ({inner}) TO STDOUT")  # psql writes COPY's rows to stdout
    assert r.returncode == 0 and r.stdout.splitlines() == [f"{s}|{n}".replace("|", "\t") for s, n in rows]
    refused = psql(svc, "-c", f"\\copy pums TO '{out}'")
    assert refused.returncode != 0 and "42501" in refused.stderr and "COPY (SELECT" in refused.stderr
    record(
        "psql",
        svc,
        "COPY",
        "\\copy to a file",
        "refused with the COPY (SELECT …) form: COPY table, \\copy table",
    )
