"""The BI corpus (tests/bi/corpus.py) end to end through psql and SQLAlchemy (psycopg2), on
DuckDB and Postgres: every statement expected answered is answered, every refusal carries its
SQLSTATE and a hint; SmartNoise SQL's PUMS queries: 13 of 14 answered, the 14th (GROUP BY an
undeclared-domain column) refused with a hint naming the bins to write; the dashboard of docs/clients.md's
tiles all answered with their shapes; and the exact scans of the new key shapes equal the
backend's own answer to the analyst's SQL."""

from __future__ import annotations

import datetime as dt
import os
import shutil
import subprocess
from collections import Counter

import pytest

import rewriter

from .corpus import ANSWERED, CORPUS, DASHBOARD, SMARTNOISE, SMARTNOISE_REFUSED

sa = pytest.importorskip("sqlalchemy", minversion="2.0")
PSQL = shutil.which("psql")

IDS = [f"{tool}:{name}" for tool, name, _, _ in CORPUS]


def psql(svc, sql: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PGCONNECT_TIMEOUT": "10", "PGSSLMODE": "disable"}
    return subprocess.run(
        [
            PSQL,
            svc.url("analyst"),
            "-X",
            "-A",
            "-t",
            "-v",
            "ON_ERROR_STOP=1",
            "-v",
            "VERBOSITY=verbose",
            "-c",
            sql,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )


@pytest.mark.skipif(PSQL is None, reason="psql not installed (.ci/run installs it)")
def test_corpus_through_psql(bi):
    bad = []
    for tool, name, sql, expected in CORPUS:
        r = psql(bi, sql)
        if expected == ANSWERED:
            if r.returncode != 0 or "NOTICE:" not in r.stderr and "no data touched" not in r.stderr:
                bad.append((tool, name, r.stderr[:300]))
        elif r.returncode == 0 or f"ERROR:  {expected}:" not in r.stderr or "HINT:" not in r.stderr:
            bad.append((tool, name, expected, r.stderr[:300]))
    assert not bad, "\n".join(map(repr, bad))


def engine(svc):
    from support.service import PASSWORDS

    url = sa.engine.URL.create(
        "postgresql+psycopg2",
        username="analyst",
        password=PASSWORDS["analyst"],
        host="127.0.0.1",
        port=svc.port,
        database="demo",
    )
    return sa.create_engine(url)


def run_sqlalchemy(svc, statements):
    """{sql: ("answered", rows) | (sqlstate, hint, message)} through one SQLAlchemy connection."""
    out = {}
    eng = engine(svc)
    with eng.connect() as conn:
        for sql in statements:
            try:
                rows = conn.execute(sa.text(sql.replace(":", r"\:"))).fetchall()
                conn.commit()
                out[sql] = (ANSWERED, rows)
            except sa.exc.DBAPIError as e:
                conn.rollback()
                out[sql] = (e.orig.pgcode, e.orig.diag.message_hint, e.orig.diag.message_primary)
    eng.dispose()
    return out


def test_corpus_through_sqlalchemy(bi):
    got = run_sqlalchemy(bi, [sql for _, _, sql, _ in CORPUS])
    bad = [
        (tool, name, got[sql][0])
        for tool, name, sql, expected in CORPUS
        if got[sql][0] != expected or (expected != ANSWERED and not got[sql][1])
    ]
    assert not bad, bad
    per_tool = Counter(tool for tool, _, sql, e in CORPUS if e == ANSWERED)
    assert set(per_tool) == {"metabase", "superset", "tableau", "powerbi", "looker", "grafana"}


def test_smartnoise_pums_queries(bi):
    got = run_sqlalchemy(bi, SMARTNOISE)
    answered = [sql for sql in SMARTNOISE if got[sql][0] == ANSWERED]
    refused = {sql: got[sql][0] for sql in SMARTNOISE if got[sql][0] != ANSWERED}
    assert len(answered) == 14 and refused == SMARTNOISE_REFUSED, refused


def test_dashboard_tiles(bi):
    got = run_sqlalchemy(bi, [sql for _, sql in DASHBOARD])
    (bins, months, kpi, top) = (got[sql] for _, sql in DASHBOARD)
    assert all(g[0] == ANSWERED for g in (bins, months, kpi, top))
    assert [r[0] for r in bins[1]] == list(range(0, 12)) + [None]  # width_bucket: 0, 1..10, 11; NULL age
    assert [r[0] for r in months[1]] == [dt.datetime(2025, m, 1) for m in range(1, 13)]
    ((avg_ticket, pct_big),) = kpi[1]
    assert 200 < avg_ticket < 300 and 70 < float(pct_big) < 90  # amount ~ U[0, 500]
    assert len(top[1]) == 10 and top[1][0][0] == 1  # item 1 is the most popular


@pytest.mark.parametrize(
    "key, reference",
    [
        (
            "floor(extract(epoch from ts)/86400)*86400",
            {
                "duckdb": "CAST(floor(epoch(ts) / 86400) * 86400 AS BIGINT)",
                "postgres": "CAST(floor(extract(epoch from ts) / 86400) * 86400 AS BIGINT)",
            },
        ),
        (
            "CAST(DATE_TRUNC('MONTH', CAST(ts AS DATE)) AS DATE)",
            {
                "duckdb": "CAST(date_trunc('month', CAST(ts AS DATE)) AS DATE)",
                "postgres": "CAST(date_trunc('month', CAST(ts AS DATE)) AS DATE)",
            },
        ),
        ("store::text", {"duckdb": "CAST(store AS TEXT)", "postgres": "CAST(store AS TEXT)"}),
        (
            "TO_CHAR(DATE_TRUNC('month', ts), 'YYYY-MM')",
            {
                "duckdb": "strftime(date_trunc('month', ts), '%Y-%m')",
                "postgres": "to_char(date_trunc('month', ts), 'YYYY-MM')",
            },
        ),
        (
            "(CAST(extract(dow from ts) AS integer) + 1)",
            {
                "duckdb": "CAST(extract(dow from ts) AS INTEGER) + 1",
                "postgres": "CAST(extract(dow from ts) AS INTEGER) + 1",
            },
        ),
    ],
)
def test_new_keys_exact_before_noise(bi, key, reference):
    """Exact before noise: the rewrite's per-cell counts and sums equal the backend's own GROUP BY
    of the analyst's key (cells no row reaches: 0)."""
    where = "ts BETWEEN '2025-03-01T00:00:00Z' AND '2025-03-31T23:59:59Z'"
    plan = rewriter.build_plan(
        rewriter.parse(f"SELECT {key} AS k, COUNT(*), SUM(amount) FROM purchases WHERE {where} GROUP BY 1"),
        bi.gw.config,
    )
    got = rewriter.complete(plan, bi._call(bi.gw.backend.fetch(rewriter.to_sql(plan, bi.gw.backend.dialect))))
    ref_where = where.replace("T00:00:00Z", " 00:00:00").replace("T23:59:59Z", " 23:59:59")
    ref = bi._call(
        bi.gw.backend.fetch(
            f"SELECT {reference[bi.kind]} AS k, COUNT(*), SUM(CASE WHEN amount < 0 THEN 0 WHEN amount > 500 THEN 500 "
            f"ELSE amount END) FROM purchases WHERE {ref_where} GROUP BY 1"
        )
    )
    want = {r[0]: (int(r[1]), float(r[2])) for r in ref}
    assert want and set(want) <= {r[0] for r in got}
    for k, n, s in got:
        wn, ws = want.get(k, (0, 0.0))
        assert int(n) == wn and float(s) == pytest.approx(ws, rel=1e-9, abs=1e-9), k
