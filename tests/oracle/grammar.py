"""A typed grammar of the statements the rewriter accepts (and a few it must refuse), as
hypothesis strategies. Each expression is rendered twice: in Postgres (the analyst's SQL,
what dpgate parses) and in DuckDB spelling *with Postgres semantics* — integer division is
``//``, LIKE/ILIKE name the backslash escape Postgres uses by default, ``IS UNKNOWN`` and
``BETWEEN SYMMETRIC`` are spelled out — so the DuckDB reference answers the same question.
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import strategies as st


@dataclass(frozen=True)
class E:
    pg: str
    duck: str
    typ: str  # int, numeric (Postgres's exact decimal), float (float8), text, bool, null


def same(sql: str, typ: str) -> E:
    return E(sql, sql, typ)


def _q(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


INTS = [-3, -1, 0, 1, 2, 3, 7, 10, 11, 1000]
DYADIC = ["0.5", "-1.5", "2.25", "2.5", "10.0", "-0.25"]  # exact in binary and decimal
TEXTS = ["abc", "ABC", "abc ", "x", "X", "x ", "a_b", "", "Ab", "a\\b"]
PATTERNS = [
    "a%",
    "%b",
    "a_b",
    "a\\_b",
    "a\\%b",
    "%\\\\%",
    "ABC",
    "abc ",
    "_",
    "%",
    "",
    "x",
    "x%",
    "%c%",
    "a\\",
]  # the last one is refused (22025)


def _lit_num(draw) -> E:
    if draw(st.booleans()):
        v = draw(st.sampled_from(INTS))
        return same(f"({v})" if v < 0 else str(v), "int")
    v = draw(st.sampled_from(DYADIC + ["0.1"]))  # 0.1: refused in numeric arithmetic
    return same(f"({v})" if v.startswith("-") else v, "numeric")


def _num_type(a: E, b: E) -> str:
    """Postgres's result kind: float8 wins, then numeric, then integer."""
    kinds = {a.typ, b.typ}
    return "float" if "float" in kinds else ("numeric" if "numeric" in kinds else "int")


@st.composite
def num(draw, depth: int = 2) -> E:
    kind = draw(st.integers(0, 9 if depth > 0 else 3))
    if kind == 0:
        return same(draw(st.sampled_from(["i", "g"])), "int")
    if kind == 1:
        return same("f", "float")
    if kind == 2:
        return _lit_num(draw)
    if kind == 3:
        return draw(
            st.sampled_from(
                [
                    same("NULL", "null"),
                    same("CAST(b AS integer)", "int"),
                    same("length(t)", "int"),
                    same("length(s)", "int"),
                    same("CAST(2.5 AS double precision)", "float"),
                    same("CAST(-0.5 AS double precision)", "float"),
                    same("CAST('7' AS integer)", "int"),
                    same("CAST(NULL AS integer)", "int"),
                    same("CAST(TRUE AS integer)", "int"),
                    same("CAST(i AS bigint)", "int"),
                    same("CAST(f AS integer)", "int"),
                ]
            )
        )  # last: refused
    d = depth - 1
    if kind == 4:
        a, b = draw(num(d)), draw(num(d))
        op = draw(st.sampled_from(["+", "-", "*"]))
        return E(f"({a.pg} {op} {b.pg})", f"({a.duck} {op} {b.duck})", _num_type(a, b))
    if kind == 5:
        a = draw(num(d))
        b = draw(
            st.sampled_from(
                [str(x) for x in INTS if x] + ["0.5", "-0.25", "4.0", "10.0", "100.0", "3.0", "0.1", "0", "i"]
            )
        )
        bt = "int" if b.lstrip("-").isdigit() or b == "i" else "numeric"
        bs = f"({b})" if b.startswith("-") else b
        if a.typ in ("int", "null") and bt == "int":
            return E(f"({a.pg} / {bs})", f"({a.duck} // {bs})", "int")
        return E(f"({a.pg} / {bs})", f"({a.duck} / {bs})", "float" if a.typ == "float" else "numeric")
    if kind == 6:
        a = draw(num(d))
        m = draw(st.sampled_from(["2", "3", "(-4)", "0", "2.5"]))
        return E(f"({a.pg} % {m})", f"({a.duck} % {m})", "int" if a.typ == "int" else "float")
    if kind == 7:
        a = draw(num(d))
        fn = draw(st.sampled_from(["-", "abs", "floor", "ceil", "round", "round2", "float", "int"]))
        if fn == "-":
            return E(f"(- {a.pg})", f"(- {a.duck})", a.typ)
        if fn == "abs":
            return E(f"abs({a.pg})", f"abs({a.duck})", a.typ)
        if fn == "round2":  # Postgres has round(numeric, int) only
            n = draw(st.sampled_from([0, 1, 2, -1]))
            return E(f"round({a.pg}, {n})", f"round({a.duck}, {n})", "numeric")
        if fn == "round":  # round(float8) is rint (half to even), round(numeric) is not
            if a.typ == "float":
                return E(f"round({a.pg})", f"round_even({a.duck}, 0)", "float")
            return E(f"round({a.pg})", f"round({a.duck})", "numeric" if a.typ == "numeric" else "float")
        if fn == "float":
            return E(f"CAST({a.pg} AS double precision)", f"CAST({a.duck} AS double)", "float")
        if fn == "int":
            return E(f"({a.pg})::integer", f"CAST({a.duck} AS integer)", "int")
        return E(f"{fn}({a.pg})", f"{fn}({a.duck})", "numeric" if a.typ == "numeric" else "float")
    a, b = draw(num(d)), draw(num(d))
    fn = draw(st.sampled_from(["coalesce", "least", "greatest"]))
    return E(f"{fn}({a.pg}, {b.pg})", f"{fn}({a.duck}, {b.duck})", _num_type(a, b))


