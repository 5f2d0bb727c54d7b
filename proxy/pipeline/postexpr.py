"""Evaluate a post-processing tree (:mod:`rewriter.postprocess`) on one released row.

Pure post-processing: the inputs are released (noisy) values and public group keys,
never raw rows or exact aggregates. Postgres semantics: integer arithmetic stays
bigint (``/`` truncates toward zero), a decimal literal makes it numeric (exact,
``/`` to Postgres's result scale, half away from zero), anything with a float8 is
float8; NULL propagates; division by zero raises 22012 as Postgres does — the
divisor is a released value, so the error reveals nothing beyond the release.
"""

from __future__ import annotations

import math
import random
from decimal import ROUND_CEILING, ROUND_FLOOR, ROUND_HALF_UP, Context, Decimal, localcontext
from typing import Any

from rewriter.postprocess import PI

from ..wire.api import SqlError

_RANDOM = random.SystemRandom()

_INT8 = 2**63
_CTX = Context(prec=1000)


def _error(state: str, msg: str):
    return SqlError(state, msg)


def _int(v: int) -> int:
    if not -_INT8 <= v < _INT8:
        raise _error("22003", "bigint out of range")
    return v


def _digits(d: Decimal) -> tuple[int, int]:
    """(weight, first digit) of |d| in Postgres's base-10000 numeric representation."""
    d = abs(d)
    if d == 0:
        return 0, 0
    w = (d.adjusted()) // 4
    first = int(d.scaleb(-4 * w, _CTX))
    return w, first


def _scale(d: Decimal) -> int:
    exp = d.as_tuple().exponent  # an int when d is finite; a letter for NaN and infinities
    return max(0, -exp) if isinstance(exp, int) else 0


def _numeric_div(a: Decimal, b: Decimal) -> Decimal:
    """``a / b`` on numeric, at Postgres's select_div_scale (numeric.c)."""
    w1, f1 = _digits(a)
    w2, f2 = _digits(b)
    qweight = w1 - w2 - (1 if f1 <= f2 else 0)
    rscale = min(max(16 - qweight * 4, _scale(a), _scale(b), 0), 1000)
    with localcontext(_CTX):
        return (a / b).quantize(Decimal(1).scaleb(-rscale), ROUND_HALF_UP)


def _dec(v) -> Decimal:
    return Decimal(v) if isinstance(v, int) else v


def _arith(sym: str, a, b):
    if a is None or b is None:
        return None
    if isinstance(a, float) or isinstance(b, float):
        a, b = float(a), float(b)
        if sym == "/":
            if b == 0:
                raise _error("22012", "division by zero")
            return a / b
        r = {"+": a + b, "-": a - b, "*": a * b}[sym]
        if math.isinf(r) and math.isfinite(a) and math.isfinite(b):
            raise _error("22003", "value out of range: overflow")
        return r
    if isinstance(a, Decimal) or isinstance(b, Decimal):
        a, b = _dec(a), _dec(b)
        if sym in ("/", "%") and b == 0:
            raise _error("22012", "division by zero")
        with localcontext(_CTX):
            if sym == "/":
                return _numeric_div(a, b)
            if sym == "%":
                return a % b  # Decimal % keeps the dividend's sign, as Postgres
            return {"+": a + b, "-": a - b, "*": a * b}[sym]
    if sym in ("/", "%") and b == 0:
        raise _error("22012", "division by zero")
    if sym == "/":
        q = abs(a) // abs(b)
        return _int(q if (a >= 0) == (b >= 0) else -q)
    if sym == "%":
        return int(math.fmod(a, b)) if abs(a) < 2**53 else a - b * int(a / b)
    return _int({"+": a + b, "-": a - b, "*": a * b}[sym])


