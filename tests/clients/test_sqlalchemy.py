"""The shared scenario through SQLAlchemy 2 (engine, ``inspect()`` reflection as Superset
and other BI tools use it, ``pandas.read_sql``) with its Postgres drivers, on DuckDB and on
Postgres, and over TLS."""

from __future__ import annotations

import ssl

import pytest

sa = pytest.importorskip("sqlalchemy", minversion="2.0", reason="pip install 'sqlalchemy>=2'")
pd = pytest.importorskip("pandas", reason="pip install pandas")

from support.service import PASSWORDS, ask  # noqa: E402

from .outcomes import record  # noqa: E402
from .pending import CATALOG_PARAMS, SESSION_STATEMENTS, expect_fix  # noqa: E402
from .scenario import (  # noqa: E402
    GROUP_SQL,
    MORE_SQL,
    PARAM,
    PARAM_SQL,
    PUMS_COLUMNS,
    PUMS_TYPES,
    REFUSED_SQL,
    SECRET,
    SECRET_SQL,
    check_answers,
    check_report,
    check_rows,
)
from .test_copy import charged  # noqa: E402

# driver -> the fix it still needs (None: works today)
DRIVERS = {"psycopg2": None, "psycopg": SESSION_STATEMENTS, "pg8000": CATALOG_PARAMS}
ROWS = {
    "psycopg2": "SQLAlchemy + psycopg2",
    "psycopg": "SQLAlchemy + psycopg 3",
    "pg8000": "SQLAlchemy + pg8000",
}


def engine(svc, driver="psycopg2", **connect_args):
    if driver == "psycopg2":
        pytest.importorskip("psycopg2", reason="pip install psycopg2-binary")
    if driver == "pg8000":
        pytest.importorskip("pg8000", reason="pip install pg8000")
    url = sa.engine.URL.create(
        f"postgresql+{driver}",
        username="analyst",
        password=PASSWORDS["analyst"],
        host="127.0.0.1",
        port=svc.port,
        database="demo",
    )
    return sa.create_engine(url, connect_args=connect_args, pool_pre_ping=True)


def error(conn, sql) -> tuple[str, str]:
    with pytest.raises(sa.exc.DBAPIError) as e:
        conn.execute(sa.text(sql))
    conn.rollback()
    orig = e.value.orig
    state = getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)
    if state is None and isinstance(orig.args[0], dict):  # pg8000: the ErrorResponse fields
        return orig.args[0]["C"], orig.args[0]["M"]
    diag = getattr(orig, "diag", None)
    return state, diag.message_primary if diag is not None else str(orig)


def reflect(eng) -> dict:
    insp = sa.inspect(eng)
    cols = insp.get_columns("pums")
    out = {
        "schemas": insp.get_schema_names(),
        "tables": insp.get_table_names(),
        "views": insp.get_view_names(),
        "columns": [c["name"] for c in cols],
        "types": {c["name"]: c["type"] for c in cols},
        "comments": {c["name"]: c.get("comment") for c in cols},
        "has_secret": insp.has_table(SECRET),
        "pk": insp.get_pk_constraint("pums"),
        "fks": insp.get_foreign_keys("pums"),
        "indexes": insp.get_indexes("pums"),
        "unique": insp.get_unique_constraints("pums"),
        "checks": insp.get_check_constraints("pums"),
        "comment": insp.get_table_comment("pums"),
    }
    with pytest.raises(sa.exc.NoSuchTableError):
        insp.get_columns(SECRET)
    md = sa.MetaData()
    md.reflect(eng)
    out["reflected"] = sorted(md.tables)
    out["table"] = sa.Table("pums", sa.MetaData(), autoload_with=eng)
    return out


def scenario(eng) -> dict:
    meta = reflect(eng)
    with eng.connect() as conn:
        rows = conn.execute(sa.text(GROUP_SQL)).all()
        n = conn.execute(sa.text(PARAM_SQL["named"]), {"age": PARAM}).scalar_one()
        more = {name: conn.execute(sa.text(sql)).all() for name, sql in MORE_SQL.items()}
        refused, secret = error(conn, REFUSED_SQL), error(conn, SECRET_SQL)
    return {
        **meta,
        "rows": [tuple(r) for r in rows],
        "param_count": n,
        "more": more,
        "refused": refused,
        "secret_error": secret,
    }


def check_reflection(svc, report) -> None:
    assert report["schemas"] == ["dpgate", "information_schema", "public"]  # dpgate: the budget/release views
    assert report["views"] == [] and report["has_secret"] is False
    assert report["reflected"] == sorted(report["tables"])
    assert {
        k: str(v.compile(dialect=sa.dialects.postgresql.dialect())).lower()
        for k, v in report["types"].items()
    } == PUMS_TYPES
    assert (
        report["comments"]["age"]
        == "age in years — bounds [0, 100]: SUM/AVG/VAR clamp here; no public domain: GROUP BY releases the keys chosen by partition selection (needs δ)"
    )
    assert (
        report["comment"]["text"]
        == svc.cfg.tables["pums"].description
        + " — central DP per row: each answer noisy, ε per query from your tier"
    )
    assert report["pk"]["constrained_columns"] == [] and report["fks"] == report["indexes"] == []
    assert report["unique"] == report["checks"] == []
    assert list(report["table"].c.keys()) == PUMS_COLUMNS


@pytest.mark.parametrize("driver", list(DRIVERS))
def test_sqlalchemy_engine_and_inspect(svc, driver, request):
    if DRIVERS[driver]:
        expect_fix(request, svc, DRIVERS[driver])
    eng = engine(svc, driver)
    try:
        report = scenario(eng)
    finally:
        eng.dispose()
    check_reflection(svc, report)
    done = check_report(svc, f"sqlalchemy+{driver}", report)
    record(ROWS[driver], svc, *done, "inspect() reflection with the DP facts as comments")


