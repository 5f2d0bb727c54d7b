"""``SET dpgate.intervals = on``: a statement's released aggregates with their error bars
as columns, for tools that cannot edit the SQL.

Read from the parse: after each select item of the outermost SELECT that is one released
aggregate (COUNT, SUM, AVG, VAR/STDDEV, with FILTER or display steps around it), two items
``dp_interval_low(<aggregate>[, level]) AS <name>_low`` and ``dp_interval_high(…) AS
<name>_high`` are added, ``<name>`` the item's output name (its alias, or Postgres's name for
it). The statement is then answered as if written so (the intervals are post-processing of
the same release, :mod:`rewriter.postprocess`), so its Describe, EXPLAIN and execution agree.
A statement with no such item, one that asks for intervals itself, or whose outermost SELECT reads a derived table or a WITH (its
aggregates are then over released rows), is unchanged. SQL only: no I/O.
"""

from __future__ import annotations

from sqlglot import exp

from . import stats
from .aggregates import post_steps
from .postprocess import INTERVAL_FUNCS, interval_target

__all__ = ["with_interval_columns", "interval_level"]

_ON = ("on", "true", "yes", "1")
_OFF = ("off", "false", "no", "0", "")


def interval_level(setting: str | None) -> float | None:
    """The confidence ``SET dpgate.intervals`` asks for: 0.95 for on, a number in (0, 1)
    as given, None for off; ValueError for anything else."""
    v = (setting or "").strip().lower()
    if v in _OFF:
        return None
    if v in _ON:
        return 0.95
    level = float(v)
    if not 0.0 < level < 1.0:
        raise ValueError(v)
    return level


def _name(node: exp.Expression) -> str:
    """Postgres's output name of an unaliased aggregate item (the select rules' names)."""
    chain = post_steps(node)
    if chain is not None:
        return chain[2] or _name(chain[0])
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.Filter):
        return _name(node.this)
    if isinstance(node, exp.Count):
        return "count"
    func = next((f for t, f in stats.VARIANCE_NODES.items() if isinstance(node, t)), node.key)
    return stats.output_name(node, func)


def _reads_tables(select: exp.Select) -> bool:
    """Whether the SELECT's aggregates are over declared tables read directly (FROM and JOIN of
    tables, no WITH): over a derived table the outer aggregates are post-processing of the
    inner release's rows (:mod:`rewriter.inline`), with no interval of their own."""
    if select.args.get("with_") is not None or select.args.get("with") is not None:
        return False
    sources = [select.args.get("from_") or select.args.get("from")] + list(select.args.get("joins") or [])
    return all(s is not None and isinstance(s.this, exp.Table) for s in sources)


def with_interval_columns(tree: exp.Expression, level: float) -> exp.Expression | None:
    """A copy of ``tree`` with the interval columns added (module docstring), or None when
    it has no item to add them to."""
    if not isinstance(tree, exp.Select) or not _reads_tables(tree):
        return None
    if any(isinstance(n, exp.Anonymous) and n.name.lower() in INTERVAL_FUNCS for n in tree.walk()):
        return None  # it asks for its intervals itself (or was given them: the heavy lane's copy)
    out = tree.copy()
    items: list[exp.Expr] = []
    added = False
    for item in out.expressions:
        items.append(item)
        node = item.unalias() if isinstance(item, exp.Alias) else item
        while isinstance(node, exp.Paren):
            node = node.this
        if not isinstance(node, exp.Expression):
            continue
        target = node
        chain = post_steps(node)
        if chain is not None:
            target = chain[0]
        if not interval_target(target):
            continue
        name = item.alias if isinstance(item, exp.Alias) and item.alias else _name(node)
        for fn, suffix in (("dp_interval_low", "_low"), ("dp_interval_high", "_high")):
            args = [target.copy()] + ([] if level == 0.95 else [exp.Literal.number(repr(level))])
            items.append(exp.alias_(exp.Anonymous(this=fn, expressions=args), name + suffix, quoted=True))
        added = True
    if not added:
        return None
    out.set("expressions", items)
    return out
