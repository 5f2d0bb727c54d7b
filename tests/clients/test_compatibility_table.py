"""The compatibility table in docs/clients.md is what the client tests show.

It is written by ``python -m tests.clients.report`` from the outcomes the client tests
record (:mod:`tests.clients.outcomes`). Here: the table has one row per client the tests
know, and — run after the client tests (``conftest`` orders it last) — each row of a client
whose tests all ran in this pytest run is the row those tests' outcomes render: the same cells
(connect, introspection, aggregates, COPY, TLS), and everything the row says it showed was
shown. The version and the further items may differ in another environment (a newer psql
adds ``\\bind``; npm's newest ``pg@8``): the table says what its own run tested.
"""

from __future__ import annotations

import os

import pytest

from . import outcomes, report

WRITING = pytest.mark.skipif(
    bool(os.environ.get("DPGATE_CLIENT_OUTCOMES")),
    reason="this run writes the table (python -m tests.clients.report)",
)


@WRITING
def test_table_has_a_row_per_tested_client():
    rows = report.table_rows(report.DOC.read_text())
    assert list(rows) == list(outcomes.CLIENTS), "run: python -m tests.clients.report"


@WRITING
def test_table_rows_are_this_runs_outcomes():
    snapshot = outcomes.snapshot()
    checked = [c for c in outcomes.CLIENTS if outcomes.complete(c) and c in snapshot]
    if not checked:
        pytest.skip("no client's tests all ran in this pytest run")
    rows = report.table_rows(report.DOC.read_text())
    for client in checked:
        doc, run = rows.get(client), report.row(client, snapshot[client])
        stale = f"docs/clients.md: the row of {client} is not what its tests show; run: python -m tests.clients.report"
        assert doc is not None and len(doc) == len(run), stale
        assert doc[0] == run[0] and doc[2:-1] == run[2:-1], (stale, doc, run)
        shown = set(run[-1].split("; "))
        assert doc[-1] == "—" or set(doc[-1].split("; ")) <= shown, (stale, doc[-1], run[-1])
