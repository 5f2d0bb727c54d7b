"""A zCDP tier served from Spark (Spark Connect), end to end over the wire: central COUNT and SUM
by the discrete Gaussian at a customer's L2 sensitivity, charged ρ, with the (ε, δ) reading in the
NOTICE; the bounded truth comes from the DuckDB file the Spark tables were mirrored from. Skipped
with one line when Java or pyspark is missing (the ``spark_connect`` fixture)."""

from __future__ import annotations

import math

import pytest

from mechanisms import SeededSource
from mechanisms.accounting import zcdp_epsilon
from support.service import Service, ask, backend_rows, make_config
from support.spark import mirror_demo

RHO = 0.05
ZTIER = {"half": {"accounting": "zcdp", "rho": RHO, "budget": 1.0, "period": "day"}}
PEOPLE = 2000


def _config(backend: dict) -> dict:
    cfg = make_config(backend, tiers=ZTIER)
    if backend["kind"] == "spark":
        cfg["demo"] = False  # the demo loader writes DuckDB/Postgres
        del cfg["tables"]["trips"]  # a local table
        for role in cfg["roles"].values():
            role.pop("insert", None)
    return cfg


@pytest.fixture(scope="module")
def services(spark_connect, tmp_path_factory):
    work = tmp_path_factory.mktemp("spark_zcdp")
    mirror_demo(spark_connect.session(), work / "mirror.duckdb", work / "parquet", PEOPLE)
    duck = Service(
        _config({"kind": "duckdb", "path": str(work / "mirror.duckdb")}),
        work / "duck_state",
        people_rows=PEOPLE,
        trips_rows=1000,
        source=SeededSource(5),
    ).start()
    spark = Service(
        _config({"kind": "spark", "remote": spark_connect.remote}),
        work / "spark_state",
        source=SeededSource(5),
    ).start()
    yield duck, spark
    spark.close()
    duck.close()


def test_count_and_sum_by_store_on_spark_are_gaussian_and_charged_rho(services):
    duck, spark = services
    sql = "SELECT store, COUNT(*), SUM(amount) FROM purchases GROUP BY store"
    rows, notes = ask(spark, sql, "half")
    assert spark.gw.ledger.spent("half", "day", "rho") == pytest.approx(RHO)
    head = notes[-1]
    assert head.startswith(
        f"dpgate: ρ charged {RHO:g} (zCDP; alone (ε {zcdp_epsilon(RHO, 1e-6):.3g}, δ 1e-06)-DP)"
    )
    assert "discrete_gaussian_count" in head and "discrete_gaussian_sum" in head
    truth = dict(
        backend_rows(
            duck,
            "SELECT store, SUM(LEAST(n, 10)) FROM (SELECT store, customer_id, COUNT(*) AS n FROM purchases "
            "WHERE customer_id IS NOT NULL GROUP BY store, customer_id) t GROUP BY store",
        )
    )
    sigma2 = 10 * 10 * 10 / (2 * RHO / 2)  # COUNT at ρ/2: Δ₂² = min(G, cells)·R² = 1000
    bound = math.sqrt(2 * sigma2 * math.log(2 * 10 / 1e-9))  # sub-Gaussian tail, union over 10 cells
    assert [r[0] for r in rows] == list(range(1, 11))
    for store, n, _ in rows:
        assert abs(n - int(truth[store])) <= bound
    again, notes = ask(spark, sql, "half")
    assert again == rows and "ρ charged 0 (repeat" in notes[-1]
