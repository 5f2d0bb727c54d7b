"""COPY read from its tokens (rewriter/copy.py): the query's text and the options in the
forms clients send (ADBC's ``(FORMAT binary)``, connectorx's, psql's ``\\copy … CSV HEADER``),
and the routes: the query's route inside, every other COPY refused with the COPY (SELECT …)
form as the hint."""

from __future__ import annotations

import pytest

from rewriter.copy import CopyOut, copy_statement
from rewriter.errors import Refusal
from rewriter.route import route

Q = "SELECT sex, COUNT(*) FROM pums WHERE name = ')' GROUP BY sex"


@pytest.mark.parametrize(
    "sql, expected",
    [
        (f"COPY ({Q}) TO STDOUT", CopyOut(Q)),
        (f"copy ( {Q} ) to stdout (format binary)", CopyOut(Q, "binary")),
        (
            f"COPY ({Q}) TO STDOUT WITH (FORMAT csv, HEADER true, DELIMITER ';', NULL 'NA', FORCE_QUOTE *)",
            CopyOut(Q, "csv", True, ";", "NA", force_quote=True),
        ),
        (
            f"COPY ({Q}) TO STDOUT (FORMAT csv, HEADER off, QUOTE '''', ESCAPE '\\', FORCE_QUOTE (sex, \"N\"))",
            CopyOut(Q, "csv", False, quote="'", escape="\\", force_quote=("sex", "N")),
        ),
        (
            f"COPY ({Q}) TO STDOUT WITH CSV HEADER DELIMITER AS '|' NULL AS '' FORCE QUOTE sex",
            CopyOut(Q, "csv", True, "|", "", force_quote=("sex",)),
        ),
        (f"COPY ({Q}) TO STDOUT BINARY", CopyOut(Q, "binary")),
        (f"COPY ({Q}) TO STDOUT (ENCODING 'UTF8')", CopyOut(Q)),
        ("COPY ((SELECT 1)) TO STDOUT", CopyOut("(SELECT 1)")),
    ],
)
def test_copy_to_stdout_is_read(sql, expected):
    assert copy_statement(sql) == expected


def test_not_a_copy():
    assert copy_statement("SELECT 'COPY (SELECT 1) TO STDOUT'") is None


@pytest.mark.parametrize(
    "sql, state",
    [
        ("COPY pums TO STDOUT", "42501"),
        ("COPY pums FROM STDIN", "42501"),
        ("COPY pums (a, b) FROM STDIN", "42501"),
        ("COPY (SELECT 1) FROM STDIN", "42501"),
        ("COPY (SELECT 1) TO '/tmp/f'", "42501"),
        ("COPY (SELECT 1) TO PROGRAM 'x'", "42501"),
        ("COPY (SELECT 1) TO STDOUT (FORMAT parquet)", "22023"),
        ("COPY (SELECT 1) TO STDOUT (FORMAT csv, FORMAT text)", "42601"),
        ("COPY (SELECT 1) TO STDOUT (DELIMITER ';;')", "0A000"),
        ("COPY (SELECT 1) TO STDOUT (QUOTE '\"')", "0A000"),
        ("COPY (SELECT 1) TO STDOUT (FORMAT binary, NULL '')", "42601"),
        ("COPY (SELECT 1) TO STDOUT (FORMAT csv, DELIMITER ',', NULL 'a,b')", "22023"),
        ("COPY (SELECT 1) TO STDOUT (HEADER maybe)", "22023"),
        ("COPY (SELECT 1) TO STDOUT (FREEZE)", "0A000"),
        ("COPY (SELECT 1) TO STDOUT (ENCODING 'LATIN1')", "0A000"),
        ("COPY (SELECT 1) TO STDOUT WITH OIDS", "42601"),
        ("COPY (SELECT 1 TO STDOUT", "42601"),
        ("COPY () TO STDOUT", "42601"),
        ("COPY (SELECT 1) TO STDOUT (FORMAT csv", "42601"),
    ],
)
def test_other_copies_are_refused(sql, state):
    with pytest.raises(Refusal) as e:
        copy_statement(sql)
    assert e.value.sqlstate == state and "COPY (SELECT" in e.value.hint


def test_route_of_a_copy_is_its_query_route():
    tables = {"pums": None}
    r = route(f"COPY ({Q}) TO STDOUT (FORMAT binary)", tables)
    assert (r.kind, r.table, r.body, r.inner) == ("copy", "pums", Q, route(Q, tables))
    with pytest.raises(Refusal) as e:
        route("COPY (INSERT INTO pums VALUES (1)) TO STDOUT", tables)
    assert e.value.sqlstate == "0A000"
    with pytest.raises(Refusal):
        route(f"EXPLAIN COPY ({Q}) TO STDOUT", tables)
