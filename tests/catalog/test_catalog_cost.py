"""Catalog statements obey the same cost rules as DP statements (proxy/catalog/cost.py): the
rewriter's per-row caps (literals, texts built from the statement's values, nodes, depth) and a
bound on the rows the catalog can be made to produce (cross products, series). A statement
over a cap is refused from its parse — no catalog query runs — with 54000/54001 and a hint,
and the introspection queries of psql, drivers and ORMs stay under the caps also on a config
with thousands of columns."""

from __future__ import annotations

import psycopg
import pytest
from catalog_helpers import client_queries, make_config, psql_queries

from config.models import Config
from proxy.catalog import Catalog, CatalogError

ATTACKS = {
    "repeat": (
        "SELECT relname FROM pg_class WHERE relname = 'pums' AND length(repeat('ab', 500000000)) > 0",
        "54000",
    ),
    "lpad": ("SELECT lpad(relname, 300000000, 'x') FROM pg_class", "54000"),
    "concat": (
        "SELECT relname FROM pg_class WHERE relname || '" + "a" * 200 + "' || '" + "b" * 200 + "' = ''",
        "54000",
    ),
    "long literal": ("SELECT relname FROM pg_class WHERE relname = '" + "x" * 5000 + "'", "54000"),
    "triple cross join": ("SELECT count(*) FROM pg_attribute a, pg_attribute b, pg_attribute c", "54000"),
    "cross join syntax": (
        "SELECT count(*) FROM pg_type a CROSS JOIN pg_type b CROSS JOIN pg_type c",
        "54000",
    ),
    "join on a constant": (
        "SELECT count(*) FROM pg_type a JOIN pg_type b ON true JOIN pg_type c ON 1 = 1",
        "54000",
    ),
    "join on a low-cardinality column": (
        "SELECT count(*) FROM pg_attribute a JOIN pg_attribute b ON "
        "a.attisdropped = b.attisdropped JOIN pg_attribute c ON "
        "c.attisdropped = b.attisdropped",
        "54000",
    ),
    "long series": ("SELECT count(*) FROM pg_class, generate_series(1, 100000000) g", "54000"),
    "series in a subquery": (
        "SELECT relname FROM pg_class WHERE oid IN (SELECT generate_series(1, 100000000))",
        "54000",
    ),
    "series to a computed end": (
        "SELECT count(*) FROM generate_series(1, (SELECT max(oid) * 1000000 FROM pg_type)) g, pg_class",
        "54000",
    ),
    "scalar range": ("SELECT range(100000000) FROM pg_class", "54000"),
    "cross join in a CTE": (
        "WITH x AS (SELECT a.oid FROM pg_type a, pg_type b, pg_type c) SELECT count(*) FROM x, pg_class",
        "54000",
    ),
    "cross join in a scalar subquery": (
        "SELECT (SELECT count(*) FROM pg_type a, pg_type b, pg_type c) FROM pg_class",
        "54000",
    ),
    "correlated sub-select": (
        "SELECT (SELECT count(*) FROM pg_type b, pg_type c WHERE b.oid < a.oid) FROM pg_type a",
        "54000",
    ),
    "many relations": ("SELECT 1 FROM " + ", ".join(f"pg_namespace n{i}" for i in range(40)), "54000"),
    "an unbounded series": ("SELECT count(*) FROM generate_series(1, 1e400) g", "54000"),
    "deep nesting": ("SELECT relname FROM pg_class WHERE " + "(" * 100 + "oid > 0" + ")" * 100, "54001"),
    "many nodes": (
        "SELECT relname FROM pg_class WHERE " + " OR ".join(f"oid = {i}" for i in range(1500)),
        "54000",
    ),
}


def _wide_config(tables: int, columns: int) -> Config:
    base = make_config().model_dump(exclude_none=True)
    cfg = {
        "server": {"auth": "trust"},
        "tiers": base["tiers"],
        "roles": {"analyst": {"tier": "basic"}},
        "tables": {
            "pums": {"source": "pums_raw", "columns": {"age": {"type": "int", "lower": 0, "upper": 100}}}
        },
    }
    for t in range(tables):
        cfg["tables"][f"t{t}"] = {
            "columns": {f"c{i}": {"type": "int", "lower": 0, "upper": 9} for i in range(columns)}
        }
    return Config.model_validate(cfg)


