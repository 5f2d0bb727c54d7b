"""The result-shape oracle's machinery: an in-process dpgate whose tier's noise is negligible,
and the comparison of its answer with a backend's own answer to the analyst's SQL.

The dpgate here is the service a client's connection reaches (``Gateway`` → ``Connection``:
plan, budget, one scan, mechanism, ledger, post-processing), minus the socket. Its tier has
ε = 100 (the largest a tier may declare), so a COUNT's geometric noise is non-zero with
probability 2e^-100/(1+e^-100) < 1e-43 and a SUM's or AVG's noise is a small multiple of
its stated 95% half-width ``h``. A released value is compared with the reference within
``TAIL × h`` (``h`` read from the NOTICE, the largest of the column's name): for Laplace-
tailed noise P(|X| > k·h) = 20^-k, so k = 7 leaves a chance below 1e-9 per cell, and the
noise source is seeded (no flaky run).

The comparison (:func:`compare`): the column names are Postgres's for the analyst's own
SQL; the rows are the reference's — keys equal, values within the tolerance, the same
number — in the reference's order where ``ORDER BY`` fixes it (rows tied on every ORDER BY
column compare as a multiset), as a multiset otherwise. A statement whose keys are chosen
by partition selection may miss reference keys (each one is reported); no other difference
is allowed.

This module is shared by ``tests/oracle/test_oracle_shape.py`` and
``python -m bench.sql_coverage`` (which loads it by path).
"""
from __future__ import annotations

import asyncio
import datetime
import math
import re
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path

TAIL = 7                 # tolerance = TAIL × the stated 95% half-width (Laplace tail: 20^-7 < 1e-9)
EPSILON = 100.0          # the largest ε a tier may declare (config.models.Tier)
DELTA = 1e-7


@dataclass
class Answer:
    names: list[str]
    rows: list[tuple]
    notice: str
    sqlstate: str | None = None          # a refusal's SQLSTATE (then no names, rows)
    message: str = ""

    @property
    def refused(self) -> bool:
        return self.sqlstate is not None

    def half_widths(self) -> dict[str, float]:
        """The NOTICE's 95% half-widths by column name ("count ±0, sum ±0.225, …")."""
        m = re.search(r"95% half-width: (.*?)(?:;|$)", self.notice)
        out: dict[str, float] = {}
        if m:
            for name, value in re.findall(r"([^,±]+?) ±([0-9.e+-]+)", m.group(1)):
                name = name.strip().removesuffix("(max over rows)").strip()
                out[name] = max(out.get(name, 0.0), float(value))
        return out

    @property
    def selected(self) -> bool:
        return "partition selection" in self.notice


class Dpgate:
    """An in-process dpgate on its own event loop: one connection of role ``analyst``."""

    def __init__(self, config: dict, state_dir: Path, source_seed: int = 20261128):
        from config import parse_config
        from mechanisms import SeededSource
        from proxy.gateway import Gateway
        self.loop = asyncio.new_event_loop()
        self.gw = Gateway(parse_config(config), state_dir, source=SeededSource(source_seed))
        self.loop.run_until_complete(self.gw.start())
        self.conn = self.loop.run_until_complete(
            self.gw.handler_factory("analyst", self.gw.config.server.database, {}))

    @property
    def backend(self):
        return self.gw.backend

    def ask(self, sql: str) -> Answer:
        from proxy.wire.api import SqlError
        from rewriter.errors import Refusal
        try:
            r = self.loop.run_until_complete(self.conn.execute(sql, []))
        except (SqlError, Refusal) as e:
            return Answer([], [], "", e.sqlstate, str(e))
        return Answer([c.name for c in r.columns or []], [tuple(x) for x in r.rows],
                      " ".join(r.notices))

    def close(self) -> None:
        self.loop.run_until_complete(self.conn.close())
        self.loop.run_until_complete(self.gw.close())
        self.loop.close()


# ------------------------------------------------------------------------- comparison

def _num(v):
    if isinstance(v, bool) or v is None:
        return None
    if isinstance(v, (int, float, Decimal)):
        return float(v)
    return None


def _cell_equal(a, b, tol: float) -> bool:
    """A released value ``a`` against the reference's ``b``: numbers within ``tol`` (NaN
    equals NaN), anything else equal."""
    x, y = _num(a), _num(b)
    if x is not None and y is not None:
        if math.isnan(x) or math.isnan(y):
            return math.isnan(x) and math.isnan(y)
        if math.isinf(x) or math.isinf(y):
            return x == y
        return abs(x - y) <= tol + 1e-9 * max(1.0, abs(y))
    if isinstance(a, datetime.datetime) and isinstance(b, datetime.datetime):
        return a.replace(tzinfo=None) == b.replace(tzinfo=None)
    return a == b


