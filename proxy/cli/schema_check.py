"""Config meets the backend at start.

Every declared table's ``source`` (a relation, a view, or on DuckDB a table
function such as ``read_parquet('…')``) is run as the scans read it
(``rewriter.source_sql``) with ``SELECT * FROM source LIMIT 0`` (DuckDB ``DESCRIBE``,
Postgres the result's column types), and every declared column is checked: the relation exists, the
column exists, and the backend type can hold the declared type (``int``: an
integer column; ``float``: any number; ``text``: a string; ``bool``: a
boolean). Each problem is ONE line naming the config file, the field
(``tables.X.columns.Y``) and what the backend has — so a mismatch is found by
``dpgate serve`` / ``dpgate check-config --backend``, never as an XX000 at
query time.

Local (LDP) tables store reports in ``<table>_reports``: a missing one is
fine (the first ingestion creates it); an existing one must match the layout
(public columns and report bits, :func:`proxy.ldp_load.ensure_duckdb`'s check).
"""

from __future__ import annotations

from rewriter import source_sql
from rewriter.local import layout

from ..ingest.ldp_load import IngestError, resolved_layout

_INT = (
    "TINYINT",
    "SMALLINT",
    "INTEGER",
    "BIGINT",
    "HUGEINT",
    "UTINYINT",
    "USMALLINT",
    "UINTEGER",
    "UBIGINT",
    "UHUGEINT",
    "INT2",
    "INT4",
    "INT8",
    "INT",
    "SMALLSERIAL",
    "SERIAL",
    "BIGSERIAL",
)
_FLOAT = ("FLOAT", "DOUBLE", "REAL", "FLOAT4", "FLOAT8", "DOUBLE PRECISION", "NUMERIC", "DECIMAL")
_TEXT = ("VARCHAR", "TEXT", "CHAR", "BPCHAR", "CHARACTER", "CHARACTER VARYING", "STRING", "NAME", "ENUM")
_BOOL = ("BOOLEAN", "BOOL")
_DATE = ("DATE",)
_TIMESTAMP = (
    "TIMESTAMP",
    "TIMESTAMP WITHOUT TIME ZONE",
    "DATETIME",
    "TIMESTAMP_S",
    "TIMESTAMP_MS",
    "TIMESTAMP_US",
    "TIMESTAMP_NS",
    "TIMESTAMP_NTZ",
)


def kind_of(backend_type: str) -> str | None:
    """The dpgate type a backend column type holds exactly: int, float, text, bool, date,
    timestamp or None (a timestamp with a time zone is none of them)."""
    t = backend_type.upper().split("(")[0].strip()
    if t in _INT:
        return "int"
    if t in ("NUMERIC", "DECIMAL") and "(" in backend_type:  # DECIMAL(p, 0) holds integers
        scale = backend_type.split("(", 1)[1].rstrip(")").split(",")
        if len(scale) == 2 and scale[1].strip() == "0":
            return "int"
    if t in _FLOAT:
        return "float"
    if t in _TEXT or t.startswith("ENUM"):
        return "text"
    if t in _DATE:
        return "date"
    if t in _TIMESTAMP:
        return "timestamp"
    if t in _BOOL:
        return "bool"
    return None


def fits(declared: str, backend_type: str) -> bool:
    kind = kind_of(backend_type)
    return kind == declared or (declared == "float" and kind == "int")


def column_problems(
    file: str, name: str, table, have: dict[str, str] | None, source: str, columns=None
) -> list[str]:
    """Problems of one declared table against the backend's columns ``have``
    (name -> backend type; None: the relation is missing)."""
    if have is None:
        return [
            f"{file}: tables.{name}: the backend has no relation {source} (a source names a relation or "
            "table function; a query goes into a view)"
        ]
    out = []
    for col, spec in (columns or table.columns).items():
        typ = have.get(col)
        field = f"tables.{name}.columns.{col}"
        if typ is None:
            cols = ", ".join(sorted(have))[:200]
            out.append(f"{file}: {field}: {source} has no column {col} (it has: {cols})")
        elif not fits(spec.type, typ):
            out.append(f"{file}: {field}: declared {spec.type}, but {source}.{col} is {typ} in the backend")
    return out


# -- describing a source ---------------------------------------------------------
async def describe(backend, source: str) -> dict[str, str] | None:
    """Column name -> backend type of ``source`` on any backend (None: no such relation)."""
    return await backend.describe(source)


async def check_backend_schema(config, backend, file: str) -> list[str]:
    """One line per problem (empty: the config and the backend agree)."""
    problems: list[str] = []
    for name, table in config.tables.items():
        if table.mode == "local":
            problems += await _check_local(config, backend, file, name, table)
            continue
        source = config.source_of(name)
        try:  # the relation exactly as every scan reads it (rewriter.source_sql)
            have = await describe(backend, source_sql(source, backend.dialect))
        except Exception as e:  # e.g. read_parquet of a missing file
            problems.append(
                f"{file}: tables.{name}: the backend cannot read {source}: "
                f"{str(e).splitlines()[0] if str(e) else type(e).__name__}"
            )
            continue
        problems += column_problems(file, name, table, have, source)
    return problems


async def _check_local(config, backend, file: str, name: str, table) -> list[str]:
    """A local table: its report table, if it exists, matches the layout."""
    lay = layout(name, table, config.tiers)
    have = await describe(backend, lay.reports)
    if have is None:
        return []  # created by the first ingestion
    try:
        resolved_layout(lay, list(have))
    except IngestError as e:
        return [f"{file}: tables.{name}: {e.message}"]
    public = {c: table.columns[c] for c in lay.public}
    return column_problems(file, name, table, have, lay.reports, public)
