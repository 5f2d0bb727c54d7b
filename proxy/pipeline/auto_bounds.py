"""Bounds written ``"auto"`` in the config, chosen by dpgate once per data version: a table's
``max_rows_per_unit`` and ``max_groups_per_unit``, a column's ``lower`` / ``upper``.

Each is one ε-DP release per privacy unit (``[auto_bounds] epsilon``): a histogram of one value
per unit (its rows, its distinct groups, its largest or smallest value: the scans of
:mod:`rewriter.contributions`) released by :class:`mechanisms.auto_bounds.LogHistogramBound`
(a noisy log-scale histogram, its support and a quantile: ApproxBounds / get_bounds). The
choices of a data version are kept in the ledger (``auto_bounds``, with their ε and MAC) before
any statement uses them, within the owner's ``[auto_bounds] budget``; a restart reads them back
and a new data version (``dpgate data-version --advance``) chooses again.

The service then serves a *resolved* config — the same config with the chosen numbers in place
of ``"auto"`` (and a sentence in the descriptions, shown by ``\\d+``) — so every planner reads
plain bounds. A bound that cannot be chosen (too few units for its ε, the budget spent, a scan
that failed) stays ``"auto"``: a statement that needs it is refused (55000 by
:func:`rewriter.unit.caps` for a contribution bound; a column without bounds refuses SUM/AVG)
with what to write instead; nothing is guessed.

**The guarantee.** The chosen bounds are public (every role sees the same values), so an answer
computed with them is ε_q-DP given the bounds, and the pair (bounds, answer) is
(ε_q + Σ ε_bounds)-DP per unit by basic composition (Dwork & Roth 2014, Thm 3.16), where the sum
runs over the choices of the tables the statement reads. The NOTICE and EXPLAIN say so. The ε of
the choices is charged once per data version to the owner's budget, never to a role's.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from fractions import Fraction

from config.models import AUTO, Column, Config, Table
from mechanisms.auto_bounds import LogHistogramBound, count_edges, value_edges
from mechanisms.rng import RandomSource
from rewriter.contributions import Measure, contribution_sql
from rewriter.errors import Refusal

from ..stores.ledger import ChosenBound

log = logging.getLogger("dpgate")

__all__ = ["Choice", "Resolved", "needed", "resolve", "statement_note"]

ROWS, GROUPS = "max_rows_per_unit", "max_groups_per_unit"
MAX_ROWS, MAX_GROUPS = 100_000, 1000  # the fields' largest values (config.models): the grids' tops
SCAN_TIMEOUT_S = 600.0  # a contribution scan reads the whole table once (not an analyst's statement)
NANO = 1_000_000_000  # the ledger's ε unit: budgets add up in integers


@dataclass(frozen=True)
class Choice:
    """One bound to choose: ``field`` is ``max_rows_per_unit``, ``max_groups_per_unit`` or
    ``columns.<c>.lower`` / ``columns.<c>.upper``."""

    table: str
    field: str

    @property
    def column(self) -> str | None:
        return self.field.split(".")[1] if self.field.startswith("columns.") else None


@dataclass
class Resolved:
    """The config as served (chosen numbers in place of ``"auto"``), the data version it was
    resolved for, the bounds kept in the ledger, why each missing one is missing and the ε they
    took."""

    config: Config
    data_version: int
    chosen: dict[Choice, ChosenBound] = field(default_factory=dict)
    missing: dict[Choice, str] = field(default_factory=dict)
    spent: float = 0.0  # ε of the owner's budget this data version's choices took (failed ones too)


def needed(config: Config) -> list[Choice]:
    """Every bound the config writes ``"auto"``, in declaration order."""
    out = []
    for name, t in config.tables.items():
        out += [Choice(name, f) for f in (ROWS, GROUPS) if getattr(t, f) == AUTO]
        for c, col in t.columns.items():
            out += [Choice(name, f"columns.{c}.{s}") for s in ("lower", "upper") if getattr(col, s) == AUTO]
    return out


async def resolve(gw, declared: Config, source: RandomSource) -> Resolved:
    """The bounds of the current data version: read from the ledger, the missing ones chosen
    (one scan and one release each) and kept there, then the resolved config."""
    want = needed(declared)
    dv = await gw.ledger_read(gw.ledger.data_version)
    if not want:
        return Resolved(declared, dv)
    kept = {Choice(c.table, c.field): c for c in await gw.ledger_read(gw.ledger.chosen_bounds, dv)}
    ab = declared.auto_bounds
    made: list[ChosenBound] = []
    missing: dict[Choice, str] = {}
    budget_left = round(ab.budget * NANO) - sum(round(c.epsilon * NANO) for c in kept.values())
    spent_why = (
        f"the [auto_bounds] budget ({ab.budget:g} ε per data version) is spent by the bounds chosen before it"
    )
    for ch in want:
        if ch in kept:
            continue
        if budget_left < round(ab.epsilon * NANO):  # not drawn at all (the ledger checks it again)
            missing[ch] = spent_why
            continue
        budget_left -= round(ab.epsilon * NANO)
        try:
            made.append(await _choose(gw, declared, ch, source, len(want)))
        except Refusal as r:
            missing[ch] = r.message
        except Exception as e:  # the backend failed: nothing released, nothing kept
            missing[ch] = f"its scan failed ({getattr(e, 'message', None) or e})"
    if made:
        rows = await asyncio.to_thread(gw.ledger.record_bounds, dv, made, ab.budget)  # fsync
        kept = {Choice(c.table, c.field): c for c in rows}
        for c in made:
            ch = Choice(c.table, c.field)
            if ch not in kept:  # another proxy's choices took the budget first
                missing[ch] = spent_why
    for ch, c in kept.items():
        if c.value is None:
            missing[ch] = (
                f"too few units for ε {c.epsilon:g}: no bin of the noisy histogram reached the "
                "support threshold"
            )
    for ch, why in missing.items():
        log.warning(
            'auto bounds: %s.%s = "auto" not chosen for data version %s: %s', ch.table, ch.field, dv, why
        )
    chosen = {ch: c for ch, c in kept.items() if c.value is not None and ch in set(want)}
    spent = sum(c.epsilon for c in kept.values())
    return Resolved(_resolved_config(declared, chosen, dv), dv, chosen, missing, spent)


async def _choose(gw, config: Config, ch: Choice, source: RandomSource, choices: int) -> ChosenBound:
    """One bound: its scan, then its release (exact integer noise, :mod:`mechanisms.auto_bounds`),
    at β / ``choices``: by the union bound, w.p. ≥ 1 − β no choice of the data version takes an
    empty bin (one bound far beyond the data widens every answer's noise)."""
    ab = config.auto_bounds
    table = config.tables[ch.table]
    measure, columns, edges, lower = _measure(ch, table)
    sql = contribution_sql(config, ch.table, measure, columns, gw.backend.dialect)
    rows = await gw.backend.fetch(sql, SCAN_TIMEOUT_S)
    mech = LogHistogramBound(ab.epsilon, edges, Fraction(str(ab.quantile)), ab.beta / choices, lower=lower)
    got = await asyncio.to_thread(mech.release, rows, source)  # a large histogram: off the event loop
    value = None if got.value is None else _text(got.value)
    return ChosenBound(ch.table, ch.field, value, ab.epsilon, time.time())


def _measure(ch: Choice, table: Table):
    """(scan measure, its columns, the grid's edges, a lower bound?) of a choice."""
    if ch.field == ROWS:
        return "rows", (), count_edges(MAX_ROWS), False
    if ch.field == GROUPS:
        cols = tuple(
            c for c, spec in table.columns.items() if spec.public_domain is not None and not spec.per_unit
        )
        if not cols:
            raise Refusal(
                "55000",
                "it needs a column with a public domain (domain or domain_range) to count a unit's groups in",
                hint=f"Write max_groups_per_unit = <an integer> for table {ch.table}.",
            )
        return "groups", cols, count_edges(MAX_GROUPS), False
    col = ch.column
    assert col is not None
    side = ch.field.rsplit(".", 1)[1]
    m: Measure = "min" if side == "lower" else "max"
    return m, (col,), value_edges(table.columns[col].type == "int"), side == "lower"


def _text(v: Fraction) -> str:
    """A chosen value as decimal text (the grid's edges are short decimals: 1.2e-05, 2500)."""
    return str(v.numerator) if v.denominator == 1 else repr(float(v))


def _number(text: str, integral: bool) -> int | float:
    f = Fraction(text)
    return int(f) if integral and f.denominator == 1 else float(f)


def _resolved_config(declared: Config, chosen: dict[Choice, ChosenBound], dv: int) -> Config:
    """``declared`` with the chosen numbers in place of ``"auto"`` and a sentence per table and
    column saying which were chosen and at what ε (the catalog's comments: ``\\d+``)."""
    by_table: dict[str, list[tuple[Choice, ChosenBound]]] = {}
    for ch, c in chosen.items():
        by_table.setdefault(ch.table, []).append((ch, c))
    tables = dict(declared.tables)
    for name, items in by_table.items():
        t = declared.tables[name]
        upd: dict[str, object] = {}
        cols: dict[str, Column] = dict(t.columns)
        col_upd: dict[str, dict[str, object]] = {}
        notes = []
        for ch, c in items:
            assert c.value is not None
            col = ch.column
            if col is None:
                upd[ch.field] = int(Fraction(c.value))
                notes.append(f"{ch.field} = {c.value}")
            else:
                side = ch.field.rsplit(".", 1)[1]
                col_upd.setdefault(col, {})[side] = _number(c.value, t.columns[col].type == "int")
        for col, u in col_upd.items():
            spec = t.columns[col]
            sides = " and ".join(f"{s} = {_shown(v)}" for s, v in sorted(u.items(), reverse=True))
            eps = next(c.epsilon for ch, c in items if ch.column == col)
            note = _note(sides, eps, dv)
            u["description"] = f"{spec.description} ({note})" if spec.description else note
            cols[col] = spec.model_copy(update=u)
        if notes:
            eps = next(c.epsilon for ch, c in items if ch.column is None)
            note = _note(", ".join(notes), eps, dv)
            upd["description"] = f"{t.description} ({note})" if t.description else note
        upd["columns"] = cols
        tables[name] = t.model_copy(update=upd)
    return declared.model_copy(update={"tables": tables})


def _shown(v: object) -> str:
    return format(v, "g") if isinstance(v, float) else str(v)


def _note(what: str, eps: float, dv: int) -> str:
    return f"{what} chosen by dpgate, ε {eps:g}-DP per unit each, for data version {dv}"


def statement_note(resolved: Resolved | None, tables: Iterable[str]) -> str:
    """What the NOTICE and EXPLAIN say of the chosen bounds a statement's tables use (empty when
    none): their values and ε, and the composed guarantee."""
    if resolved is None or not resolved.chosen:
        return ""
    names = set(tables)
    used = [(ch, c) for ch, c in resolved.chosen.items() if ch.table in names]
    if not used:
        return ""
    parts = [
        f"{ch.table}.{ch.field.removeprefix('columns.')} = {c.value} (ε {c.epsilon:g})" for ch, c in used
    ]
    total = sum(c.epsilon for _, c in used)
    return (
        f"bounds chosen by dpgate for data version {resolved.data_version}, ε-DP per unit from the "
        f"owner's [auto_bounds] budget, public and shared by every role: {', '.join(parts)}; "
        f"this answer with them is (ε + {total:g})-DP per unit"
    )
