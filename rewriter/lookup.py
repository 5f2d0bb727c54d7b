"""A public table looked up by the keys of a release: ``FROM supplier, revenue0 WHERE s_suppkey =
supplier_no`` where ``revenue0`` is an aggregating WITH query (TPC-H Q15).

The aggregating query is released as a statement of its own (with the conditions on its
columns — a scalar subquery over its own rows among them); the public table's rows, exact and
free, are read as a statement of their own (with the conditions on its columns); the proxy
joins the two on the equality and projects, orders and limits the joined rows. Joining public
data to released rows is post-processing (Dwork & Roth 2014, Prop. 2.1): the statement costs
what its one release costs.

SQL only: :func:`split` reads the shape from the parse (None when the statement is not this
shape, so the other planners decide), and refuses what it cannot answer exactly.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from sqlglot import exp

from .errors import FEATURE_NOT_SUPPORTED, Refusal

Side = Literal["p", "d"]
HINT = (
    "A public table joined to an aggregating WITH query is answered as SELECT its columns and "
    "the query's FROM public_table, with_query WHERE public_table.key = with_query.column [AND "
    "conditions on one side each] [ORDER BY output columns] [LIMIT n]; select the released rows "
    "alone and look the public rows up yourself otherwise."
)


@dataclass(frozen=True)
class Lookup:
    """The two statements and how their rows are joined: ``released`` (the aggregating query,
    released), ``public`` (the public table's rows), the join columns, and the outputs (side,
    column, name), ORDER BY (output index, desc, nulls first) and LIMIT/OFFSET."""

    released: str
    public: str
    public_table: str
    d_key: str
    p_key: str
    outputs: tuple[tuple[Side, str, str], ...]
    order: tuple[tuple[int, bool, bool], ...]
    limit: int | None
    offset: int


def _aggregates(q: exp.Expression) -> bool:
    return isinstance(q, exp.Select) and (q.args.get("group") is not None or q.find(exp.AggFunc) is not None)


def _cte_columns(cte: exp.CTE) -> list[str] | None:
    alias = cte.args.get("alias")
    listed = [c.name for c in alias.columns] if alias is not None and alias.columns else []
    body = cte.this
    if not isinstance(body, exp.Select):
        return None
    names = [e.alias_or_name for e in body.expressions]
    return listed + names[len(listed) :]


def _columns(sub: exp.Subquery) -> list[str] | None:
    alias = sub.args.get("alias")
    listed = [c.name for c in alias.columns] if alias is not None and alias.columns else []
    body = sub.this
    if not isinstance(body, exp.Select):
        return None
    names = [e.alias_or_name for e in body.expressions]
    return listed + names[len(listed) :]


def split(tree: exp.Expression, tables: Mapping[str, Any]) -> Lookup | None:
    """The lookup of ``tree``, or None when it is not a public table joined to an aggregating
    WITH query (see the module doc); a refusal where it is, but reads more than it can."""
    if not isinstance(tree, exp.Select) or not isinstance(tables, Mapping):
        return None
    w = tree.args.get("with_")
    ctes = {c.alias_or_name: c for c in (w.expressions if isinstance(w, exp.With) else [])}
    f = tree.args.get("from_")
    joins = tree.args.get("joins") or []
    if f is None or len(joins) != 1:
        return None
    j = joins[0]
    if j.side or j.kind not in (None, "", "INNER") or j.args.get("using") or j.args.get("method"):
        return None
    rels = [f.this, j.this]
    pub = [
        r
        for r in rels
        if isinstance(r, exp.Table)
        and not r.text("db")
        and r.name in tables
        and getattr(tables[r.name], "public", False)
        and r.name not in ctes
    ]
    der = [  # an aggregating WITH query, or derived table (a temporary view, inlined)
        r
        for r in rels
        if (
            isinstance(r, exp.Table)
            and not r.text("db")
            and r.name in ctes
            and _aggregates(ctes[r.name].this)
        )
        or (isinstance(r, exp.Subquery) and r.alias and _aggregates(r.this))
    ]
    if len(pub) != 1 or len(der) != 1:
        return None
    p, d = pub[0], der[0]
    pa, da = p.alias_or_name, d.alias_or_name
    p_cols = set(tables[p.name].columns)
    d_body = ctes[d.name].this if isinstance(d, exp.Table) else d.this
    d_cols = _cte_columns(ctes[d.name]) if isinstance(d, exp.Table) else _columns(d)
    if d_cols is None:
        return None
    bad = [k for k, v in tree.args.items() if v not in (None, [], False) and k not in _OK]
    if bad:
        raise Refusal(
            FEATURE_NOT_SUPPORTED, f"the {bad[0].rstrip('_').upper()} clause is not answered here.", hint=HINT
        )

    def side(c: exp.Column) -> Side:
        if c.table:
            if c.table in (pa, da):
                return "p" if c.table == pa else "d"
            raise Refusal("42P01", f'missing FROM-clause entry for table "{c.table}"', hint=None)
        in_p, in_d = c.name in p_cols, c.name in d_cols
        if in_p and in_d:
            raise Refusal("42702", f'column reference "{c.name}" is ambiguous', hint=None)
        if not (in_p or in_d):
            raise Refusal("42703", f'column "{c.name}" does not exist', hint=None)
        return "p" if in_p else "d"

    def sides(e: exp.Expression) -> set[Side]:
        out: set[Side] = set()
        for c in e.find_all(exp.Column):
            if c.find_ancestor(exp.Subquery) is None:
                out.add(side(c))
        for s in e.find_all(exp.Subquery):
            if s.parent is not None and s.parent.find_ancestor(exp.Subquery) is not None:
                continue  # inside a scalar subquery: that subquery's reads
            q = s.this
            g = q.args.get("from_") if isinstance(q, exp.Select) else None
            r = g.this if g is not None else None
            own = (isinstance(r, exp.Table) and isinstance(d, exp.Table) and r.name == d.name) or (
                isinstance(r, exp.Subquery) and r.this == d_body
            )
            out.add("d" if own else "p")
        return out

    conds: list[exp.Expression] = []
    for c in (j.args.get("on"), (tree.args.get("where") or exp.Where()).this):
        if isinstance(c, exp.Expression):
            conds += (
                [x for x in c.flatten() if isinstance(x, exp.Expression)] if isinstance(c, exp.And) else [c]
            )
    key: tuple[str, str] | None = None
    p_conj: list[exp.Expression] = []
    d_conj: list[exp.Expression] = []
    for c in conds:
        c = c.unnest() if isinstance(c, exp.Paren) else c
        if isinstance(c, exp.EQ) and isinstance(c.this, exp.Column) and isinstance(c.expression, exp.Column):
            a, b = side(c.this), side(c.expression)
            if {a, b} == {"p", "d"}:
                if key is not None:
                    raise Refusal(FEATURE_NOT_SUPPORTED, "join the public table on one equality.", hint=HINT)
                pc, dc = (c.this, c.expression) if a == "p" else (c.expression, c.this)
                key = (pc.name, dc.name)
                continue
        s = sides(c)
        if s == {"p", "d"}:
            raise Refusal(
                FEATURE_NOT_SUPPORTED,
                f"the condition {c.sql('postgres')[:60]} reads both the public table and the released rows.",
                hint=HINT,
            )
        (p_conj if s == {"p"} else d_conj).append(c)
    if key is None:
        return None
    outputs: list[tuple[Side, str, str]] = []
    for e in tree.expressions:
        node = e.unalias()
        if not isinstance(node, exp.Column) or node.is_star:
            raise Refusal(
                FEATURE_NOT_SUPPORTED,
                "select columns of the public table and of the released rows here (no * or expressions).",
                hint=HINT,
            )
        outputs.append((side(node), node.name, e.alias or node.name))
    order: list[tuple[int, bool, bool]] = []
    o = tree.args.get("order")
    for it in o.expressions if o is not None else []:
        node, idx = it.this, -1
        if isinstance(node, exp.Literal) and node.is_int:
            idx = int(node.this) - 1
        elif isinstance(node, exp.Column):
            by_name = [i for i, (_, _, n) in enumerate(outputs) if n == node.name and not node.table]
            by_col = [i for i, (s_, c_, _) in enumerate(outputs) if (s_, c_) == (side(node), node.name)]
            idx = (by_name or by_col or [-1])[0]
        if not 0 <= idx < len(outputs):
            raise Refusal(
                FEATURE_NOT_SUPPORTED, "ORDER BY output columns here (a name or a position).", hint=HINT
            )
        desc = bool(it.args.get("desc"))
        nf = it.args.get("nulls_first")
        order.append((idx, desc, desc if nf is None else bool(nf)))
    limit = _count(tree.args.get("limit"))
    offset = _count(tree.args.get("offset")) or 0
    released = exp.select("*").from_(d.copy())
    if d_conj:
        released = released.where(exp.and_(*[c.copy() for c in d_conj]))
    released.set("with_", w.copy() if w is not None else None)
    public = exp.select("*").from_(p.copy())
    if p_conj:
        public = public.where(exp.and_(*[c.copy() for c in p_conj]))
    return Lookup(
        released.sql("postgres"),
        public.sql("postgres"),
        p.name,
        key[1],
        key[0],
        tuple(outputs),
        tuple(order),
        limit,
        offset,
    )


_OK = {"expressions", "from_", "joins", "where", "order", "limit", "offset", "with_"}


def _count(node: exp.Expression | None) -> int | None:
    if node is None:
        return None
    v = node.args.get("expression") if isinstance(node, (exp.Limit, exp.Offset)) else node
    if isinstance(v, exp.Literal) and v.is_int:
        return int(v.this)
    raise Refusal(FEATURE_NOT_SUPPORTED, "LIMIT and OFFSET take an integer constant here.", hint=HINT)