@st.composite
def text(draw, depth: int = 1) -> E:
    kind = draw(st.integers(0, 5 if depth > 0 else 2))
    if kind == 0:
        return same(draw(st.sampled_from(["t", "s"])), "text")
    if kind == 1:
        return same(_q(draw(st.sampled_from(TEXTS))), "text")
    if kind == 2:
        return draw(
            st.sampled_from(
                [
                    same("CAST(g AS text)", "text"),
                    same("CAST(b AS text)", "text"),
                    same("NULL", "null"),
                    same("CAST(f AS text)", "text"),
                    same("CAST(i AS varchar)", "text"),
                    same("CAST(7 AS text)", "text"),
                    same("CAST(2.5 AS text)", "text"),
                ]
            )
        )
    a = draw(text(depth - 1))
    if kind == 3:
        fn = draw(st.sampled_from(["lower", "upper"]))
        return E(f"{fn}({a.pg})", f"{fn}({a.duck})", "text")
    if kind == 4:
        return E(f"coalesce({a.pg}, 'z')", f"coalesce({a.duck}, 'z')", "text")
    return E(f"({a.pg} || 'a')", f"({a.duck} || 'a')", "text")  # total: checked like any other text


def _cmp_pair(draw, depth):
    kind = draw(st.sampled_from(["num", "num", "text", "bool"]))
    if kind == "num":
        return draw(num(depth)), draw(num(depth))
    if kind == "text":
        return draw(text()), draw(text())
    return draw(boolean(0)), draw(st.sampled_from([same("TRUE", "bool"), same("b", "bool")]))