def _cmp(sym: str, a, b):
    if a is None or b is None:
        return None
    if isinstance(a, Decimal) and isinstance(b, float) or isinstance(b, Decimal) and isinstance(a, float):
        a, b = float(a), float(b)  # numeric vs float8 compares as float8
    return {"=": a == b, "<>": a != b, "<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[sym]


def _fn(name: str, args: list):
    if name == "pi":
        return PI
    if name == "random":  # Postgres's random(): uniform [0, 1), independent of the data
        return _RANDOM.random()
    if name == "coalesce":
        return next((a for a in args if a is not None), None)
    if name == "nullif":
        a, b = args
        return None if a is not None and b is not None and _cmp("=", a, b) else a
    if name in ("greatest", "least"):
        vals = [a for a in args if a is not None]
        if not vals:
            return None
        if any(isinstance(v, float) for v in vals):
            vals = [float(v) for v in vals]
        elif any(isinstance(v, Decimal) for v in vals):
            vals = [_dec(v) for v in vals]
        return max(vals) if name == "greatest" else min(vals)
    if any(a is None for a in args):
        return None
    if name == "abs":
        return _int(abs(args[0])) if isinstance(args[0], int) else abs(args[0])
    numeric = any(isinstance(a, Decimal) for a in args) and not any(isinstance(a, float) for a in args)
    if name == "sqrt":
        if args[0] < 0:
            raise _error("2201F", "cannot take square root of a negative number")
        if numeric:
            with localcontext(Context(prec=17)):
                return _dec(args[0]).sqrt()
        return math.sqrt(args[0])
    if name == "power":
        x, y = args
        if x == 0 and y < 0:
            raise _error("2201F", "zero raised to a negative power is undefined")
        if x < 0 and y != int(y):
            raise _error("2201F", "a negative number raised to a non-integer power yields a complex result")
        if numeric:
            with localcontext(Context(prec=17)):
                return _dec(x) ** _dec(y)
        try:
            return math.pow(float(x), float(y))
        except OverflowError:
            raise _error("22003", "value out of range: overflow") from None
    raise ValueError(name)


def evaluate(t, key, vals):
    """The value of tree ``t`` on one released cell (group ``key``, aggregate ``vals``); an
    arithmetic failure on released values is an SQL error (22003), never an internal one."""
    try:
        return _evaluate(t, key, vals)
    except SqlError:
        raise
    except (ArithmeticError, TypeError, ValueError) as e:
        raise _error("22003", f"value out of range in post-processing: {type(e).__name__}") from None


def _evaluate(t, key, vals):
    evaluate = _evaluate
    kind = t[0]
    if kind == "agg":
        return vals[t[1]]
    if kind == "key":
        return key[t[1]]
    if kind == "lit":
        return t[1]
    if kind == "op":
        sym = t[1]
        if sym in ("and", "or"):
            a, b = evaluate(t[2], key, vals), evaluate(t[3], key, vals)
            if sym == "and":
                return False if a is False or b is False else None if a is None or b is None else True
            return True if a is True or b is True else None if a is None or b is None else False
        a, b = evaluate(t[2], key, vals), evaluate(t[3], key, vals)
        if sym in ("+", "-", "*", "/", "%"):
            return _arith(sym, a, b)
        return _cmp(sym, a, b)
    if kind == "neg":
        a = evaluate(t[1], key, vals)
        return None if a is None else _int(-a) if isinstance(a, int) else -a
    if kind == "not":
        a = evaluate(t[1], key, vals)
        return None if a is None else not a
    if kind == "isnull":
        a = evaluate(t[1], key, vals)
        return (a is not None) if t[2] else (a is None)
    if kind == "display":
        return post_process(evaluate(t[2], key, vals), t[1])
    if kind == "fn":
        return _fn(t[1], [evaluate(a, key, vals) for a in t[2:]])
    if kind == "case":
        for cond, value in t[1]:
            if evaluate(cond, key, vals) is True:
                return evaluate(value, key, vals)
        return evaluate(t[2], key, vals)
    raise ValueError(kind)


def rollup(spec, cells):
    """``("rollup", func, tree)``: COUNT/SUM/AVG/MIN/MAX over the released rows ``cells``
    ((key, values) pairs), as Postgres aggregates a derived table: NULLs skipped, SUM/AVG of
    bigint are numeric, an empty input gives NULL (COUNT: 0)."""
    _, func, t = spec
    if t is None:
        return len(cells)
    vals = [v for v in (evaluate(t, k, vs) for k, vs in cells) if v is not None]
    if func == "count":
        return len(vals)
    if not vals:
        return None
    if func in ("min", "max"):
        return min(vals) if func == "min" else max(vals)
    if any(isinstance(v, float) for v in vals):
        total = math.fsum(float(v) for v in vals)
        return total if func == "sum" else total / len(vals)
    exact = sum((_dec(v) for v in vals), Decimal(0))
    return exact if func == "sum" else _numeric_div(exact, Decimal(len(vals)))


def _over_rows_in(t) -> bool:
    return isinstance(t, tuple) and (t[:1] == ("over_rows",) or any(_over_rows_in(x) for x in t))


def has_over_rows(trees) -> bool:
    """Whether a tree reads an aggregate of the released rows (``("over_rows", func, t, where)``:
    a scalar subquery over the statement's own aggregating subquery)."""
    return any(_over_rows_in(t) for t in trees)


def with_over_rows(trees: list, cells: list) -> list:
    """``trees`` with each ``("over_rows", func, t, where)`` replaced by its value over ``cells``
    (the released rows before the outer WHERE, those its own ``where`` keeps: what the scalar
    subquery reads), a constant (:func:`rollup`)."""

    def sub(t):
        if not isinstance(t, tuple):
            return t
        if t[:1] == ("over_rows",):
            _, func, arg, keep = t
            rows = cells if keep is None else [(k, v) for k, v in cells if evaluate(keep, k, v) is True]
            return ("lit", rollup(("rollup", func, arg), rows), None)
        return tuple(sub(x) for x in t)

    return [sub(t) for t in trees]


def _as_decimal(v) -> Decimal:
    return v if isinstance(v, Decimal) else Decimal(v) if isinstance(v, int) else Decimal(repr(float(v)))


def post_process(v, steps: tuple):
    """Apply an output's display steps to a released value (None stays None), as Postgres:
    float8 → integer and round(float8) round half to even (rint); numeric rounds half away
    from zero; round(x, n) is numeric."""
    for op, arg in steps:
        if v is None:
            return None
        if isinstance(v, int) and op != "cast" and arg is None:  # round/floor/ceil of an integer
            continue
        if op == "cast" and arg == "float":
            v = float(v)
        elif op == "cast" and arg == "numeric":
            v = _as_decimal(v)
        elif op == "round" and arg is not None:
            v = _as_decimal(v).quantize(Decimal(1).scaleb(-arg), ROUND_HALF_UP)
        elif isinstance(v, Decimal):  # to an integral numeric
            v = v.quantize(Decimal(1), {"floor": ROUND_FLOOR, "ceil": ROUND_CEILING}.get(op, ROUND_HALF_UP))
            v = int(v) if op == "cast" else v
        else:  # float8 (or int cast to int)
            f = {"floor": math.floor, "ceil": math.ceil}.get(op, round)
            v = int(f(v)) if op == "cast" else float(f(v))
    return v


def _windows_in(t, found: list) -> None:
    if not isinstance(t, tuple):
        return
    if t[:1] == ("window",):
        if t not in found:
            found.append(t)
        return
    for x in t:
        _windows_in(x, found)


def _substituted(t, slots: dict):
    if not isinstance(t, tuple):
        return t
    if t in slots:
        return slots[t]
    return tuple(_substituted(x, slots) for x in t)


def window_text(trees) -> str:
    """The NOTICE's statement that window functions were computed over the released cells
    (empty when no tree has one)."""
    found: list = []
    for t in trees:
        _windows_in(t, found)
    if not found:
        return ""
    names = ", ".join(dict.fromkeys(w[1] for w in found))
    return f"; window functions ({names}) computed over the released rows (post-processing, no ε)"


def with_windows(trees: list, cells: list) -> tuple[list, list]:
    """(trees, cells) with every window function of ``trees`` computed over the released
    ``cells`` ((key, values) pairs, after HAVING) and read as one more value of each cell:
    a window node becomes ("agg", j) for the j-th appended value. Unchanged when no tree
    has a window."""
    found: list = []
    for t in trees:
        _windows_in(t, found)
    if not found:
        return trees, cells
    width = len(cells[0][1]) if cells else 0
    columns = [window_values(w, cells) for w in found]
    slots = {w: ("agg", width + j) for j, w in enumerate(found)}
    cells = [(key, list(vals) + [col[i] for col in columns]) for i, (key, vals) in enumerate(cells)]
    return [_substituted(t, slots) for t in trees], cells


def _sorted_partition(idx: list[int], keys: list[tuple], order) -> list[int]:
    """``idx`` in the window's ORDER BY: one stable pass per sort key, last first, NULLs
    first or last as the key says (Postgres: last for ASC, first for DESC)."""
    for j in reversed(range(len(order))):
        _, desc, nulls_first = order[j]
        nulls = [i for i in idx if keys[i][j] is None]
        rest = sorted((i for i in idx if keys[i][j] is not None), key=lambda i: keys[i][j], reverse=desc)
        idx = nulls + rest if nulls_first else rest + nulls
    return idx


def _range_at(keys: list, desc: bool, pos: int, b, is_start: bool, peers: tuple[int, int]) -> int:
    """A RANGE frame end ``n PRECEDING`` / ``n FOLLOWING`` (``b``) of the row at ``pos``, as a
    position in the ordered partition whose ORDER BY values are ``keys`` (Postgres: the rows
    whose key is within n of the current row's, in the sort's direction; a row whose key is
    NULL has its NULL peers for frame, and a non-NULL row never frames a NULL)."""
    cur = keys[pos]
    if cur is None:
        return peers[0] if is_start else peers[1]
    d = -1 if desc else 1
    off = b[1] if b[0] == "following" else -b[1]
    bound = _dec(cur) + d * _dec(off) if not isinstance(cur, float) else cur + d * float(off)
    idx = [p for p, k in enumerate(keys) if k is not None]
    if is_start:  # the first row at or past the bound
        return next((p for p in idx if d * keys[p] >= d * bound), idx[-1] + 1 if idx else 0)
    last = [p for p in idx if d * keys[p] <= d * bound]
    return last[-1] + 1 if last else (idx[0] if idx else 0)


def _frame_bounds(
    frame,
    pos: int,
    n: int,
    peer_lo: list[int],
    peer_hi: list[int],
    group_of,
    group_starts,
    keys=None,
    desc=False,
):
    """[lo, hi) of the frame of the row at ``pos`` in its ordered partition of ``n`` rows
    (``keys``: the partition's first ORDER BY values in order, for a RANGE offset)."""
    if frame is None:  # RANGE UNBOUNDED PRECEDING .. CURRENT ROW: up to the last peer
        return 0, peer_hi[pos]
    mode, start, end = frame

    def at(b, is_start: bool) -> int:
        if b[0] == "unbounded":
            return 0 if b[1] == "preceding" else n
        if b[0] == "current":
            if mode == "rows":
                return pos if is_start else pos + 1
            return peer_lo[pos] if is_start else peer_hi[pos]
        if mode == "range":
            return _range_at(keys or [], desc, pos, b, is_start, (peer_lo[pos], peer_hi[pos]))
        off = b[1] if b[0] == "following" else -b[1]
        if mode == "rows":
            p = pos + off
            return min(max(p if is_start else p + 1, 0), n)
        g = group_of[pos] + off  # GROUPS: peer groups
        ng = len(group_starts) - 1
        if is_start:
            return group_starts[min(max(g, 0), ng)]
        return group_starts[min(max(g + 1, 0), ng)]

    lo, hi = at(start, True), at(end, False)
    return lo, max(lo, hi)


def _frame_aggregate(fn: str, vals: list):
    """COUNT/SUM/AVG/MIN/MAX over a frame's values as Postgres: NULLs skipped; SUM/AVG of
    bigint or numeric are numeric; float8 summed in row order (float8pl); empty: NULL (COUNT 0)."""
    vals = [v for v in vals if v is not None]
    if fn == "count":
        return len(vals)
    if not vals:
        return None
    if fn in ("min", "max"):
        return min(vals) if fn == "min" else max(vals)
    if any(isinstance(v, float) for v in vals):
        fsum = 0.0
        for v in vals:
            fsum += float(v)
        return fsum if fn == "sum" else fsum / len(vals)
    total = sum((_dec(v) for v in vals), Decimal(0))
    return total if fn == "sum" else _numeric_div(total, Decimal(len(vals)))


def window_values(w, cells: list) -> list:
    """The window function ``w`` (("window", fn, args, partition, order, frame), resolved)
    at every released cell, with Postgres's semantics: rows partitioned by the PARTITION BY
    values (NULLs one partition), ordered by ORDER BY, peers (equal ORDER BY values) ranked
    alike; the frame ROWS / GROUPS / RANGE (UNBOUNDED, CURRENT ROW; the default frame ends
    at the last peer, or with no ORDER BY is the whole partition)."""
    _, fn, args, part, order, frame = w
    n = len(cells)
    out: list = [None] * n
    parts: dict = {}
    for i, (key, vals) in enumerate(cells):
        parts.setdefault(tuple(evaluate(p, key, vals) for p in part), []).append(i)
    okeys = [tuple(evaluate(o[0], key, vals) for o in order) for key, vals in cells]
    argv = [[evaluate(a, key, vals) for a in args] for key, vals in cells]
    for idx in parts.values():
        idx = _sorted_partition(idx, okeys, order)
        m = len(idx)
        peer_lo, peer_hi, group_of, group_starts = [0] * m, [0] * m, [0] * m, [0]
        for p in range(1, m):
            if okeys[idx[p]] != okeys[idx[p - 1]]:
                group_starts.append(p)
        group_starts.append(m)
        for g in range(len(group_starts) - 1):
            for p in range(group_starts[g], group_starts[g + 1]):
                peer_lo[p], peer_hi[p], group_of[p] = group_starts[g], group_starts[g + 1], g
        rkeys = [okeys[i][0] for i in idx] if order else None  # a RANGE offset's distances
        rdesc = bool(order) and order[0][1]
        prefix: list[tuple[int, Decimal]] | None = None
        v: Any  # the function's value at the row: a number, a released value, or NULL
        for p, i in enumerate(idx):
            if fn == "row_number":
                v = p + 1
            elif fn == "rank":
                v = peer_lo[p] + 1
            elif fn == "dense_rank":
                v = group_of[p] + 1
            elif fn == "percent_rank":
                v = 0.0 if m <= 1 else peer_lo[p] / (m - 1)
            elif fn == "cume_dist":
                v = peer_hi[p] / m
            elif fn == "ntile":
                k = argv[i][0]
                per, extra = divmod(m, k)
                big = extra * (per + 1)  # the first `extra` buckets hold one row more
                v = p // (per + 1) + 1 if p < big else extra + (p - big) // per + 1
            elif fn in ("lag", "lead"):
                off = argv[i][1]
                q = p - off if fn == "lag" else p + off
                v = argv[idx[q]][0] if 0 <= q < m else argv[i][2]
            else:  # an aggregate or first/last/nth value over the frame
                lo, hi = _frame_bounds(frame, p, m, peer_lo, peer_hi, group_of, group_starts, rkeys, rdesc)
                if fn == "nth_value":
                    k = lo + argv[i][1] - 1
                    v = argv[idx[k]][0] if k < hi else None
                elif fn == "first_value":
                    v = argv[idx[lo]][0] if lo < hi else None
                elif fn == "last_value":
                    v = argv[idx[hi - 1]][0] if lo < hi else None
                elif (
                    fn in ("sum", "count", "avg")
                    and lo == 0
                    and not (args and any(isinstance(argv[j][0], float) for j in idx))
                ):  # exact values from the partition start: running sums
                    if prefix is None:
                        prefix = [(0, Decimal(0))]
                        for j in idx:
                            c, s = prefix[-1]
                            x = argv[j][0] if args else 1
                            prefix.append((c, s) if x is None else (c + 1, s + _dec(x)))
                    c, s = prefix[hi]
                    if fn == "count":
                        v = c
                    elif c == 0:
                        v = None
                    else:
                        v = s if fn == "sum" else _numeric_div(s, Decimal(c))
                else:
                    v = _frame_aggregate(fn, [argv[idx[q]][0] if args else 1 for q in range(lo, hi)])
            out[i] = v
    return out
