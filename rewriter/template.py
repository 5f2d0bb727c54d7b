"""Plan templates: statements that differ only in the integer literals of their
row comparisons (``age BETWEEN 20 AND 70`` vs ``… 31 AND 64``) share one plan,
with the literals put back in — a prepared statement derived from the text.

A statement is *masked* by its tokens: every integer literal of at most nine
digits becomes a slot; everything else (keywords, names, operators, other
literals) is the key. The first statement of a key is planned in full and a
template is derived only if it provably depends on the slot values in nothing
but the values themselves:

* every slot sits directly in a comparison, BETWEEN or IN whose subject is a
  column (never in arithmetic, LIMIT, HAVING, a function or a sign), so no
  rule of the rewriter branches on it;
* the statement planned with distinct sentinel values in ascending and in
  descending order gives the same plan apart from WHERE, and the same backend
  SQL and canonical text with the sentinels in the same places (no ordering
  depends on the values);
* the template filled with the first statement's own values reproduces its
  full plan's SQL and canonical text exactly.

Otherwise the key is remembered as not templatable and every statement of it is
planned in full. A filled template is a :class:`Plan` equal to the full plan of
the statement (WHERE rebuilt with the values; canonical text and SQL preset).
SQL only: no numbers are released here.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Literal

from sqlglot import exp
from sqlglot.tokens import Token

import rewriter  # the package's parse / build_plan / to_sql, looked up at each call (one hook sees every parse)

from .dialects import get as dialect_of
from .lru import LRU
from .params import ParamSQL
from .plan import Plan

if TYPE_CHECKING:
    from config import Config

#: a statement's tokens with each slot masked (its template key)
Key = tuple[Any, ...]
#: (key, the slots' values, their character spans)
Masked = tuple[Key, list[int], list[tuple[int, int]]]

_MAX_DIGITS = 9  # values < 2**31: int in every dialect
_ASC = tuple(1_900_000_001 + i for i in range(512))
_DESC = tuple(1_999_999_999 - i for i in range(512))
_SENTINEL = re.compile(r"(?<![\w.])(19\d{8})(?![\w.])")
_SLOT_PARENTS = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.Between, exp.In)


def mask(tokens: Sequence[Token], params: Sequence[Any] | None = None) -> Masked | None:
    """(key, values, character spans) of a token list; None if it has no slot or
    a number that is not a short integer (such statements are planned in full).
    With ``params`` (the values of $1..$n), a parameter ``$k`` whose value is a
    short non-negative ``int``, or the decimal digits of one sent untyped (text, as
    node-postgres and pgbench send them), is a slot too (its span: the ``$k``
    characters; the two kinds are distinct keys), so a driver's parameterised
    statement shares a template like its literal twin; a parameter of any other
    value, or a ``?`` placeholder, is planned in full. Whether a template may stand
    for the statement is decided by :func:`derive` against the plan with the
    parameters bound by the rewriter."""
    key: list[Any] = []
    values: list[int] = []
    spans: list[tuple[int, int]] = []
    i, n = 0, len(tokens)
    while i < n:
        t = tokens[i]
        name = t.token_type.name
        if name == "NUMBER":
            text = t.text
            if not text.isdigit() or len(text) > _MAX_DIGITS or (len(text) > 1 and text[0] == "0"):
                return None
            key.append("#")
            values.append(int(text))
            spans.append((t.start, t.end + 1))
        elif (
            name == "PARAMETER"
            and params is not None
            and t.text == "$"
            and i + 1 < n
            and (num := tokens[i + 1]).token_type.name == "NUMBER"
            and num.start == t.end + 1
            and num.text.isdigit()
            and 0 < int(num.text) <= len(params)
        ):
            v = params[int(num.text) - 1]
            if type(v) is int and 0 <= v < 10**_MAX_DIGITS:
                key.append("$")
            elif (
                type(v) is str and v.isascii() and v.isdigit() and len(v) <= _MAX_DIGITS and str(int(v)) == v
            ):
                key.append("$'")  # an untyped (text) parameter: its own key, its own check
                v = int(v)
            else:
                return None
            values.append(v)
            spans.append((t.start, num.end + 1))
            i += 1
        elif name == "PARAMETER" or name == "PLACEHOLDER":
            return None
        else:
            key.append((name, t.text))
        i += 1
    if not values or len(values) > len(_ASC):
        return None
    return tuple(key), values, spans


def _fill(sql: str, spans: Sequence[tuple[int, int]], values: Sequence[int]) -> str:
    out: list[str] = []
    at = 0
    for (a, b), v in zip(spans, values):
        out.append(sql[at:a])
        out.append(str(v))
        at = b
    out.append(sql[at:])
    return "".join(out)


def _slots(text: str, sentinels: tuple[int, ...]) -> str | None:
    """``text`` with each sentinel replaced by ``{i}`` (its slot), or None if a
    sentinel is missing or a foreign one appears."""
    index = {str(s): i for i, s in enumerate(sentinels)}
    seen: set[int] = set()

    def sub(m: re.Match[str]) -> str:
        i = index.get(m.group(1))
        if i is None:
            raise KeyError(m.group(1))
        seen.add(i)
        return f"\x00{i}\x01"

    try:
        out = _SENTINEL.sub(sub, text.replace("\x00", "").replace("\x01", ""))
    except KeyError:
        return None
    return out if len(seen) == len(sentinels) else None


_HOLE = re.compile("\x00(\\d+)\x01")


def _put(template: str, values: Sequence[int]) -> str:
    return _HOLE.sub(lambda m: str(values[int(m.group(1))]), template)


def _param_form(template: str, n: int) -> str | None:
    """``template`` with hole k as ``CAST($k+1 AS INTEGER)``, or None unless every hole
    stands where a number token does: the template filled with the sentinels tokenizes
    to exactly one NUMBER token per hole (a hole inside a quoted string or name would
    not, and a parameter there would change the text)."""
    holes = _HOLE.findall(template)
    tokens = rewriter.tokenize(_put(template, _ASC[:n]))
    if tokens is None:
        return None
    sentinels = {str(v) for v in _ASC[:n]}
    numbers = [t.text for t in tokens if t.token_type.name == "NUMBER" and t.text in sentinels]
    if len(numbers) != len(holes):
        return None
    return _HOLE.sub(lambda m: f"CAST(${int(m.group(1)) + 1} AS INTEGER)", template)


@dataclasses.dataclass(frozen=True)
class Template:
    plan: Plan  # planned with the ascending sentinels
    canonical: str
    sql: dict[str, str]  # dialect -> backend SQL with holes
    params_sql: dict[str, str] = dataclasses.field(
        default_factory=dict
    )  # dialect -> its :class:`ParamSQL` template

    def fill(self, values: Sequence[int]) -> Plan:
        if self.plan.where is None:  # derive keeps only plans whose slots sit in WHERE
            raise ValueError("a template's plan has a WHERE")
        where = self.plan.where.copy()
        for i, node in enumerate(_sentinel_literals(where, len(values))):
            node.set("this", str(values[i]))
        plan = dataclasses.replace(self.plan, where=where)
        plan.memo.canonical = _put(self.canonical, values)
        plan.memo.sql = {d: self._text(d, s, values) for d, s in self.sql.items()}
        # memos of the aggregates alone (e.g. the releases per ε), shared: only WHERE differs
        plan.memo.releases = self.plan.memo.releases
        plan.memo.domain = self.plan.memo.domain  # public cells: the same
        return plan

    def _text(self, dialect: str, sql: str, values: Sequence[int]) -> str:
        text = _put(sql, values)
        tpl = self.params_sql.get(dialect)
        if tpl is None:
            return text
        out = ParamSQL(text)
        out.template, out.params = tpl, tuple(values)
        return out


def _sentinel_literals(where: exp.Expression, n: int) -> list[exp.Literal]:
    """The sentinel literals of a WHERE tree, slot order (each exactly once)."""
    found: dict[int, exp.Literal] = {}
    for node in where.find_all(exp.Literal):
        if node.is_int:
            v = int(node.this)
            if _ASC[0] <= v <= _ASC[0] + n - 1:
                if v - _ASC[0] in found:
                    raise ValueError("sentinel twice")
                found[v - _ASC[0]] = node
    if len(found) != n:
        raise ValueError("sentinel missing")
    return [found[i] for i in range(n)]


def _positions_ok(expr: exp.Expression, n: int) -> bool:
    """Every sentinel of the parsed statement sits directly in a comparison,
    BETWEEN or IN whose subject is a column."""
    count = 0
    for node in expr.find_all(exp.Literal):
        if not node.is_int or not (_ASC[0] <= int(node.this) < _ASC[0] + n):
            continue
        count += 1
        parent = node.parent
        if not isinstance(parent, _SLOT_PARENTS) or node is parent.this:
            return False
        if not isinstance(parent.this, exp.Column):
            return False
    return count == n


def derive(
    sql: str,
    spans: Sequence[tuple[int, int]],
    values: Sequence[int],
    full: Plan,
    build: Callable[[exp.Expression], Plan],
    emit: Callable[[Plan, str], str],
    dialects: Iterable[str],
) -> Template | None:
    """The template of ``sql`` (see module doc), or None. ``build(tree)`` plans a parsed
    statement (the rules; raises on refusal), ``emit(plan, dialect)`` is
    ``to_sql``; ``full`` is the full plan of ``sql`` itself."""
    n = len(values)
    asc, desc = _ASC[:n], _DESC[:n]
    try:
        a_tree = rewriter.parse(_fill(sql, spans, asc))
        if not _positions_ok(a_tree, n):
            return None
        a, b = build(a_tree), build(rewriter.parse(_fill(sql, spans, desc)))
    except Exception:  # a refusal or anything else: no template
        return None
    if a.where is None or a.selection is not None or a.key_filter or full.key_filter:
        return None  # a slot in a predicate on a group key sets the cells

    def bare(p: Plan) -> Plan:
        return dataclasses.replace(p, where=None)

    if not (bare(a) == bare(full) == bare(b)):
        return None
    canonical = _slots(a.canonical(), asc)
    if canonical is None or _slots(b.canonical(), desc) != canonical:
        return None
    if _put(canonical, values) != full.canonical():
        return None
    sqls: dict[str, str] = {}
    named: set[str] = set()
    for d in dialects:
        text = emit(a, d)
        t = _slots(text, asc)
        if t is None or _slots(emit(b, d), desc) != t or _put(t, values) != emit(full, d):
            return None
        sqls[d] = t
        if isinstance(getattr(text, "params", None), dict):  # bound values of its own (the unit's salt)
            named.add(d)
    try:
        _sentinel_literals(a.where, n)
    except ValueError:
        return None
    params = {
        d: p
        for d, t in sqls.items()
        if dialect_of(d).prepares_templates and d not in named and (p := _param_form(t, n)) is not None
    }
    tpl = Template(a, canonical, sqls, params)
    if tpl.fill(values).where != full.where:
        return None
    return tpl


class Templates:
    """Masked key -> Template (or None: not templatable), LRU-bounded."""

    def __init__(self, size: int = 1024) -> None:
        self._map: LRU[Key, Template | None] = LRU(size)
        self.size = size
        self.filled = 0  # statements planned from a template (for tests)

    def plan(
        self,
        sql: str,
        config: Config,
        dialect: str,
        params: list[Any] | None = None,
        tree: exp.Expression | None = None,
    ) -> Plan:
        """The plan of ``sql`` with ``params`` (the values of $1..$n, or None): filled
        from its key's template, or planned in full from ``tree`` (its parse, which the
        planner may change; None: parsed here; refusals raise as from
        ``build_plan``), deriving the key's template the first time — checked
        against the full plan of the statement with its parameters bound by the
        rewriter, so a parameter stands in a template only where its value
        planned as a literal gives that same plan."""
        masked, tpl = self._lookup(sql, params)
        if masked is not None and tpl:
            self.filled += 1
            return tpl.fill(masked[1])
        if tree is None:
            tree = rewriter.parse(sql)
        plan = rewriter.build_plan(tree, config, list(params) if params else None, copy=False)
        if masked is None or tpl is None:  # not templatable
            return plan
        if tpl is False and plan.clock:  # now() / current_date: no template
            self.put(masked[0], None)
        elif tpl is False:  # first statement of this key
            self.put(
                masked[0],
                derive(
                    sql,
                    masked[2],
                    masked[1],
                    plan,
                    lambda tree: rewriter.build_plan(tree, config, None, copy=False),
                    rewriter.to_sql,
                    (dialect,),
                ),
            )
        return plan

    def fill(self, sql: str, params: list[Any] | None = None) -> Plan | None:
        """The plan of ``sql`` filled from its key's template, or None when the key has
        none (yet): never a full planning, so cheap enough for any caller."""
        masked, tpl = self._lookup(sql, params)
        if masked is None or not tpl:
            return None
        self.filled += 1
        return tpl.fill(masked[1])

    def _lookup(
        self, sql: str, params: list[Any] | None
    ) -> tuple[Masked | None, Template | None | Literal[False]]:
        """(masked statement, its key's template: a Template, None if not templatable, False
        if not seen yet)."""
        tokens = rewriter.tokenize(sql)
        masked = mask(tokens, params) if tokens else None
        if masked is None or len(set(masked[1])) != len(masked[1]):
            return masked, None
        return masked, self.get(masked[0])

    def get(self, key: Key) -> Template | None | Literal[False]:
        return self._map.get(key, False)

    def put(self, key: Key, tpl: Template | None) -> None:
        self._map.put(key, tpl)
