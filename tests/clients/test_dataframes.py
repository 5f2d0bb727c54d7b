"""Data-frame clients as their documentation uses them: polars ``read_database_uri`` with
connectorx (its default engine) and with ADBC (``adbc-driver-postgresql``), and ADBC's
DB-API directly. Both engines fetch through ``COPY (<query>) TO STDOUT`` (binary); ADBC
first reads ``pg_type`` to map type OIDs to Arrow types.

Each answer is the release the same SELECT gets (a repeat: ε charged 0), with Arrow
types from the RowDescription (int64, float64). The shared five aggregates give every other
client's numbers; a parameter goes through ``pl.read_database`` on an ADBC connection
(``execute_options={"parameters": …}``); connectorx has no bind parameters in its API. A
client that is not installed skips.
"""

from __future__ import annotations

import importlib.util

import pytest

from support.service import ask

from .outcomes import record
from .scenario import GROUP_SQL, MORE_SQL, PARAM, PARAM_SQL, check_answers
from .test_copy import charged

pl = pytest.importorskip("polars", reason="polars not installed (pip install -e .[test])")

AGGREGATES = [  # {lo}: each engine asks its own statements, so each is a fresh release
    "SELECT sex, COUNT(*) AS n, AVG(income) AS mean_income FROM pums WHERE age BETWEEN {lo} AND 52 "
    "GROUP BY sex ORDER BY sex",
    "SELECT COUNT(*) AS n FROM pums WHERE married = 1 AND age > {lo}",
    "SELECT educ, SUM(income) AS total FROM pums WHERE age < {lo} + 20 GROUP BY educ ORDER BY educ",
    "SELECT date_trunc('month', ts) AS month, COUNT(*) AS n FROM purchases WHERE amount > {lo} "
    "GROUP BY 1 ORDER BY 1",  # a date bucket: timestamps in binary COPY
]
LOW = {"connectorx": 33, "adbc": 35}
ROWS = {"connectorx": "polars + connectorx", "adbc": "polars + ADBC"}


def _engine(name: str, module: str):
    return pytest.param(
        name,
        marks=pytest.mark.skipif(
            importlib.util.find_spec(module) is None,
            reason=f"{module} not installed (pip install -e .[test])",
        ),
    )


@pytest.mark.parametrize(
    "engine", [_engine("connectorx", "connectorx"), _engine("adbc", "adbc_driver_postgresql")]
)
def test_polars_read_database_uri(svc, engine):
    eps = svc.gw.tier_of("analyst").epsilon  # what a fresh SELECT of these kinds is charged
    for template in AGGREGATES:
        sql = template.format(lo=LOW[engine])
        before = svc.gw.ledger.spent("analyst", "day")
        df = pl.read_database_uri(sql, svc.url(), engine=engine)
        assert svc.gw.ledger.spent("analyst", "day") - before == pytest.approx(eps), (engine, sql)
        rows, notes = ask(svc, sql)  # the same SELECT afterwards: a repeat
        assert charged(notes) == 0, (engine, sql, notes)
        assert df.rows() == [tuple(r) for r in rows], (engine, sql)
        assert all(dt in (pl.Int64, pl.Float64) or isinstance(dt, pl.Datetime) for dt in df.dtypes), df.schema
    record(ROWS[engine], svc, "connect", "COPY", "the same release as the SELECT")


@pytest.mark.parametrize(
    "engine", [_engine("connectorx", "connectorx"), _engine("adbc", "adbc_driver_postgresql")]
)
def test_polars_five_aggregates(svc, engine):
    """The shared aggregates as data frames: every other client's numbers."""
    url = svc.url()
    report = {
        "rows": pl.read_database_uri(GROUP_SQL, url, engine=engine).rows(),
        "more": {
            name: pl.read_database_uri(sql, url, engine=engine).rows() for name, sql in MORE_SQL.items()
        },
        "param_count": None,  # connectorx has no bind parameters
    }
    if engine == "adbc":
        import adbc_driver_postgresql.dbapi as adbc

        with adbc.connect(url) as conn:
            df = pl.read_database(
                PARAM_SQL["dollar"], connection=conn, execute_options={"parameters": [PARAM]}
            )
        ((report["param_count"],),) = df.rows()
    done = check_answers(svc, ROWS[engine], report)
    record(ROWS[engine], svc, *done)
    if engine == "connectorx":
        record(ROWS[engine], svc, "no bind parameters in connectorx's API")


@pytest.mark.skipif(
    importlib.util.find_spec("adbc_driver_postgresql") is None,
    reason="adbc-driver-postgresql not installed (pip install -e .[test])",
)
def test_adbc_dbapi_charges_like_the_select(svc):
    import adbc_driver_postgresql.dbapi as adbc

    sql = "SELECT COUNT(*) AS n, AVG(age) AS mean_age FROM pums WHERE income > 20000 AND sex = 1"
    before = svc.gw.ledger.spent("analyst", "day")
    with adbc.connect(svc.url()) as conn:
        cur = conn.cursor()
        cur.execute(sql)
        table = cur.fetch_arrow_table()
        cur.close()
    spent = svc.gw.ledger.spent("analyst", "day") - before
    fresh = charged(ask(svc, sql.replace("20000", "20001"))[1])
    assert spent == pytest.approx(fresh) and fresh > 0  # one release, charged as a SELECT
    rows, notes = ask(svc, sql)
    assert charged(notes) == 0
    assert [tuple(r.values()) for r in table.to_pylist()] == [tuple(r) for r in rows]
    assert [str(t) for t in table.schema.types] == ["int64", "double"]
    record("polars + ADBC", svc, "ADBC DB-API with Arrow types")


@pytest.mark.parametrize(
    "engine", [_engine("connectorx", "connectorx"), _engine("adbc", "adbc_driver_postgresql")]
)
def test_polars_over_tls(tls_svc, engine):
    """``sslmode=require`` in the URI: the engine refuses a connection without TLS."""
    url = tls_svc.url().replace("sslmode=disable", "sslmode=require")
    df = pl.read_database_uri("SELECT COUNT(*) AS n FROM pums WHERE age > 44", url, engine=engine)
    assert df.dtypes == [pl.Int64] and 0 < df.item() < 1000
    record(ROWS[engine], tls_svc, "TLS")
