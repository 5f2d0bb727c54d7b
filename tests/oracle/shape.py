"""The result-shape oracle's machinery: an in-process dpgate whose tier's noise is negligible,
and the comparison of its answer with a backend's own answer to the analyst's SQL.

The dpgate here is the service a client's connection reaches (``Gateway`` → ``Connection``:
plan, budget, one scan, mechanism, ledger, post-processing), minus the socket. Its tier has
ε = 20, so a COUNT's geometric noise is non-zero with probability 2e^-20/(1+e^-20) < 5e-9
(ε/2 = 10 under partition selection: < 1e-4, and the NOTICE states it) and a SUM's or AVG's
noise is a small multiple of its stated 95% half-width ``h``. (A higher ε is not the
better test: the hourglass AVG's exact sampler needs about 2M/(2G − 1) rejection rounds
per draw, M = 2^20, and G falls to 1 near ε = 40 — seconds to minutes per cell.) A
released value is compared with the reference within ``TAIL × h`` (``h`` read from the
NOTICE, the largest of the column's name): for Laplace-tailed noise P(|X| > k·h) = 20^-k,
so k = 7 leaves a chance below 1e-9 per cell, and the noise source is seeded. The hourglass
AVG is the exception: its noise is uniform on a narrow centre (what the half-width states)
and, with probability about 2M·e^-ε/(2G − 1) (~1e-3 here), one whole grid step away — an
error near the width of the argument's bounds — so an AVG is compared within that width
(its exact sum and count are the differential oracle's, cell by cell).

The comparison (:func:`compare`): the column names are Postgres's for the analyst's own
SQL; the rows are the reference's — keys equal, values within the tolerance, the same
number — in the reference's order where ``ORDER BY`` fixes it (rows tied on every ORDER BY
column compare as a multiset), as a multiset otherwise. A statement whose keys are chosen
by a mechanism (partition selection; the sparse vector's HAVING or top-c) may miss
reference keys (counted); no other difference is allowed. That a released row never
contradicts the SQL at ordinary noise is checked separately (``shape_corpus.HOLDS``).

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

TAIL = 7  # tolerance = TAIL × the stated 95% half-width (Laplace tail: 20^-7 < 1e-9)


@dataclass
class Answer:
    names: list[str]
    rows: list[tuple]
    notice: str
    sqlstate: str | None = None  # a refusal's SQLSTATE (then no names, rows)
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
        """Its keys were chosen by a mechanism — partition selection, or the sparse vector's
        HAVING/top-c (its NOTICE: "the list may be incomplete") — so a key near the
        threshold may be missing from it, never added."""
        return "partition selection" in self.notice or "sparse vector" in self.notice


class Dpgate:
    """An in-process dpgate on its own event loop: one connection per role asked."""

    def __init__(self, config: dict, state_dir: Path, source_seed: int = 20261128):
        from config import parse_config
        from mechanisms import SeededSource
        from proxy.gateway import Gateway

        self.loop = asyncio.new_event_loop()
        self.gw = Gateway(parse_config(config), state_dir, source=SeededSource(source_seed))
        self.loop.run_until_complete(self.gw.start())
        self.conns: dict = {}

    @property
    def backend(self):
        return self.gw.backend

    def ask(self, sql: str, role: str = "analyst") -> Answer:
        from proxy.wire.api import SqlError
        from rewriter.errors import Refusal

        if role not in self.conns:
            self.conns[role] = self.loop.run_until_complete(
                self.gw.handler_factory(role, self.gw.config.server.database, {})
            )
        try:
            r = self.loop.run_until_complete(self.conns[role].execute(sql, []))
        except (SqlError, Refusal) as e:
            return Answer([], [], "", e.sqlstate, str(e))
        return Answer([c.name for c in r.columns or []], [tuple(x) for x in r.rows], " ".join(r.notices))

    def close(self) -> None:
        for conn in self.conns.values():
            self.loop.run_until_complete(conn.close())
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
    return tuple(
        (v is None, type(v).__name__ if _num(v) is None else "n", _num(v) if _num(v) is not None else str(v))
        for v in row
    )


@dataclass
class Verdict:
    ok: bool
    why: str = ""
    missing: list = field(default_factory=list)  # keys partition selection left out


def compare(
    got: Answer,
    ref_rows: list[tuple],
    ref_names: list[str] | None,
    *,
    keys: int,
    order: list[int] | None,
    values: bool = True,
    empty_ok: bool = False,
    widths: dict[int, float] | None = None,
) -> Verdict:
    """``got`` against the reference. ``keys``: how many leading output columns are group
    keys (matched exactly); ``order``: the output columns ORDER BY sorts on (None: no
    ORDER BY, rows compare as a multiset); ``values``: compare the value columns (within
    ``TAIL`` × their stated half-width) or only the keys; ``empty_ok``: a released row
    whose key the reference lacks is an empty cell of a public domain the reference does
    not spell out — allowed when every value is 0 within its tolerance; ``widths``: output
    columns (AVG) whose tolerance is at least the width of the argument's bounds."""
    if ref_names is not None and list(got.names) != list(ref_names):
        return Verdict(False, f"column names {got.names} != {ref_names}")
    hw = got.half_widths()
    width = len(got.names)
    # a stated half-width is rounded: an integer value's "±0" means its 95% quantile is below one
    # unit (a two-sided geometric with P(X ≠ 0) < 5% has P(|X| ≥ 7) < 1e-10)
    unit = [
        1.0 if any(isinstance(r[j], int) and not isinstance(r[j], bool) for r in got.rows) else 0.0
        for j in range(width)
    ]
    tol = [
        0.0
        if j < keys
        else max(
            TAIL * max(hw[got.names[j]], unit[j]) if got.names[j] in hw else 0.0, (widths or {}).get(j, 0.0)
        )
        for j in range(width)
    ]
    if any(len(r) != width for r in ref_rows):
        return Verdict(False, f"{width} columns, reference rows have {len(ref_rows[0])}")

    def row_equal(a, b) -> bool:
        return all(_cell_equal(x, y, t) for j, (x, y, t) in enumerate(zip(a, b, tol)) if values or j < keys)

    missing: list = []
    ref = list(ref_rows)
    if empty_ok and keys:
        known = {tuple(map(_key_norm, r[:keys])) for r in ref}
        got = Answer(
            got.names,
            [
                r
                for r in got.rows
                if tuple(map(_key_norm, r[:keys])) in known
                or not all(_cell_equal(v, 0, tol[j]) for j, v in enumerate(r) if j >= keys)
            ],
            got.notice,
        )
    if got.selected and keys:
        present = {tuple(map(_key_norm, r[:keys])) for r in got.rows}
        kept = [r for r in ref if tuple(map(_key_norm, r[:keys])) in present]
        missing = [r[:keys] for r in ref if tuple(map(_key_norm, r[:keys])) not in present]
        ref = kept
    if len(got.rows) != len(ref):
        extra = _unmatched(got.rows, ref, row_equal)
        lacking = _unmatched(ref, got.rows, lambda a, b: row_equal(b, a))
        return Verdict(
            False,
            f"{len(got.rows)} rows, reference {len(ref)}; "
            f"not in the reference: {extra[:6]}; missing: {lacking[:6]}",
            missing,
        )
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
            return Verdict(
                False, f"order: rows {i}..{j - 1} are {run_got[:4]}, the reference's {run_ref[:4]}", missing
            )
        extra = _unmatched(run_got, run_ref, row_equal)
        if extra:
            return Verdict(
                False, f"rows {i}..{j - 1}: {extra[:4]} not in the reference's {run_ref[:4]}", missing
            )
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