@st.composite
def boolean(draw, depth: int = 3) -> E:
    kind = draw(st.integers(0, 12 if depth > 0 else 1))
    if kind == 0:
        return draw(
            st.sampled_from(
                [same("b", "bool"), same("TRUE", "bool"), same("FALSE", "bool"), same("NULL", "null")]
            )
        )
    d = max(depth - 1, 0)
    if kind == 1:
        a, b = _cmp_pair(draw, 1)
        op = draw(st.sampled_from(["=", "<>", "<", "<=", ">", ">=", "!="]))
        return E(f"({a.pg} {op} {b.pg})", f"({a.duck} {op} {b.duck})", "bool")
    if kind == 2:
        a = draw(st.one_of(num(1), text(), boolean(0)))
        neg = draw(st.sampled_from(["", "NOT "]))
        return E(f"({a.pg} IS {neg}NULL)", f"({a.duck} IS {neg}NULL)", "bool")
    if kind == 3:
        a = draw(boolean(0))
        neg = draw(st.sampled_from(["", "NOT "]))
        what = draw(st.sampled_from(["TRUE", "FALSE", "UNKNOWN"]))
        duck = "NULL" if what == "UNKNOWN" else what
        return E(f"({a.pg} IS {neg}{what})", f"({a.duck} IS {neg}{duck})", "bool")
    if kind == 4:
        a = draw(text())
        neg = draw(st.sampled_from(["", "NOT "]))
        op = draw(st.sampled_from(["LIKE", "ILIKE"]))
        p = _q(draw(st.sampled_from(PATTERNS)))
        return E(f"({a.pg} {neg}{op} {p})", f"({a.duck} {neg}{op} {p} ESCAPE '\\')", "bool")
    if kind == 5:
        neg = draw(st.sampled_from(["", "NOT "]))
        if draw(st.booleans()):
            a = draw(num(1))
            items = draw(
                st.lists(
                    st.sampled_from(["1", "3", "0", "(-7)", "NULL", "2.5", "10"]), min_size=1, max_size=3
                )
            )
        else:
            a = draw(text())
            items = draw(st.lists(st.sampled_from([_q(x) for x in TEXTS] + ["NULL"]), min_size=1, max_size=3))
        lst = ", ".join(items)
        return E(f"({a.pg} {neg}IN ({lst}))", f"({a.duck} {neg}IN ({lst}))", "bool")
    if kind == 6:
        if draw(st.integers(0, 3)):
            a, lo, hi = draw(num(1)), draw(num(0)), draw(num(0))
        else:
            a, lo, hi = draw(text()), draw(text(0)), draw(text(0))
        neg = draw(st.sampled_from(["", "NOT "]))
        if draw(st.booleans()):
            pg = f"({a.pg} {neg}BETWEEN SYMMETRIC {lo.pg} AND {hi.pg})"
            duck = (
                f"({'NOT ' if neg else ''}(({a.duck} BETWEEN {lo.duck} AND {hi.duck}) OR "
                f"({a.duck} BETWEEN {hi.duck} AND {lo.duck})))"
            )
            return E(pg, duck, "bool")
        return E(
            f"({a.pg} {neg}BETWEEN {lo.pg} AND {hi.pg})",
            f"({a.duck} {neg}BETWEEN {lo.duck} AND {hi.duck})",
            "bool",
        )
    if kind == 7:
        a, b = _cmp_pair(draw, 1)
        neg = draw(st.sampled_from(["", "NOT "]))
        return E(
            f"({a.pg} IS {neg}DISTINCT FROM {b.pg})", f"({a.duck} IS {neg}DISTINCT FROM {b.duck})", "bool"
        )
    if kind == 8:
        a = draw(boolean(d))
        return E(f"(NOT {a.pg})", f"(NOT {a.duck})", "bool")
    if kind in (9, 10):
        a, b = draw(boolean(d)), draw(boolean(d))
        op = "AND" if kind == 9 else "OR"
        return E(f"({a.pg} {op} {b.pg})", f"({a.duck} {op} {b.duck})", "bool")
    if kind == 11:
        a = draw(text())
        return draw(
            st.sampled_from(
                [  # all refused
                    E(f"({a.pg} SIMILAR TO 'a%')", "", "bool"),
                    E(f"({a.pg} ~ 'a')", "", "bool"),
                    E(f"({a.pg} LIKE 'a!%' ESCAPE '!')", "", "bool"),
                ]
            )
        )
    return draw(
        st.sampled_from(
            [
                same("(b = TRUE)", "bool"),
                same("(i > 3)", "bool"),
                same("(t = 'abc ')", "bool"),
                same("(s = 'x')", "bool"),
                same("(i > '3')", "bool"),
                same("(b = 't')", "bool"),
                same("(b <> 'false')", "bool"),
                same("(f < '0.5')", "bool"),
                same("(b IN (TRUE, NULL))", "bool"),
                same("(NULL IS NULL)", "bool"),
                same("(NOT NULL)", "bool"),
                same("(NULL = NULL)", "bool"),
                same("(i = 2.5)", "bool"),
                same("(i IN (2.0, 3))", "bool"),
                same("(g <> ALL (1))", "bool"),
            ]
        )
    )


