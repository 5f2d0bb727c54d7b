"""What a catalog statement may cost: the rewriter's per-row caps, and a bound on its rows.

A catalog statement (psql ``\\d``, a driver's type lookup, an ORM's reflection) runs on the
emulated catalog's DuckDB, in the proxy's own process, so its work must be bounded as a DP
statement's is — else one analyst can hold a core and memory (``repeat('ab', 500000000)``)
or multiply the catalog by itself (``pg_attribute a, pg_attribute b, pg_attribute c``)
until the statement timeout, on every connection they open. Two checks, from the parse,
before the statement runs (54000 / 54001 with a hint; nothing reaches the data backend):

* the rewriter's per-row caps (:func:`rewriter.cost.check`: literal and pattern sizes, text
  operations, syntax nodes and depth, IN lists, texts built from the statement's values);
* a bound on the rows the statement makes the catalog produce, at most
  ``[server.limits] max_catalog_rows``. A relation counts its rows (the catalog is fixed for
  its config: :class:`Stats` reads each relation's row count, and how often its most
  frequent value of a column occurs, once); a join along an equality ``a.x = b.y`` (ON,
  USING or a WHERE conjunct) multiplies by at most the largest number of rows of ``b`` that
  share one ``y`` — the chain bound of a join tree, tight for the key joins clients write —
  and sources that no equality links multiply in full (a cross product). A series
  (``generate_series``, ``range``) counts its length, which must follow from numbers or
  parameters in the statement or the length of a catalog array; ``unnest`` of a catalog array
  counts the most elements a catalog array holds; a sub-select in an expression is a join with
  the select around it (DuckDB unnests correlated subqueries into joins): its own work once, plus
  its rows for each row around it, where a correlation ``inner.x = outer.y`` bounds its rows as a
  value does (a key lookup: a row or so per outer row; any other correlation: all its rows).
  The statement's work is the sum over all its selects; a select reads at most 32 relations.
  A recursive CTE's reference to itself counts one row: how deep it recurses is bounded by the
  statement timeout alone.

The statement timeout (``statement_timeout_ms``) and the catalog's DuckDB memory limit still
apply to whatever passes (:meth:`proxy.catalog.Catalog._query`).
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable

from sqlglot import exp

from config.models import Config
from rewriter import cost as rewriter_cost
from rewriter.errors import Refusal

__all__ = ["CatalogCostError", "Stats", "check"]

log = logging.getLogger(__name__)

_ARRAY_FLOOR = 64  # an array in the catalog: at most max(64, Stats.array_rows) elements
_SERIES = ("generate_series", "range", "generateseries")
_ARRAY_LEN = ("array_upper", "array_length", "cardinality", "array_ndims")
_MAX_SOURCES = 32  # relations one select reads (the join bound is searched over them)


class CatalogCostError(Exception):
    """A catalog statement refused for its cost: ``sqlstate``, ``message``, ``hint``."""

    def __init__(self, sqlstate: str, message: str, hint: str):
        super().__init__(message)
        self.sqlstate, self.message, self.hint = sqlstate, message, hint


class Stats:
    """Row counts and per-column largest multiplicities of the emulated relations, read on
    first use and kept (the catalog does not change while its config is served).
    ``query(sql) -> rows`` runs on the catalog's DuckDB."""

    def __init__(self, query: Callable[[str], list[tuple]]):
        self._query = query
        self._lock = threading.Lock()
        self._size: dict[tuple[str, str], int] = {}
        self._cols: dict[tuple[str, str], tuple[str, ...]] = {}
        self._freq: dict[tuple[str, ...], int] = {}
        self._arrays: int | None = None

    def _load(self, rel: tuple[str, str]) -> None:
        if rel in self._size:
            return
        db, name = rel
        self._size[rel] = int(self._query(f'SELECT count(*) FROM {db}."{name}"')[0][0])
        self._cols[rel] = tuple(
            r[0].lower()
            for r in self._query(
                "SELECT column_name FROM information_schema.columns WHERE table_schema = "
                f"'{db}' AND table_name = '{name}'"
            )
        )

    def size(self, rel: tuple[str, str]) -> int:
        with self._lock:
            self._load(rel)
            return self._size[rel]

    def columns(self, rel: tuple[str, str]) -> tuple[str, ...]:
        with self._lock:
            self._load(rel)
            return self._cols[rel]

    def freq(self, rel: tuple[str, str], columns: frozenset[str]) -> int:
        """How many rows of ``rel`` share its most frequent combination of values of
        ``columns`` (its row count when it lacks one of them, or for none)."""
        with self._lock:
            self._load(rel)
            if not columns or not columns <= set(self._cols[rel]):
                return self._size[rel]
            key = (*rel, *sorted(columns))
            if key not in self._freq:
                db, name = rel
                by = ", ".join(f'"{c}"' for c in sorted(columns))
                got = self._query(
                    f'SELECT max(n) FROM (SELECT count(*) AS n FROM {db}."{name}" GROUP BY {by})'
                )
                self._freq[key] = int(got[0][0] or 0)
            return self._freq[key]

    def array_rows(self, relations) -> int:
        """The most elements any array column of the catalog holds (``unnest`` of one, or a
        series up to its length, has at most this many rows)."""
        if self._arrays is None:
            most = 0
            for db, name in relations:
                arrays = [
                    r[0]
                    for r in self._query(
                        "SELECT column_name FROM information_schema.columns WHERE table_schema = "
                        f"'{db}' AND table_name = '{name}' AND data_type LIKE '%[]'"
                    )
                ]
                if arrays:
                    got = self._query(
                        "SELECT " + ", ".join(f'max(len("{c}"))' for c in arrays) + f' FROM {db}."{name}"'
                    )[0]
                    most = max([most] + [int(v or 0) for v in got])
            self._arrays = most
        return self._arrays


