"""Shared fixtures: a dpgate service on embedded DuckDB and on a real Postgres."""

from __future__ import annotations

import os
import sys

import pytest

sys.path.append(os.path.dirname(__file__))  # after the packages: tests/mechanisms must not shadow mechanisms

from hypothesis import settings

from support.pg import TempPostgres

# Property tests are reproducible: a fixed derivation of examples, no example database
# carried between runs (set HYPOTHESIS_PROFILE=explore for fresh random examples).
settings.register_profile("ci", derandomize=True, database=None)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(scope="session")
def postgres():
    pg = TempPostgres().start()
    yield pg
    pg.stop()


@pytest.fixture(scope="session")
def spark_connect(tmp_path_factory):
    """A local Spark Connect server (tests/support/spark.py); skipped with one line if
    pyspark or Java is missing (.ci/run installs both)."""
    from support.spark import LocalSparkConnect, unavailable

    why = unavailable()
    if why:
        pytest.skip(f"Spark tests skipped: {why}")
    sc = LocalSparkConnect(tmp_path_factory.mktemp("spark")).start()
    yield sc
    sc.stop()


def _service(request, tmp_path_factory, purchases: str = "demo"):
    from support.service import Service, make_config

    backend = None
    if request.param == "postgres":
        pg = request.getfixturevalue("postgres")
        backend = {"kind": "postgres", "dsn": pg.dsn, "pool_size": 4}
    else:
        backend = {"kind": "duckdb", "path": str(tmp_path_factory.mktemp("duck") / "demo.duckdb")}
    from mechanisms import SeededSource

    # Tests inject a seeded source so that noisy assertions are reproducible; serving
    # code uses the CSPRNG (tests/core/test_randomness.py checks that).
    svc = Service(
        make_config(backend, purchases=purchases),
        tmp_path_factory.mktemp("state"),
        source=SeededSource(20261122),
    ).start()
    return svc


@pytest.fixture(scope="module", params=["duckdb", "postgres"])
def service(request, tmp_path_factory):
    """A dpgate service per backend (module scope: the ledger persists across a module's tests)."""
    svc = _service(request, tmp_path_factory)
    yield svc
    svc.close()


@pytest.fixture(scope="module", params=["duckdb", "postgres"])
def row_service(request, tmp_path_factory):
    """As ``service``, with ``purchases`` protected per row (no privacy unit)."""
    svc = _service(request, tmp_path_factory, purchases="rows")
    yield svc
    svc.close()


@pytest.fixture(scope="module", params=["duckdb"])
def duck_service(request, tmp_path_factory):
    svc = _service(request, tmp_path_factory)
    yield svc
    svc.close()
