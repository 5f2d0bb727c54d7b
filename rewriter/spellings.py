"""Spellings of one statement read as one, applied to the parse before any rule sees it
(:func:`rewriter.parsing.parse`); each rewrite gives a statement with the same result on
every database, so no rule has to know the other spelling.

* :func:`factor_common`: ``(A AND X) OR (A AND Y)`` as ``A AND (X OR Y)``;
* :func:`alias_columns`: a derived table's or WITH query's column list, ``(SELECT a, b …)
  AS t (x, y)``, as the aliases of its select items, ``(SELECT a AS x, b AS y …) AS t``.

SQL only: no I/O.
"""

from __future__ import annotations

from typing import cast

from sqlglot import exp

__all__ = ["alias_columns", "factor_common", "normalize"]


def normalize(tree: exp.Expression) -> exp.Expression:
    """``tree`` with every rewrite of this module applied, in place."""
    return factor_common(alias_columns(tree))


def alias_columns(tree: exp.Expression) -> exp.Expression:
    """Each ``AS t (x, y, …)`` on a derived table or a WITH query whose body is one SELECT
    with at least as many items, none of them ``*``, moved onto the items: the first k items
    are named x, y, … (as Postgres names them; the rest keep their names), and the alias
    keeps the name only. TPC-H Q13 names its per-customer count so (``AS c_orders
    (c_custkey, c_count)``), and Q15's ``WITH revenue0 (supplier_no, total_revenue)``. Other
    column lists are left as written, for the rules to refuse or read."""
    for node in list(tree.find_all(exp.Subquery, exp.CTE)):
        alias = node.args.get("alias")
        body = node.this
        if not isinstance(alias, exp.TableAlias) or not alias.columns or not isinstance(body, exp.Select):
            continue
        names, items = alias.columns, body.expressions
        if len(names) > len(items) or any(
            isinstance(i.unalias(), exp.Star) or (isinstance(i.unalias(), exp.Column) and i.unalias().is_star)
            for i in items
        ):
            continue
        body.set(
            "expressions",
            [exp.alias_(item.unalias().copy(), name.copy()) for item, name in zip(items, names)]
            + [item.copy() for item in items[len(names) :]],
        )
        alias.set("columns", None)
    return tree


def factor_common(tree: exp.Expression) -> exp.Expression:
    """Each WHERE and JOIN … ON condition with an OR whose every branch repeats the same
    conjuncts rewritten with them taken out, in place: ``(A AND X) OR (A AND Y)`` is
    ``A AND (X OR Y)`` (AND distributes over OR in SQL's three-valued logic as in Boolean
    logic, so the two are true, false and NULL for the same rows). TPC-H Q19 repeats its join
    equality ``p_partkey = l_partkey`` in each branch; taken out, it is the join's equality
    that the join rules read (:mod:`rewriter.joins`). A branch left empty makes the OR true
    given the common part (``A OR (A AND X)`` is ``A``). Conjuncts are the same when their
    text is (an equality of two columns in either order)."""
    for node in list(tree.find_all(exp.Where, exp.Join)):
        key = "this" if isinstance(node, exp.Where) else "on"
        cond = node.args.get(key)
        if isinstance(cond, exp.Expression):
            node.set(key, _factored(cond))
    return tree


def _factored(cond: exp.Expression) -> exp.Expression:
    inner = cond
    while isinstance(inner, exp.Paren):
        inner = inner.this
    if isinstance(inner, exp.And):
        parts = [_factored(c) for c in _flat(inner, exp.And)]
        return _join(parts, exp.And) if parts else cond
    if not isinstance(inner, exp.Or):
        return cond
    branches = [_flat(b, exp.And) for b in _flat(inner, exp.Or)]
    keys = [[_conjunct_key(c) for c in b] for b in branches]
    common = [c for c, k in zip(branches[0], keys[0]) if all(k in ks for ks in keys[1:])]
    if not common:
        return cond
    taken = {_conjunct_key(c) for c in common}
    rest = [[c for c, k in zip(b, ks) if k not in taken] for b, ks in zip(branches, keys)]
    parts = [c.copy() for c in common]
    if all(rest):
        either = _join([_join([c.copy() for c in r], exp.And) for r in rest], exp.Or)
        parts.append(exp.Paren(this=_factored(either)))
    return _join(parts, exp.And)


def _flat(node: exp.Expression, kind: type[exp.Connector]) -> list[exp.Expression]:
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, kind):
        return [x for side in (node.this, node.expression) for x in _flat(side, kind)]
    return [node]


def _join(parts: list[exp.Expression], kind: type[exp.Connector]) -> exp.Expression:
    """``parts`` joined by AND or OR, an OR inside an AND in parentheses."""
    wrap = [exp.Paren(this=p) if kind is exp.And and isinstance(p, exp.Or) else p for p in parts]
    out = wrap[0]
    for p in wrap[1:]:
        out = cast(exp.Expression, kind(this=out, expression=p))
    return out


def _conjunct_key(node: exp.Expression) -> str:
    if isinstance(node, exp.EQ) and all(isinstance(s, exp.Column) for s in (node.this, node.expression)):
        return "=".join(sorted(s.sql() for s in (node.this, node.expression)))
    return node.sql()
