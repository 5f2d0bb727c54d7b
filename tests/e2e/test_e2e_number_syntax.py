"""Numbers through the wire are read in Postgres's syntax: a text parameter '41_0' bound to an
integer column is refused, not read as 410 as Python's int() would."""

from __future__ import annotations

import psycopg
import pytest


def test_int_parameter_with_digit_separator_is_refused(duck_service):
    with psycopg.connect(duck_service.dsn("other"), autocommit=True) as c:
        with pytest.raises(psycopg.Error) as e:
            c.execute("SELECT COUNT(*) FROM pums WHERE age = %s", ["41_0"])
        assert e.value.sqlstate in ("22023", "22P02")
