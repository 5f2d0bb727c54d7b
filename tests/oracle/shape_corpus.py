"""What the result-shape oracle asks: its config (the oracle's NULL fixture ``fx`` under a
tier of ε = 20, plus a public lookup table, a table with a privacy unit, and an orders /
lines pair along the unit), generated statements (:func:`shaped`), and the hand corpus
(:data:`HAND`), each with the reference SQL it is compared with.

**The reference is the analyst's SQL over the table as declared.** Three things differ from
running the analyst's text on the raw table, each a documented rule of dpgate, each written
into the reference explicitly:

1. SUM/AVG read a value clamped to its column's declared bounds (``[tables.X.columns]``).
2. A row whose group key is NULL or outside the key's declared domain belongs to no group.
3. A public domain's cells are all released, the empty ones too (COUNT 0, SUM a noisy 0, AVG
   a value within its bounds): the reference adds one *phantom* row per domain cell that
   counts nothing (``__r`` NULL; every other column NULL). A phantom passes the WHERE when
   the WHERE's conjuncts on group keys admit its key (a key predicate restricts the output
   keys); HAVING, ORDER BY, LIMIT and outer queries then see the empty cell like any other
   — "the SQL over the released cells". SQL's SUM/AVG of no value is NULL, a release is a
   number: the reference says ``COALESCE(SUM(..), 0)`` and ``COALESCE(AVG(..), midpoint)``.

Keys chosen by a mechanism — partition selection (GROUP BY ``t``, a column without a
domain) and the sparse vector's HAVING/top-c — are allowed to be missing, and counted
(:func:`shape.compare`); never added. What must hold of released rows at ordinary noise is
:data:`HOLDS`.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from pathlib import Path

import sqlglot
from fixture import COLUMNS, TABLE, UNIT_TABLE, create_sql, create_unit_sql, rows, unit_rows
from grammar import AGGS, EXPRS, boolean
from hypothesis import strategies as st
from shape import Dpgate, ShapeOracle
from sqlglot import exp

# ------------------------------------------------------------------------------ config

GL_ROWS = [(0, "zero"), (1, "one"), (2, "two"), (5, "five")]
FO_ROWS = [
    (oid, [1, 1, 2, 2, 3, 3, 4, 5, 1, 2, 4, 5][oid - 1], ["hi", "lo", "lo"][oid % 3]) for oid in range(1, 13)
]
FL_ROWS = [(1 + (k * 5) % 12, 1 + k % 5) for k in range(30)]

SHAPE_CONFIG = {
    "tiers": {
        "default": {"epsilon": 20, "budget": 1e9, "delta": 1e-7, "delta_budget": 1e-2},
        # an ordinary tier, for what must hold of released values whatever the noise
        "noisy": {"epsilon": 1, "budget": 1e9, "delta": 1e-7, "delta_budget": 1e-2},
    },
    "roles": {"analyst": {"tier": "default"}, "noisy": {"tier": "noisy"}},
    "server": {"auth": "trust"},
    "tables": {
        TABLE: {"columns": {k: v[1] for k, v in COLUMNS.items()}},
        "gl": {
            "public": True,
            "key": "g",
            "columns": {
                "g": {"type": "int", "domain": [0, 1, 2, 5]},
                "label": {"type": "text", "domain": ["zero", "one", "two", "five"]},
            },
        },
        # bounds that bind nothing (20 rows for the largest unit, 5 groups at most)
        "fu": {
            "source": UNIT_TABLE,
            "privacy_unit": "u",
            "max_groups_per_unit": 5,
            "max_rows_per_unit": 20,
            "columns": {**{k: v[1] for k, v in COLUMNS.items()}, "u": {"type": "int"}},
        },
        "fo": {
            "privacy_unit": "u",
            "key": "oid",
            "max_groups_per_unit": 2,
            "max_rows_per_unit": 4,
            "columns": {
                "oid": {"type": "int"},
                "u": {"type": "int"},
                "pri": {"type": "text", "domain": ["hi", "lo"]},
            },
        },
        "fl": {
            "privacy_unit": "fo.u",
            "references": {"oid": "fo"},
            "max_groups_per_unit": 2,
            "max_rows_per_unit": 10,
            "columns": {"oid": {"type": "int"}, "q": {"type": "int", "lower": 1, "upper": 5}},
        },
    },
}

EXTRA_TABLES = [
    ("CREATE TABLE gl (g integer, label text)", "INSERT INTO gl VALUES ({})", GL_ROWS),
    ("CREATE TABLE fo (oid integer, u integer, pri text)", "INSERT INTO fo VALUES ({})", FO_ROWS),
    ("CREATE TABLE fl (oid integer, q integer)", "INSERT INTO fl VALUES ({})", FL_ROWS),
]


def extra_sql() -> list[str]:
    """DDL and rows of the shape oracle's own tables (fx and fxu are the oracle fixture's)."""

    def lit(v):
        return "NULL" if v is None else (f"'{v}'" if isinstance(v, str) else str(v))

    out = []
    for ddl, ins, table_rows in EXTRA_TABLES:
        out.append(ddl)
        out.extend(ins.format(", ".join(map(lit, r))) for r in table_rows)
    return out


def open_duckdb(state: Path, names=lambda sql: None) -> ShapeOracle:
    """The oracle on an in-process dpgate over embedded DuckDB holding the fixture; the
    reference runs on the same DuckDB. ``names``: Postgres's output names of a statement."""
    cfg = copy.deepcopy(SHAPE_CONFIG)
    cfg["backend"] = {"kind": "duckdb", "path": str(state / "shape.duckdb")}
    dp = Dpgate(cfg, state)
    b = dp.backend
    b.execute_script(create_sql())
    for r in rows():
        b.query(f"INSERT INTO {TABLE} VALUES (?, ?, ?, ?, ?, ?)", list(r))
    b.execute_script(create_unit_sql())
    for r in unit_rows():
        b.query(f"INSERT INTO {UNIT_TABLE} VALUES (?, ?, ?, ?, ?, ?, ?)", list(r))
    for s in extra_sql():
        b.execute_script(s)
    return ShapeOracle(dp, "duckdb", b.query, names)


# -------------------------------------------------------------------- one statement

