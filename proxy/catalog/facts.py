"""Each declared column's DP facts as its comment: what an analyst needs to write a
query that is answered — bounds (SUM/AVG clamp there), the public domain (groupable), the
per-record policy, a local table's perturbation — shown by ``\\d+ table``, ``col_description``
and every client that reads ``pg_description``. From the config alone, like the whole catalog;
everything here is already public (it is what the config publishes)."""

from __future__ import annotations

from config.models import Column, Table

__all__ = ["column_comment", "table_comment"]

SHOWN_VALUES = 12  # a longer domain is shown by its first values and its size


def _num(v) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def _join(description: str, facts: list[str]) -> str:
    text = "; ".join(facts)
    return f"{description} — {text}" if description and text else (description or text)


def _domain(col: Column) -> str | None:
    if col.domain_range is not None:
        lo, hi = col.domain_range
        return f"groupable: {lo}..{hi} ({hi - lo + 1} values)"
    dom = col.public_domain
    if dom is None:
        return None
    shown = ", ".join(str(v).lower() if isinstance(v, bool) else str(v) for v in dom[:SHOWN_VALUES])
    more = f", … ({len(dom)} values)" if len(dom) > SHOWN_VALUES else ""
    return f"groupable: {{{shown}{more}}}"


def column_comment(table: Table, name: str, col: Column) -> str:
    facts = []
    if table.local is not None and name in table.local.columns:
        lc = table.local.columns[name]
        facts.append(
            f"private (metric LDP, local): [{_num(lc.lo)}, {_num(lc.hi)}] in {lc.buckets} buckets, "
            f"ε {_num(lc.epsilon)} per bucket step; COUNT/AVG/quantiles over ranges"
        )
    elif table.local is not None and name in table.local.categories:
        facts.append(f"private (Subset, local; ladder {table.local.categories[name].ladder})")
    if col.type in ("date", "timestamp") and col.lower is not None:
        facts.append(f"range {col.lower} … {col.upper}: groups by date_trunc / extract")
    elif col.bounded:
        facts.append(f"bounds [{_num(col.lower)}, {_num(col.upper)}]: SUM/AVG/VAR clamp here")
    elif col.type in ("int", "float") and not (table.local and name in table.local.columns):
        facts.append("no bounds: SUM/AVG refused")
    dom = _domain(col)
    if name == table.privacy_unit:
        declared = table.unit_name if table.unit_name != name else None
        facts.append(
            f"privacy unit{f' ({declared})' if declared else ''}: answers protect each value (a person) "
            "with all its rows; COUNT(DISTINCT) counts them"
        )
    if col.per_unit and table.privacy_unit:
        facts.append("one value per person: GROUP BY it counts each person once (L0 = 1)")
    keys = table.key_columns
    if name in keys:
        with_ = f" (with {', '.join(k for k in keys if k != name)})" if len(keys) > 1 else ""
        facts.append(f"key{with_}: other tables join here on it" if table.public else "key")
    if name in table.references:
        ref = table.references[name]
        on_path = (table.privacy_unit or "").split(".", 1)[0] == ref
        facts.append(
            f"references {ref}" + (f": the path to privacy unit {table.unit_name}" if on_path else "")
        )
    if dom:
        facts.append(dom)
    elif table.public:
        facts.append("public: read as-is")
    elif col.type in ("text", "int") and table.mode == "central" and table.privacy is None:
        facts.append("no public domain: GROUP BY releases the keys chosen by partition selection (needs δ)")
    elif col.type in ("text", "int", "bool") and not (table.local and name in table.local.columns):
        facts.append("not groupable (no public domain)")
    p = table.privacy
    if p is not None and p.column == name:
        facts.append(
            f"per-record ε(r) = {p.function} of this column (α {_num(p.alpha)}), "
            f"in [{_num(p.eps_min)}, {_num(p.eps_max)}]"
        )
    if col.type in ("int", "float") and col.avg_mechanism != "hourglass" and col.bounded:
        facts.append(f"AVG: {col.avg_mechanism}")
    return _join(col.description, facts)


def table_comment(table: Table) -> str:
    if table.local is not None:
        facts = ["local table (rows perturbed on the way in; queries charge no ε)"]
    elif table.privacy is not None:
        p = table.privacy
        of = f"{p.function}({p.column})" if p.column else p.function
        facts = [
            f"per-record DP: each row's ε = {of}, in [{_num(p.eps_min)}, {_num(p.eps_max)}], "
            f"values bounded by {_num(p.value_bound)}"
        ]
    elif table.public:
        facts = [
            f"public table: exact rows, no noise, nothing charged; joinable on its key "
            f"{', '.join(table.key_columns)}"
        ]
    else:
        unit = table.unit_name
        rows = (
            f"≤ {table.max_rows_per_unit} row(s) in all"
            if table.max_rows_scope == "total"
            else f"≤ {table.max_groups_per_unit} group(s) × {table.max_rows_per_unit} row(s) each"
        )
        who = f"per {unit} (all of a person's rows{_path(table)}; {rows})" if unit else "per row"
        facts = [f"central DP {who}: each answer noisy, ε per query from your tier"]
    return _join(table.description, facts)


def _path(table: Table) -> str:
    """How a table's rows reach a declared unit, when through references: `; reached by
    l_orderkey → orders.o_custkey`."""
    u = table.privacy_unit
    if u is None or "." not in u or table.unit_name == u:
        return ""
    ref = u.split(".", 1)[0]
    fk = next((c for c, t in table.references.items() if t == ref), None)
    return f"; reached by {fk} → {u}" if fk else ""