AGGS = {  # select item -> measures (kind, column) it needs
    "COUNT(*)": {("count_rows", None)},
    "COUNT(1)": {("count_rows", None)},
    "COUNT(i)": {("count", "i")},
    "COUNT(f)": {("count", "f")},
    "COUNT(t)": {("count", "t")},
    "COUNT(b)": {("count", "b")},
    "COUNT(s)": {("count", "s")},
    "SUM(i)": {("sum", "i")},
    "SUM(f)": {("sum", "f")},
    "AVG(i)": {("sum", "i"), ("count", "i")},
    "AVG(f)": {("sum", "f"), ("count", "f")},
    # SUM/AVG of arithmetic over bounded columns: the measure's column is the
    # expression's text; the reference computes it on the clamped columns (EXPRS)
    "SUM(i + 1)": {("sum", "i + 1")},
    "SUM(2 * i)": {("sum", "2 * i")},
    "SUM(i + f)": {("sum", "i + f")},
    "SUM(f * 2.5)": {("sum", "f * 2.5")},
    "SUM(i * i - 3)": {("sum", "i * i - 3")},
    "SUM(f / 2.0)": {("sum", "f / 2.0")},
    "AVG(i - 10)": {("sum", "i - 10"), ("count", "i - 10")},
    "AVG(-f)": {("sum", "-f"), ("count", "-f")},
    "SUM(CAST(i AS DOUBLE PRECISION) * 3)": {("sum", "cast(i as double precision) * 3")},
}
#: expression text -> (reference SQL over the clamped columns CI / CF, result kind)
EXPRS = {
    "i + 1": ("CI + 1", "int"),
    "2 * i": ("2 * CI", "int"),
    "i + f": ("CI + CF", "float"),
    "f * 2.5": ("CF * 2.5", "float"),
    "i * i - 3": ("CI * CI - 3", "int"),
    "f / 2.0": ("CF / 2.0", "float"),
    "i - 10": ("CI - 10", "int"),
    "-f": ("-CF", "float"),
    "cast(i as double precision) * 3": ("CAST(CI AS DOUBLE PRECISION) * 3", "float"),
}
REFUSED_AGGS = ["SUM(t)", "SUM(i / 2)", "COUNT(DISTINCT i)", "SUM(g)", "SUM(i + t)", "SUM(i / f)"]
GROUPS = ["g", "s", "b"]


@st.composite
def statement(draw):
    """(analyst SQL, DuckDB WHERE, group columns, aggregate items)."""
    groups = draw(st.lists(st.sampled_from(GROUPS + ["i"] * 0), max_size=2, unique=True))
    if draw(st.integers(0, 30)) == 0:
        groups.append(draw(st.sampled_from(["i", "t"])))  # refused
    aggs = draw(st.lists(st.sampled_from(sorted(AGGS)), min_size=1, max_size=3))
    if draw(st.integers(0, 30)) == 0:
        aggs.append(draw(st.sampled_from(REFUSED_AGGS)))
    where = draw(boolean()) if draw(st.integers(0, 9)) else None
    items = ", ".join(groups + aggs)
    sql = f"SELECT {items} FROM fx"
    if where is not None:
        sql += f" WHERE {where.pg}"
    if groups:
        sql += f" GROUP BY {', '.join(groups)}"
    return (
        sql,
        (where.duck if where is not None else None, where.pg if where is not None else None),
        groups,
        aggs,
    )


# ----------------------------------------------------------------- derived group keys


