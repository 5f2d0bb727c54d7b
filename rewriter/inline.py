"""Derived tables and CTEs, from the parse.

``WITH x AS (q) … FROM x`` becomes ``… FROM (q) AS x``. A derived table whose query
is a projection/filter of one declared table or of a join (``FROM (SELECT a, b + 1 AS c
FROM t WHERE p) s``, ``FROM (SELECT p.amount, s.area FROM purchases p JOIN stores s ON
…) j``: the shapes SQL generators such as ibis write) is inlined: the outer query's
columns are renamed through to the inner expressions, the inner join becomes the outer
query's and the WHERE clauses are conjoined, so the statement IS the flat one (same
plan, same release key; :mod:`.joins` then decides whether the join is answerable). A derived table that aggregates is split off:
:func:`split_outer` returns it and the outer query, which :func:`apply_outer` turns
into post-processing of the inner release (filters, projections, arithmetic, ORDER
BY, LIMIT over its output columns: free, same release).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any, TypeVar, cast

from sqlglot import exp

from . import postprocess
from . import select as select_
from .args import understood
from .errors import FEATURE_NOT_SUPPORTED as UNSUPPORTED
from .errors import INSUFFICIENT_PRIVILEGE as DENIED
from .errors import UNDEFINED_COLUMN, Refusal
from .plan import OrderItem, Output, Plan
from .postprocess import Tree, output_type
from .scope import Ctx, T

_AGGS = (exp.AggFunc,)
E = TypeVar("E", bound=exp.Expression)
_INNER_OK = {"expressions", "from_", "where", "order"}


def expand_ctes(expr: exp.Expression) -> exp.Expression:
    """Replace references to WITH queries by derived tables (in place; returns the statement)."""
    if not isinstance(expr, exp.Select) or not expr.args.get("with_"):
        return expr
    with_ = expr.args["with_"]
    if with_.args.get("recursive"):
        raise Refusal(DENIED, "WITH RECURSIVE is not allowed; query the declared table directly.")
    bodies: dict[str, exp.Expression] = {}
    for cte in with_.expressions:
        if cte.args.get("materialized") is not None:
            raise Refusal(UNSUPPORTED, "write the WITH query as WITH x AS (SELECT …) without MATERIALIZED.")
        body = cte.this.copy()
        names = cte.args["alias"].columns if cte.args.get("alias") else []
        if names:
            body = _renamed(body, [n.name for n in names], cte.alias_or_name)
        _substitute_ctes(body, bodies)
        bodies[cte.alias_or_name] = body
    expr.set("with_", None)
    _substitute_ctes(expr, bodies)
    return expr


def _renamed(body: exp.Expression, names: list[str], cte: str) -> exp.Expression:
    """A WITH query's body with its column list ``WITH x (a, b) AS (SELECT …)`` applied: the
    first output columns renamed, in order (Postgres: the rest keep their names)."""
    if not isinstance(body, exp.Select) or any(
        isinstance(e.unalias(), exp.Star) or (isinstance(e, exp.Column) and e.is_star)
        for e in body.expressions
    ):
        raise Refusal(
            UNSUPPORTED,
            "a WITH query with a column list is answered when its query is a SELECT of named "
            "expressions (no *); or name the columns with AS inside it.",
        )
    if len(names) > len(body.expressions):
        raise Refusal(
            "42P10",
            f'WITH query "{cte}" has {len(body.expressions)} columns available but {len(names)} columns specified',
        )
    for e, name in zip(list(body.expressions), names):
        e.replace(exp.alias_(e.unalias().copy(), name))
    return body


def _substitute_ctes(node: exp.Expression, bodies: dict[str, exp.Expression]) -> None:
    for t in list(node.find_all(exp.Table)):
        if not t.text("db") and t.name in bodies and isinstance(t.this, exp.Identifier):
            alias = t.alias or t.name
            t.replace(
                exp.Subquery(this=bodies[t.name].copy(), alias=exp.TableAlias(this=exp.to_identifier(alias)))
            )


def _derived(select: exp.Select) -> exp.Subquery | None:
    from_ = select.args.get("from_")
    sub = from_.this if from_ is not None else None
    if (
        isinstance(sub, exp.Subquery)
        and isinstance(sub.this, exp.Select)
        and not select.args.get("joins")
        and sub.this.expressions
    ):
        return sub
    return None


def _aggregating(inner: exp.Select) -> bool:
    return bool(
        inner.args.get("group") or inner.args.get("having") or any(e.find(*_AGGS) for e in inner.expressions)
    )


def inline(select: E) -> E:
    """Inline projection/filter derived tables of ``select`` (innermost first; in place)."""
    if not isinstance(select, exp.Select):
        return select
    sub = _derived(select)
    if sub is None:
        if select.args.get("joins"):
            _inline_operands(select)
        return select
    inner = inline(sub.this)
    if _aggregating(inner):
        sub.set("this", inner)
        return select
    joined = bool(inner.args.get("joins"))
    ok = _INNER_OK | {"joins"} if joined and not select.args.get("joins") else _INNER_OK
    bad = [k for k, v in inner.args.items() if v not in (None, [], False) and k not in ok]
    if bad and bad[0] in ("joins", "laterals"):
        raise Refusal(
            DENIED,
            "LATERAL is not allowed (also not inside a derived table); join declared tables with JOIN … ON.",
        )
    if bad:
        what = {"limit": "LIMIT", "offset": "OFFSET", "distinct": "DISTINCT"}.get(bad[0], bad[0].upper())
        raise Refusal(
            UNSUPPORTED,
            f"{what} inside a derived table is not supported; put it on the "
            "outer query (or query the table directly).",
        )
    alias = sub.alias
    names: dict[str, exp.Expression] = {}
    twice: set[str] = set()  # an output name the derived table gives twice: ambiguous outside
    star = False
    for e in inner.expressions:
        if isinstance(e, exp.Star) or (isinstance(e, exp.Column) and e.is_star):
            if joined and isinstance(e, exp.Column) and e.table:
                raise Refusal(
                    UNSUPPORTED,
                    f"name the columns of {e.table} in the derived table "
                    f"(SELECT {e.table}.a, {e.table}.b …) instead of {e.table}.*.",
                )
            star = True
        elif isinstance(e, (exp.Alias, exp.Column)):
            out = e.alias if isinstance(e, exp.Alias) else e.name
            if out in names:
                twice.add(out)
            names[out] = e.this if isinstance(e, exp.Alias) else e
        else:
            raise Refusal(
                UNSUPPORTED,
                f"name the expression {e.sql('postgres')[:40]} in the derived "
                "table (… AS name) to use it outside.",
            )
    outer_aliases = {e.alias for e in select.expressions if isinstance(e, exp.Alias)}

    def rename_order(node: exp.Expr) -> exp.Expr:
        if isinstance(node, exp.Column) and not node.table and node.name in outer_aliases:
            return node  # ORDER BY an output name of the outer query
        return rename(node)

    def rename(node: exp.Expr) -> exp.Expr:
        if not isinstance(node, exp.Column) or node.is_star:
            return node
        if node.table and node.table != alias:
            return node
        if node.name in twice:
            raise Refusal(
                "42702",
                f"column reference {node.name} is ambiguous: the derived table "
                f"{alias} has two columns of that name.",
                hint=None,
            )
        target = names.get(node.name)
        if target is not None:
            t = target.copy()
            return t if isinstance(t, (exp.Column, exp.Literal)) else exp.Paren(this=t)
        if star:
            return exp.column(node.name)
        raise Refusal(UNDEFINED_COLUMN, f"column {alias}.{node.name} does not exist.", hint=None)

    for key in ("expressions", "where", "group", "having", "order"):
        v = select.args.get(key)
        if v is None:
            continue
        if isinstance(v, list):
            select.set(
                key,
                [
                    _named(x, x.transform(rename))
                    if key == "expressions"
                    else x.transform(rename)
                    if not (isinstance(x, (exp.Star,)) or (isinstance(x, exp.Column) and x.is_star))
                    else x
                    for x in v
                ],
            )
        else:
            select.set(key, v.transform(rename_order if key == "order" else rename))
    select.set("from_", inner.args["from_"].copy())
    if joined:  # the derived table's join is the outer query's relation
        select.set("joins", [j.copy() for j in inner.args["joins"]])
    iw = inner.args.get("where")
    ow = select.args.get("where")
    if iw is not None:
        cond = (
            iw.this.copy()
            if ow is None
            else exp.and_(exp.Paren(this=iw.this.copy()), exp.Paren(this=ow.this))
        )
        select.set("where", exp.Where(this=cond))
    return select


def _inline_operands(select: exp.Select) -> None:
    """A join operand that is a projection/filter of one declared table (``FROM (SELECT *
    FROM purchases t0 WHERE t0.amount > 10) t4 JOIN stores t2 ON t4.store = t2.store_id``)
    becomes that table under the operand's alias, its WHERE conjoined to the statement's:
    the same rows for the FROM side and for the right side of an inner join (a filter on
    the right of a LEFT JOIN is not a WHERE: that operand is left to :mod:`.joins`, which
    refuses it)."""
    holders = [select.args["from_"]] + [
        j for j in select.args["joins"] if not j.side and j.kind in ("", "INNER") and not j.args.get("using")
    ]
    for holder in holders:
        sub = holder.this
        body = sub.this if isinstance(sub, exp.Subquery) else None
        if (
            not isinstance(body, exp.Select)
            or _aggregating(body)
            or not body.expressions
            or any(
                v not in (None, [], False) and k not in ("expressions", "from_", "where")
                for k, v in body.args.items()
            )
        ):
            continue
        table = body.args["from_"].this
        if not isinstance(table, exp.Table) or not sub.alias:
            continue
        inner_q, alias = table.alias_or_name, sub.alias

        def requalify(node: exp.Expr, inner_q: str = inner_q, alias: str = alias) -> exp.Expr:
            if isinstance(node, exp.Column) and not node.is_star and node.table in ("", inner_q):
                return exp.column(node.name, table=alias)
            return node

        names: dict[str, exp.Expr] = {}
        star = False
        for e in body.expressions:
            if isinstance(e, exp.Star) or (
                isinstance(e, exp.Column) and e.is_star and e.table in ("", inner_q)
            ):
                star = True
            elif isinstance(e, (exp.Alias, exp.Column)) and not (isinstance(e, exp.Column) and e.is_star):
                out = e.alias if isinstance(e, exp.Alias) else e.name
                names[out] = (e.this if isinstance(e, exp.Alias) else e).transform(requalify)
            else:
                raise Refusal(
                    UNSUPPORTED,
                    f"name the expression {e.sql('postgres')[:40]} in the derived "
                    "table (… AS name) to use it outside.",
                )

        def rename(
            node: exp.Expr, alias: str = alias, names: dict[str, exp.Expr] = names, star: bool = star
        ) -> exp.Expr:
            if not isinstance(node, exp.Column) or node.is_star or node.table != alias:
                return node
            target = names.get(node.name)
            if target is not None:
                t = target.copy()
                return t if isinstance(t, (exp.Column, exp.Literal)) else exp.Paren(this=t)
            if star:
                return node
            raise Refusal(UNDEFINED_COLUMN, f"column {alias}.{node.name} does not exist.", hint=None)

        t = table.copy()
        t.set("alias", exp.TableAlias(this=exp.to_identifier(alias)))
        holder.set("this", t)
        for key in ("expressions", "where", "group", "having", "order"):
            v = select.args.get(key)
            if isinstance(v, list):
                select.set(
                    key,
                    [
                        _named(x, x.transform(rename)) if key == "expressions" else x.transform(rename)
                        for x in v
                    ],
                )
            elif v is not None:
                select.set(key, v.transform(rename))
        for j in select.args["joins"]:
            if j.args.get("on") is not None:
                j.set("on", j.args["on"].transform(rename))
        iw, ow = body.args.get("where"), select.args.get("where")
        if iw is not None:
            f = iw.this.transform(requalify)
            cond = f if ow is None else exp.and_(exp.Paren(this=f), exp.Paren(this=ow.this))
            select.set("where", exp.Where(this=cond))


def _named(before: exp.Expr, after: exp.Expr) -> exp.Expr:
    """A select item renamed through a derived table keeps the output name Postgres gives
    it: a column of the derived table is named as the derived table names it (``SELECT s
    FROM (SELECT store AS s …) x`` returns a column ``s``), whatever it stands for inside."""
    if (
        isinstance(before, exp.Column)
        and not isinstance(after, exp.Alias)
        and not (isinstance(after, exp.Column) and after.name == before.name)
    ):
        return exp.alias_(after.this if isinstance(after, exp.Paren) else after, before.name, quoted=True)
    return after


def derived_alias(select: exp.Select) -> str:
    """The alias of the derived table ``select`` reads."""
    return _derived_table(select).alias


def _derived_table(select: exp.Select) -> exp.Subquery:
    sub = _derived(select)
    if sub is None:  # the callers have split the statement at its derived table
        raise Refusal(UNSUPPORTED, "this query reads no derived table.")
    return sub


def split_outer(select: exp.Expression) -> tuple[exp.Select, exp.Select] | None:
    """(inner select, outer select) when ``select`` reads an aggregating derived table; else None."""
    if not isinstance(select, exp.Select):
        return None
    sub = _derived(select)
    if sub is None or not _aggregating(sub.this):
        return None
    return sub.this, select


_OUTER_OK = {"expressions", "from_", "where", "order", "limit", "offset"}
_ROLLUP = (exp.Count, exp.Sum, exp.Avg, exp.Min, exp.Max)


def apply_outer(plan: Plan, outer: exp.Select, ctx: Ctx) -> Plan:
    """The plan of the inner release with the outer query as post-processing."""
    alias = _derived_table(outer).alias
    bad = [k for k, v in outer.args.items() if v not in (None, [], False) and k not in _OUTER_OK]
    rollup = any(
        not (isinstance(a.parent, exp.Window) and a.arg_key == "this")  # a window over the rows
        and a.find_ancestor(exp.Subquery) is None  # a scalar subquery's (over_rows below)
        for e in outer.expressions
        for a in e.find_all(*_AGGS)
    )
    if bad or (rollup and outer.args.get("order")):
        raise Refusal(
            UNSUPPORTED,
            "over an aggregating subquery dpgate answers filters, projections, "
            "arithmetic, ORDER BY and LIMIT, and COUNT/SUM/AVG/MIN/MAX of its released rows "
            "(post-processing of its release); group or join in the inner query instead.",
        )
    if plan.limit is not None or plan.offset:
        raise Refusal(
            UNSUPPORTED,
            "LIMIT / OFFSET inside an aggregating subquery are not supported; put "
            "ORDER BY and LIMIT on the outer query.",
        )
    plan = replace(plan, selection=None)  # an inner HAVING: a filter on the released cells (row_filter)
    named = {o.name: o for o in plan.outputs}

    def as_tree(o: Output) -> Tree:
        if o.source == "group":
            return ("key", o.index)
        if o.source == "expr":
            return o.post
        return ("display", o.post, ("agg", o.index)) if o.post else ("agg", o.index)

    def col(node: exp.Column) -> Output:
        if node.table and node.table != alias:
            raise Refusal("42P01", f"missing FROM-clause entry for {node.table!r}.", hint=None)
        o = named.get(node.name)
        if o is None:
            raise Refusal(
                UNDEFINED_COLUMN,
                f"column {node.name} does not exist in subquery {alias}; its columns: {', '.join(named)}.",
                hint=None,
            )
        return o

    derived = _derived_table(outer).this

    def over_rows(sub: exp.Subquery) -> Output:
        """``(SELECT MAX(c) FROM <the same derived table>)``: an aggregate of all the inner
        release's rows (before the outer WHERE, as the subquery reads them), post-processing
        of that one release — never a second release of the same cells."""
        q = sub.this
        bad_args = [
            k
            for k, v in q.args.items()
            if v not in (None, [], False) and k not in ("expressions", "from_", "where")
        ]
        item = q.expressions[0].unalias() if len(q.expressions) == 1 else None
        arg = item.this if isinstance(item, _ROLLUP) else None
        if (
            bad_args
            or not isinstance(item, _ROLLUP)
            or not (
                isinstance(arg, exp.Column) or (isinstance(item, exp.Count) and isinstance(arg, exp.Star))
            )
        ):
            raise Refusal(
                UNSUPPORTED,
                "a scalar subquery over the statement's own aggregating subquery is answered as "
                "COUNT(*) / COUNT(c) / SUM(c) / AVG(c) / MIN(c) / MAX(c) of its output columns "
                "[WHERE a condition on them], without GROUP BY.",
                hint=postprocess.HINT,
            )
        understood(item)
        func = item.key
        w = q.args.get("where")
        keep = tree(w.this)[0] if w is not None else None  # a filter on the released rows it reads
        if isinstance(arg, exp.Star):
            return Output(func, "expr", -1, "int", ("over_rows", func, None, keep))
        o = col(exp.column(arg.name))
        typ = o.type
        if func in ("sum", "avg", "min", "max") and typ not in ("int", "float", "numeric", "int4"):
            if not (func in ("min", "max") and typ == "text"):
                raise Refusal("42883", f"{func}() of a {typ} column is not available.")
        out_type = {
            "count": "int",
            "sum": "numeric" if typ == "int" else typ,
            "avg": "float" if typ == "float" else "numeric",
        }.get(func, typ)
        return Output(func, "expr", -1, output_type(out_type), ("over_rows", func, as_tree(o), keep))

    def reads_derived(sub: exp.Subquery) -> bool:
        q = sub.this
        f = q.args.get("from_") if isinstance(q, exp.Select) else None
        return f is not None and isinstance(f.this, exp.Subquery) and f.this.this == derived

    def tree(node: exp.Expression) -> tuple[Tree, str | None]:
        """(resolved tree, type) of an outer expression over the inner's output columns."""
        placeholder: dict[str, Output] = {}
        probe = node.copy()
        for sub in [s for s in probe.find_all(exp.Subquery) if reads_derived(s)]:
            tag = f"__dp{len(placeholder)}"
            placeholder[tag] = over_rows(sub)
            sub.replace(exp.column(tag))
        for c in list(probe.find_all(exp.Column)):
            if c.name in placeholder:
                continue
            o = col(c)
            tag = f"__dp{len(placeholder)}"
            placeholder[tag] = o
            c.replace(exp.column(tag))
        raw = postprocess.tree(probe, cast(Ctx, _Names(ctx, placeholder)))  # a Ctx by delegation
        return _resolve(raw, placeholder, as_tree)

    outs: list[Output] = []
    for e in outer.expressions if rollup else []:  # aggregates of the released rows
        name = e.alias if isinstance(e, exp.Alias) else None
        node = e.unalias()
        arg = node.this if isinstance(node, _ROLLUP) else None
        if not isinstance(node, _ROLLUP) or not (
            isinstance(arg, exp.Column) or (isinstance(node, exp.Count) and isinstance(arg, exp.Star))
        ):
            raise Refusal(
                UNSUPPORTED,
                "over an aggregating subquery the outer select list takes either "
                "its columns and expressions over them, or only COUNT(*) / COUNT(c) / SUM(c) / "
                "AVG(c) / MIN(c) / MAX(c) of its output columns.",
            )
        understood(node)
        func = node.key
        t: Tree | None
        typ: str | None
        if isinstance(arg, exp.Star):
            t, typ = None, None
        else:
            o = col(arg)
            t, typ = as_tree(o), o.type
            if (
                func in ("sum", "avg", "min", "max")
                and typ not in ("int", "float", "numeric")
                and not (func in ("min", "max") and typ == "text")
            ):
                raise Refusal("42883", f"{func}() of a {typ} column is not available.")
        out_type = {
            "count": "int",
            "sum": "numeric" if typ == "int" else typ,
            "avg": "float" if typ == "float" else "numeric",
        }.get(func, typ)
        outs.append(Output(name or func, "expr", -1, output_type(out_type), ("rollup", func, t)))
    for e in outer.expressions if not rollup else []:
        name = e.alias if isinstance(e, exp.Alias) else None
        node = e.unalias()
        if isinstance(node, exp.Star) or (isinstance(node, exp.Column) and node.is_star):
            outs.extend(plan.outputs)
            continue
        if isinstance(node, exp.Column):
            o = col(node)
            outs.append(replace(o, name=name or o.name))
            continue
        t, typ = tree(node)
        outs.append(Output(name or postprocess.name(node), "expr", -1, output_type(typ), t))
    keep = plan.row_filter
    w = outer.args.get("where")
    if w is not None and w.find(exp.Window) is not None:
        raise Refusal("42P20", "window functions are not allowed in WHERE", hint=postprocess.WINDOW_HINT)
    if w is not None:
        f, _ = tree(w.this)
        keep = f if keep is None else ("op", "and", keep, f)
    order: list[OrderItem] = []
    o_node = outer.args.get("order")
    for o in understood(o_node).expressions if o_node is not None else []:
        node, idx = understood(o).this, None
        if isinstance(node, exp.Literal) and node.is_int:
            idx = int(node.this) - 1
        elif isinstance(node, exp.Column) and not node.table and any(x.name == node.name for x in outs):
            idx = next(i for i, x in enumerate(outs) if x.name == node.name)
        elif isinstance(node, exp.Column):
            inner_o = col(node)
            idx = next((i for i, x in enumerate(outs) if x == replace(inner_o, name=x.name)), None)
        if idx is None or not 0 <= idx < len(outs):
            raise Refusal(
                UNSUPPORTED,
                "ORDER BY over a subquery takes output columns of the outer query: a name or a position.",
            )
        order.append(OrderItem(idx, bool(o.args.get("desc")), o.args.get("nulls_first")))
    if o_node is None and plan.order_by:  # the inner ORDER BY, where the outer selects its columns
        for item in plan.order_by:
            src = plan.outputs[item.output]
            idx = next((i for i, x in enumerate(outs) if x == replace(src, name=x.name)), None)
            if idx is None:
                break
            order.append(replace(item, output=idx))
    limit, offset = select_.limit_offset(outer, ctx)
    return replace(
        plan, outputs=tuple(outs), order_by=tuple(order), limit=limit, offset=offset, row_filter=keep
    )


