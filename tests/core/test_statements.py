"""Statement splitting and the locally answered session statements."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.pipeline.statements import SessionState, split
from rewriter.errors import Refusal


def test_split_respects_quotes_comments_dollar():
    sql = "select 1; select ';' -- c;\n; /* a;/* b; */ */ select $$a;b$$; select $t$x;$t$;;"
    assert split(sql) == ["select 1", "select ';'", "select $$a;b$$", "select $t$x;$t$"]
    assert split("  ;  -- only a comment\n") == []
    assert split('select "a;b" from t') == ['select "a;b" from t']


@pytest.mark.parametrize(
    "sql,tag",
    [
        ("BEGIN", "BEGIN"),
        ("begin transaction isolation level read committed", "BEGIN"),
        ("START TRANSACTION", "START TRANSACTION"),
        ("COMMIT", "COMMIT"),
        ("END", "COMMIT"),
        ("ROLLBACK", "ROLLBACK"),
        ("SET extra_float_digits = 3", "SET"),
        ("SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL READ COMMITTED", "SET"),
        ("RESET ALL", "RESET"),
        ("DISCARD ALL", "DISCARD ALL"),
        ("DEALLOCATE ALL", "DEALLOCATE ALL"),
        ("DEALLOCATE PREPARE s1", "DEALLOCATE"),
        ("SELECT 1", "SELECT 1"),
    ],
)
def test_session_statements(sql, tag):
    assert SessionState("u", "demo", {}).match(sql)[0] == tag


def test_set_show_reset_roundtrip():
    s = SessionState("u", "demo", {"application_name": "psql"})
    assert s.match("SHOW application_name")[2] == [("psql",)]
    tag, _, _, ps = s.match("SET application_name TO 'bi tool'")
    assert ps == {"application_name": "bi tool"}
    assert s.match("show application_name")[2] == [("bi tool",)]
    s.match("RESET application_name")
    assert s.match("SHOW application_name")[2] == [("",)]
    assert s.match("SHOW TRANSACTION ISOLATION LEVEL")[2] == [("read committed",)]


def test_show_unknown_and_protected():
    s = SessionState("u", "demo", {})
    with pytest.raises(Refusal) as e:
        s.match("SHOW data_directory")
    assert e.value.sqlstate == "42704"
    with pytest.raises(Refusal) as e:
        s.match("SET role = admin")
    assert e.value.sqlstate == "42501"


def test_data_queries_are_not_session_statements():
    s = SessionState("u", "demo", {})
    assert s.match("SELECT count(*) FROM pums") is None
    assert s.match("SELECT 1 FROM pums") is None


def test_local_table_settings_are_checked_at_set_time():
    s = SessionState("u", "demo", {})
    assert s.match("SET dpgate.local_edges = 'whole'")[0] == "SET"
    assert s.settings["dpgate.local_edges"] == "whole"
    with pytest.raises(Refusal) as e:
        s.match("SET dpgate.local_edges = 'partial'")
    assert e.value.sqlstate == "22023" and "dpgate.local_edges" in e.value.message
    assert s.settings["dpgate.local_edges"] == "whole"  # a refused SET changes nothing
    with pytest.raises(Refusal) as e:
        s.match("SET dpgate.local_edge = 'whole'")  # a typo is not silently kept
    assert e.value.sqlstate == "42704"
    assert s.match("RESET dpgate.local_edges")[0] == "RESET" and not s.settings["dpgate.local_edges"]


@given(
    st.text(
        alphabet=st.sampled_from(list("SELECT count(*) FROM t WHERE a > 5 AND b IN (1,2)\n\t\r ")),
        max_size=80,
    )
)
@settings(max_examples=500, deadline=None)
def test_split_fast_path_equals_the_scanner(sql):
    """Without ; quotes, comments or $, split() skips the character scanner: same result."""
    from proxy.pipeline.statements import _scan

    assert split(sql) == _scan(sql)
