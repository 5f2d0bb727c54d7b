"""The statement log: one JSON line per statement with role, fingerprint,
decision, ε, time in the proxy and in the backend scan — never an answer."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import psycopg
import pytest

from proxy.gateway.statement_log import statement_fingerprint
from support.service import Service, make_config


@pytest.fixture
def logged(tmp_path):
    cfg = make_config({"kind": "duckdb", "path": str(tmp_path / "d.duckdb")})
    cfg["server"]["log_format"] = "json"
    svc = Service(cfg, tmp_path / "state", people_rows=1000).start()
    yield svc
    svc.close()


class _Capture(logging.Handler):
    def __init__(self):
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record):
        self.lines.append(record.getMessage())


def test_json_statement_log_has_timing_and_no_values(logged):
    log = logging.getLogger("dpgate.statements")
    cap, old = _Capture(), log.level
    log.addHandler(cap)
    log.setLevel(logging.INFO)
    sql = "SELECT sex, COUNT(*), AVG(age) FROM pums GROUP BY sex"
    try:
        with psycopg.connect(logged.dsn("analyst"), autocommit=True) as c:
            rows = c.execute(sql).fetchall()
            c.execute(sql).fetchall()  # repeat: no scan
            with pytest.raises(psycopg.Error):
                c.execute("SELECT age FROM pums")  # refused: no scan
        deadline = time.monotonic() + 10  # the line is written after the reply
        while len(cap.lines) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        log.removeHandler(cap)
        log.setLevel(old)
    recs = [json.loads(x) for x in cap.lines]
    released, repeat, refused = recs[-3:]
    assert released["decision"] == "released" and released["role"] == "analyst"
    assert released["fingerprint"] == statement_fingerprint(sql) == repeat["fingerprint"]
    assert released["epsilon"] == 1.0 and repeat["epsilon"] == 0
    assert 0 < released["backend_ms"] <= released["ms"]  # the scan is part of the statement
    assert repeat["decision"] == "repeat" and "backend_ms" not in repeat
    assert refused["decision"] == "refused 42501" and "backend_ms" not in refused
    assert released["ledger"] == "charged" and repeat["ledger"] == refused["ledger"] == "none"
    allowed = {"ts", "role", "fingerprint", "decision", "epsilon", "ledger", "ms", "backend_ms"}
    assert all(set(r) <= allowed for r in recs)  # no field for any answer or value
    assert len(rows) == 2


def _documented_log_examples() -> tuple[list[dict], list[str]]:
    """The example lines of docs/operations.md, section "Logs": (JSON records, text lines)."""
    doc = (Path(__file__).resolve().parents[2] / "docs" / "operations.md").read_text()
    section = doc[doc.index("\n## Logs\n") :]
    end = section.find("\n## ", 1)
    section = section if end < 0 else section[:end]
    blocks = section.split("```")[1::2]
    lines = [ln for b in blocks for ln in b.strip().splitlines()]
    return [json.loads(ln) for ln in lines if ln.startswith("{")], [
        ln for ln in lines if ln.startswith("role=")
    ]


def test_the_documented_log_examples_are_what_is_written(logged):
    """The documented example lines have exactly the fields, in the order, that the log writes."""
    log = logging.getLogger("dpgate.statements")
    cap, old = _Capture(), log.level
    log.addHandler(cap)
    log.setLevel(logging.INFO)
    sql = "SELECT sex, COUNT(*) FROM pums GROUP BY sex"
    try:
        with psycopg.connect(logged.dsn("analyst"), autocommit=True) as c:
            c.execute(sql).fetchall()
            c.execute(sql).fetchall()
        deadline = time.monotonic() + 10
        while len(cap.lines) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        logged.gw.log_statement.as_json = False  # the same statements, written as text
        cap.lines_json, cap.lines = cap.lines, []
        logged.gw.log_statement(
            role="analyst",
            sql=sql,
            decision="released",
            epsilon=1.0,
            ms=2.0,
            backend_ms=1.0,
            ledger="charged",
        )
        logged.gw.log_statement(role="analyst", sql=sql, decision="repeat", epsilon=0.0, ms=0.3)
    finally:
        log.removeHandler(cap)
        log.setLevel(old)
    released, repeat = (json.loads(x) for x in cap.lines_json[-2:])
    examples, text = _documented_log_examples()
    assert [list(r) for r in examples] == [list(released), list(repeat)]
    assert [(r["decision"], r["ledger"]) for r in examples] == [
        (released["decision"], released["ledger"]),
        (repeat["decision"], repeat["ledger"]),
    ]

    def keys(line: str) -> list[str]:
        return [w.split("=", 1)[0] for w in line.split() if "=" in w]

    assert [keys(t) for t in text[:2]] == [keys(x) for x in cap.lines]
