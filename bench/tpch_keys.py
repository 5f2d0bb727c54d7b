"""Which key rows a TPC-H query's SQL can produce at all, whatever the private rows hold.

A released row whose key is not in the exact answer is one of two things. Either the SQL keeps
it and the data merely has no rows there (Q1's ``('A', 'O')``: a cell of the public domain that
TPC-H's generator leaves empty — a DP release of that cell is the SQL's row over released
values), or the SQL itself excludes it, for any data (Q5's nations outside ``r_name = 'ASIA'``):
a wrong answer. :func:`possible_keys` tells them apart from the parse (sqlglot), not the text:

* the key columns' expressions are followed to the columns of the tables they read (through a
  derived table's or a column list's names);
* of the WHERE and ON conjuncts of that SELECT, those that read only public tables and the key
  columns' own source columns are kept (a conjunct with a subquery, or one that reads another
  private column, could be satisfied by some private row: dropped);
* each released key is a row of a VALUES list, joined with the tables those conjuncts connect to
  the keys' sources: public tables as they are; a key that is a private column as it is takes the
  asked value (never NULL where the schema says NOT NULL), one computed from private columns
  (``extract(year from o_orderdate)``) every value of its columns the data holds and, for a date,
  every day of the years asked about (:func:`candidates`); the key is possible
  when the kept conjuncts and ``<key expression> = <asked value>`` can all hold. A key expression
  over an aggregate (Q13's ``c_count``) can take any value: None.
"""

from __future__ import annotations

from decimal import Decimal

from sqlglot import exp, parse_one


def _select_defining(top: exp.Select, keys: tuple[str, ...]):
    """(the SELECT over base tables, {key: expression over its columns}) for the output names
    ``keys`` of ``top``, followed through one level of derived table (and its column list)."""
    out: dict[str, exp.Expression] = {}
    for e in top.expressions:
        name = e.alias_or_name
        if name in keys:
            out[name] = e.this if isinstance(e, exp.Alias) else e
    src = top.args.get("from_") or top.args.get("from")
    sub = src.this if src is not None else None
    if isinstance(sub, exp.Subquery) and isinstance(sub.this, exp.Select):
        inner = sub.this
        names = [c.name for c in (sub.args.get("alias").columns if sub.args.get("alias") else [])]
        proj = {}
        for i, e in enumerate(inner.expressions):
            name = names[i] if i < len(names) else e.alias_or_name
            proj[name] = e.this if isinstance(e, exp.Alias) else e
        resolved = {}
        for k, e in out.items():
            if isinstance(e, exp.Column) and e.name in proj:
                resolved[k] = proj[e.name]
            else:
                resolved[k] = e
        return inner, resolved
    return top, out


def _tables(sel: exp.Select) -> dict[str, str]:
    """alias → base table name of the tables SELECT ``sel`` reads directly (not in subqueries)."""
    out = {}
    for t in sel.find_all(exp.Table):
        if t.find_ancestor(exp.Select) is sel:
            out[t.alias_or_name] = t.name
    return out


def _conjuncts(sel: exp.Select) -> list[exp.Expression]:
    out: list[exp.Expression] = []
    where = sel.args.get("where")
    if where is not None:
        out += list(where.this.flatten()) if isinstance(where.this, exp.And) else [where.this]
    for j in sel.args.get("joins") or []:
        on = j.args.get("on")
        if on is not None:
            out += list(on.flatten()) if isinstance(on, exp.And) else [on]
    return out


def candidates(con, table: str, col: str, asked) -> str:
    """The values a private column a key is computed from may take, as a relation of one column:
    those it holds, and for a date column every day of each year an asked key names (an integer
    between 1 and 9999: ``extract(year from …)`` of a date the data does not hold, a cell the SQL
    keeps), so a year the WHERE does not rule out is never taken for one it does."""
    ((typ,),) = con.execute(
        "SELECT data_type FROM information_schema.columns WHERE table_name = ? AND column_name = ?",
        [table, col],
    ).fetchall()
    held = f"SELECT DISTINCT {col} FROM {table}"
    if typ.upper() != "DATE":
        return f"({held})"
    years = sorted(
        {
            int(v)
            for row in asked
            for v in row
            if isinstance(v, (int, float, Decimal)) and v == int(v) and 1 <= v <= 9999
        }
    )
    if not years:
        return f"({held})"
    days = " UNION ".join(
        f"SELECT CAST(d AS DATE) AS {col} FROM generate_series(DATE '{y:04d}-01-01', DATE '{y:04d}-12-31', INTERVAL 1 DAY) AS g(d)"
        for y in years
    )
    return f"({held} UNION {days})"


