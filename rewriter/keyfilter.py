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

A derived key (:mod:`rewriter.keys`: a bin, a boolean expression, a text cast) restricts
the same way when every column the conjunct reads lies inside the key's own expression —
compared on the checked parse tree, never on text: ``WHERE floor(f) >= 1 … GROUP BY
floor(f)`` evaluates ``k >= 1`` on each value k of the key's domain. The scan computes the
very same expression for the WHERE and for the key, so the value the conjunct sees is
the key's value.

A CASE key (``CASE WHEN age < 30 THEN 'young' ELSE 'old' END``) is restricted by a
conjunct on the column its conditions read (``WHERE age < 30``) when the conditions and
the conjunct are comparisons, BETWEEN, IN and IS NULL of that one column with literals,
joined by AND/OR/NOT. Their literals cut the column's values (NULL, each literal, the
open intervals between them and beyond them; for text: each literal and every other
string) into pieces on which every such comparison has one truth value, so evaluating
the CASE and the conjunct at one value of each piece covers every value a row can hold,
the values outside the declared bounds, ±Infinity and NaN (above every number on DuckDB
and Postgres) included. A label is kept when some piece gives it with the conjunct true;
a label no piece gives so has no row that passes the WHERE. A piece holding no value of
the column's type (an interval between two adjacent integers) can only keep a label, so
the restriction never drops a cell the SQL would return.

A date-part key (``extract(year from d)``, ``date_trunc('month', d)``) is restricted by a
conjunct comparing its column with date or timestamp literals (``d BETWEEN date '1995-01-01'
AND date '1996-12-31'``): the values the key takes on the dates the conjunct admits
(:func:`_date_kept`), NULL only when the conjunct is true of NULL. The column's declared
type says which values lie between two literals (a date column holds midnights).

Anything the evaluator does not fully understand (a function, a cast, a comparison of
text by collation order, LIKE against a CASE, a date key) leaves the domain as it is: the
cell is then still released, answered by its (empty) noisy count.
"""

from __future__ import annotations

import datetime as dt
import itertools
import re
from collections.abc import Callable, Mapping
from decimal import Decimal, InvalidOperation
from typing import Any

from sqlglot import exp

from . import dates
from .cells import sql_key
from .plan import ColumnType, GroupKey, conjuncts
from .values import literal_value

__all__ = ["restrict", "tuples"]


class _Unknown(Exception):
    """A node the evaluator does not interpret: the domain is left whole."""


def restrict(
    groups: tuple[GroupKey, ...],
    where: exp.Expression | None,
    types: Mapping[str, ColumnType] | None = None,
) -> tuple[tuple[GroupKey, ...], tuple[str, ...]]:
    """(group keys with their domains restricted by ``where``, the keys restricted).
    ``types``: the declared type of each column the WHERE may read (a date part's key is
    restricted by a range on its column only when the column's type is known)."""
    if where is None or not groups:
        return groups, ()
    out: list[GroupKey] = list(groups)
    touched: list[str] = []
    for conj in conjuncts(where):
        for i, g in enumerate(out):
            if g.domain is None:
                continue
            keep = None
            if g.type in ("int", "float", "text", "bool"):
                try:
                    keep = _kept(conj, g)
                    if keep is None:
                        keep = _kept_by_branches(conj, g)
                except _Unknown:
                    keep = None
            if keep is None and (fn := _date_key(g.expr)) is not None:
                try:  # a range on the column a date part is taken of
                    keep = _date_kept(conj, g.domain, *fn, types or {})
                except _Unknown:
                    keep = None
            if keep is None:
                continue
            out[i] = GroupKey(g.column, g.type, keep, g.expr)
            if g.column not in touched:
                touched.append(g.column)
    return tuple(out), tuple(touched)


MAX_TUPLES = 10_000
"""Key tuples a conjunct over several keys is evaluated on (a larger product keeps its cells)."""

KeyTuples = tuple[tuple[tuple[int, ...], frozenset[tuple[Any, ...]]], ...]


def tuples(
    groups: tuple[GroupKey, ...], where: exp.Expression | None
) -> tuple[tuple[GroupKey, ...], KeyTuples, tuple[str, ...]]:
    """A conjunct that reads several group keys and nothing else (``(a = 1 AND b = 'x') OR
    (a = 2 AND b = 'y')``; a derived key by its own expression, as :func:`restrict` reads
    it) keeps the key tuples it is true of: it is evaluated on each tuple
    of the keys' domains (at most :data:`MAX_TUPLES`), each comparison on the key it reads
    (the rules above); (the keys, each domain cut to the values some kept tuple has, the
    tuples as :attr:`Plan.key_tuples`, the keys restricted)."""
    if where is None or len(groups) < 2:
        return groups, (), ()
    out = list(groups)
    at = {g.column: i for i, g in reversed(list(enumerate(groups))) if g.expr is None}
    found: list[tuple[tuple[int, ...], frozenset[tuple[Any, ...]]]] = []
    touched: list[str] = []
    for conj in conjuncts(where):
        for i, g in enumerate(out):  # a derived key's expression, compared on the checked tree
            if g.expr is not None and g.domain is not None:
                name = f"{_MARKER}{i}"
                at[name] = i
                conj = conj.copy().transform(lambda n, e=g.expr, m=name: exp.column(m) if n == e else n)
        cols = sorted({c.name for c in conj.find_all(exp.Column)})
        if len(cols) < 2 or any(c not in at for c in cols):
            continue
        pos = tuple(at[c] for c in cols)
        keys = [out[i] for i in pos]
        if any(g.domain is None or g.type not in ("int", "float", "text", "bool") for g in keys):
            continue
        n = 1
        for g in keys:
            n *= len(g.domain or ())
        if n > MAX_TUPLES:
            continue
        try:
            kept = frozenset(
                t
                for t in itertools.product(*(g.domain or () for g in keys))
                if _eval_keys(conj, dict(zip(cols, zip(keys, t)))) is True
            )
        except _Unknown:
            continue
        for j, i in enumerate(pos):
            seen = {t[j] for t in kept}
            out[i] = GroupKey(out[i].column, out[i].type, tuple(v for v in out[i].domain or () if v in seen))
            if out[i].column not in touched:
                touched.append(out[i].column)
        found.append((pos, kept))
    return tuple(out), tuple(found), tuple(touched)


def _eval_keys(node: exp.Expression, env: dict[str, tuple[GroupKey, Any]]) -> bool | None:
    """Three-valued truth of ``node`` with each key column at its value in ``env``: AND, OR
    and NOT here, every other predicate on the one key it reads (:func:`_eval`)."""
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.And):
        a, b = _eval_keys(node.this, env), _eval_keys(node.expression, env)
        return False if False in (a, b) else (None if None in (a, b) else True)
    if isinstance(node, exp.Or):
        a, b = _eval_keys(node.this, env), _eval_keys(node.expression, env)
        return True if True in (a, b) else (None if None in (a, b) else False)
    if isinstance(node, exp.Not):
        a = _eval_keys(node.this, env)
        return None if a is None else not a
    cols = {c.name for c in node.find_all(exp.Column)}
    if len(cols) != 1:
        raise _Unknown
    g, v = env[cols.pop()]
    return _eval(node, g, v)