class _Names:
    """A Ctx stand-in for postprocess.tree over an outer query: columns are the
    inner's outputs (placeholders), parameters bind through the real context."""

    def __init__(self, ctx: Ctx, placeholder: dict[str, Output]) -> None:
        self._ctx, self._ph = ctx, placeholder

    def column(self, node: exp.Column) -> T:
        return T(exp.column(node.name), None)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ctx, name)


def _resolve(
    raw: Tree, placeholder: dict[str, Output], as_tree: Callable[[Output], Tree]
) -> tuple[Tree, str | None]:

    def agg(func: str, col: Any) -> tuple[int, str | None]:
        raise Refusal(
            UNSUPPORTED,
            "aggregates over the rows of an aggregating subquery are not supported; "
            "aggregate in the inner query.",
        )

    def key(name: str) -> tuple[int | str, str | None]:
        return name, placeholder[name].type  # spliced below

    t, typ = postprocess.resolve(raw, agg, key)
    return _splice(t, placeholder, as_tree), typ


def _splice(t: Any, placeholder: dict[str, Output], as_tree: Callable[[Output], Tree]) -> Any:
    if not isinstance(t, tuple):
        return t
    if len(t) == 2 and t[0] == "key" and isinstance(t[1], str):
        return as_tree(placeholder[t[1]])
    return tuple(_splice(x, placeholder, as_tree) for x in t)