@pytest.fixture(scope="module")
def wide() -> Catalog:
    """120 columns in one table: pg_attribute holds more than 100 rows, its cube more than 10^6."""
    return Catalog(_wide_config(1, 120), database="demo", server_version="16.0")


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_attack_is_refused_before_it_runs(wide, name, monkeypatch):
    sql, state = ATTACKS[name]
    ran = []
    real = wide._query
    monkeypatch.setattr(wide, "_query", lambda *a, **k: ran.append(a) or real(*a, **k))
    with pytest.raises(CatalogError) as e:
        wide.execute(sql, user="alice")
    assert e.value.sqlstate == state, e.value.message
    assert e.value.hint  # what to write instead
    assert [
        a for a in ran if a[0] == "alice"
    ] == []  # refused from the parse (reading the cost statistics aside)


def test_key_joins_and_bounded_series_are_answered(wide):
    """The bound follows keys and filters: the same relations joined along their keys, a
    self-join on the key, a short series and one up to a catalog array's length pass."""
    ok = [
        "SELECT count(*) FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid "
        "JOIN pg_namespace n ON n.oid = c.relnamespace JOIN pg_type t ON t.oid = a.atttypid",
        "SELECT count(*) FROM pg_attribute a, pg_attribute b WHERE a.attrelid = b.attrelid AND a.attnum = b.attnum",
        "SELECT count(*) FROM pg_attribute a, pg_attribute b, pg_attribute c WHERE a.attrelid = 16384 "
        "AND b.attrelid = 16384 AND c.attrelid = 16384 AND a.attnum = 1",
        "SELECT count(*) FROM pg_class c, generate_series(1, 100) g",
        "SELECT s FROM pg_class c, generate_series(0, array_upper(c.reloptions, 1)) s",
        "SELECT relname FROM pg_class c WHERE EXISTS (SELECT 1 FROM pg_attribute a, pg_attribute b "
        "WHERE a.attrelid = c.oid AND b.attrelid = c.oid AND a.attnum = b.attnum)",
        "SELECT (SELECT t.typname FROM pg_type t WHERE t.oid = a.atttypid) FROM pg_attribute a",
    ]
    for sql in ok:
        wide.execute(sql, user="alice")


def test_triple_cross_join_of_a_small_catalog_is_harmless(catalog):
    """The cap counts rows, not syntax: the demo catalog's pg_attribute (tens of rows) cubed is
    under it and answered exactly; pg_type (about 200 rows) cubed is not."""
    (n,) = catalog.execute("SELECT count(*) FROM pg_attribute", user="alice")[1][0]
    assert n**3 < 1_000_000
    assert catalog.execute(
        "SELECT count(*) FROM pg_attribute a, pg_attribute b, pg_attribute c", user="alice"
    )[1] == [(n**3,)]
    with pytest.raises(CatalogError) as e:
        catalog.execute("SELECT count(*) FROM pg_type a, pg_type b, pg_type c", user="alice")
    assert e.value.sqlstate == "54000" and "max_catalog_rows" in e.value.hint


def test_clients_introspection_stays_under_the_caps_on_a_wide_config():
    """Every captured driver/ORM query and psql's \\d family pass on 400 tables × 25 columns
    (10,000 rows of pg_attribute)."""
    cat = Catalog(_wide_config(400, 25), database="demo", server_version="16.0")
    for name, q in sorted(client_queries().items()):
        params = [p.replace("{oid}", "16384") if isinstance(p, str) else p for p in q["params"]]
        cat.execute(q["sql"], user="alice", params=params)
    for name in ("d", "dt", "dt_plus", "d_pums", "d_plus_pums", "dn", "du", "df", "di", "dv", "dT", "l"):
        for sql in psql_queries(name, 16384):
            cat.execute(sql, user="alice")


def test_refusal_reaches_the_client_with_its_hint(duck_service):
    with psycopg.connect(duck_service.dsn(), autocommit=True) as con:
        for sql in (ATTACKS["repeat"][0], "SELECT count(*) FROM pg_type a, pg_type b, pg_type c"):
            with pytest.raises(psycopg.Error) as e:
                con.execute(sql)
            assert e.value.diag.sqlstate == "54000" and "[server.limits]" in (e.value.diag.message_hint or "")
        assert con.execute("SELECT relname FROM pg_class WHERE relname = 'pums'").fetchall() == [("pums",)]