DOMAIN = {"g": ["0", "1", "2"], "s": ["'x'", "'X'", "'x '"], "b": ["TRUE", "FALSE"]}
IN_DOMAIN = {"g": "g IN (0, 1, 2)", "s": "s IN ('x', 'X', 'x ')", "b": "b IS NOT NULL"}
NULLS = {
    "i": "CAST(NULL AS integer)",
    "f": "CAST(NULL AS double precision)",
    "t": "CAST(NULL AS text)",
    "g": "CAST(NULL AS integer)",
    "s": "CAST(NULL AS text)",
    "b": "CAST(NULL AS boolean)",
}
BOUNDS = {"i": (0, 10), "f": (-1.5, 2.5)}
EXPR_BOUNDS = {
    "i + 1": (1, 11),
    "2 * i": (0, 20),
    "i + f": (-1.5, 12.5),
    "f * 2.5": (-3.75, 6.25),
    "i * i - 3": (-3, 97),
    "f / 2.0": (-0.75, 1.25),
    "i - 10": (-10, 0),
    "-f": (-2.5, 1.5),
    "cast(i as double precision) * 3": (0, 30),
}
COUNTS = ["COUNT(*)", "COUNT(1)", "COUNT(i)", "COUNT(f)", "COUNT(t)", "COUNT(b)", "COUNT(s)"]


def _clamped(col: str) -> str:
    lo, hi = BOUNDS[col]
    return f"(CASE WHEN {col} < {lo} THEN {lo} WHEN {col} > {hi} THEN {hi} ELSE {col} END)"


def ref_aggregate(item: str) -> str:
    """The reference's value of an aggregate item of :data:`grammar.AGGS`."""
    if item in ("COUNT(*)", "COUNT(1)"):
        return "COUNT(__r)"
    if item.startswith("COUNT("):  # a phantom row's key column is not NULL
        return f"COUNT(CASE WHEN __r = 1 THEN {item[6:-1]} END)"
    fn, arg = item[:3], item[4:-1]
    key = arg.lower() if arg.lower() in EXPRS else arg
    if key in EXPRS:
        body = EXPRS[key][0].replace("CI", _clamped("i")).replace("CF", _clamped("f"))
        lo, hi = EXPR_BOUNDS[key]
    else:
        body, (lo, hi) = _clamped(arg), BOUNDS[arg]
    if fn == "SUM":
        return f"COALESCE(SUM({body}), 0)"
    return f"COALESCE(AVG({body}), {(lo + hi) / 2})"


@dataclass
class Case:
    """An analyst statement and its reference. ``ref`` maps a dialect to the reference SQL;
    ``keys``: leading output columns that are group keys; ``order``: output columns ORDER
    BY sorts on (None: unordered). ``note``: why the reference differs from the text."""

    sql: str
    ref: dict[str, str]
    keys: int
    order: list[int] | None
    name: str = ""
    note: str = ""
    must_answer: bool = False  # a shape users were given wrong rows for: a refusal is a failure
    hand: bool = False  # the hand corpus: its reference must run
    defect: str = ""  # the known defect this case shows, while it stands
    extra: dict = field(default_factory=dict)


KEY_PREDICATES = {
    "g": ["g = 1", "g IN (0, 2)", "g BETWEEN 1 AND 2", "g <> 1", "g IN (1, 5)", "g > 0", "g NOT IN (0)"],
    "s": ["s = 'x'", "s IN ('x', 'X')", "s LIKE 'x%'", "s <> 'X'", "s IN ('y', 'x ')", "s NOT LIKE 'X%'"],
    "b": ["b = TRUE", "b", "NOT b", "b IS TRUE"],
}


@st.composite
def shaped(draw) -> Case:
    """A statement of the grammar the rewriter accepts, with the shapes around the release:
    aliases, key predicates, HAVING on counts, ORDER BY by name, alias, position or
    expression, LIMIT/OFFSET, a renaming derived table and an outer query."""
    groups = draw(st.lists(st.sampled_from(["g", "s", "b"]), max_size=2, unique=True))
    selected = bool(groups) and draw(st.integers(0, 12)) == 0  # GROUP BY t: partition selection
    if selected:
        groups = groups[:1] + ["t"]
    # HAVING and ORDER BY an aggregate decide on released values: those statements release one
    # COUNT (spelled once or twice), so its noise is at the whole ε (non-zero w.p. < 5e-9);
    # each further measurement would take a share of ε and make ties and thresholds noisy
    on_values = bool(groups) and draw(st.integers(0, 2)) == 0
    if on_values:
        same = {"COUNT(*)": ["COUNT(*)", "COUNT(1)"]}
        first = draw(st.sampled_from(COUNTS[1:]))
        first = "COUNT(*)" if first == "COUNT(1)" else first
        aggs = draw(st.lists(st.sampled_from(same.get(first, [first])), min_size=1, max_size=2))
    else:
        aggs = draw(st.lists(st.sampled_from(sorted(AGGS)), min_size=1, max_size=3))
        if not any(a in COUNTS for a in aggs) and draw(st.booleans()):
            aggs.insert(0, draw(st.sampled_from(COUNTS)))
    key_alias = {k: (f"k_{k}" if draw(st.integers(0, 2)) == 0 else None) for k in groups}
    agg_alias = [f"a{j}" if draw(st.integers(0, 2)) == 0 else None for j in range(len(aggs))]
    renamed = "g" in groups and draw(st.integers(0, 4)) == 0  # FROM (SELECT …, g AS gk …) x
    keyed = [
        (k, draw(st.sampled_from(KEY_PREDICATES[k])))
        for k in groups
        if k in KEY_PREDICATES and draw(st.integers(0, 2)) == 0
    ]
    keypreds = [p for _, p in keyed]
    row = draw(boolean()) if draw(st.integers(0, 2)) == 0 else None
    if renamed and row is not None and _mentions_g(row.pg):
        row = None
    gname = {k: ("gk" if renamed and k == "g" else k) for k in groups}

    def key_text(k: str, pg_text: str) -> str:
        return pg_text.replace("g ", "gk ").replace("g)", "gk)") if renamed and k == "g" else pg_text

    analyst_where = [key_text(k, p) for k, p in keyed]
    where_items = [f"({p})" for p in analyst_where] + ([f"({row.pg})"] if row else [])

    n_keys = len(groups)
    items_a = [gname[k] + (f" AS {key_alias[k]}" if key_alias[k] else "") for k in groups]
    items_a += [a + (f" AS {al}" if al else "") for a, al in zip(aggs, agg_alias)]
    counts = [j for j, a in enumerate(aggs) if a in COUNTS] if on_values else []
    having = None
    if counts and draw(st.booleans()):
        j = draw(st.sampled_from(counts))
        op = draw(st.sampled_from([">", ">=", "<", "="]))
        c = draw(st.integers(0, 14))
        having = (f"{aggs[j]} {op} {c}", f"{ref_aggregate(aggs[j])} {op} {c}")
    order_a, order_r, order_cols = [], [], None
    limit = ""
    if groups and draw(st.booleans()):
        order_cols = []
        for _ in range(draw(st.integers(1, 2))):
            pos = draw(st.sampled_from(list(range(n_keys)) + [n_keys + j for j in counts]))
            how = draw(st.sampled_from(["name", "position", "expression"]))
            desc = draw(st.sampled_from(["", " DESC", " ASC"]))
            a, r = _order_item(pos, how, groups, gname, key_alias, aggs, agg_alias, n_keys)
            order_a.append(a + desc)
            order_r.append(r + desc)
            order_cols.append(pos)
        for j in range(n_keys):  # keys break every tie
            order_a.append(str(j + 1))
            order_r.append(str(j + 1))
            order_cols.append(j)
        if not selected and draw(st.booleans()):  # (missing selected keys would shift the window)
            limit = f" LIMIT {draw(st.integers(0, 5))}"
            if draw(st.booleans()):
                limit += f" OFFSET {draw(st.integers(0, 4))}"
    src = f"(SELECT i, f, t, g AS gk, s, b FROM {TABLE}) x" if renamed else TABLE
    sql = f"SELECT {', '.join(items_a)} FROM {src}"
    if where_items:
        sql += " WHERE " + " AND ".join(where_items)
    if groups:
        sql += " GROUP BY " + ", ".join(
            gname[k] if draw(st.booleans()) else str(j + 1) for j, k in enumerate(groups)
        )
    if having:
        sql += f" HAVING {having[0]}"
    if order_a:
        sql += " ORDER BY " + ", ".join(order_a)
    sql += limit
    refs = {}
    for dialect in ("duckdb", "postgres"):
        refs[dialect] = _reference(
            dialect, groups, key_alias, aggs, agg_alias, keypreds, row, having, order_r, limit, selected
        )
    outer = draw(st.integers(0, 5)) if not limit else 5
    if outer == 0:  # an outer query over the release
        sql = f"SELECT * FROM ({sql}) q"
        refs = {d: f"SELECT * FROM ({r}) q" for d, r in refs.items()}
        order_cols = None  # a derived table's order is not the outer one's
    elif outer == 1 and counts and not limit:
        j = draw(st.sampled_from(counts))
        alias = agg_alias[j]
        if alias:
            c = draw(st.integers(0, 10))
            sql = f"SELECT * FROM ({sql}) q WHERE q.{alias} > {c}"
            refs = {d: f"SELECT * FROM ({r}) q WHERE q.{alias} > {c}" for d, r in refs.items()}
            order_cols = None
    widths = {n_keys + j: _avg_width(a) for j, a in enumerate(aggs) if a.startswith("AVG")}
    return Case(sql, refs, n_keys, order_cols, extra={"selected": selected, "widths": widths})


