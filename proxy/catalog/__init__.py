"""Answers catalog introspection queries (psql \\d, drivers, ORMs) from the config alone.

The emulated catalog lives in a private in-memory DuckDB database (see :mod:`.schema`);
incoming PostgreSQL SQL is rewritten (regex pre-pass for psql-isms, then sqlglot) so
that every relation it reads is one of the emulated ones.  A statement that reads
anything else raises :class:`CatalogError`; nothing is ever sent to the data backend.
"""

from __future__ import annotations

import logging
import re
import threading

import duckdb
import sqlglot
from sqlglot import exp

from config.models import Config

from . import cost, forms, schema
from .macros import MACRO_NAMES, create_macros
from .schema import INFO_SCHEMA_RELATIONS, RELATIONS, VIEWS

__all__ = ["Catalog", "CatalogError"]

log = logging.getLogger(__name__)

PG_RELATIONS = frozenset(RELATIONS) | frozenset(VIEWS)
INFO_RELATIONS = frozenset(INFO_SCHEMA_RELATIONS)
ALL_RELATIONS = tuple(sorted(("pgc", r) for r in PG_RELATIONS)) + tuple(
    sorted(("pgc_is", r) for r in INFO_RELATIONS)
)

# functions whose presence makes a FROM-less statement a catalog statement
CATALOG_FUNCTIONS = MACRO_NAMES | {
    "current_user",
    "session_user",
    "current_role",
    "current_catalog",
    "pg_catalog",
}


class CatalogError(Exception):
    """A catalog statement failed; ``sqlstate`` is the PostgreSQL error code."""

    def __init__(self, sqlstate: str, message: str, hint: str | None = None):
        super().__init__(message)
        self.sqlstate = sqlstate
        self.message = message
        self.hint = hint


# ----------------------------------------------------------------------------- text pass

_SEGMENT = re.compile(
    r"""(?P<str>(?<![\w$])[eE]'(?:[^'\\]|''|\\.)*'|'(?:[^']|'')*')"""
    r"""|(?P<dollar>\$(?P<tag>[A-Za-z_]\w*)?\$.*?\$(?P=tag)?\$)"""
    r"""|(?P<comment>--[^\n]*|/\*.*?\*/)""",
    re.S,
)


def _split(sql: str) -> list[tuple[bool, str]]:
    """Split into (is_code, text) parts: string literals are not code; comments become blanks."""
    out: list[tuple[bool, str]] = []
    pos = 0
    for m in _SEGMENT.finditer(sql):
        if m.start() > pos:
            out.append((True, sql[pos : m.start()]))
        if m.group("comment"):
            out.append((True, " "))
        else:
            out.append((False, m.group(0)))
        pos = m.end()
    if pos < len(sql):
        out.append((True, sql[pos:]))
    return out


_FUNC_NAMES = "|".join(sorted(MACRO_NAMES, key=len, reverse=True))
_CODE_SUBS: list[tuple[re.Pattern, str]] = [
    (re.compile(r"OPERATOR\s*\(\s*(?:pg_catalog\s*\.\s*)?([~!*<>=@#%^&|`?+\-/]+)\s*\)", re.I), r" \1 "),
    (re.compile(r"COLLATE\s+(?:pg_catalog\s*\.\s*)?(?:\"?default\"?|\"C\"|\"POSIX\"|C\b)", re.I), " "),
    (re.compile(r"(::\s*)pg_catalog\s*\.\s*", re.I), r"\1"),
    (re.compile(r"::\s*(?:oid|regclass|regtype|regproc)\s*\[\s*\]", re.I), "::UINTEGER[]"),
    (
        re.compile(r"::\s*(?:name|\"char\"|bpchar|character\s+varying|varchar|text)\s*\[\s*\]", re.I),
        "::VARCHAR[]",
    ),
    (re.compile(r"::\s*(?:name|\"char\"|bpchar)\b(?!\s*\[)", re.I), "::VARCHAR"),
    (re.compile(r"::\s*int2vector\b", re.I), "::SMALLINT[]"),
    (re.compile(r"::\s*oidvector\b", re.I), "::UINTEGER[]"),
    (re.compile(r"(?<![\w.$])(?:pg_catalog\s*\.\s*)?(" + _FUNC_NAMES + r")\s*\(", re.I), r"pgc_\1("),
    (
        re.compile(r"(?<![\w.$\"])(?:current_user|session_user|current_role)\b(?!\s*\()", re.I),
        "pgc_current_user()",
    ),
    (re.compile(r"(?<![\w.$\"])current_catalog\b(?!\s*\()", re.I), "pgc_current_database()"),
    (re.compile(r"(?<![\w.$])pg_catalog\s*\.\s*(?=\w+\s*\()", re.I), ""),
    (re.compile(r"(?<![\w.$])jsonb?_build_object\s*\(", re.I), "pgcjson_build_object("),
]
_PARAM = re.compile(r"\$(\d+)")


