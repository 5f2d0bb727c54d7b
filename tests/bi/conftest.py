"""One dpgate per backend for the BI corpus, with a budget that lets the whole corpus run
(through psql and SQLAlchemy; a repeat of a release is free, a plan with now() is new)."""

from __future__ import annotations

import pytest

from mechanisms import SeededSource
from support.service import Service, make_config


@pytest.fixture(scope="module", params=["duckdb", "postgres"])
def bi(request, tmp_path_factory):
    if request.param == "postgres":
        backend = {"kind": "postgres", "dsn": request.getfixturevalue("postgres").dsn, "pool_size": 4}
    else:
        backend = {"kind": "duckdb", "path": str(tmp_path_factory.mktemp("duck") / "demo.duckdb")}
    # purchases per purchase: the corpus checks BI shapes and their row-level numbers
    # (tests/e2e/test_e2e_unit.py and tests/oracle cover the per-customer table)
    data = make_config(
        backend,
        tiers={
            "default": {
                "epsilon": 1.0,
                "budget": 100_000.0,
                "period": "day",
                "delta": 1e-7,
                "delta_budget": 1.0e-3,
            }
        },
        purchases="rows",
    )
    svc = Service(data, tmp_path_factory.mktemp("state"), source=SeededSource(20261123)).start()
    svc.kind = request.param
    yield svc
    svc.close()