def _kept_by_branches(conj: exp.Expression, g: GroupKey) -> tuple[Any, ...] | None:
    """An OR whose every branch has conjuncts on ``g`` alone (TPC-H Q7: ``(n1.n_name =
    'FRANCE' AND n2.n_name = 'GERMANY') OR (n1.n_name = 'GERMANY' AND n2.n_name =
    'FRANCE')``): a row passing it passes some branch, hence that branch's conjuncts on
    ``g``, so ``g`` keeps the union over the branches of the values each branch's
    conjuncts on ``g`` keep. None when some branch has none (the domain stays whole)."""
    node = conj
    while isinstance(node, exp.Paren):
        node = node.this
    if not isinstance(node, exp.Or) or g.domain is None:
        return None
    kept: set[Any] = set()
    for branch in node.flatten():
        if not isinstance(branch, exp.Expression):
            return None
        values: set[Any] | None = None
        for c in conjuncts(branch):
            k = _kept(c, g)
            if k is not None:
                values = set(k) if values is None else values & set(k)
        if values is None:
            return None
        kept |= values
    return tuple(v for v in g.domain if v in kept)


def _kept(conj: exp.Expression, g: GroupKey) -> tuple[Any, ...] | None:
    """The values of ``g``'s domain a row passing ``conj`` can have; None when ``conj`` does
    not read ``g`` alone; :class:`_Unknown` when it does but is not understood."""
    cols = {c.name for c in conj.find_all(exp.Column)}
    domain = g.domain
    if _MARKER in cols or domain is None:
        return None
    if g.expr is None:  # a plain key: the column itself
        if cols != {g.column}:
            return None
        return tuple(v for v in domain if _eval(conj, g, v) is True)
    marker = exp.column(_MARKER)
    seen: list[exp.Expr] = []

    def mark(node: exp.Expr) -> exp.Expr:
        if node == g.expr:  # structural equality of the checked trees
            seen.append(node)
            return marker.copy()
        return node

    marked = conj.copy().transform(mark)
    if seen and {c.name for c in marked.find_all(exp.Column)} == {_MARKER}:
        return tuple(v for v in domain if _eval(marked, g, v) is True)
    if isinstance(g.expr, exp.Case) and len(cols) == 1:
        return _case_kept(conj, g.expr, g, domain, next(iter(cols)))
    return None