def _literal(value, following: str) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_literal(v, "") for v in value) + "]"
    if isinstance(value, (bytes, bytearray, memoryview)):
        value = bytes(value).decode("utf-8", "replace")
    s = str(value)
    # a Postgres array literal '{a,b}' cast to an array type: DuckDB wants a list
    if (
        s.startswith("{")
        and s.endswith("}")
        and re.match(r"\s*::\s*[\w\"]+(\s*\.\s*\w+)?\s*\[\s*\]", following)
    ):
        items = [i.strip().strip('"') for i in s[1:-1].split(",") if i.strip()]
        return "[" + ", ".join("'" + i.replace("'", "''") + "'" for i in items) + "]"
    return "'" + s.replace("'", "''") + "'"


class _Keep:
    """``_preprocess(..., params=_KEEP)``: leave $n placeholders in place."""


_KEEP = _Keep()


def _preprocess(sql: str, params: list | _Keep | None) -> str:
    parts = _split(sql)
    out = []
    for idx, (code, text) in enumerate(parts):
        if code:
            for pat, rep in _CODE_SUBS:
                text = pat.sub(rep, text)
        parts[idx] = (code, text)
    for code, text in parts:
        if code and "$" in text and not isinstance(params, _Keep):

            def sub(m: re.Match, text: str = text) -> str:
                n = int(m.group(1))
                if params is None:
                    return "NULL"
                if n < 1 or n > len(params):
                    raise CatalogError("08P01", f"there is no parameter ${n}")
                return _literal(params[n - 1], text[m.end() :])

            text = _PARAM.sub(sub, text)
        out.append(text)
    return "".join(out).strip().rstrip(";").strip()


# ----------------------------------------------------------------------------- AST pass


def _table_key(t: exp.Table) -> tuple[str, str]:
    return (t.text("db").lower(), t.name.lower())


def _cte_names(tree: exp.Expr) -> set[str]:
    return {c.alias_or_name.lower() for c in tree.find_all(exp.CTE)}


def _relations(tree: exp.Expr):
    ctes = _cte_names(tree)
    for t in tree.find_all(exp.Table):
        if not isinstance(t.this, exp.Identifier):
            continue  # table function: generate_series(...), unnest(...)
        db, name = _table_key(t)
        if not db and name in ctes:
            continue
        yield t, db, name


def _emulated(t: exp.Table) -> tuple[str, str] | None:
    """The emulated relation (schema, name) a table of a parsed catalog statement reads, or
    None (a CTE, a table function, or a relation the translation refuses)."""
    if not isinstance(t.this, exp.Identifier):
        return None
    db, name = _table_key(t)
    if db in ("", "pg_catalog") and name in PG_RELATIONS:
        return ("pgc", name)
    if db == "information_schema" and name in INFO_RELATIONS:
        return ("pgc_is", name)
    return None


def _is_literal(e: exp.Expression) -> bool:
    return isinstance(e, exp.Literal) and e.is_string