# ------------------------------------------------------------------------- the oracle


class ShapeOracle:
    def __init__(self, dp: Dpgate, dialect: str, reference, names):
        self.dp, self.dialect, self.reference, self.names = dp, dialect, reference, names
        self.stats = {
            "answered": 0,
            "refused": 0,
            "reference_error": 0,
            "names_checked": 0,
            "missing_selected_keys": 0,
        }
        self.refusals: dict[str, int] = {}

    def check(self, case) -> str | None:
        """None if the answer is the reference's (or refused), else what differs."""
        got = self.dp.ask(case.sql)
        if got.refused:
            self.stats["refused"] += 1
            self.refusals[got.sqlstate] = self.refusals.get(got.sqlstate, 0) + 1
            if case.must_answer:
                return f"refused ({got.sqlstate}: {got.message})"
            return None
        try:
            ref = self.reference(case.ref[self.dialect])
        except Exception as e:  # the backend cannot run the reference (e.g. integer overflow)
            self.stats["reference_error"] += 1
            if case.hand:
                raise AssertionError(f"reference SQL fails: {e}") from e
            return None
        names = self.names(case.sql)
        self.stats["names_checked"] += names is not None
        self.stats["answered"] += 1
        v = compare(
            got,
            ref,
            names,
            keys=case.keys,
            order=case.order,
            empty_ok=case.extra.get("empty_buckets", False),
            widths=case.extra.get("widths"),
        )
        self.stats["missing_selected_keys"] += len(v.missing)
        if v.ok:
            return None
        return f"{v.why}\n  got {got.names} {got.rows[:8]}\n  reference {ref[:8]}\n  NOTICE {got.notice}"