_MARKER = "__dpgate_key__"  # the key's expression, replaced in a conjunct (never a column name: checked)


def _case_kept(
    conj: exp.Expression, case: exp.Case, g: GroupKey, domain: tuple[Any, ...], column: str
) -> tuple[Any, ...] | None:
    """The labels of a CASE key (``case``, ``g``'s expression) whose rows can pass ``conj``
    (module doc: one value per piece)."""
    branches = [(b.this, _label(b.args.get("true"), g)) for b in case.args.get("ifs") or []]
    default = case.args.get("default")
    otherwise = _label(default, g) if default is not None else None
    conds = [c for c, _ in branches]
    read = {c.name for n in conds for c in n.find_all(exp.Column)}
    if read != {column}:
        return None
    literals: list[exp.Literal] = []
    for node in [conj, *conds]:
        if any(type(n) not in _PIECEWISE for n in node.walk()):
            raise _Unknown  # only comparisons with literals cut into pieces
        literals += [n for n in node.find_all(exp.Literal)]
    typ = _column_type(literals)
    col = GroupKey(column, typ, None)
    values = [_literal(n, col) for n in literals]
    if typ == "float":  # a literal under unary minus (-1 is Neg(1)): both signs cut
        values += [-v for v in values]
    kept: set[Any] = set()
    for x in _pieces(values, typ):
        label = next((lab for cond, lab in branches if _eval(cond, col, x) is True), otherwise)
        if _eval(conj, col, x) is True:
            kept.add(label)
    return tuple(v for v in domain if v in kept)


_PIECEWISE = frozenset(
    {
        exp.And,
        exp.Or,
        exp.Not,
        exp.Paren,
        exp.EQ,
        exp.NEQ,
        exp.GT,
        exp.GTE,
        exp.LT,
        exp.LTE,
        exp.Between,
        exp.In,
        exp.Is,
        exp.Column,
        exp.Identifier,
        exp.Literal,
        exp.Null,
        exp.Neg,
    }
)


def _label(node: exp.Expression, g: GroupKey) -> Any:
    """A CASE branch's result as a value of the key's type (compared with its domain's values)."""
    while isinstance(node, (exp.Paren, exp.Cast)):
        node = node.this
    ok, v = literal_value(node)
    if not ok:
        raise _Unknown
    return float(v) if g.type == "float" and v is not None else v


def _column_type(literals: list[exp.Literal]) -> ColumnType:
    """The pieces' kind: numbers or text, from the literals compared with the column."""
    if literals and all(n.is_string for n in literals):
        return "text"
    if all(not n.is_string for n in literals):
        return "float"
    raise _Unknown


def _pieces(values: list[Any], typ: str) -> list[Any]:
    """One value of each piece the literals cut the column's values into, and NULL."""
    points = sorted({v for v in values if v is not None})
    if typ == "text":
        return [*points, "".join(points) + "\x00", None]  # every other string: equal to none
    if not points:
        return [Decimal(0), None]
    mids = [(a + b) / 2 for a, b in zip(points, points[1:])]
    return [points[0] - 1, *points, *mids, points[-1] + 1, None]


def _literal(node: exp.Expression, g: GroupKey) -> Any:
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


def _value(node: exp.Expression, g: GroupKey, v: Any) -> Any:
    """The operand ``node`` for the key value ``v``: the key itself or a literal."""
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.Column):
        if v is None or g.type == "text" or g.type == "bool":
            return v
        return Decimal(str(v))
    return _literal(node, g)


_CMP: dict[type[exp.Expr], Callable[[Any, Any], bool]] = {
    exp.EQ: lambda a, b: a == b,
    exp.NEQ: lambda a, b: a != b,
    exp.GT: lambda a, b: a > b,
    exp.GTE: lambda a, b: a >= b,
    exp.LT: lambda a, b: a < b,
    exp.LTE: lambda a, b: a <= b,
}


