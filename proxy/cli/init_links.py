"""How ``dpgate init``'s tables hang together: keys, references, and which reach the unit.

* **Keys** — a table's unique column(s): those the schema declares (PRIMARY KEY / UNIQUE), else
  (files, or a database that declares none) a column whose values are all present and distinct,
  preferring a key-like name (``…key``, ``…id``), as a guess.
* **References** (foreign keys, ``references = { o_custkey = "customer" }``): the schema's
  declared FOREIGN KEYs; where it declares none, a guess needs both kinds of evidence — the
  names (``o_custkey`` and ``customer``'s key ``c_custkey`` share ``custkey`` after a short
  table prefix; or ``customer_id`` = the table's name + its key) and the values (every
  non-null value of the column is a key value of the other table, checked by the backend).
* **Reach** — a table reaches the privacy unit when it is the unit's table or a reference leads
  to a table that reaches it (the shortest chain is the unit's path: ``lineitem.l_orderkey →
  orders.o_custkey → customer``). A table that reaches no unit is proposed public (a lookup
  table) with its key.
* **The people** — without ``--privacy-unit``, :func:`suggest_unit` names the table that looks
  like them: one whose name says so (customer, person, user, patient, …), else the end of the
  longest chain of references from the largest table that is not a code table.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

__all__ = ["Ref", "key_like", "name_evidence", "paths_to", "suggest_unit"]

_PREFIX = re.compile(r"^[a-z]{1,3}_(.+)$")  # TPC-H's c_, o_, l_, ps_: a short table prefix
_GENERIC = ("id", "key", "code", "no", "num", "nr")
_PEOPLE = (
    "customer",
    "person",
    "people",
    "user",
    "patient",
    "member",
    "client",
    "employee",
    "student",
    "individual",
    "household",
    "citizen",
    "subscriber",
    "passenger",
    "resident",
    "respondent",
    "participant",
    "voter",
    "taxpayer",
    "account",
)


@dataclass(frozen=True)
class Ref:
    """``table.column`` holds ``target``'s key; ``declared``: by the schema (else a guess)."""

    table: str
    column: str
    target: str
    declared: bool


def key_like(column: str) -> bool:
    """A name that says key: ``…key``, ``…id`` (``c_custkey``, ``customer_id``, ``id``)."""
    return column.endswith(("key", "id"))


def _suffix(name: str) -> str:
    m = _PREFIX.match(name)
    return m.group(1) if m else name


def _singular(name: str) -> str:
    return name[:-1] if name.endswith("s") and not name.endswith("ss") else name


def name_evidence(column: str, target: str, key: str) -> bool:
    """Whether ``column``'s name says it holds table ``target``'s key ``key``: the same name
    (when it is not a generic ``id``/``key``), the same name after a short table prefix
    (``o_custkey`` / ``c_custkey``), or the table's name joined to the key's
    (``customer_id``, ``customers_id``, ``customerid``, ``customer_key``)."""
    ks = _suffix(key)
    if ks not in _GENERIC and (column == key or _suffix(column) == ks):
        return True
    names = {target, _singular(target)}
    return column in {f"{n}{sep}{k}" for n in names for sep in ("_", "") for k in {key, ks, "id", "key"}}


def guess_refs(
    tables: Mapping[str, Mapping[str, str]],
    keys: Mapping[str, str],
    contained: Callable[[str, str, str], bool],
) -> list[Ref]:
    """References by name and value evidence. ``tables``: name -> {column: dpgate type};
    ``keys``: name -> its single-column key; ``contained(table, column, target)``: whether
    every non-null value of the column is a key value of ``target`` (asked only where the
    names agree)."""
    out = []
    for t, cols in tables.items():
        for c, typ in cols.items():
            if keys.get(t) == c:
                continue
            for target, key in keys.items():
                if target == t or tables[target].get(key) != typ or not name_evidence(c, target, key):
                    continue
                if contained(t, c, target):
                    out.append(Ref(t, c, target, declared=False))
                    break
    return out


def paths_to(unit: str, refs: Iterable[Ref]) -> dict[str, list[Ref]]:
    """Each table that reaches ``unit`` -> its shortest chain of references to it (``[]``: the
    unit's own table); breadth first, so the first chain found is a shortest one."""
    refs = list(refs)
    out: dict[str, list[Ref]] = {unit: []}
    frontier = [unit]
    while frontier:
        nxt = []
        for target in frontier:
            for r in refs:
                if r.target == target and r.table not in out:
                    out[r.table] = [r, *out[target]]
                    nxt.append(r.table)
        frontier = nxt
    return out


def suggest_unit(
    rows: Mapping[str, int], keys: Mapping[str, str], refs: Iterable[Ref], code_rows: int
) -> tuple[str, str] | None:
    """(table, why) for the table that looks like the people, or None. ``rows``: each table's
    row count; a table of at most ``code_rows`` rows is a code table (nation, region)."""
    refs = list(refs)
    referenced = {r.target for r in refs}
    named = sorted((t for t in keys if any(p in t for p in _PEOPLE)), key=lambda t: (len(t), t))
    if named:  # the shortest such name: users rather than user_events
        t = named[0]
        via = sorted({r.table for r in refs if r.target == t})
        return t, f"its name; referenced by {', '.join(via)}" if via else "its name"
    if not rows:
        return None
    start = max(rows, key=lambda t: rows[t])
    best: list[str] = [start]

    def walk(chain: list[str]) -> None:
        nonlocal best
        for r in refs:
            if r.table == chain[-1] and r.target not in chain and rows.get(r.target, 0) > code_rows:
                longer = [*chain, r.target]
                if len(longer) > len(best):
                    best = longer
                walk(longer)

    walk([start])
    end = best[-1]
    if end == start or end not in keys or end not in referenced:
        return None
    return end, "the end of the longest chain of references: " + " → ".join(best)