def check(
    tree: exp.Expr,
    config: Config,
    params: list | None,
    stats: Stats,
    relations: tuple[tuple[str, str], ...],
    resolve: Callable[[exp.Table], tuple[str, str] | None],
) -> None:
    """Refuse (CatalogCostError 54000 / 54001) a catalog statement over the caps.
    ``resolve(table)``: the (schema, name) of the emulated relation a table reads, or None
    (a CTE, or a relation the translation refuses); ``relations``: all of them."""
    try:
        rewriter_cost.check(tree, config, params)
    except Refusal as r:
        raise CatalogCostError(r.sqlstate, r.message, r.hint or "") from None
    cap = config.server.limits.max_catalog_rows
    bound = _Bound(stats, resolve, params, max(_ARRAY_FLOOR, stats.array_rows(relations)), cap)
    try:
        _, work = bound.query(tree, {})
    except CatalogCostError:
        raise
    except (AttributeError, TypeError, ValueError, KeyError, IndexError) as e:  # a shape not foreseen
        log.warning("catalog cost bound failed on %s: %r", tree.sql("postgres")[:200], e)
        raise _refuse(
            "the catalog statement's cost cannot be bounded.", "Write a simpler catalog query"
        ) from None
    if work > cap:
        raise CatalogCostError(
            rewriter_cost.PROGRAM_LIMIT,
            (
                f"the catalog statement may produce about {_human(work)} rows; at most {cap:,} are allowed "
                "(a cross product of catalog relations, or a long series)."
            ),
            "Join the catalog relations along their keys (ON c.relnamespace = n.oid), or narrow the "
            "series (caps: [server.limits] max_catalog_rows in the config)",
        )


def _human(n: float) -> str:
    return f"{n:,.0f}" if n < 1e15 else f"{n:.1e}" if math.isfinite(n) else "unboundedly many"


def _refuse(message: str, hint: str) -> CatalogCostError:
    return CatalogCostError(
        rewriter_cost.PROGRAM_LIMIT, message, hint + " (caps: [server.limits] in the config)"
    )