def _avg_width(item: str) -> float:
    arg = item[4:-1]
    lo, hi = EXPR_BOUNDS.get(arg.lower(), BOUNDS.get(arg, (0, 0)))
    return float(hi - lo)


def _reads_only(text: str, columns: set[str]) -> bool:
    """The condition reads at least one column, and only ``columns``."""
    read = {c.name for c in sqlglot.parse_one(text, read="postgres").find_all(exp.Column)}
    return bool(read) and read <= columns


def _mentions_g(text: str) -> bool:
    return re.search(r"\bg\b", text) is not None


def _order_item(pos, how, groups, gname, key_alias, aggs, agg_alias, n_keys):
    if pos < n_keys:
        k = groups[pos]
        if how == "position":
            return str(pos + 1), str(pos + 1)
        if how == "name" and key_alias[k]:
            return key_alias[k], key_alias[k]
        return gname[k], k
    j = pos - n_keys
    if how == "position":
        return str(pos + 1), str(pos + 1)
    if how == "name" and agg_alias[j]:
        return agg_alias[j], agg_alias[j]
    return aggs[j], ref_aggregate(aggs[j])


def _reference(
    dialect, groups, key_alias, aggs, agg_alias, keypreds, row, having, order_r, limit, selected
) -> str:
    cols = ["i", "f", "t", "g", "s", "b"]
    domain_keys = [k for k in groups if k in DOMAIN]
    real = f"SELECT {', '.join(cols)}, 1 AS __r FROM {TABLE}"
    if domain_keys:
        real += " WHERE " + " AND ".join(IN_DOMAIN[k] for k in domain_keys)
    src = real
    if domain_keys and not selected:
        values = {k: f"(VALUES {', '.join(f'({v})' for v in DOMAIN[k])}) d_{k}({k})" for k in domain_keys}
        phantom = (
            f"SELECT {', '.join(k if k in domain_keys else NULLS[k] for k in cols)}, "
            f"CAST(NULL AS integer) AS __r FROM {' CROSS JOIN '.join(values.values())}"
        )
        src = f"{real} UNION ALL {phantom}"
    keypred = " AND ".join(f"({p})" for p in keypreds) or "TRUE"
    rowpred = (row.pg if dialect == "postgres" else row.duck) if row is not None else "TRUE"
    # A condition that reads only this statement's group keys decides which keys exist, so an
    # empty cell (a phantom) passes it only when its key does — as a Postgres row with that key would.
    phantom_pred = keypred
    if row is not None and _reads_only(row.pg, set(domain_keys)):
        phantom_pred = f"({keypred}) AND ({rowpred})"
    where = f"CASE WHEN __r IS NULL THEN ({phantom_pred}) ELSE ({keypred}) AND ({rowpred}) END"
    items = [k + (f" AS {key_alias[k]}" if key_alias[k] else "") for k in groups]
    items += [
        ref_aggregate(a) + (f" AS {al}" if al else f" AS c{j}")
        for j, (a, al) in enumerate(zip(aggs, agg_alias))
    ]
    sql = f"SELECT {', '.join(items)} FROM ({src}) x WHERE {where}"
    if groups:
        sql += " GROUP BY " + ", ".join(groups)
    if having:
        sql += f" HAVING {having[1]}"
    if order_r:
        sql += " ORDER BY " + ", ".join(order_r)
    return sql + limit


# ------------------------------------------------------------------------- hand corpus


def _both(sql: str) -> dict[str, str]:
    return {"duckdb": sql, "postgres": sql}