def _type_name(dt: exp.DataType) -> str:
    return dt.sql("postgres").lower().replace(" ", "")


_CAST_FUNCS = {
    # a literal cast ('pums'::regclass) fails for an unknown name, as in Postgres (42P01 / 42704)
    "regclass": ("pgc_regclass_strict", "pgc_regclass_name"),
    "regtype": ("pgc_regtype_strict", "pgc_regtype_name"),
    "regnamespace": (None, "pgc_regnamespace_name"),
    "regrole": (None, "pgc_regrole_name"),
    "regproc": ("pgc_regproc_text", "pgc_regproc_text"),
    "regprocedure": ("pgc_regproc_text", "pgc_regproc_text"),
}
_CAST_TYPES = {
    "oid": "UINTEGER",
    "xid": "UINTEGER",
    "cid": "UINTEGER",
    "regoper": "VARCHAR",
    "name": "VARCHAR",
    '"char"': "VARCHAR",
    "bpchar": "VARCHAR",
    "pg_node_tree": "VARCHAR",
    "aclitem": "VARCHAR",
    "aclitem[]": "VARCHAR[]",
    "oid[]": "UINTEGER[]",
    "int2vector": "SMALLINT[]",
    "oidvector": "UINTEGER[]",
    "regclass[]": "UINTEGER[]",
    "regtype[]": "UINTEGER[]",
    "name[]": "VARCHAR[]",
}


def _rewrite_casts(node: exp.Expression) -> exp.Expression:
    if isinstance(node, (exp.Cast, exp.TryCast)):
        tname = _type_name(node.to)
        if tname in _CAST_FUNCS:
            lit_fn, col_fn = _CAST_FUNCS[tname]
            operand = node.this
            fn = lit_fn if (_is_literal(operand) and lit_fn) else col_fn
            if _is_literal(operand) and tname in ("regnamespace", "regrole"):
                return operand
            return exp.Anonymous(this=fn, expressions=[operand])
        if tname in _CAST_TYPES:
            return exp.Cast(this=node.this, to=exp.DataType.build(_CAST_TYPES[tname], dialect="duckdb"))
    return node


def _figure_colname(e: exp.Expression) -> str | None:
    if isinstance(e, exp.Alias):
        return e.alias
    if isinstance(e, exp.Star) or (isinstance(e, exp.Column) and isinstance(e.this, exp.Star)):
        return None
    if isinstance(e, exp.Column):
        return e.name
    if isinstance(e, exp.Paren):
        return _figure_colname(e.this)
    if isinstance(e, (exp.Cast, exp.TryCast)):
        inner = _figure_colname(e.this)
        if inner and inner != "?column?":
            return inner
        name = _type_name(e.to)
        return {
            "text": "text",
            "bigint": "int8",
            "int": "int4",
            "integer": "int4",
            "smallint": "int2",
            "boolean": "bool",
            "doubleprecision": "float8",
            "varchar": "varchar",
            "uinteger": "oid",
        }.get(name, name)
    if isinstance(e, exp.Case):
        return "case"
    if isinstance(e, exp.Exists):
        return "exists"
    if isinstance(e, exp.Array) or (
        isinstance(e, exp.Func) and type(e).__name__ in ("Array", "ArrayAgg") and False
    ):
        return "array"
    if isinstance(e, exp.Subquery):
        q = e.this
        if isinstance(q, exp.Select) and q.expressions:
            return _figure_colname(q.expressions[0])
        return "?column?"
    if isinstance(e, exp.Anonymous):
        name = e.name.lower()
        return name[4:] if name.startswith("pgc_") else name
    if isinstance(e, exp.Func):
        rendered = e.sql("postgres")
        m = re.match(r"\s*([A-Za-z_][\w.]*)\s*\(", rendered)
        if m:
            name = m.group(1).split(".")[-1].lower()
            return "array" if name == "array" else name
        if isinstance(e, (exp.CurrentUser,)):
            return "current_user"
        return rendered.lower() if re.fullmatch(r"[A-Za-z_]\w*", rendered) else "?column?"
    if isinstance(e, exp.Boolean):
        return "bool"
    return "?column?"