def _fname(fn: exp.Anonymous) -> str:
    """A function's name as Postgres spells it (the catalog's macros are ``pgc_<name>``)."""
    name = fn.name.lower()
    return name[4:] if name.startswith("pgc_") else name


def _unwrap(e: exp.Expr) -> exp.Expr:
    """Without parentheses, casts and a schema qualifier (``pg_catalog.array_upper(…)``)."""
    while True:
        if isinstance(e, (exp.Paren, exp.Cast, exp.TryCast)):
            e = e.this
        elif isinstance(e, exp.Dot) and isinstance(e.expression, exp.Func):
            e = e.expression
        else:
            return e


def _conjuncts(e: exp.Expression | None) -> list[exp.Expression]:
    if e is None:
        return []
    e = e.this if isinstance(e, exp.Paren) else e
    if isinstance(e, exp.And):
        return _conjuncts(e.this) + _conjuncts(e.expression)
    return [e]


class _Source:
    def __init__(
        self, alias: str, rows: float, rel: tuple[str, str] | None = None, columns: tuple[str, ...] = ()
    ):
        self.alias, self.rows, self.rel, self.columns = alias, max(float(rows), 1.0), rel, columns


class _Bound:
    """Upper bounds on (rows out, rows worked) of a query, per the module's rules."""

    def __init__(self, stats: Stats, resolve, params, array_rows: int, cap: int):
        self.stats, self.resolve, self.params = stats, resolve, params or []
        self.array_rows, self.cap = array_rows, cap

    # -- queries -----------------------------------------------------------------
    def query(self, q: exp.Expr, ctes: dict[str, float]) -> tuple[float, float]:
        q = _unwrap(q) if isinstance(q, exp.Paren) else q
        if isinstance(q, exp.Subquery):
            return self.query(q.this, ctes)
        ctes = dict(ctes)
        work = 0.0
        with_ = q.args.get("with_") or q.args.get("with")
        if with_ is not None:
            for cte in with_.expressions:
                name = cte.alias_or_name.lower()
                ctes[name] = 1.0  # a recursive reference: one row a round (see above)
                rows, w = self.query(cte.this, ctes)
                ctes[name], work = rows, work + w
        if isinstance(q, exp.SetOperation):
            lr, lw = self.query(q.left, ctes)
            rr, rw = self.query(q.right, ctes)
            return lr + rr, work + lw + rw
        if isinstance(q, exp.Select):
            rows, w = self.select(q, ctes)
            return rows, work + w
        if isinstance(q, exp.Values):
            return float(len(q.expressions)), work
        raise _refuse(
            f"a catalog statement of the form {q.key.upper()} cannot be bounded.",
            "Write the catalog query as a SELECT",
        )

    def select(self, q: exp.Select, ctes: dict[str, float]) -> tuple[float, float]:
        sources: list[_Source] = []
        work = 0.0
        frm = q.args.get("from_") or q.args.get("from")
        joins = q.args.get("joins") or []
        if len(joins) >= _MAX_SOURCES:
            raise _refuse(
                f"a select of the catalog statement reads more than {_MAX_SOURCES} relations.",
                "Read fewer relations in one select",
            )
        for node in ([frm.this] if frm is not None else []) + [j.this for j in joins]:
            src, w = self.source(node, ctes)
            sources.append(src)
            work += w + src.rows
        where = q.args.get("where")
        conds: list[tuple[exp.Expression, int | None]] = [
            (c, None) for c in _conjuncts(where.this if where is not None else None)
        ]
        for k, j in enumerate(joins, 1):
            side = j.side.upper()
            if side in ("RIGHT", "FULL"):  # bounds only what the WHERE says
                continue
            # an outer join's ON bounds its joined side only: the preserved side keeps every row
            conds += [(c, k if side == "LEFT" else None) for c in _conjuncts(j.args.get("on"))]
        fixed: dict[int, set[str]] = {}  # source -> its columns equal to a constant
        spread: dict[int, float] = {}  # source -> rows bound from an IN list
        links: dict[tuple[int, int], set[str]] = {}  # (u, v) -> v's columns equal to u's values
        for c, only in conds:
            if (
                isinstance(c, exp.In)
                and not c.args.get("query")
                and isinstance(col := _unwrap(c.this), exp.Column)
            ):
                if (
                    (v := self._owner(col, sources)) is not None
                    and only in (None, v)
                    and not self._scope_columns(c.expressions, sources)
                ):
                    n = len(c.expressions) * self._factor(sources[v], {col.name.lower()})
                    spread[v] = min(spread.get(v, n), n)
                continue
            if not isinstance(c, exp.EQ):
                continue
            for col, other in ((_unwrap(c.this), c.expression), (_unwrap(c.expression), c.this)):
                if (
                    not isinstance(col, exp.Column)
                    or (v := self._owner(col, sources)) is None
                    or only not in (None, v)
                ):
                    continue
                owners = self._scope_columns([other], sources)
                if not owners:  # col = a value, a parameter or an outer column
                    fixed.setdefault(v, set()).add(col.name.lower())
                elif len(owners) == 1 and (u := next(iter(owners))) not in (-1, v):
                    links.setdefault((u, v), set()).add(col.name.lower())
        for k, j in enumerate(joins, 1):
            side = j.side.upper()
            for u in j.args.get("using") or [] if side not in ("RIGHT", "FULL") else []:
                name = u.name.lower()  # USING (x): x = x with every source before it
                for i in range(k):
                    if name in sources[i].columns:
                        links.setdefault((i, k), set()).add(name)
                        if side != "LEFT":
                            links.setdefault((k, i), set()).add(name)
        for v, src in enumerate(sources):
            src.rows = min(src.rows, self._factor(src, fixed.get(v, set())), spread.get(v, src.rows))
        edges = [
            (u, v, self._factor(sources[v], cols | fixed.get(v, set()))) for (u, v), cols in links.items()
        ]
        rows = self._join_rows(sources, edges) if sources else 1.0
        work += rows
        for child in _inner_queries(q):  # a join with the rows around it (see above)
            crows, cwork = self.query(child, ctes)
            work += cwork + rows * crows
        work += self._expression_series(q, ctes)
        return rows, work

    def source(self, node: exp.Expression, ctes: dict[str, float]) -> tuple[_Source, float]:
        alias = node.alias_or_name.lower() if hasattr(node, "alias_or_name") else ""
        if isinstance(node, exp.Table) and isinstance(node.this, exp.Identifier):
            name = node.name.lower()
            if not node.text("db") and name in ctes:
                return _Source(alias, ctes[name]), 0.0
            rel = self.resolve(node)
            if rel is None:
                return _Source(alias, 1.0), 0.0
            return _Source(alias, self.stats.size(rel), rel, self.stats.columns(rel)), 0.0
        if isinstance(node, exp.Table):  # a table function
            rows, w = self.set_rows(node.this, ctes)
            return _Source(alias, rows), w
        if isinstance(node, (exp.Unnest, exp.Explode)):
            rows, w = self.unnest_rows(node, ctes)
            return _Source(alias, rows), w
        if isinstance(node, exp.Lateral):
            inner = node.this
            if isinstance(inner, (exp.Subquery, exp.Select, exp.SetOperation)):
                rows, w = self.query(inner, ctes)
                return _Source(alias, rows), w
            rows, w = self.set_rows(inner, ctes)
            return _Source(alias, rows), w
        if isinstance(node, exp.Subquery):
            rows, w = self.query(node.this, ctes)
            return _Source(
                alias,
                rows,
                columns=tuple(s.lower() for s in node.this.named_selects)
                if isinstance(node.this, exp.Query)
                else (),
            ), w
        if isinstance(node, exp.Values):
            return _Source(alias, len(node.expressions)), 0.0
        raise _refuse(
            f"a catalog statement reading {node.key.upper()} cannot be bounded.",
            "Read catalog relations, sub-selects or generate_series",
        )

    # -- joins -------------------------------------------------------------------
    def _owner(self, col: exp.Column, sources: list[_Source]) -> int | None:
        table = col.table.lower()
        if table:
            hits = [i for i, s in enumerate(sources) if s.alias == table]
        else:
            hits = [i for i, s in enumerate(sources) if col.name.lower() in s.columns]
        return hits[0] if len(hits) == 1 else None

    def _factor(self, s: _Source, columns: set[str]) -> float:
        """At most how many rows of ``s`` share one combination of values of ``columns``."""
        if s.rel is None or not columns:
            return s.rows
        return min(max(float(self.stats.freq(s.rel, frozenset(columns))), 1.0), s.rows)

    def _scope_columns(self, exprs, sources: list[_Source]) -> set[int]:
        """The sources of this select whose columns ``exprs`` read (-1: a column that may be
        one of theirs); empty for values, parameters and outer columns."""
        owners = set()
        for e in exprs:
            for x in e.find_all(exp.Column):
                o = self._owner(x, sources)
                if o is not None:
                    owners.add(o)
                elif not x.table and any(x.name.lower() in s.columns for s in sources):
                    owners.add(-1)
        return owners

    def _join_rows(self, sources: list[_Source], edges) -> float:
        """Π over the equality-linked components of the least chain bound over their roots."""
        adj: dict[int, list[tuple[int, float]]] = {i: [] for i in range(len(sources))}
        linked: dict[int, set[int]] = {i: set() for i in range(len(sources))}
        for u, v, f in edges:
            adj[u].append((v, f))
            linked[u].add(v)
            linked[v].add(u)
        seen: set[int] = set()
        total = 1.0
        for start in range(len(sources)):
            if start in seen:
                continue
            comp, stack = {start}, [start]
            while stack:
                for v in linked[stack.pop()]:
                    if v not in comp:
                        comp.add(v)
                        stack.append(v)
            seen |= comp
            total *= min(self._chain(root, comp, adj, sources) for root in comp)
        return total

    @staticmethod
    def _chain(root: int, comp: set[int], adj, sources: list[_Source]) -> float:
        """Rows of a join tree grown from ``root``: each next source by its cheapest edge from
        the sources joined so far (at most f rows of it per row), else in full (a cross product)."""
        rows, done = sources[root].rows, {root}
        while len(done) < len(comp):
            steps = [(min(f, sources[v].rows), v) for u in done for v, f in adj[u] if v not in done]
            step = min(steps) if steps else min((sources[v].rows, v) for v in comp - done)
            rows *= max(step[0], 1.0)
            done.add(step[1])
        return rows

    # -- series and arrays -----------------------------------------------------------
    def set_rows(self, fn: exp.Expression, ctes: dict[str, float]) -> tuple[float, float]:
        """(rows, work) of a table function."""
        name = _fname(fn) if isinstance(fn, exp.Anonymous) else fn.key.lower()
        if isinstance(fn, exp.GenerateSeries) or name in _SERIES:
            return self.series_rows(fn), 0.0
        if isinstance(fn, (exp.Unnest, exp.Explode)) or name == "unnest":
            return self.unnest_rows(fn, ctes)
        if name in ("generate_subscripts", "generatesubscripts"):
            return float(self.array_rows), 0.0
        raise _refuse(
            f"the table function {name} cannot be bounded in a catalog statement.",
            "Use generate_series with numeric bounds, or unnest a catalog array",
        )

    def unnest_rows(self, fn: exp.Expression, ctes: dict[str, float]) -> tuple[float, float]:
        """(rows, work) of unnest: an array literal's length, a series' length, the rows of the
        query that builds the array, or (a catalog array) the array bound."""
        args = fn.expressions or ([fn.this] if fn.this is not None else [])
        rows = work = 0.0
        for a in args:
            a = _unwrap(a)
            if isinstance(a, exp.Array):
                rows = max(rows, float(len(a.expressions)))
            elif isinstance(a, exp.GenerateSeries) or (isinstance(a, exp.Anonymous) and _fname(a) in _SERIES):
                rows = max(rows, self.series_rows(a))
            elif (inner := a.find(exp.Select)) is not None:
                r, w = self.query(inner, ctes)
                rows, work = max(rows, r), work + w
            else:
                rows = max(rows, float(self.array_rows))
        return max(rows, 1.0), work

    def series_rows(self, fn: exp.Expression) -> float:
        if isinstance(fn, exp.GenerateSeries):
            args = [fn.args.get("start"), fn.args.get("end"), fn.args.get("step")]
        else:
            args = list(fn.expressions) + [None] * 3
            if len(fn.expressions) == 1:  # range(n): 0 … n-1
                args = [exp.Literal.number(0), fn.expressions[0], None]
        start, end, step = (self._number(a) for a in args[:3])
        if start is None or end is None or (args[2] is not None and step is None):
            raise _refuse(
                "a series in a catalog statement must run between numbers or parameters "
                "(or up to the length of a catalog array).",
                "Write generate_series(1, 10), or generate_series(1, array_upper(col, 1))",
            )
        step = 1.0 if step is None else step  # no step given (a given one is a number: checked above)
        if step == 0:
            return 1.0
        n = (end - start) / step + 1
        return n if math.isfinite(n) and n >= 1 else (math.inf if not n < 1 else 1.0)

    def _number(self, a) -> float | None:
        if a is None:
            return None
        a = _unwrap(a)
        if isinstance(a, exp.Neg):
            v = self._number(a.this)
            return None if v is None else -v
        if isinstance(a, exp.Literal) and not a.is_string:
            try:
                return float(a.this)
            except ValueError:
                return None
        if isinstance(a, exp.Parameter):
            try:
                v = self.params[int(a.name) - 1]
            except (ValueError, IndexError):
                return 0.0  # described without values
            if v is None:
                return 0.0
            try:
                return float(v)
            except (TypeError, ValueError):
                return None
        if (isinstance(a, exp.Anonymous) and _fname(a) in _ARRAY_LEN) or isinstance(a, exp.ArraySize):
            return float(self.array_rows)
        if isinstance(a, (exp.Add, exp.Sub)):
            x, y = self._number(a.this), self._number(a.expression)
            if x is None or y is None:
                return None
            return x + y if isinstance(a, exp.Add) else x - y
        return None

    def _expression_series(self, q: exp.Select, ctes: dict[str, float]) -> float:
        """Series and unnests in the select's expressions (a set-returning function in the
        select list multiplies its rows; DuckDB's scalar ``range`` builds a list)."""
        out = 0.0
        for node in _own_nodes(q):
            if isinstance(node, exp.GenerateSeries) or (
                isinstance(node, exp.Anonymous) and _fname(node) in _SERIES
            ):
                out += self.series_rows(node)
            elif isinstance(node, (exp.Explode, exp.Unnest)):
                out += sum(self.unnest_rows(node, ctes))
        return out


def _sources(q: exp.Select) -> set[int]:
    """The ids of ``q``'s FROM and JOIN sources: their queries are not ``q``'s own expressions."""
    frm = q.args.get("from_") or q.args.get("from")
    skip = {id(frm.this)} if frm is not None else set()
    skip.update(id(j.this) for j in q.args.get("joins") or [])
    return skip


def _own_nodes(q: exp.Select):
    """The nodes of ``q``'s own expressions: not inside a FROM source or a nested query."""
    skip = _sources(q)
    stack = list(q.iter_expressions())
    while stack:
        node = stack.pop()
        if id(node) in skip or isinstance(node, (exp.Select, exp.SetOperation, exp.With)):
            continue
        yield node
        stack.extend(node.iter_expressions())


def _inner_queries(q: exp.Select):
    """The queries nested in ``q``'s own expressions (scalar, EXISTS, IN, ANY sub-selects)."""
    skip = _sources(q)
    stack = list(q.iter_expressions())
    while stack:
        node = stack.pop()
        if id(node) in skip or isinstance(node, exp.With):
            continue
        if isinstance(node, (exp.Select, exp.SetOperation)):
            yield node
            continue
        stack.extend(node.iter_expressions())