def _sort_key(row) -> tuple:
    return tuple((v is None, type(v).__name__ if _num(v) is None else "n",
                  _num(v) if _num(v) is not None else str(v)) for v in row)


@dataclass
class Verdict:
    ok: bool
    why: str = ""
    missing: list = field(default_factory=list)   # keys partition selection left out


def compare(got: Answer, ref_rows: list[tuple], ref_names: list[str] | None, *, keys: int,
            order: list[int] | None, values: bool = True, empty_ok: bool = False) -> Verdict:
    """``got`` against the reference. ``keys``: how many leading output columns are group
    keys (matched exactly); ``order``: the output columns ORDER BY sorts on (None: no
    ORDER BY, rows compare as a multiset); ``values``: compare the value columns (within
    ``TAIL`` × their stated half-width) or only the keys; ``empty_ok``: a released row
    whose key the reference lacks is an empty cell of a public domain the reference does
    not spell out — allowed when every value is 0 within its tolerance."""
    if ref_names is not None and [n.lower() for n in got.names] != [n.lower() for n in ref_names]:
        return Verdict(False, f"column names {got.names} != {ref_names}")
    hw = got.half_widths()
    width = len(got.names)
    tol = [0.0 if j < keys else TAIL * hw.get(got.names[j], 0.0) for j in range(width)]
    if any(len(r) != width for r in ref_rows):
        return Verdict(False, f"{width} columns, reference rows have {len(ref_rows[0])}")

    def row_equal(a, b) -> bool:
        return all(_cell_equal(x, y, t) for j, (x, y, t) in enumerate(zip(a, b, tol))
                   if values or j < keys)

    missing: list = []
    ref = list(ref_rows)
    if empty_ok and keys:
        known = {tuple(map(_key_norm, r[:keys])) for r in ref}
        got = Answer(got.names, [r for r in got.rows if tuple(map(_key_norm, r[:keys])) in known or not all(
            _cell_equal(v, 0, tol[j]) for j, v in enumerate(r) if j >= keys)], got.notice)
    if got.selected and keys:
        present = {tuple(map(_key_norm, r[:keys])) for r in got.rows}
        kept = [r for r in ref if tuple(map(_key_norm, r[:keys])) in present]
        missing = [r[:keys] for r in ref if tuple(map(_key_norm, r[:keys])) not in present]
        ref = kept
    if len(got.rows) != len(ref):
        extra = _unmatched(got.rows, ref, row_equal)
        lacking = _unmatched(ref, got.rows, lambda a, b: row_equal(b, a))
        return Verdict(False, f"{len(got.rows)} rows, reference {len(ref)}; "
                              f"not in the reference: {extra[:6]}; missing: {lacking[:6]}", missing)
    if order is None:
        extra = _unmatched(got.rows, ref, row_equal)
        if extra:
            lacking = _unmatched(ref, got.rows, lambda a, b: row_equal(b, a))
            return Verdict(False, f"rows not in the reference: {extra[:6]}; missing: {lacking[:6]}", missing)
        return Verdict(True, "", missing)
    # ordered: runs of rows tied on every ORDER BY column compare as multisets
    i = 0
    while i < len(ref):
        j = i + 1
        while j < len(ref) and all(_cell_equal(ref[j][c], ref[i][c], 0.0) for c in order):
            j += 1
        run_got, run_ref = got.rows[i:j], ref[i:j]
        if not all(_cell_equal(g[c], ref[i][c], tol[c]) for g in run_got for c in order):
            return Verdict(False, f"order: rows {i}..{j - 1} are {run_got[:4]}, the reference's "
                                  f"{run_ref[:4]}", missing)
        extra = _unmatched(run_got, run_ref, row_equal)
        if extra:
            return Verdict(False, f"rows {i}..{j - 1}: {extra[:4]} not in the reference's {run_ref[:4]}",
                           missing)
        i = j
    return Verdict(True, "", missing)


def _key_norm(v):
    x = _num(v)
    return ("n", x) if x is not None else v


def _unmatched(rows, pool, eq) -> list:
    """The rows of ``rows`` left over after matching each to a distinct equal row of ``pool``."""
    free = list(pool)
    out = []
    for r in sorted(rows, key=_sort_key):
        for k, p in enumerate(free):
            if eq(r, p):
                del free[k]
                break
        else:
            out.append(r)
    return out