@st.composite
def derived_key(draw) -> E:
    """A group key whose values follow from the config: numeric bins over the bounded i and f,
    width_bucket, CASE labels over generated predicates, boolean predicates."""
    kind = draw(st.integers(0, 9))
    if kind == 0:
        w = draw(st.sampled_from([1, 2, 3, 4, 10]))
        return E(f"(i / {w} * {w})", f"((i // {w}) * {w})", "int")
    if kind == 1:
        w = draw(st.sampled_from([2, 3, 5]))
        return E(f"floor(i / {w}) * {w}", f"floor(i // {w}) * {w}", "float")
    if kind == 2:
        m = draw(st.sampled_from([2, 3, 4]))
        return E(f"(i - i % {m})", f"(i - i % {m})", "int")
    if kind == 3:
        a, w = draw(st.sampled_from(["1.5", "0", "(-0.5)"])), draw(st.sampled_from(["0.5", "1", "2.0"]))
        return E(f"floor((f + {a}) / {w}) * {w}", f"floor((f + {a}) / {w}) * {w}", "float")
    if kind == 4:
        return draw(
            st.sampled_from(
                [
                    same("ceil(f * 2)", "float"),
                    same("floor(f)", "float"),
                    E("(floor(i / 2.0) + 1)", "(floor(i / 2.0) + 1)", "float"),
                ]
            )
        )
    if kind == 5:
        n = draw(st.sampled_from([1, 2, 4]))
        return E(
            f"width_bucket(f, -1.5, 2.5, {n})",
            f"(CASE WHEN f < -1.5 THEN 0 WHEN f >= 2.5 OR isnan(f) THEN {n + 1} "
            f"ELSE CAST(floor((f + 1.5) / 4.0 * {n}) AS BIGINT) + 1 END)",
            "int",
        )
    if kind == 6:
        p, q = draw(boolean(1)), draw(boolean(1))
        lab = draw(st.sampled_from([("'a'", "'b'", "'c'"), ("1", "2", "3"), ("1", "2.5", "0")]))
        other = draw(st.sampled_from(["", f" ELSE {lab[2]}"]))
        return E(
            f"CASE WHEN {p.pg} THEN {lab[0]} WHEN {q.pg} THEN {lab[1]}{other} END",
            f"CASE WHEN {p.duck} THEN {lab[0]} WHEN {q.duck} THEN {lab[1]}{other} END",
            "case",
        )
    if kind == 7:
        return draw(
            st.sampled_from(
                [
                    E(
                        "CASE g WHEN 1 THEN 'one' WHEN 2 THEN 'two' ELSE 'other' END",
                        "CASE g WHEN 1 THEN 'one' WHEN 2 THEN 'two' ELSE 'other' END",
                        "case",
                    ),
                    E("CASE s WHEN 'x' THEN 0 END", "CASE s WHEN 'x' THEN 0 END", "case"),
                ]
            )
        )
    if kind == 9:  # the text of a public-domain column (Tableau's CAST(c AS TEXT), Grafana's c::text)
        return draw(
            st.sampled_from(
                [
                    E("CAST(g AS TEXT)", "CAST(g AS TEXT)", "text"),
                    E("s::text", "CAST(s AS TEXT)", "text"),
                    E("CAST(b AS TEXT)", "CAST(b AS TEXT)", "text"),
                ]
            )
        )
    p = draw(boolean(2))
    return E(p.pg, p.duck, "bool")


@st.composite
def derived_statement(draw):
    """(analyst SQL, (DuckDB WHERE, Postgres WHERE), group keys, aggregate items); the GROUP BY
    repeats the key or names its position."""
    keys = draw(st.lists(derived_key(), min_size=1, max_size=2, unique_by=lambda e: e.pg))
    if draw(st.integers(0, 3)) == 0:  # beside a declared-domain column
        keys.insert(draw(st.integers(0, len(keys))), same("g", "int"))
    aggs = draw(st.lists(st.sampled_from(sorted(AGGS)), min_size=1, max_size=2))
    where = draw(boolean()) if draw(st.integers(0, 3)) == 0 else None
    sql = f"SELECT {', '.join([k.pg for k in keys] + aggs)} FROM fx"
    if where is not None:
        sql += f" WHERE {where.pg}"
    by_position = draw(st.booleans())
    sql += " GROUP BY " + ", ".join(str(j + 1) if by_position else k.pg for j, k in enumerate(keys))
    return (
        sql,
        (where.duck if where is not None else None, where.pg if where is not None else None),
        keys,
        aggs,
    )
