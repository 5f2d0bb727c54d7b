"""Writes are a permission: only a role whose config grants a local table
(`[roles.X] insert = ["trips"]`) may INSERT into it, at most `insert_rows_per_minute` rows a
minute (a token bucket per role). Every other role gets 42501 before anything is perturbed,
stored or sent to the backend; the config is checked at load."""

from __future__ import annotations

import copy
import tomllib

import psycopg
import pytest

from config import ConfigError, load_config, parse_config
from proxy.demo import demo_config_path
from proxy.pipeline import local
from proxy.pipeline.local import RowBucket
from proxy.pipeline.orchestrator import Connection
from proxy.wire.api import SqlError

ROW = "(8, 3.2, 12.5, 1, 'card', 1, 'midtown')"
COLS = "(hour, distance, fare, vendor, payment, passengers, zone)"


def _insert(n: int, zone: str = "midtown") -> str:
    return f"INSERT INTO trips {COLS} VALUES " + ", ".join(
        f"({i % 24}, 3.2, 12.5, 1, 'card', 1, '{zone}')" for i in range(n)
    )


def _reports(svc) -> int:
    return svc.gw.backend.query("SELECT COUNT(*) FROM trips_reports")[0][0]


class FakeClock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        return self.t


@pytest.fixture
def watched(duck_service, monkeypatch):
    """The service with its backend fetches and the LDP encoder counted."""
    svc = duck_service
    calls, encoded = [], []
    real_fetch, real_encoder = svc.gw.backend.fetch, local.Encoder

    async def fetch(sql, *a, **k):
        calls.append(sql)
        return await real_fetch(sql, *a, **k)

    class Encoder(real_encoder):
        def encode(self, data, n):
            encoded.append(n)
            return super().encode(data, n)

    monkeypatch.setattr(svc.gw.backend, "fetch", fetch)
    monkeypatch.setattr(local, "Encoder", Encoder)
    local._BUCKETS.pop(svc.gw, None)  # each test starts with full buckets
    yield svc, calls, encoded
    local._BUCKETS.pop(svc.gw, None)


@pytest.mark.parametrize("role", ["bronze", "analyst", "admin", "gold", "other"])
def test_insert_without_grant_is_refused_before_anything_happens(watched, role):
    svc, calls, encoded = watched
    before = _reports(svc)
    with psycopg.connect(svc.dsn(role), autocommit=True) as c:
        for sql, params in [
            (f"INSERT INTO trips {COLS} VALUES {ROW}", None),
            (_insert(50), None),
            (
                f'INSERT INTO public."trips" {COLS} VALUES (%s, %s, %s, %s, %s, %s, %s)',
                (8, 3.2, 12.5, 1, "card", 1, "midtown"),
            ),
            ("INSERT INTO trips SELECT * FROM trips", None),
            ("INSERT INTO trips (hour) VALUES (pg_sleep(10))", None),
        ]:
            for prepare in (False, True):
                with pytest.raises(psycopg.Error) as e:
                    c.execute(sql, params, prepare=prepare)
                assert e.value.sqlstate == "42501", (sql, e.value.sqlstate)
                assert str(e.value).startswith("permission denied for table trips")
                assert 'insert = ["trips"]' in e.value.diag.message_hint
    assert calls == [] and encoded == [] and _reports(svc) == before
    assert svc.gw.ledger.spent(role, "day") == 0


def test_describe_of_an_insert_needs_the_grant(watched):
    svc, calls, _ = watched
    sql = f"INSERT INTO trips {COLS} VALUES ($1, $2, $3, $4, $5, $6, $7)"
    with pytest.raises(SqlError) as e:
        svc._call(Connection(svc.gw, "bronze", "demo", {}).describe(sql, []))
    assert e.value.sqlstate == "42501"
    d = svc._call(Connection(svc.gw, "producer", "demo", {}).describe(sql, []))
    assert len(d.param_type_oids) == 7 and calls == []


def test_producer_inserts(watched):
    svc, calls, encoded = watched
    before = _reports(svc)
    with psycopg.connect(svc.dsn("producer"), autocommit=True) as c:
        assert c.execute(_insert(3)).statusmessage == "INSERT 0 3"
        cur = c.cursor()
        cur.execute(
            f"INSERT INTO trips {COLS} VALUES (%s, %s, %s, %s, %s, %s, %s)",
            (18, 11.0, 30.0, 2, "cash", 2, "airport"),
            prepare=True,
        )
        assert cur.rowcount == 1
        # the grant is for local tables only; the rest of dpgate stays read-only for it too
        for sql, state in [
            ("INSERT INTO pums VALUES (1, 1, 1, 1, 1, 1)", "42501"),
            ("INSERT INTO trips_reports VALUES (1)", "42501"),
            ("DELETE FROM trips", "42501"),
            ("UPDATE trips SET hour = 1", "42501"),
            ("TRUNCATE trips", "42501"),
            ("COPY trips FROM STDIN", "42501"),
            (f"INSERT INTO trips {COLS} VALUES {ROW} RETURNING hour", "0A000"),
            ("INSERT INTO trips SELECT * FROM trips", "0A000"),
        ]:
            with pytest.raises(psycopg.Error) as e:
                c.execute(sql)
            assert e.value.sqlstate == state, (sql, e.value.sqlstate)
    assert _reports(svc) == before + 4 and encoded == [3, 1] and len(calls) == 2