def _leftmost_select(tree: exp.Expr) -> exp.Select | None:
    while isinstance(tree, exp.SetOperation):
        tree = tree.this
    if isinstance(tree, exp.Subquery):
        return _leftmost_select(tree.this)
    return tree if isinstance(tree, exp.Select) else None


_DUCK_TO_PG = {
    "BIGINT": 20,
    "INTEGER": 23,
    "SMALLINT": 21,
    "TINYINT": 21,
    "HUGEINT": 1700,
    "UBIGINT": 1700,
    "UINTEGER": 26,
    "USMALLINT": 23,
    "UTINYINT": 21,
    "DOUBLE": 701,
    "FLOAT": 700,
    "REAL": 700,
    "VARCHAR": 25,
    "BOOLEAN": 16,
    "DATE": 1082,
    "TIMESTAMP": 1114,
    "TIMESTAMP WITH TIME ZONE": 1184,
    "TIME": 1083,
    "INTERVAL": 1186,
    "BLOB": 17,
    "UUID": 2950,
    "JSON": 114,
    '"NULL"': 25,
    "NULL": 25,
    "BIGINT[]": 1016,
    "INTEGER[]": 1007,
    "SMALLINT[]": 1005,
    "UINTEGER[]": 1028,
    "VARCHAR[]": 1009,
    "BOOLEAN[]": 1000,
    "DOUBLE[]": 1022,
    "FLOAT[]": 1021,
}


def _pg_type(duck_type) -> int:
    s = str(duck_type).upper()
    if s in _DUCK_TO_PG:
        return _DUCK_TO_PG[s]
    if s.startswith("DECIMAL"):
        return 1700
    if s.endswith("[]"):
        return 1009
    return 25


# parameter type inference -------------------------------------------------------
_PG_OIDS = {
    "bool": 16,
    "char": 18,
    "name": 19,
    "int8": 20,
    "int2": 21,
    "int4": 23,
    "text": 25,
    "oid": 26,
    "xid": 28,
    "float4": 700,
    "float8": 701,
}
_CAST_OIDS = {
    "oid": 26,
    "regclass": 2205,
    "regtype": 2206,
    "regproc": 24,
    "regprocedure": 2202,
    "regnamespace": 4089,
    "regrole": 4096,
    "name": 19,
    "text": 25,
    "varchar": 25,
    "int": 23,
    "integer": 23,
    "int4": 23,
    "smallint": 21,
    "int2": 21,
    "bigint": 20,
    "int8": 20,
    "boolean": 16,
    "bool": 16,
    '"char"': 18,
    "char": 18,
    "real": 700,
    "doubleprecision": 701,
}
_COLUMN_TYPES: dict[str, dict[str, str]] = {rel: dict(cols) for rel, cols in RELATIONS.items()}


def _column_oid(col: exp.Column, aliases: dict[str, str]) -> int | None:
    name, table = col.name.lower(), col.table.lower()
    rels = [aliases[table]] if table in aliases else list(dict.fromkeys(aliases.values()))
    for rel in rels:
        pgtype = _COLUMN_TYPES.get(rel, {}).get(name)
        if pgtype:
            return _PG_OIDS.get(pgtype)
    return None


def _param_oid(p: exp.Parameter, aliases: dict[str, str]) -> int | None:
    parent = p.parent
    while isinstance(parent, exp.Paren):
        parent = parent.parent
    if isinstance(parent, (exp.Cast, exp.TryCast)):
        return _CAST_OIDS.get(_type_name(parent.to), 25)
    if isinstance(parent, (exp.Limit, exp.Offset)):
        return 20
    other = None
    if isinstance(parent, exp.In):
        other = parent.this
    elif isinstance(parent, (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.Like, exp.ILike)):
        on_left = any(x is p for x in parent.left.find_all(exp.Parameter))
        other = parent.right if on_left else parent.left
    if isinstance(other, exp.Column):
        return _column_oid(other, aliases)
    return None