def test_sqlalchemy_core_select_and_pandas(svc):
    eng = engine(svc)
    try:
        pums = sa.Table("pums", sa.MetaData(), autoload_with=eng)
        q = (
            sa.select(pums.c.sex, sa.func.count(), sa.func.sum(pums.c.income), sa.func.avg(pums.c.age))
            .where(pums.c.age.between(30, 60))
            .group_by(pums.c.sex)
            .order_by(pums.c.sex)
        )
        with eng.connect() as conn:
            core = conn.execute(q).all()
            n = conn.execute(
                sa.select(sa.func.count()).select_from(pums).where(pums.c.age > PARAM)
            ).scalar_one()
        df = pd.read_sql(GROUP_SQL, eng)
        dfp = pd.read_sql(sa.text(PARAM_SQL["named"]), eng, params={"age": PARAM})
        tables = pd.read_sql(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public' ORDER BY 1", eng
        )
        more = {name: _records(pd.read_sql(sql, eng)) for name, sql in MORE_SQL.items()}
    finally:
        eng.dispose()
    ref = svc.reference["scenario"] if "scenario" in svc.reference else None
    rows = check_rows(core)  # Core's SELECT (with bound parameters) is the same measurement
    assert list(df.columns) == ["sex", "count", "sum", "avg"] and len(df) == 2
    got = [tuple(r) for r in df.itertuples(index=False)]
    assert len(got) == len(rows)
    for g, r in zip(got, rows):  # pytest.approx takes flat sequences only
        assert list(g) == pytest.approx(list(r))
    assert str(df["count"].dtype) == "int64" and str(df["avg"].dtype) == "float64"
    assert dfp.iloc[0, 0] == n
    assert SECRET not in set(tables["table_name"])
    if ref is not None:
        assert n == ref["param_count"]
    record("SQLAlchemy + psycopg2", svc, "Core select() with func.count/sum/avg")
    report = {"rows": _records(df), "param_count": _records(dfp)[0][0], "more": more}
    record("pandas.read_sql", svc, "connect", *check_answers(svc, "pandas.read_sql", report))


def _records(df) -> list[tuple]:
    """A data frame's rows with Python values (numpy scalars unwrapped)."""
    return [
        tuple(v.item() if hasattr(v, "item") and hasattr(v, "dtype") else v for v in r)
        for r in df.itertuples(index=False)
    ]


@pytest.mark.parametrize("driver", list(DRIVERS))
def test_sqlalchemy_tls(tls_svc, driver):
    if driver == "pg8000":  # pg8000 takes an SSL context, not sslmode
        ctx = ssl.create_default_context()
        ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
        eng = engine(tls_svc, driver, ssl_context=ctx)
    else:
        eng = engine(tls_svc, driver, sslmode="require")
    try:
        with eng.connect() as conn:
            dbapi = conn.connection.dbapi_connection
            if driver == "pg8000":
                assert isinstance(dbapi._usock, ssl.SSLSocket)
            else:
                assert (dbapi.pgconn if driver == "psycopg" else dbapi.info).ssl_in_use
        report = scenario(eng)
    finally:
        eng.dispose()
    check_reflection(tls_svc, report)
    check_report(tls_svc, f"sqlalchemy+{driver} tls", report)
    record(ROWS[driver], tls_svc, "TLS")


def test_sqlalchemy_psycopg3_date_trunc_unit_is_a_bound_parameter(svc):
    """psycopg 3 sends ``func.date_trunc('month', ts)`` as ``date_trunc($1::VARCHAR, ts)`` with
    a server-side parameter: the plan reads the bound unit before it decides anything, so
    the release is the one the literal ``'month'`` gets (the literal SELECT is its repeat)."""
    eng = engine(svc, "psycopg")
    try:
        purchases = sa.Table("purchases", sa.MetaData(), autoload_with=eng)
        month = sa.func.date_trunc("month", purchases.c.ts).label("m")
        q = (
            sa.select(month, sa.func.count().label("n"))
            .where(purchases.c.amount > 17)
            .group_by(month)
            .order_by(month)
        )
        compiled = str(q.compile(eng))
        assert "date_trunc(%(date_trunc_1)s::VARCHAR" in compiled  # the unit is a parameter
        with eng.connect() as conn:
            rows = conn.execute(q).all()
            quarter = sa.func.date_trunc("quarter", purchases.c.ts).label("m")  # same text, other value
            quarters = conn.execute(
                sa.select(quarter, sa.func.count().label("n"))
                .where(purchases.c.amount > 17)
                .group_by(quarter)
                .order_by(quarter)
            ).all()
            bad = sa.select(
                sa.func.date_trunc("fortnight", purchases.c.ts).label("f"), sa.func.count()
            ).group_by(sa.text("1"))
            with pytest.raises(sa.exc.DBAPIError) as e:
                conn.execute(bad)
    finally:
        eng.dispose()
    assert e.value.orig.sqlstate == "0A000" and "'fortnight'" in str(e.value.orig)
    assert [r[0].month for r in rows] == list(range(1, 13)) and all(r[0].year == 2025 for r in rows)
    assert [r[0].month for r in quarters] == [1, 4, 7, 10]
    literal, notes = ask(
        svc,
        "SELECT date_trunc('month', purchases.ts) AS m, count(*) AS n FROM purchases "
        "WHERE purchases.amount > 17 GROUP BY date_trunc('month', purchases.ts) ORDER BY m",
    )
    assert charged(notes) == 0 and [tuple(r) for r in literal] == [tuple(r) for r in rows]
    record("SQLAlchemy + psycopg 3", svc, "func.date_trunc with a bound unit")