def _ordered(a: Any, b: Any) -> None:
    """Ranges compare numbers only (text order depends on the backend's collation)."""
    if not (isinstance(a, Decimal) and isinstance(b, Decimal)):
        raise _Unknown


def _eval(node: exp.Expr, g: GroupKey, v: Any) -> bool | None:
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
    if isinstance(node, exp.Column):  # a boolean key as a predicate: WHERE b
        if g.type != "bool":
            raise _Unknown
        truth: bool | None = _value(node, g, v)
        return truth
    if (
        isinstance(node, exp.Is)
        and isinstance(node.expression, exp.Null)
        and isinstance(node.this, exp.Column)
    ):
        return (_value(node.this, g, v) is None) != bool(node.args.get("negate"))
    if (
        isinstance(node, exp.Is)
        and isinstance(node.expression, exp.Boolean)
        and isinstance(node.this, exp.Column)
    ):
        if g.type != "bool":  # b IS [NOT] TRUE / FALSE: never NULL
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
        _ordered(a, lo)
        _ordered(a, hi)
        return bool(lo <= a <= hi)
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


def _like(node: exp.Expression, g: GroupKey, v: Any, esc: Any) -> bool | None:
    if g.type != "text" or not isinstance(node.this, exp.Column) or not isinstance(esc, str) or len(esc) != 1:
        raise _Unknown
    pattern = _literal(node.expression, g)
    if v is None or pattern is None:
        return None
    rx: list[str] = []
    i = 0
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


def _date_key(expr: exp.Expression | None) -> tuple[str, str, str] | None:
    """(``extract`` | ``trunc``, its part or unit, the column) of a date-part key
    (:mod:`rewriter.keys`: ``CAST(EXTRACT(part FROM c) AS BIGINT)``,
    ``CAST(DATE_TRUNC('unit', c) AS …)``), else None."""
    node = expr.this if isinstance(expr, exp.Cast) else expr
    if isinstance(node, exp.Extract) and isinstance(node.expression, exp.Column):
        part = node.this.name.lower() if isinstance(node.this, (exp.Var, exp.Identifier)) else ""
        return ("extract", part, node.expression.name) if part in dates.EXTRACT_PARTS else None
    if isinstance(node, exp.Anonymous) and node.name.upper() == "DATE_TRUNC" and len(node.expressions) == 2:
        unit, col = node.expressions
        if isinstance(col, exp.Cast):
            col = col.this
        if isinstance(unit, exp.Literal) and unit.is_string and isinstance(col, exp.Column):
            u = unit.this.lower()
            return ("trunc", u, col.name) if u in dates.TRUNC_UNITS else None
    return None


_DATE_NODES = frozenset(
    {exp.And, exp.Or, exp.Not, exp.Paren, exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE}
    | {exp.Between, exp.In, exp.Is, exp.Column, exp.Identifier, exp.Null, exp.Cast, exp.Literal, exp.DataType}
)
_MONOTONE = ("year",)  # extract parts that never decrease as time goes on (date_trunc: every unit)
_TICK = {"date": dt.timedelta(days=1), "timestamp": dt.timedelta(microseconds=1)}


