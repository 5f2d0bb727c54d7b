"""A toy fourth backend's SQL: SQLite, as sqlglot writes it. Nothing to override for the
statements it runs (COUNT, SUM, AVG with GROUP BY over declared domains): identifiers are
double-quoted, ``IntDiv`` and the clamp are spelled by sqlglot. It has no keyed hash and no
named parameters, so a table with a privacy unit is refused on it (SQLDialect's defaults)."""

from __future__ import annotations

from rewriter.dialects import SQLDialect


class SQLiteDialect(SQLDialect):
    name = "sqlite"
