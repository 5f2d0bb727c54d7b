"""The clients' corpus (tests/clients/corpus.json: every statement each client sent in the
client tests, with its parameters and how dpgate answered it) replayed per client, as
``python -m bench.sql_coverage`` does: each statement is still answered, or refused with the
same SQLSTATE, as when it was recorded."""

from __future__ import annotations

import json

from bench.sql_coverage import ROOT, client_coverage


def test_each_clients_statements_get_their_recorded_outcome():
    corpus = json.loads((ROOT / "tests" / "clients" / "corpus.json").read_text())
    rows = client_coverage(20_000)  # what is answered does not depend on the data's size
    assert set(rows) == set(corpus) and len(rows) >= 10
    for client, r in rows.items():
        assert r["total"] == len(corpus[client]) and r["as recorded"] == r["total"], (client, dict(r))
        assert r["answered"] > r["total"] // 2, (client, dict(r))
