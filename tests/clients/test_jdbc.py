"""The shared scenario through pgjdbc (the PostgreSQL JDBC driver, as DBeaver, Metabase
and other JVM tools use it): tests/clients/java/Scenario.java is compiled with javac and
run against the driver jar, on DuckDB and on Postgres, and over TLS."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from support.service import PASSWORDS, ask

from .outcomes import record
from .scenario import COPY_SQL, MORE_SQL, check_report

SOURCE = Path(__file__).parent / "java" / "Scenario.java"
JAVA, JAVAC = shutil.which("java"), shutil.which("javac")
JAR = Path(os.environ.get("PGJDBC_JAR", "/usr/share/java/postgresql.jar"))

pytestmark = [
    pytest.mark.skipif(
        JAVA is None or JAVAC is None,
        reason="java/javac not installed: apt-get install -y openjdk-17-jdk-headless",
    ),
    pytest.mark.skipif(not JAR.exists(), reason=f"{JAR} missing: apt-get install -y libpostgresql-jdbc-java"),
]


@pytest.fixture(scope="session")
def classes(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("jdbc")
    try:
        r = subprocess.run(
            [JAVAC, "-d", str(out), "-cp", str(JAR), str(SOURCE)],
            capture_output=True,
            text=True,
            timeout=float(os.environ.get("DPGATE_JAVAC_TIMEOUT", "180")),
        )
    except subprocess.TimeoutExpired as e:
        pytest.skip(
            f"javac did not finish in {e.timeout:g} s (a slow or overloaded JDK); set DPGATE_JAVAC_TIMEOUT"
        )
    assert r.returncode == 0, r.stderr
    return out


def run(classes, svc, password=PASSWORDS["analyst"], **props) -> subprocess.CompletedProcess:
    query = "&".join(f"{k}={v}" for k, v in {"connectTimeout": 10, **props}.items())
    url = f"jdbc:postgresql://127.0.0.1:{svc.port}/demo?{query}"
    return subprocess.run(
        [
            JAVA,
            "-Xshare:auto",
            "-XX:TieredStopAtLevel=1",
            "-cp",
            f"{JAR}{os.pathsep}{classes}",
            "Scenario",
            url,
            "analyst",
            password,
            COPY_SQL,
            *(x for pair in MORE_SQL.items() for x in pair),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )


def check(svc, r: subprocess.CompletedProcess, client: str) -> list[str]:
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["product"].startswith("PostgreSQL 16")
    views = ["budget", "coalition", "releases"]  # dpgate.*: dpgate's own views
    assert sorted(out["all_tables"]) == sorted(out["tables"] + views)  # no undeclared relation in any schema
    assert out["schemas"] == ["dpgate", "information_schema", "pg_catalog", "public"]
    assert out["catalogs"] == ["demo"]
    assert [t for _, t in out["columns"]] == ["int8", "int8", "int8", "int8", "float8", "int8"]
    assert out["secret_columns"] == [] and out["primary_keys"] == [] and out["indexes"] == []
    assert out["column_types"] == ["int8", "int8", "float8", "float8"]
    assert out["value_types"] == ["Long", "Long", "Double", "Double"]
    assert sorted(out["information_schema_tables"]) == sorted(out["tables"] + views)
    report = {
        **out,
        "columns": [c for c, _ in out["columns"]],
        "rows": [(int(s), int(n), float(t), float(a)) for s, n, t, a in out["rows"]],
        "refused": (out["refused"]["sqlstate"], out["refused"]["message"]),
        "secret_error": (out["secret_error"]["sqlstate"], out["secret_error"]["message"]),
    }
    return check_report(svc, client, report)


def test_jdbc_scenario(classes, svc):
    r = run(classes, svc, sslmode="disable")
    done = check(svc, r, "pgjdbc")
    record("pgjdbc", svc, *done, "DatabaseMetaData", "server-side prepared statements")
    out = json.loads(r.stdout)
    rows, _ = ask(svc, COPY_SQL)
    assert out["copied"] == len(rows) and out["copy"].splitlines() == [f"{s},{n}" for s, n in rows]
    record("pgjdbc", svc, "COPY")


def test_jdbc_wrong_password(classes, svc):
    r = run(classes, svc, password="nope", sslmode="disable")
    assert r.returncode != 0 and "password authentication failed" in r.stderr


def test_jdbc_tls(classes, tls_svc):
    check(
        tls_svc,
        run(classes, tls_svc, sslmode="require", sslfactory="org.postgresql.ssl.NonValidatingFactory"),
        "pgjdbc tls",
    )
    record("pgjdbc", tls_svc, "TLS")


def test_jdbc_require_without_tls_fails(classes, svc):
    r = run(classes, svc, sslmode="require", sslfactory="org.postgresql.ssl.NonValidatingFactory")
    assert r.returncode != 0 and "does not support SSL" in r.stderr
    record("pgjdbc", svc, "sslmode=require without TLS fails at connect, as against Postgres")