def _date_kept(
    conj: exp.Expression,
    domain: tuple[Any, ...],
    fn: str,
    arg: str,
    column: str,
    types: Mapping[str, ColumnType],
) -> tuple[Any, ...] | None:
    """The values of a date-part key (``fn(arg, column)``, its ``domain``) a row passing ``conj`` can
    have, when ``conj`` compares ``column`` with date or timestamp literals only. The
    literals cut the column's values into pieces (each literal, the open intervals between
    them, NULL) on which ``conj`` has one truth value; a piece where it is true gives the
    key the values ``fn`` takes on it: for a monotone part (year, any date_trunc) every value
    between those of the piece's ends, else the values over its days
    (:func:`rewriter.dates.extract_domain`). The piece's ends are its first and last values
    of the column's type (a date column holds midnights: ``c < '1995-01-01'`` ends on
    1994-12-31)."""
    cols = {c.name for c in conj.find_all(exp.Column)}
    typ = types.get(column)
    if cols != {column} or typ not in _TICK:
        return None
    points: set[dt.datetime] = set()
    for n in conj.walk():
        if type(n) not in _DATE_NODES:
            raise _Unknown
        if isinstance(n, exp.Literal) and not isinstance(n.parent, exp.Cast):
            raise _Unknown
        if isinstance(n, exp.Cast):
            points.add(_time_literal(n))
    ordered = sorted(points)
    pieces: list[tuple[dt.datetime | None, dt.datetime | None]] = []
    for i, p in enumerate(ordered):
        if typ == "timestamp" or p == _midnight(p):
            pieces.append((p, p))
        after = _after(p, typ)
        before = _before(ordered[i + 1], typ) if i + 1 < len(ordered) else None
        if before is None or after <= before:
            pieces.append((after, before))
    pieces.append((None, _before(ordered[0], typ) if ordered else None))
    kept: set[Any] = set()
    keys = {v: sql_key(v, "timestamp") for v in domain if v is not None} if fn == "trunc" else {}
    if _deval(conj, column, None) is True:
        kept.add(None)
    for lo, hi in pieces:
        rep = lo if lo is not None else hi if hi is not None else dt.datetime(2000, 1, 1)
        if _deval(conj, column, rep) is not True:
            continue
        if fn == "trunc":
            a = dates.trunc(lo, arg) if lo is not None else None
            b = dates.trunc(hi, arg) if hi is not None else None
            kept |= {v for v, t in keys.items() if (a is None or a <= t) and (b is None or t <= b)}
        elif arg in _MONOTONE:
            a_, b_ = (
                (dates.part(lo, arg) if lo is not None else None),
                (dates.part(hi, arg) if hi is not None else None),
            )
            kept |= {
                v for v in domain if v is not None and (a_ is None or a_ <= v) and (b_ is None or v <= b_)
            }
        elif lo is not None and hi is not None and hi - lo <= dt.timedelta(days=800):
            kept |= set(dates.extract_domain(lo, hi, arg))
        else:
            kept |= {v for v in domain if v is not None}
    return tuple(v for v in domain if v in kept)


def _midnight(v: dt.datetime) -> dt.datetime:
    return dt.datetime(v.year, v.month, v.day)


def _after(p: dt.datetime, typ: str) -> dt.datetime:
    """The first value of the column's type after ``p``."""
    if typ == "timestamp":
        return p + _TICK["timestamp"]
    return _midnight(p) + _TICK["date"]


def _before(p: dt.datetime, typ: str) -> dt.datetime:
    """The last value of the column's type before ``p``."""
    if typ == "timestamp":
        return p - _TICK["timestamp"]
    m = _midnight(p)
    return m - _TICK["date"] if m == p else m


def _time_literal(node: exp.Cast) -> dt.datetime:
    """``CAST('…' AS DATE | TIMESTAMP)`` (how a plan spells a time literal) as a datetime."""
    lit = node.this
    if not (isinstance(lit, exp.Literal) and lit.is_string) or not node.to.is_type("date", "timestamp"):
        raise _Unknown
    try:
        v = dt.datetime.fromisoformat(lit.this)
    except ValueError:
        raise _Unknown from None
    if v.tzinfo is not None:
        raise _Unknown
    return _midnight(v) if node.to.is_type("date") else v


def _deval(node: exp.Expression, column: str, x: dt.datetime | None) -> bool | None:
    """Three-valued truth of ``node`` when the column holds ``x``."""
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.And):
        a, b = _deval(node.this, column, x), _deval(node.expression, column, x)
        return False if False in (a, b) else (None if None in (a, b) else True)
    if isinstance(node, exp.Or):
        a, b = _deval(node.this, column, x), _deval(node.expression, column, x)
        return True if True in (a, b) else (None if None in (a, b) else False)
    if isinstance(node, exp.Not):
        a = _deval(node.this, column, x)
        return None if a is None else not a
    if isinstance(node, exp.Is) and isinstance(node.expression, exp.Null):
        return (_dvalue(node.this, x) is None) != bool(node.args.get("negate"))
    op = _CMP.get(type(node))
    if op is not None:
        u, w = _dvalue(node.this, x), _dvalue(node.expression, x)
        return None if u is None or w is None else op(u, w)
    if isinstance(node, exp.Between):
        u, lo, hi = (_dvalue(node.this, x), _dvalue(node.args["low"], x), _dvalue(node.args["high"], x))
        if u is None or lo is None or hi is None:
            return None
        return bool(lo <= u <= hi)
    if isinstance(node, exp.In) and not node.args.get("query") and not node.args.get("unnest"):
        u = _dvalue(node.this, x)
        items = [_dvalue(e, x) for e in node.expressions]
        if u is None:
            return None
        if u in items:
            return True
        return None if None in items else False
    raise _Unknown


def _dvalue(node: exp.Expression, x: dt.datetime | None) -> dt.datetime | None:
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.Column):
        return x
    if isinstance(node, exp.Null):
        return None
    if isinstance(node, exp.Cast):
        return _time_literal(node)
    raise _Unknown