def possible_keys(
    con, sql: str, keys: tuple[str, ...], public: set[str], columns: dict[str, set[str]], asked
):
    """Of the key tuples ``asked`` (in ``keys`` order, values as a client reads them), those the
    SQL can produce; None when it cannot be told (a key over an aggregate or over a name not
    resolved to a table). ``public``: the public tables; ``columns``: each table's columns.

    Each asked tuple is a row of a VALUES list; a key that is a private column as it is reads its
    value from there, a key computed from private columns (``extract(year from o_orderdate)``)
    from every distinct value of its columns, a public table from the table itself; the kept
    conjuncts and ``key = asked value`` for each key decide."""
    if not keys or not asked:
        return None
    tree = parse_one(sql, read="postgres")
    top = tree if isinstance(tree, exp.Select) else tree.find(exp.Select)
    sel, kexpr = _select_defining(top, keys)
    if set(kexpr) != set(keys) or any(e.find(exp.AggFunc) for e in kexpr.values()):
        return None
    aliases = _tables(sel)

    def owner(col: exp.Column) -> str | None:
        if col.table:
            return col.table if col.table in aliases else None
        hits = [a for a, t in aliases.items() if col.name in columns.get(t, ())]
        return hits[0] if len(hits) == 1 else None

    sources: set[tuple[str, str]] = set()
    for e in kexpr.values():
        for c in e.find_all(exp.Column):
            a = owner(c)
            if a is None:
                return None
            sources.add((a, c.name))
    bare = {}  # a private column that is a key as it is → the asked column holding its value
    for i, k in enumerate(keys):
        e = kexpr[k]
        if isinstance(e, exp.Column) and aliases[owner(e) or ""] not in public:
            bare[(owner(e) or "", e.name)] = f"k{i}"

    def refs(e: exp.Expression) -> set[tuple[str, str]] | None:
        out = set()
        for c in e.find_all(exp.Column):
            a = owner(c)
            if a is None:
                return None
            out.add((a, c.name))
        return out

    kept = []
    for c in _conjuncts(sel):
        if c.find(exp.Select, exp.Exists, exp.Subquery):
            continue
        r = refs(c)
        if r is None or not r:
            continue
        if all(aliases[a] in public or (a, col) in sources for a, col in r):
            kept.append((c, {a for a, _ in r}))
    reach = {a for a, _ in sources}
    grew = True
    while grew:
        grew = False
        for _, al in kept:
            if al & reach and not al <= reach:
                reach |= al
                grew = True

    def bind(e: exp.Expression) -> str:
        """``e`` in DuckDB's SQL, a bare private key column read from the asked row."""

        def swap(node):
            if isinstance(node, exp.Column):
                a = owner(node)
                if a is not None and (a, node.name) in bare:
                    return exp.column(bare[(a, node.name)], table="asked")
            return node

        return e.copy().transform(swap).sql(dialect="duckdb")

    froms = []
    for a in sorted(reach):
        t = aliases[a]
        if t in public:
            froms.append(f"{t} AS {a}")
            continue
        cols = sorted(c for al, c in sources if al == a and (al, c) not in bare)
        if cols:
            combos = " CROSS JOIN ".join(candidates(con, t, c, asked) for c in cols)
            froms.append(f"(SELECT * FROM {combos}) AS {a}")
    conds = [f"({bind(c)})" for c, al in kept if al <= reach]
    conds += [f"({bind(kexpr[k])}) IS NOT DISTINCT FROM asked.k{i}" for i, k in enumerate(keys)]
    for (a, c), k in bare.items():  # a NOT NULL column is never a NULL key
        ((nullable,),) = con.execute(
            "SELECT is_nullable FROM information_schema.columns WHERE table_name = ? AND column_name = ?",
            [aliases[a], c],
        ).fetchall()
        if nullable == "NO":
            conds.append(f"asked.{k} IS NOT NULL")
    rows = ", ".join(
        "(" + ", ".join(exp.convert(v).sql(dialect="duckdb") for v in row) + ")" for row in asked
    )
    names = ", ".join(f"k{i}" for i in range(len(keys)))
    q = (
        f"SELECT DISTINCT asked.* FROM (VALUES {rows}) AS asked({names})"
        + "".join(f", {f}" for f in froms)
        + f" WHERE {' AND '.join(conds)}"
    )
    return set(con.execute(q).fetchall())