_TABLE_FUNCTIONS = frozenset(
    {
        "generate_series",
        "generateseries",
        "unnest",
        "explode",
        "generate_subscripts",
        "generatesubscripts",
        "range",
        "explodinggenerateseries",
    }
)

_RAISED = re.compile(r"pgc:([0-9A-Z]{5}):(.*)")

_SHOW = re.compile(r"^\s*SHOW\s+(.+?)\s*;?\s*$", re.I | re.S)
_SHOW_ALIASES = {
    "transaction isolation level": "transaction_isolation",
    "time zone": "TimeZone",
    "session authorization": "session_authorization",
}


CATALOG_MEMORY = "256MB"
"""The emulated catalog's DuckDB memory limit: a catalog query that needs more fails (53200)
instead of growing the proxy."""


class Catalog:
    """The emulated catalog for one config. Thread-safe: each query runs on a cursor
    of its own (the calling user is a variable of that cursor), so a long catalog
    query holds no lock others wait on; ``statement_timeout`` (and the client's
    cancel) interrupts it."""

    def __init__(
        self,
        config: Config,
        *,
        database: str = "demo",
        server_version: str = "16.0",
        views: dict | None = None,
    ):
        self.config = config
        self.database = database
        self.server_version = server_version
        self._tables = frozenset(t.lower() for t in config.tables)
        self._lock = threading.Lock()
        self._session_ns: dict[int, tuple[int, str]] = {}  # session -> its pg_temp_N (oid, name)
        self._next_oid = schema.FIRST_SESSION_OID
        self._con = duckdb.connect(":memory:")
        schema.build(self._con, config, database=database, server_version=server_version, views=views)
        create_macros(self._con, database, server_version)
        self._stats = cost.Stats(lambda sql: self._query("postgres", sql)[0])
        for stmt in (
            "SET enable_external_access = false",
            "SET autoinstall_known_extensions = false",
            "SET autoload_known_extensions = false",
            f"SET memory_limit = '{CATALOG_MEMORY}'",
            "SET threads = 1",
            "SET lock_configuration = true",
        ):
            try:
                self._con.execute(stmt)
            except duckdb.Error:  # pragma: no cover - older/newer DuckDB without the option
                log.debug("duckdb option not available: %s", stmt)

    # ------------------------------------------------------------------ classification
    def handles(self, sql: str) -> bool:
        """True if ``sql`` reads catalog relations/functions and no declared data table."""
        if _SHOW.match(sql) and not re.match(r"^\s*SHOW\s+ALL\b", sql, re.I):
            return True
        try:
            text = _preprocess(sql, None)
            trees = [t for t in sqlglot.parse(text, read="postgres") if t is not None]
        except (sqlglot.errors.SqlglotError, CatalogError, RecursionError):
            lowered = sql.lower()
            mentions = re.search(
                r"\b(pg_catalog|information_schema)\s*\.|\bpg_[a-z_]+\b|\bversion\s*\(|"
                r"\bcurrent_(schema|database|user|setting)\b",
                lowered,
            )
            declared = any(re.search(rf"\b{re.escape(t)}\b", lowered) for t in self._tables)
            return bool(mentions) and not declared
        if len(trees) != 1:
            return False
        tree = trees[0]
        if not isinstance(tree, (exp.Query, exp.Select)):
            return False
        catalog = False
        for _t, db, name in _relations(tree):
            if db in ("pg_catalog", "information_schema") or (not db and name in PG_RELATIONS):
                catalog = True
            elif db in ("", "public") and name in self._tables:
                return False
        if not catalog:
            for f in tree.find_all(exp.Anonymous):
                if f.name.lower().startswith("pgc_"):
                    catalog = True
                    break
        if not catalog:  # SELECT CURRENT_SCHEMA
            catalog = tree.find(*forms.NILADIC) is not None
        if not catalog:  # SELECT 'pums'::regclass, SELECT $1::regtype::oid …
            catalog = any(_type_name(c.to) in _CAST_FUNCS for c in tree.find_all(exp.Cast, exp.TryCast))
        return catalog

    # ------------------------------------------------------------------ translation
    def _translate(self, sql: str, params: list | None) -> tuple[str, list[str | None]]:
        text = _preprocess(sql, params)
        if not text:
            raise CatalogError("42601", "empty catalog statement")
        try:
            trees = [t for t in sqlglot.parse(text, read="postgres") if t is not None]
        except sqlglot.errors.SqlglotError as e:
            raise CatalogError("42601", f"catalog query not understood: {str(e).splitlines()[0]}") from None
        if len(trees) != 1:
            raise CatalogError("0A000", "exactly one catalog statement is allowed")
        tree = trees[0]
        if not isinstance(tree, exp.Query):
            raise CatalogError("0A000", "only SELECT statements are allowed on the catalog")
        top = _leftmost_select(tree)
        names = [_figure_colname(p) for p in top.expressions] if top is not None else []
        try:
            tree = forms.rewrite(tree)
        except forms.ArrayLiteralError as e:
            raise CatalogError("22P02", str(e)) from None
        for t in tree.find_all(exp.Table):
            if not isinstance(t.this, exp.Identifier):
                fname = (
                    t.this.name if isinstance(t.this, exp.Func) and t.this.name else type(t.this).__name__
                ).lower()
                if fname not in _TABLE_FUNCTIONS:
                    raise CatalogError("42883", f"function {fname} is not available in catalog queries")
        for fn in tree.find_all(exp.Func):
            if isinstance(fn, exp.Anonymous) and fn.name.lower().startswith(
                ("duckdb_", "read_", "glob", "pragma_")
            ):
                raise CatalogError("42883", f"function {fn.name.lower()} does not exist")
        try:  # the cost caps, before the statement runs (54000 / 54001)
            cost.check(tree, self.config, params, self._stats, ALL_RELATIONS, _emulated)
        except cost.CatalogCostError as e:
            raise CatalogError(e.sqlstate, e.message, e.hint) from None
        for t, db, name in list(_relations(tree)):
            if db in ("", "pg_catalog") and name in PG_RELATIONS:
                t.set("db", exp.to_identifier("pgc"))
            elif db == "information_schema" and name in INFO_RELATIONS:
                t.set("db", exp.to_identifier("pgc_is"))
            else:
                shown = f"{db}.{name}" if db else name
                raise CatalogError("42P01", f'relation "{shown}" does not exist')
            t.set("catalog", None)
            t.set("this", exp.to_identifier(name))
        for col in tree.find_all(exp.Column):
            # pg_catalog.pg_class.relname -> pg_class.relname (the table is referenced unaliased)
            if col.text("db").lower() in ("pg_catalog", "information_schema", "pgc", "pgc_is"):
                col.set("db", None)
                col.set("catalog", None)
        for fn in tree.find_all(exp.Anonymous):
            if fn.name.lower() == "pgcjson_build_object":
                fn.set("this", "json_object")
        for cast in reversed(list(tree.find_all(exp.Cast, exp.TryCast, bfs=False))):  # innermost first
            new = _rewrite_casts(cast)
            if new is not cast:
                cast.replace(new)
        return tree.sql("duckdb"), names

    def _show(self, sql: str, user: str) -> tuple[list[tuple[str, int]], list[tuple]]:
        m = _SHOW.match(sql)
        if m is None:  # callers route only SHOW statements here
            raise CatalogError("42601", "syntax error in SHOW")
        what = m.group(1).strip().strip('"')
        name = _SHOW_ALIASES.get(re.sub(r"\s+", " ", what.lower()), what)
        rows, _ = self._query(
            user, "SELECT name, setting FROM pgc.pg_settings WHERE lower(name) = lower(?)", [name]
        )
        row = rows[0] if rows else None
        if row is None:
            raise CatalogError("42704", f'unrecognized configuration parameter "{what}"')
        return [(row[0] if name.lower() != "transaction_isolation" else "transaction_isolation", 25)], [
            (row[1],)
        ]

    # ------------------------------------------------------------------ execution
    def _query(
        self, user: str, sql: str, params: list | None = None, cancel=None, session: int | None = None
    ):
        """(rows, description) of ``sql`` on a cursor of its own, interrupted by the
        statement timeout or ``cancel`` (a :class:`~proxy.backends.base.CancelSignal`):
        CatalogError 57014. The lock guards only the cursor's creation."""
        with self._lock:
            cur = self._con.cursor()
        timeout_s = self.config.server.limits.statement_timeout_ms / 1000
        done, why = threading.Event(), []

        def stop(reason: str) -> None:
            why.append(reason)
            while True:  # again until it ends: an interrupt before the query starts is lost
                cur.interrupt()
                if done.wait(0.25):
                    return

        timer = threading.Timer(timeout_s, stop, ("timeout",)) if timeout_s else None
        unsubscribe = None
        try:
            cur.execute("SET VARIABLE dpgate_user = $1", [user])
            cur.execute("SET VARIABLE dpgate_session = $1::UBIGINT", [session])
            if timer is not None:
                timer.daemon = True
                timer.start()
            if cancel is not None:
                unsubscribe = cancel.subscribe(
                    lambda: threading.Thread(target=stop, args=("cancel",), daemon=True).start()
                )
            res = cur.execute(sql, params) if params else cur.execute(sql)
            return res.fetchall(), res.description or []
        except duckdb.InterruptException:
            if why and why[0] == "cancel":
                raise CatalogError("57014", "canceling statement due to user request") from None
            raise CatalogError(
                "57014", f"canceling statement due to statement timeout ({timeout_s:g} s)"
            ) from None
        finally:
            done.set()
            if timer is not None:
                timer.cancel()
            if unsubscribe is not None:
                unsubscribe()
            cur.close()

    def execute(
        self, sql: str, *, user: str, params: list | None = None, cancel=None, session: int | None = None
    ) -> tuple[list[tuple[str, int]], list[tuple]]:
        """Run a catalog statement: ([(column name, type oid)], rows); ``session``: whose
        temporary views it lists besides the shared relations."""
        if _SHOW.match(sql):
            return self._show(sql, user)
        try:
            duck_sql, names = self._translate(sql, params if params is not None else [])
        except CatalogError:
            raise
        except RecursionError:
            raise CatalogError("54001", "catalog statement too complex") from None
        except Exception as e:  # sqlglot internals: never crash the connection
            log.warning("catalog translation failed: %s", e)
            raise CatalogError("XX000", f"catalog query not supported: {e}") from None
        try:
            rows, desc = self._query(user, duck_sql, cancel=cancel, session=session)
        except duckdb.Error as e:
            raised = _RAISED.search(str(e))
            if raised:  # an error Postgres raises too (unknown relation in a ::regclass cast …)
                raise CatalogError(raised.group(1), raised.group(2)) from None
            log.info("catalog query failed in DuckDB (%s); answering empty: %s", e, duck_sql)
            if names and all(n is not None for n in names):
                return [(n, 25) for n in names if n is not None], []
            raise CatalogError("0A000", f"catalog query not supported: {str(e).splitlines()[0]}") from None
        cols = []
        use_names = len(names) == len(desc) and all(n is not None for n in names)
        for i, d in enumerate(desc):
            name = names[i] if use_names else None
            cols.append((name if name is not None else d[0], _pg_type(d[1])))
        return cols, [tuple(r) for r in rows]

    def param_types(self, sql: str) -> list[int]:
        """Type OIDs of ``$1 … $n`` in a catalog statement, inferred as Postgres would from
        casts and from the catalog column a parameter is compared with (text otherwise)."""
        n = max((int(m) for code, text in _split(sql) if code for m in _PARAM.findall(text)), default=0)
        if n == 0:
            return []
        types = [_PG_OIDS["text"]] * n
        try:
            tree = sqlglot.parse_one(_preprocess(sql, _KEEP), read="postgres")
        except (sqlglot.errors.SqlglotError, CatalogError, RecursionError, ValueError):
            return types
        if tree is None:
            return types
        aliases: dict[str, str] = {}
        for t, _db, name in _relations(tree):
            aliases[(t.alias or name).lower()] = name
        for p in tree.find_all(exp.Parameter):
            try:
                i = int(p.name) - 1
            except ValueError:
                continue
            if not 0 <= i < n:
                continue
            oid = _param_oid(p, aliases)
            if oid:
                types[i] = oid
        return types

    def describe(self, sql: str, *, user: str, session: int | None = None) -> list[tuple[str, int]]:
        """The result columns of ``sql`` (parameters taken as NULL)."""
        n = max((int(m) for m in re.findall(r"\$(\d+)", sql)), default=0)
        cols, _ = self.execute(sql, user=user, params=[None] * n, session=session)
        return cols

    # ------------------------------------------------------------------ session relations
    def add_session_view(self, session: int, name: str, columns: list[tuple[str, int]]) -> str:
        """List ``name`` as a temporary view of ``session`` (relkind 'v' in its pg_temp_N
        schema, the columns [(name, type oid)]) in that session's catalog queries only.
        Returns the schema's name. A column type the catalog does not declare is refused (0A000)."""
        types = {spec[0]: key for key, spec in schema.COLUMN_TYPES.items()}
        if bad := [(c, t) for c, t in columns if t not in types]:
            raise CatalogError(
                "0A000",
                f"column {bad[0][0]} of view {name} has a type a view cannot list (oid {bad[0][1]}); "
                "cast it to bigint, double precision, text, boolean, date or timestamp in the SELECT.",
            )
        with self._lock:
            ns = self._session_ns.get(session)
            if ns is None:
                ns = self._session_ns[session] = (self._oid(), f"pg_temp_{len(self._session_ns) + 1}")
                self._insert_session("pg_namespace", [schema.temp_namespace(*ns)], session)
            rows = schema.session_rows(ns, self._oid(), name, [(c, types[t]) for c, t in columns])
            for rel, data in rows.items():
                self._insert_session(rel, data, session)
        return ns[1]

    def drop_session_view(self, session: int, name: str) -> None:
        """Remove ``session``'s temporary view ``name`` from its catalog."""
        with self._lock:
            oids = [
                r[0]
                for r in self._con.execute(
                    "SELECT oid FROM pgc.pg_class_session WHERE session = ? AND relname = ?", [session, name]
                ).fetchall()
            ]
            for oid in oids:
                self._con.execute(
                    "DELETE FROM pgc.pg_attribute_session WHERE session = ? AND attrelid = ?", [session, oid]
                )
                self._con.execute(
                    "DELETE FROM pgc.pg_class_session WHERE session = ? AND oid = ?", [session, oid]
                )

    def drop_session(self, session: int) -> None:
        """Forget every relation of ``session`` (the connection ended)."""
        with self._lock:
            if self._session_ns.pop(session, None) is None:
                return
            for rel in schema.SESSION_RELATIONS:
                self._con.execute(f"DELETE FROM pgc.{rel}_session WHERE session = ?", [session])

    def _oid(self) -> int:
        self._next_oid += 1
        return self._next_oid

    def _insert_session(self, rel: str, rows: list[dict], session: int) -> None:
        cols = [c for c, _ in schema.RELATIONS[rel]]
        marks = ", ".join("?" for _ in range(len(cols) + 1))
        self._con.executemany(
            f"INSERT INTO pgc.{rel}_session VALUES ({marks})",
            [(*(r.get(c) for c in cols), session) for r in rows],
        )

    def close(self) -> None:
        with self._lock:
            self._con.close()
