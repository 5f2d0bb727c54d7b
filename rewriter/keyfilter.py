"""A WHERE predicate on a group key restricts the keys returned.

``SELECT region, COUNT(*) FROM people WHERE region IN ('north', 'south') GROUP BY region``
means two rows in Postgres: the rows of the other regions are filtered out before they
are grouped. The cells dpgate releases are the public domain of the group keys; a
conjunct of the (checked) WHERE that reads one group key and nothing else — ``=``,
``<>``, ``IN``, ``BETWEEN``, ranges on a number, ``LIKE``/``ILIKE``, ``IS [NOT] NULL``,
a boolean key itself (``WHERE b``, ``b IS [NOT] TRUE``) and AND/OR/NOT of them — is
evaluated here on each value of that key's domain, and the domain keeps the values for
which it is true. Both inputs are public (the declared domain and the query's own
literals), so the restriction reveals nothing and costs nothing; the scan filters the
same rows as before.

Anything the evaluator does not fully understand (a function, a cast, a comparison of
text by collation order, a derived key) leaves the domain as it is: the cell is then
still released, answered by its (empty) noisy count.
"""
from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

from sqlglot import exp

from .plan import GroupKey

__all__ = ["restrict"]


class _Unknown(Exception):
    """A node the evaluator does not interpret: the domain is left whole."""


def restrict(groups: tuple[GroupKey, ...], where: exp.Expression | None) -> tuple[tuple[GroupKey, ...], tuple[str, ...]]:
    """(group keys with their domains restricted by ``where``, the keys restricted)."""
    if where is None or not groups:
        return groups, ()
    plain = {g.column: i for i, g in enumerate(groups)
             if g.expr is None and g.domain is not None and g.type in ("int", "float", "text", "bool")}
    if not plain:
        return groups, ()
    out, touched = list(groups), []
    for conj in _conjuncts(where):
        cols = {c.name for c in conj.find_all(exp.Column)}
        if len(cols) != 1 or next(iter(cols)) not in plain:
            continue
        i = plain[next(iter(cols))]
        g = out[i]
        try:
            keep = tuple(v for v in g.domain if _eval(conj, g, v) is True)
        except _Unknown:
            continue
        out[i] = GroupKey(g.column, g.type, keep, g.expr)
        if g.column not in touched:
            touched.append(g.column)
    return tuple(out), tuple(touched)


def _conjuncts(node: exp.Expression):
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.And):
        yield from _conjuncts(node.this)
        yield from _conjuncts(node.expression)
    else:
        yield node


def _literal(node: exp.Expression, g: GroupKey):
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.Null):
        return None
    if isinstance(node, exp.Boolean) and g.type == "bool":
        return bool(node.this)
    if isinstance(node, exp.Literal):
        if node.is_string:
            if g.type != "text":
                raise _Unknown
            return node.this
        if g.type not in ("int", "float"):
            raise _Unknown
        try:
            return Decimal(str(node.this))
        except InvalidOperation:
            raise _Unknown from None
    if isinstance(node, exp.Neg):
        v = _literal(node.this, g)
        if not isinstance(v, Decimal):
            raise _Unknown
        return -v
    raise _Unknown


def _value(node: exp.Expression, g: GroupKey, v):
    """The operand ``node`` for the key value ``v``: the key itself or a literal."""
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.Column):
        if v is None or g.type == "text" or g.type == "bool":
            return v
        return Decimal(str(v))
    return _literal(node, g)


_CMP = {exp.EQ: lambda a, b: a == b, exp.NEQ: lambda a, b: a != b,
        exp.GT: lambda a, b: a > b, exp.GTE: lambda a, b: a >= b,
        exp.LT: lambda a, b: a < b, exp.LTE: lambda a, b: a <= b}


def _ordered(a, b) -> None:
    """Ranges compare numbers only (text order depends on the backend's collation)."""
    if not (isinstance(a, Decimal) and isinstance(b, Decimal)):
        raise _Unknown


def _eval(node: exp.Expression, g: GroupKey, v):
    """Three-valued truth of ``node`` (True, False, None) for key value ``v``."""
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.And):
        a, b = _eval(node.this, g, v), _eval(node.expression, g, v)
        return False if False in (a, b) else (None if None in (a, b) else True)
    if isinstance(node, exp.Or):
        a, b = _eval(node.this, g, v), _eval(node.expression, g, v)
        return True if True in (a, b) else (None if None in (a, b) else False)
    if isinstance(node, exp.Not):
        a = _eval(node.this, g, v)
        return None if a is None else not a
    if isinstance(node, exp.Column):                 # a boolean key as a predicate: WHERE b
        if g.type != "bool":
            raise _Unknown
        return _value(node, g, v)
    if isinstance(node, exp.Is) and isinstance(node.expression, exp.Null) and isinstance(node.this, exp.Column):
        return (_value(node.this, g, v) is None) != bool(node.args.get("negate"))
    if isinstance(node, exp.Is) and isinstance(node.expression, exp.Boolean) and isinstance(node.this, exp.Column):
        if g.type != "bool":                          # b IS [NOT] TRUE / FALSE: never NULL
            raise _Unknown
        a = _value(node.this, g, v)
        return (a is not None and a == bool(node.expression.this)) != bool(node.args.get("negate"))
    op = _CMP.get(type(node))
    if op is not None:
        a, b = _value(node.this, g, v), _value(node.expression, g, v)
        if a is None or b is None:
            return None
        if type(node) not in (exp.EQ, exp.NEQ):
            _ordered(a, b)
        elif type(a) is not type(b):
            raise _Unknown
        return op(a, b)
    if isinstance(node, exp.Between):
        a, lo, hi = (_value(node.this, g, v), _value(node.args["low"], g, v), _value(node.args["high"], g, v))
        if None in (a, lo, hi):
            return None
        _ordered(a, lo), _ordered(a, hi)
        return lo <= a <= hi
    if isinstance(node, exp.In) and not node.args.get("query") and not node.args.get("unnest"):
        a = _value(node.this, g, v)
        items = [_value(e, g, v) for e in node.expressions]
        if any(x is not None and type(x) is not type(a) for x in items) and a is not None:
            raise _Unknown
        if a is None:
            return None
        if a in items:
            return True
        return None if None in items else False
    if isinstance(node, exp.Escape) and isinstance(node.this, (exp.Like, exp.ILike)):
        esc = _literal(node.expression, g)
        return _like(node.this, g, v, esc)
    if isinstance(node, (exp.Like, exp.ILike)):
        return _like(node, g, v, "\\")
    raise _Unknown


def _like(node, g: GroupKey, v, esc) -> bool | None:
    if g.type != "text" or not isinstance(node.this, exp.Column) or not isinstance(esc, str) or len(esc) != 1:
        raise _Unknown
    pattern = _literal(node.expression, g)
    if v is None or pattern is None:
        return None
    rx, i = [], 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == esc and i + 1 < len(pattern):
            rx.append(re.escape(pattern[i + 1]))
            i += 2
            continue
        rx.append(".*" if ch == "%" else "." if ch == "_" else re.escape(ch))
        i += 1
    flags = re.DOTALL | (re.IGNORECASE if isinstance(node, exp.ILike) else 0)
    return re.fullmatch("".join(rx), v, flags) is not None