def test_row_rate_limit(watched):
    svc, _, encoded = watched
    clock = FakeClock()
    rate = svc.gw.config.roles["producer"].insert_rows_per_minute
    assert rate == 1000  # the demo's setting
    local._BUCKETS.setdefault(svc.gw, {})["producer"] = RowBucket(rate, clock=clock)
    before = _reports(svc)

    def refused(sql):
        with pytest.raises(psycopg.Error) as e:
            c.execute(sql)
        return e.value

    with psycopg.connect(svc.dsn("producer"), autocommit=True) as c:
        e = refused(_insert(1001))  # larger than the bucket: never fits
        assert e.sqlstate == "53400" and "exceeds role producer's limit of 1000 rows per minute" in str(e)
        assert "Split" in e.diag.message_hint
        e = refused(_insert(1000, zone="moon"))  # refused by the encoder: rows given back
        assert e.sqlstate == "22023"
        assert c.execute(_insert(1000)).statusmessage == "INSERT 0 1000"
        e = refused(_insert(1))  # empty bucket
        assert (
            e.sqlstate == "53400"
            and "retry in 1 s" in str(e)
            and "insert_rows_per_minute" in e.diag.message_hint
        )
        clock.t += 30  # half a minute refills 500 rows
        e = refused(_insert(501))
        assert e.sqlstate == "53400" and "501 rows asked, 500 available; retry in 1 s" in str(e)
        assert c.execute(_insert(500)).statusmessage == "INSERT 0 500"
        clock.t += 3600  # refills up to the bucket, not beyond
        refused(_insert(1001))
        assert c.execute(_insert(1000)).statusmessage == "INSERT 0 1000"
    assert _reports(svc) == before + 2500
    assert encoded == [1000, 1000, 500, 1000]  # refused by the limit: never perturbed


def test_row_bucket_arithmetic():
    clock = FakeClock()
    b = RowBucket(60, clock=clock)  # one row per second
    b.take("r", 60)
    with pytest.raises(SqlError) as e:
        b.take("r", 1)
    assert e.value.sqlstate == "53400" and "retry in 1 s" in e.value.message
    clock.t += 10
    b.take("r", 10)
    with pytest.raises(SqlError):
        b.take("r", 1)
    b.give(5)
    b.take("r", 5)
    clock.t += 1e6
    b.take("r", 60)
    with pytest.raises(SqlError):
        b.take("r", 1)


def test_other_roles_buckets_are_separate(watched):
    svc, _, _ = watched
    gw = svc.gw
    local._bucket(gw, "producer").take("producer", 1000)
    assert local._bucket(gw, "producer").tokens < 1
    assert local._bucket(gw, "analyst").tokens == 1000  # per role


# ------------------------------------------------------------------------------ config
def _demo_data() -> dict:
    data = tomllib.loads(demo_config_path().read_text())
    data["server"]["auth"] = "trust"
    return copy.deepcopy(data)


def test_demo_grants_insert_to_producer_only():
    cfg = parse_config(_demo_data())
    grants = {name: list(r.insert) for name, r in cfg.roles.items() if r.insert}
    assert grants == {"producer": ["trips"]}
    assert cfg.roles["producer"].insert_rows_per_minute == 1000
    assert cfg.tiers[cfg.roles["producer"].tier].ladder is None


@pytest.mark.parametrize(
    "grant,words",
    [
        (["pums"], "roles.analyst.insert.0: table 'pums' is not a local table"),
        (["nope"], "roles.analyst.insert.0: unknown table 'nope' (local tables: trips)"),
        (["trips", "trips"], "roles.analyst.insert.1: table 'trips' is listed twice"),
        (["trips", "trips_reports"], "roles.analyst.insert.1: unknown table 'trips_reports'"),
    ],
)
def test_config_insert_must_name_local_tables(tmp_path, grant, words):
    data = _demo_data()
    data["roles"]["analyst"]["insert"] = grant
    with pytest.raises(ConfigError) as e:
        parse_config(data, "my.toml")
    assert str(e.value).startswith(f"my.toml: {words}") and "\n" not in str(e.value)
    p = tmp_path / "grants.toml"  # through the file loader: names the file
    p.write_text(
        demo_config_path()
        .read_text()
        .replace(
            '[roles.analyst]\ntier = "default"',
            f'[roles.analyst]\ntier = "default"\ninsert = {grant!r}'.replace("'", '"'),
        )
        .replace('auth = "scram"', 'auth = "trust"')
    )
    with pytest.raises(ConfigError) as e:
        load_config(p)
    assert str(e.value).startswith(f"{p}: {words}")


def test_config_rate_must_be_positive():
    data = _demo_data()
    data["roles"]["producer"]["insert_rows_per_minute"] = 0
    with pytest.raises(ConfigError, match="roles.producer.insert_rows_per_minute"):
        parse_config(data, "my.toml")