U = "u IS NOT NULL"  # rows of a unit table with a NULL unit belong to no person: left out
HAND: list[Case] = [
    # --- HAVING: every returned row satisfies it on its released value
    Case(
        "SELECT g, COUNT(*) FROM fx GROUP BY g HAVING COUNT(*) > 10 LIMIT 10",
        _both("SELECT g, COUNT(*) FROM fx WHERE g IN (0, 1, 2) GROUP BY g HAVING COUNT(*) > 10"),
        1,
        None,
        "having count, limit",
        must_answer=True,
        defect="HAVING",
    ),
    Case(
        "SELECT g FROM fx GROUP BY g HAVING COUNT(*) > 10",
        _both("SELECT g FROM fx WHERE g IN (0, 1, 2) GROUP BY g HAVING COUNT(*) > 10"),
        1,
        None,
        "having, keys only",
        must_answer=True,
        defect="HAVING",
    ),
    Case(
        "SELECT s, b, COUNT(*) AS n FROM fx GROUP BY s, b HAVING COUNT(*) >= 4 ORDER BY s, b",
        _both(
            "SELECT s, b, COUNT(*) AS n FROM fx WHERE s IN ('x', 'X', 'x ') AND b IS NOT NULL "
            "GROUP BY s, b HAVING COUNT(*) >= 4 ORDER BY s, b"
        ),
        2,
        [0, 1],
        "having >= over two keys",
        must_answer=True,
        defect="HAVING",
    ),
    Case(
        "SELECT g, COUNT(*) AS n, SUM(i) FROM fx WHERE i > 100 GROUP BY g HAVING COUNT(*) > 0",
        _both(
            "SELECT g, COUNT(*) AS n, SUM(CASE WHEN i > 10 THEN 10 ELSE i END) FROM fx WHERE g IN (0, 1, 2) "
            "AND i > 100 GROUP BY g HAVING COUNT(*) > 0"
        ),
        1,
        None,
        "having excludes the empty cells",
        must_answer=True,
        defect="HAVING",
    ),
    # --- a predicate on a group key restricts the output keys
    Case(
        "SELECT s, COUNT(*) FROM fx WHERE s IN ('x', 'X') GROUP BY s",
        _both("SELECT s, COUNT(*) FROM fx WHERE s IN ('x', 'X') GROUP BY s"),
        1,
        None,
        "key IN",
        must_answer=True,
        defect="key predicates",
    ),
    Case(
        "SELECT g, COUNT(*) FROM fx WHERE g = 1 GROUP BY g",
        _both("SELECT g, COUNT(*) FROM fx WHERE g = 1 GROUP BY g"),
        1,
        None,
        "key =",
        must_answer=True,
        defect="key predicates",
    ),
    Case(
        "SELECT g, s, COUNT(*) FROM fx WHERE (g = 0 AND s = 'x') OR (g = 2 AND s = 'X') GROUP BY g, s",
        _both("SELECT g, s, COUNT(*) FROM fx WHERE (g = 0 AND s = 'x') OR (g = 2 AND s = 'X') GROUP BY g, s"),
        2,
        None,
        "a predicate over two keys keeps tuples",
        must_answer=True,
        defect="key predicates",
    ),
    # --- a key read from a public lookup table: the public tables' values under the WHERE
    Case(
        "SELECT gl.label, COUNT(*) FROM fx JOIN gl ON fx.g = gl.g WHERE gl.g IN (1, 2) GROUP BY gl.label",
        _both(
            "SELECT gl.label, COUNT(*) FROM fx JOIN gl ON fx.g = gl.g WHERE gl.g IN (1, 2) GROUP BY gl.label"
        ),
        1,
        None,
        "lookup key cut by a public column",
        must_answer=True,
        defect="key predicates",
    ),
    Case(
        "SELECT a.label, b.label, COUNT(*) FROM fx JOIN gl a ON fx.g = a.g JOIN gl b ON fx.g = b.g "
        "WHERE (a.label = 'one' AND b.label = 'one') OR (a.label = 'two' AND b.label = 'two') "
        "GROUP BY a.label, b.label",
        _both(
            "SELECT a.label, b.label, COUNT(*) FROM fx JOIN gl a ON fx.g = a.g JOIN gl b ON fx.g = b.g "
            "WHERE (a.label = 'one' AND b.label = 'one') OR (a.label = 'two' AND b.label = 'two') "
            "GROUP BY a.label, b.label"
        ),
        2,
        None,
        "lookup keys cut tuple by tuple",
        must_answer=True,
        defect="key predicates",
    ),
    Case(
        "SELECT g, COUNT(*) FROM fx WHERE g BETWEEN 1 AND 2 GROUP BY g",
        _both("SELECT g, COUNT(*) FROM fx WHERE g BETWEEN 1 AND 2 GROUP BY g"),
        1,
        None,
        "key BETWEEN",
        must_answer=True,
        defect="key predicates",
    ),
    Case(
        "SELECT s, COUNT(*) FROM fx WHERE s LIKE 'x%' GROUP BY s",
        _both("SELECT s, COUNT(*) FROM fx WHERE s LIKE 'x%' AND s IN ('x', 'X', 'x ') GROUP BY s"),
        1,
        None,
        "key LIKE",
        must_answer=True,
        defect="key predicates",
    ),
    Case(
        "SELECT g, s, COUNT(*) FROM fx WHERE g IN (0, 2) AND s = 'X' GROUP BY g, s ORDER BY 1",
        _both("SELECT g, s, COUNT(*) FROM fx WHERE g IN (0, 2) AND s = 'X' GROUP BY g, s ORDER BY 1"),
        2,
        [0],
        "two key predicates",
        must_answer=True,
        defect="key predicates",
    ),
    Case(
        "SELECT g, COUNT(*) FROM fx WHERE g IN (1, 5) AND i > 3 GROUP BY g",
        _both("SELECT g, COUNT(*) FROM fx WHERE g = 1 AND i > 3 GROUP BY g"),
        1,
        None,
        "key IN with a value outside the domain (5: no group)",
        must_answer=True,
        defect="key predicates",
    ),
    # --- ORDER BY an aggregate: by expression, alias or position are one thing
    Case(
        "SELECT g, COUNT(*) FROM fx GROUP BY g ORDER BY COUNT(*) DESC, g LIMIT 2",
        _both("SELECT g, COUNT(*) FROM fx WHERE g IN (0, 1, 2) GROUP BY g ORDER BY COUNT(*) DESC, g LIMIT 2"),
        1,
        [1, 0],
        "order by aggregate expression, limit",
        must_answer=True,
        defect="ORDER BY aggregate",
    ),
    Case(
        "SELECT g, COUNT(*) AS n FROM fx GROUP BY g ORDER BY n DESC, g LIMIT 2",
        _both("SELECT g, COUNT(*) AS n FROM fx WHERE g IN (0, 1, 2) GROUP BY g ORDER BY n DESC, g LIMIT 2"),
        1,
        [1, 0],
        "order by alias, limit",
    ),
    Case(
        "SELECT g, COUNT(*) FROM fx GROUP BY g ORDER BY 2 DESC, 1 LIMIT 2",
        _both("SELECT g, COUNT(*) FROM fx WHERE g IN (0, 1, 2) GROUP BY g ORDER BY 2 DESC, 1 LIMIT 2"),
        1,
        [1, 0],
        "order by position, limit",
    ),
    Case(
        "SELECT g, COUNT(*) FROM fx GROUP BY g ORDER BY COUNT(*)",
        _both("SELECT g, COUNT(*) FROM fx WHERE g IN (0, 1, 2) GROUP BY g ORDER BY COUNT(*)"),
        1,
        [1],
        "order by aggregate, ties kept as a multiset",
        must_answer=True,
        defect="ORDER BY aggregate",
    ),
    Case(
        "SELECT g, COUNT(*) FROM fx GROUP BY g ORDER BY COUNT(*) DESC LIMIT 1",
        _both("SELECT g, COUNT(*) FROM fx WHERE g IN (0, 1, 2) GROUP BY g ORDER BY COUNT(*) DESC LIMIT 1"),
        1,
        [1],
        "top-1 by count (16 against 9 and 9: no tie at the cut)",
        must_answer=True,
        defect="ORDER BY aggregate",
    ),
    Case(
        "SELECT g, SUM(i) AS total FROM fx GROUP BY g ORDER BY total DESC",
        _both(
            "SELECT g, SUM(CASE WHEN i < 0 THEN 0 WHEN i > 10 THEN 10 ELSE i END) AS total FROM fx "
            "WHERE g IN (0, 1, 2) GROUP BY g ORDER BY total DESC"
        ),
        1,
        [1],
        "order by a sum's alias",
    ),
    # --- LIMIT / OFFSET
    Case(
        "SELECT g, COUNT(*) FROM fx GROUP BY g ORDER BY g DESC LIMIT 2 OFFSET 1",
        _both("SELECT g, COUNT(*) FROM fx WHERE g IN (0, 1, 2) GROUP BY g ORDER BY g DESC LIMIT 2 OFFSET 1"),
        1,
        [0],
        "limit offset",
    ),
    Case(
        "SELECT s, b, COUNT(*) FROM fx GROUP BY s, b ORDER BY 2, 1 OFFSET 4",
        _both(
            "SELECT s, b, COUNT(*) FROM fx WHERE s IN ('x', 'X', 'x ') AND b IS NOT NULL GROUP BY s, b "
            "ORDER BY 2, 1 OFFSET 4"
        ),
        2,
        [1, 0],
        "offset alone",
    ),
    Case("SELECT COUNT(*) FROM fx LIMIT 0", _both("SELECT COUNT(*) FROM fx LIMIT 0"), 0, None, "limit 0"),
    # --- output names follow Postgres
    Case(
        "SELECT k, COUNT(*) FROM (SELECT g AS k, i FROM fx) x GROUP BY k",
        _both("SELECT k, COUNT(*) FROM (SELECT g AS k, i FROM fx WHERE g IN (0, 1, 2)) x GROUP BY k"),
        1,
        None,
        "derived table renames the key",
        must_answer=True,
        defect="names",
    ),
    Case(
        "SELECT x.k AS kk, COUNT(*) AS n FROM (SELECT s AS k FROM fx) AS x GROUP BY x.k ORDER BY kk",
        _both(
            "SELECT x.k AS kk, COUNT(*) AS n FROM (SELECT s AS k FROM fx WHERE s IN ('x', 'X', 'x ')) AS x "
            "GROUP BY x.k ORDER BY kk"
        ),
        1,
        [0],
        "derived table, qualified alias",
        must_answer=True,
        defect="names",
    ),
    Case(
        "SELECT g, count(*), Sum(i), avg(f) FROM fx GROUP BY g",
        _both(
            "SELECT g, count(*), sum(CASE WHEN i < 0 THEN 0 WHEN i > 10 THEN 10 ELSE i END), "
            "avg(CASE WHEN f < -1.5 THEN -1.5 WHEN f > 2.5 THEN 2.5 ELSE f END) FROM fx WHERE g IN (0, 1, 2) "
            "GROUP BY g"
        ),
        1,
        None,
        "default names",
        extra={"widths": {3: 4.0}},
    ),
    Case(
        "SELECT * FROM (SELECT g, COUNT(*) AS n FROM fx GROUP BY g) q WHERE q.n > 10",
        _both(
            "SELECT * FROM (SELECT g, COUNT(*) AS n FROM fx WHERE g IN (0, 1, 2) GROUP BY g) q WHERE q.n > 10"
        ),
        1,
        None,
        "outer query filters released values",
    ),
    Case(
        "SELECT q.g, q.n * 2 AS twice FROM (SELECT g, COUNT(*) AS n FROM fx GROUP BY g) q ORDER BY twice DESC, 1",
        _both(
            "SELECT q.g, q.n * 2 AS twice FROM (SELECT g, COUNT(*) AS n FROM fx WHERE g IN (0, 1, 2) GROUP BY g) q "
            "ORDER BY twice DESC, 1"
        ),
        1,
        [1, 0],
        "outer expression, order",
    ),
    # --- joins: a public lookup table, in both orders and as a comma join
    Case(
        "SELECT gl.label, COUNT(*) FROM fx JOIN gl ON fx.g = gl.g GROUP BY gl.label",
        _both("SELECT gl.label, COUNT(*) FROM fx JOIN gl ON fx.g = gl.g GROUP BY gl.label"),
        1,
        None,
        "private JOIN public",
    ),
    Case(
        "SELECT gl.label, COUNT(*) FROM gl JOIN fx ON gl.g = fx.g GROUP BY gl.label",
        _both("SELECT gl.label, COUNT(*) FROM gl JOIN fx ON gl.g = fx.g GROUP BY gl.label"),
        1,
        None,
        "public JOIN private",
        must_answer=True,
        defect="join order",
    ),
    Case(
        "SELECT gl.label, COUNT(*) FROM fx, gl WHERE fx.g = gl.g GROUP BY gl.label",
        _both("SELECT gl.label, COUNT(*) FROM fx, gl WHERE fx.g = gl.g GROUP BY gl.label"),
        1,
        None,
        "comma join",
        must_answer=True,
        defect="join order",
    ),
    Case(
        "SELECT o.pri, COUNT(*) FROM fl l JOIN fo o ON l.oid = o.oid GROUP BY o.pri",
        _both("SELECT o.pri, COUNT(*) FROM fl l JOIN fo o ON l.oid = o.oid GROUP BY o.pri"),
        1,
        None,
        "lines JOIN orders (along the unit)",
    ),
    Case(
        "SELECT o.pri, COUNT(*) FROM fo o JOIN fl l ON o.oid = l.oid GROUP BY o.pri",
        _both("SELECT o.pri, COUNT(*) FROM fo o JOIN fl l ON o.oid = l.oid GROUP BY o.pri"),
        1,
        None,
        "orders JOIN lines (the other order)",
        must_answer=True,
        defect="join order",
    ),
    # --- per-unit histograms: answered with the right counts, or refused — never 0
    Case(
        "SELECT COUNT(*) FROM (SELECT u, COUNT(*) AS n FROM fu GROUP BY u) t WHERE n > 10",
        _both(
            f"SELECT COUNT(*) FROM (SELECT u, COUNT(*) AS n FROM {UNIT_TABLE} WHERE {U} GROUP BY u) t WHERE n > 10"
        ),
        0,
        None,
        "units with more than 10 rows",
        defect="per-unit histogram",
    ),
    Case(
        "SELECT n, COUNT(*) AS units FROM (SELECT u, COUNT(*) AS n FROM fu GROUP BY u) t GROUP BY n ORDER BY n",
        _both(
            f"SELECT n, COUNT(*) AS units FROM (SELECT u, COUNT(*) AS n FROM {UNIT_TABLE} WHERE {U} GROUP BY u) t "
            "GROUP BY n ORDER BY n"
        ),
        1,
        [0],
        "rows-per-unit histogram",
        defect="per-unit histogram",
        extra={"empty_buckets": True},
    ),
    Case(
        "SELECT g, COUNT(*) FROM fu GROUP BY g ORDER BY g",
        _both(f"SELECT g, COUNT(*) FROM {UNIT_TABLE} WHERE {U} AND g IN (0, 1, 2) GROUP BY g ORDER BY g"),
        1,
        [0],
        "a unit table, bounds that bind nothing",
    ),
    # --- partition selection (GROUP BY a column without a domain): keys may be missing, never added
    Case(
        "SELECT t, COUNT(*) FROM fx GROUP BY t ORDER BY t",
        _both("SELECT t, COUNT(*) FROM fx GROUP BY t ORDER BY t"),
        1,
        [0],
        "partition selection, ordered",
    ),
    Case(
        "SELECT t, COUNT(*) AS n FROM fx WHERE t IN ('abc', 'x', 'zz') GROUP BY t",
        _both("SELECT t, COUNT(*) AS n FROM fx WHERE t IN ('abc', 'x', 'zz') GROUP BY t"),
        1,
        None,
        "partition selection with a key predicate",
    ),
    # --- more shapes around the release: names of expressions, keys not selected, CTEs, FETCH
    Case(
        "SELECT g, COUNT(*) * 2 AS twice, COUNT(*) + 1, COUNT(*)::float FROM fx GROUP BY g",
        _both(
            "SELECT g, COUNT(*) * 2 AS twice, COUNT(*) + 1, COUNT(*)::float FROM fx WHERE g IN (0, 1, 2) GROUP BY g"
        ),
        1,
        None,
        "expressions over counts: names and values",
    ),
    Case(
        'SELECT g AS "Group", COUNT(*) AS "N" FROM fx GROUP BY 1 ORDER BY "N" DESC, 1',
        _both(
            'SELECT g AS "Group", COUNT(*) AS "N" FROM fx WHERE g IN (0, 1, 2) GROUP BY 1 ORDER BY "N" DESC, 1'
        ),
        1,
        [1, 0],
        "quoted mixed-case aliases",
    ),
    Case(
        "SELECT COUNT(*) FROM fx GROUP BY g",
        _both("SELECT COUNT(*) FROM fx WHERE g IN (0, 1, 2) GROUP BY g"),
        0,
        None,
        "a key that is not selected",
    ),
    Case(
        "SELECT COUNT(*) AS n, g FROM fx GROUP BY g ORDER BY g DESC",
        _both("SELECT COUNT(*) AS n, g FROM fx WHERE g IN (0, 1, 2) GROUP BY g ORDER BY g DESC"),
        0,
        [1],
        "the key after the aggregate",
    ),
    Case(
        "WITH c AS (SELECT g, COUNT(*) AS n FROM fx GROUP BY g) SELECT * FROM c WHERE n > 10 ORDER BY g",
        _both(
            "WITH c AS (SELECT g, COUNT(*) AS n FROM fx WHERE g IN (0, 1, 2) GROUP BY g) SELECT * FROM c "
            "WHERE n > 10 ORDER BY g"
        ),
        1,
        [0],
        "a CTE and an outer filter",
    ),
    Case(
        "SELECT g, COUNT(*) FROM fx GROUP BY g ORDER BY g FETCH FIRST 2 ROWS ONLY",
        _both(
            "SELECT g, COUNT(*) FROM fx WHERE g IN (0, 1, 2) GROUP BY g ORDER BY g FETCH FIRST 2 ROWS ONLY"
        ),
        1,
        [0],
        "FETCH FIRST",
    ),
    Case(
        "SELECT s, COUNT(*) FROM fx GROUP BY s ORDER BY s DESC NULLS LAST",
        _both("SELECT s, COUNT(*) FROM fx WHERE s IN ('x', 'X', 'x ') GROUP BY s ORDER BY s DESC NULLS LAST"),
        1,
        [0],
        "text keys descending",
    ),
    Case(
        "SELECT DISTINCT g FROM fx ORDER BY g",
        _both("SELECT g FROM (VALUES (0), (1), (2)) d(g) ORDER BY g"),
        1,
        [0],
        "DISTINCT on a public domain: the domain (stated: its values are public)",
    ),
    Case(
        "SELECT SUM(n) AS total FROM (SELECT g, COUNT(*) AS n FROM fx GROUP BY g) q",
        _both(
            "SELECT SUM(n) AS total FROM (SELECT g, COUNT(*) AS n FROM fx WHERE g IN (0, 1, 2) GROUP BY g) q"
        ),
        0,
        None,
        "an outer aggregate over released counts",
    ),
    Case(
        "SELECT g, ROUND(AVG(i), 1) AS m FROM fx GROUP BY g ORDER BY g",
        _both(
            "SELECT g, ROUND(AVG(CASE WHEN i < 0 THEN 0 WHEN i > 10 THEN 10 ELSE i END), 1) AS m FROM fx "
            "WHERE g IN (0, 1, 2) GROUP BY g ORDER BY g"
        ),
        1,
        [0],
        "ROUND of an AVG",
        extra={"widths": {1: 10.0}},
    ),
    Case(
        "SELECT g, s, COUNT(*) FROM fx GROUP BY g, s HAVING COUNT(*) > 1 ORDER BY 3 DESC, 1, 2 LIMIT 3",
        _both(
            "SELECT g, s, COUNT(*) FROM fx WHERE g IN (0, 1, 2) AND s IN ('x', 'X', 'x ') GROUP BY g, s "
            "HAVING COUNT(*) > 1 ORDER BY 3 DESC, 1, 2 LIMIT 3"
        ),
        2,
        [2, 0, 1],
        "having, order by position, limit",
        defect="HAVING: the sparse vector's first c keys are not the c largest",
    ),
    Case(
        "SELECT b, COUNT(*) FROM fx WHERE NOT b GROUP BY b",
        _both("SELECT b, COUNT(*) FROM fx WHERE NOT b GROUP BY b"),
        1,
        None,
        "a boolean key predicate",
        must_answer=True,
        defect="key predicates",
    ),
    # --- a predicate on a derived key's own expression, or on the column a CASE key's
    # conditions read, restricts its labels (every kept label has a row, so no phantom)
    Case(
        "SELECT CASE WHEN i < 5 THEN 'lo' ELSE 'hi' END AS band, COUNT(*) FROM fx WHERE i < 5 GROUP BY band",
        _both(
            "SELECT CASE WHEN i < 5 THEN 'lo' ELSE 'hi' END AS band, COUNT(*) FROM fx WHERE i < 5 GROUP BY band"
        ),
        1,
        None,
        "CASE key, WHERE on its column: one label",
        must_answer=True,
        defect="key predicates",
    ),
    Case(
        "SELECT CASE WHEN i < 5 THEN 'lo' WHEN i < 8 THEN 'mid' ELSE 'hi' END AS band, COUNT(*) FROM fx "
        "WHERE i >= 5 GROUP BY 1",
        _both(
            "SELECT CASE WHEN i < 5 THEN 'lo' WHEN i < 8 THEN 'mid' ELSE 'hi' END AS band, COUNT(*) FROM fx "
            "WHERE i >= 5 GROUP BY 1"
        ),
        1,
        None,
        "CASE key of three labels, values beyond the bounds in 'hi'",
        must_answer=True,
        defect="key predicates",
    ),
    Case(
        "SELECT CASE WHEN i < 5 THEN 'lo' WHEN i < 8 THEN 'mid' END AS band, COUNT(*) FROM fx "
        "WHERE i BETWEEN 2 AND 6 GROUP BY 1",
        _both(
            "SELECT CASE WHEN i < 5 THEN 'lo' WHEN i < 8 THEN 'mid' END AS band, COUNT(*) FROM fx "
            "WHERE i BETWEEN 2 AND 6 GROUP BY 1"
        ),
        1,
        None,
        "CASE key without ELSE: no NULL label under BETWEEN",
        must_answer=True,
        defect="key predicates",
    ),
    Case(
        "SELECT CASE WHEN i < 5 THEN 'lo' ELSE 'hi' END AS band, COUNT(*) FROM fx WHERE i IS NULL GROUP BY 1",
        _both(
            "SELECT CASE WHEN i < 5 THEN 'lo' ELSE 'hi' END AS band, COUNT(*) FROM fx WHERE i IS NULL GROUP BY 1"
        ),
        1,
        None,
        "CASE key, NULL takes the ELSE",
        must_answer=True,
        defect="key predicates",
    ),
    Case(
        "SELECT CASE WHEN s IN ('x', 'X') THEN 'xx' ELSE 'other' END AS k, COUNT(*) FROM fx WHERE s = 'y' GROUP BY 1",
        _both(
            "SELECT CASE WHEN s IN ('x', 'X') THEN 'xx' ELSE 'other' END AS k, COUNT(*) FROM fx WHERE s = 'y' "
            "GROUP BY 1"
        ),
        1,
        None,
        "CASE key over text",
        must_answer=True,
        defect="key predicates",
    ),
    Case(
        "SELECT CASE WHEN f < 0 THEN 'neg' ELSE 'pos' END AS k, COUNT(*) FROM fx WHERE f < -1 GROUP BY 1",
        _both(
            "SELECT CASE WHEN f < 0 THEN 'neg' ELSE 'pos' END AS k, COUNT(*) FROM fx WHERE f < -1 GROUP BY 1"
        ),
        1,
        None,
        "CASE key over a float, a negative literal, -Infinity",
        must_answer=True,
        defect="key predicates",
    ),
    Case(
        "SELECT CASE WHEN f < 0 THEN 'neg' ELSE 'pos' END AS k, COUNT(*) FROM fx WHERE f > 1 GROUP BY 1",
        _both(
            "SELECT CASE WHEN f < 0 THEN 'neg' ELSE 'pos' END AS k, COUNT(*) FROM fx WHERE f > 1 GROUP BY 1"
        ),
        1,
        None,
        "CASE key over a float: Infinity and NaN above every number",
        must_answer=True,
        defect="key predicates",
    ),
    Case(
        "SELECT floor(f) AS k, COUNT(*) FROM fx WHERE floor(f) BETWEEN -0.5 AND 0.5 GROUP BY 1",
        _both("SELECT floor(f) AS k, COUNT(*) FROM fx WHERE floor(f) = 0 GROUP BY 1"),
        1,
        None,
        "a bin's own expression",
        must_answer=True,
        defect="key predicates",
    ),
    Case(
        "SELECT i > 5 AS k, COUNT(*) FROM fx WHERE i > 5 GROUP BY 1",
        _both("SELECT i > 5 AS k, COUNT(*) FROM fx WHERE i > 5 GROUP BY 1"),
        1,
        None,
        "a boolean key's own expression",
        must_answer=True,
        defect="key predicates",
    ),
    # --- aggregate FILTER (WHERE …): the aggregate over the rows the condition keeps (each
    # value clamped as in a plain SUM/AVG); the reference is the analyst's own FILTER SQL
    Case(
        "SELECT g, COUNT(*) FILTER (WHERE i > 3) AS n, SUM(i) FILTER (WHERE b) AS s, "
        "COUNT(i) FILTER (WHERE t LIKE 'a%') AS c FROM fx GROUP BY g ORDER BY g",
        _both(
            f"SELECT g, COUNT(*) FILTER (WHERE i > 3) AS n, COALESCE(SUM({_clamped('i')}) FILTER (WHERE b), 0) "
            "AS s, COUNT(i) FILTER (WHERE t LIKE 'a%') AS c FROM fx WHERE g IN (0, 1, 2) GROUP BY g ORDER BY g"
        ),
        1,
        [0],
        "COUNT and SUM with FILTER",
        must_answer=True,
    ),
    Case(
        "SELECT g, AVG(i) FILTER (WHERE s = 'x') AS m, AVG(i) AS a FROM fx GROUP BY g ORDER BY g",
        _both(
            f"SELECT g, COALESCE(AVG({_clamped('i')}) FILTER (WHERE s = 'x'), 5.0) AS m, "
            f"COALESCE(AVG({_clamped('i')}), 5.0) AS a FROM fx WHERE g IN (0, 1, 2) GROUP BY g ORDER BY g"
        ),
        1,
        [0],
        "AVG with FILTER beside the plain AVG",
        must_answer=True,
        extra={"widths": {1: 10.0, 2: 10.0}},
    ),
    Case(
        "SELECT SUM(f) FILTER (WHERE i BETWEEN 1 AND 5) AS s, COUNT(*) FILTER (WHERE f > 0 OR b IS NULL) AS n, "
        "COUNT(*) AS all_rows FROM fx",
        _both(
            f"SELECT COALESCE(SUM({_clamped('f')}) FILTER (WHERE i BETWEEN 1 AND 5), 0) AS s, "
            "COUNT(*) FILTER (WHERE f > 0 OR b IS NULL) AS n, COUNT(*) AS all_rows FROM fx"
        ),
        0,
        None,
        "FILTER without GROUP BY: NaN and Infinity clamped, a NULL condition keeps nothing",
        must_answer=True,
    ),
    Case(
        "SELECT s, COUNT(i) FILTER (WHERE b) * 2 + COUNT(*) FILTER (WHERE NOT b) AS v FROM fx GROUP BY s ORDER BY s",
        _both(
            "SELECT s, COUNT(i) FILTER (WHERE b) * 2 + COUNT(*) FILTER (WHERE NOT b) "
            "AS v FROM fx WHERE s IN ('x', 'X', 'x ') GROUP BY s ORDER BY s"
        ),
        1,
        [0],
        "an expression over filtered counts",
        must_answer=True,
    ),
    # --- scalar subqueries (a release of their own, bound as a constant), windows over released rows
    Case(
        "SELECT g, COUNT(*) * 1.0 / (SELECT COUNT(*) FROM fx) AS share FROM fx GROUP BY g ORDER BY g",
        _both(
            "SELECT g, COUNT(*) * 1.0 / (SELECT COUNT(*) FROM fx) AS share FROM fx WHERE g IN (0, 1, 2) "
            "GROUP BY g ORDER BY g"
        ),
        1,
        [0],
        "share of a total by a scalar subquery",
        must_answer=True,
    ),
    Case(
        "SELECT s, COUNT(*) FROM fx WHERE i > (SELECT AVG(i) FROM fx WHERE g = 1) - 100 GROUP BY s",
        _both(
            f"SELECT s, COUNT(*) FROM fx WHERE i > (SELECT AVG({_clamped('i')}) FROM fx WHERE g = 1) - 100 "
            "AND s IN ('x', 'X', 'x ') GROUP BY s"
        ),
        1,
        None,
        "a row filter against a released average (far from every row)",
        must_answer=True,
    ),
    Case(
        "SELECT g, n, SUM(n) OVER (ORDER BY g) AS running, RANK() OVER (ORDER BY n DESC, g) AS r, "
        "n - LAG(n) OVER w AS change FROM (SELECT g, COUNT(*) AS n FROM fx GROUP BY g) q "
        "WINDOW w AS (ORDER BY g) ORDER BY g",
        _both(
            "SELECT g, n, SUM(n) OVER (ORDER BY g) AS running, RANK() OVER (ORDER BY n DESC, g) AS r, "
            "n - LAG(n) OVER w AS change FROM (SELECT g, COUNT(*) AS n FROM fx WHERE g IN (0, 1, 2) "
            "GROUP BY g) q WINDOW w AS (ORDER BY g) ORDER BY g"
        ),
        1,
        [0],
        "windows over an aggregating derived table, a named window",
        must_answer=True,
    ),
    Case(
        "SELECT g, COUNT(*) AS n, NTH_VALUE(COUNT(*), 2) OVER (ORDER BY g) AS second, "
        "SUM(COUNT(*)) OVER (ORDER BY g RANGE BETWEEN 1 PRECEDING AND CURRENT ROW) AS pair "
        "FROM fx GROUP BY g ORDER BY g",
        _both(
            "SELECT g, COUNT(*) AS n, NTH_VALUE(COUNT(*), 2) OVER (ORDER BY g) AS second, "
            "SUM(COUNT(*)) OVER (ORDER BY g RANGE BETWEEN 1 PRECEDING AND CURRENT ROW) AS pair "
            "FROM fx WHERE g IN (0, 1, 2) GROUP BY g ORDER BY g"
        ),
        1,
        [0],
        "NTH_VALUE and a RANGE offset over released counts",
        must_answer=True,
    ),
    Case(
        "WITH r AS (SELECT g, COUNT(*) AS n FROM fx GROUP BY g) SELECT g, n, n * 1.0 / (SELECT SUM(n) FROM r) AS share "
        "FROM r WHERE n = (SELECT MAX(n) FROM r) OR n < (SELECT AVG(n) FROM r WHERE g > 0) ORDER BY g",
        _both(
            "WITH r AS (SELECT g, COUNT(*) AS n FROM fx WHERE g IN (0, 1, 2) GROUP BY g) SELECT g, n, "
            "n * 1.0 / (SELECT SUM(n) FROM r) AS share FROM r WHERE n = (SELECT MAX(n) FROM r) "
            "OR n < (SELECT AVG(n) FROM r WHERE g > 0) ORDER BY g"
        ),
        1,
        [0],
        "scalar subqueries over the statement's own released rows (TPC-H Q15's shape)",
        must_answer=True,
    ),
]


# ----------------------------------------------- what holds of released values at any noise


@dataclass
class Holds:
    """A statement asked by role ``noisy`` (ε 1 on the unit table ``fu``: its counts carry
    noise of ±hundreds) and what every released row must satisfy: the SQL's own condition on
    the row's released values (HAVING, the result of a key predicate) or a consistent value
    (a COUNT is never negative; a SUM over a column whose lower bound is ≥ 0 is never
    negative). ``test(row)`` is that condition, written in Python from the SQL."""

    sql: str
    test: object
    name: str
    defect: str = ""


HOLDS: list[Holds] = [
    Holds(
        "SELECT g, COUNT(*) FROM fu GROUP BY g HAVING COUNT(*) > 10",
        lambda r: r[1] > 10,
        "having holds on the released count",
        "HAVING",
    ),
    Holds(
        "SELECT s, COUNT(*) AS n FROM fu GROUP BY s HAVING COUNT(*) >= 5 ORDER BY n DESC",
        lambda r: r[1] >= 5,
        "having >= with order",
        "HAVING",
    ),
    Holds(
        "SELECT g, COUNT(*) FROM fu WHERE g IN (0, 2) GROUP BY g",
        lambda r: r[0] in (0, 2),
        "key IN restricts the keys",
        "key predicates",
    ),
    Holds(
        "SELECT g, COUNT(*), SUM(i) FROM fu WHERE i > 100 GROUP BY g",
        lambda r: r[1] >= 0 and r[2] >= 0,
        "counts and sums over [0, 10] are never negative",
        "consistent values",
    ),
    Holds(
        "SELECT * FROM (SELECT g, COUNT(*) AS n FROM fu GROUP BY g) q WHERE q.n > 10",
        lambda r: r[1] > 10,
        "outer WHERE holds on released values",
    ),
]


for _c in HAND:
    _c.hand = True
