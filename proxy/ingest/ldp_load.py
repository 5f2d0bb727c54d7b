"""Ingestion into local (metric-LDP) tables (Xiang et al. 2020): raw rows in, reports out.

Raw values of private columns never reach the backend: :class:`Encoder` buckets
and perturbs them in memory (``mechanisms.metric_ldp.perturb``, the same code a
data producer runs on its side) and only the report bits (and the public
columns, as-is) are written to ``<table>_reports``. Used by

* ``INSERT INTO <local table> … VALUES …`` through the proxy (:mod:`proxy.pipeline.local`);
* ``dpgate ldp-load --table T FILE.csv`` — a raw CSV (header = column names),
  ``--from-table SRC`` — a raw table in the backend, or ``--reports FILE.csv`` —
  reports made elsewhere by the standalone randomizer, loaded as-is. Streaming in
  batches, one transaction (all rows or none), a progress line on stderr;
* ``dpgate ldp-perturb --table T RAW.csv`` — the producer side without a server:
  writes a reports CSV from a raw CSV using only the config.

Reports CSV format (what ``ldp-perturb`` writes and ``ldp-load --reports`` reads):
a header with any public columns by name and one column ``<col>_bits`` per private
column, holding the m bits of its report as a string of 0/1 (character j = the
randomised "bucket ≤ j"; for the private weight, m = 2).
"""

from __future__ import annotations

import csv
import sys
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np

from mechanisms.metric_ldp import perturb, report_columns
from mechanisms.rng import default_source
from rewriter.local import Layout
from rewriter.local_subset import resolve_stored

from .ldp_specs import group_spec
from .subset_ingest import categories_from_bits, categories_to_bits, encode_categories
from .values import IngestError, bits_matrix, public_value

__all__ = [
    "Encoder",
    "IngestError",
    "LayoutMismatch",
    "ensure_duckdb",
    "ensure_postgres",
    "write_duckdb",
    "write_postgres",
    "load_rows_duckdb",
    "load_rows_postgres",
]

BATCH = 65536


class LayoutMismatch(IngestError):
    def __init__(self, message: str):
        super().__init__(
            "55000",
            message,
            "The report table was made for another configuration "
            "(columns or buckets changed). Load into a new reports table "
            '(local.reports = "…") or drop the old one.',
        )


def _qi(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


# ---------------------------------------------------------------------------- encoding
def _public_numeric(vals, typ: str, domain):
    """A numeric numpy column converted at once ([int, …] or [float, …]), or None when the
    per-value path must run (other inputs, or a value it refuses: it then names the value)."""
    if not isinstance(vals, np.ndarray) or typ not in ("int", "float") or vals.dtype.kind not in "iuf":
        return None
    if vals.dtype.kind == "f":
        if not np.isfinite(vals).all():
            return None
        if typ == "int" and (
            not (vals == np.floor(vals)).all() or (vals.size and np.abs(vals).max() >= 2.0**62)
        ):
            return None
        vals = vals.astype(np.int64) if typ == "int" else vals
    elif typ == "float":
        vals = vals.astype(np.float64)
    if domain is not None and not np.isin(vals, np.asarray(domain)).all():
        return None
    return vals.tolist()


def _floats(values, col: str, policy: str, lo: float, n: int) -> np.ndarray:
    """Raw private values -> float array (NULL policy applied; no value is kept)."""
    if values is None:
        values = [None] * n
    try:
        arr = np.asarray(values, dtype=float)
    except (ValueError, TypeError):
        arr = np.empty(len(values))
        for i, v in enumerate(values):
            if v is None or (isinstance(v, str) and v.strip() == ""):
                arr[i] = np.nan
                continue
            try:
                if isinstance(v, bool):
                    raise ValueError
                arr[i] = float(v)
            except (ValueError, TypeError):
                raise IngestError("22P02", f"invalid number {v!r} for private column {col}") from None
    bad = np.isinf(arr)
    if bad.any():
        raise IngestError("22P02", f"infinite value for private column {col}")
    nul = np.isnan(arr)
    if nul.any():
        if policy != "lo":
            row = int(np.argmax(nul)) + 1
            raise IngestError(
                "23502",
                f"NULL in private column {col} (row {row} of the batch); "
                "this table's null_policy is 'refuse'",
                "Give a value, or set null_policy = 'lo' (NULL is then reported as the lowest bucket).",
            )
        arr = np.where(nul, lo, arr)
    return arr


class Encoder:
    """Raw column values -> report-table columns (public as-is, private as report bits).

    ``source``: a :class:`mechanisms.rng.RandomSource` (CSPRNG when None). Each call
    draws fresh generators from it; every record is perturbed exactly once.
    """

    def __init__(self, lay: Layout, source=None):
        self.lay = lay
        self.source = source
        t = lay.table
        self.domains = {c: t.columns[c].public_domain for c in lay.public}
        assert t.local is not None  # a layout is made for a local table
        self.policy = t.local.null_policy
        # categorical Subset columns draw every coin of the exact program from this source
        self.subset_source = source if source is not None else default_source()

    def public(self, cols: dict, n: int) -> dict:
        out = {}
        for c in self.lay.public:
            vals = cols.get(c)
            typ, dom = self.lay.col_type(c), self.domains[c]
            arr = np.empty(n, dtype=object)
            if vals is not None:
                fast = _public_numeric(vals, typ, dom)
                arr[:] = fast if fast is not None else [public_value(v, typ, c, dom) for v in vals]
            out[c] = arr
        return out

    def reports(self, cols: dict, n: int) -> list[np.ndarray]:
        """Per joint group, the (n, Σm) uint8 report bits."""
        out = []
        for g in self.lay.groups:
            spec = group_spec(g)
            vals = np.empty((n, spec.D))
            for d, (c, dim) in enumerate(zip(g.columns, spec.dims)):
                vals[:, d] = _floats(cols.get(c), c, self.policy, dim.lo, n)
            out.append(perturb(vals, spec, self.source))
        return out

    def encode(self, cols: dict, n: int) -> dict:
        """Report-table columns for ``n`` raw rows given as {column: values}."""
        unknown = set(cols) - set(self.lay.table.columns)
        if unknown:
            raise IngestError(
                "42703", f"column(s) {', '.join(sorted(unknown))} are not declared for table {self.lay.name}"
            )
        out = self.public(cols, n)
        for g, rep in zip(self.lay.groups, self.reports(cols, n)):
            names = [c for c, _ in _report_cols(g)]
            for i, name in enumerate(names):
                out[name] = rep[:, i]
        out.update(encode_categories(self.lay, cols, n, self.subset_source, self.policy))
        return out

    def from_bits(self, cols: dict, n: int) -> dict:
        """Report-table columns from a reports CSV batch (``<col>_bits`` strings)."""
        out = self.public({c: cols.get(c) for c in self.lay.public}, n)
        for g in self.lay.groups:
            parts = []
            for c, dim in zip(g.columns, g.dims):
                parts.append(bits_matrix(cols, f"{c}_bits", n, dim.m))
            rep = np.concatenate(parts, axis=1)
            for i, (name, _) in enumerate(_report_cols(g)):
                out[name] = rep[:, i]
        out.update(categories_from_bits(self.lay, cols, n))
        return out

    def to_bits(self, cols: dict, n: int) -> dict:
        """Producer side: raw columns -> reports-CSV columns (public as-is, ``<col>_bits``)."""
        out = self.public(cols, n)
        for g, rep in zip(self.lay.groups, self.reports(cols, n)):
            start = 0
            for c, dim in zip(g.columns, g.dims):
                block = (rep[:, start : start + dim.m] + 48).astype(np.uint8)
                out[f"{c}_bits"] = [row.tobytes().decode() for row in block]
                start += dim.m
        out.update(categories_to_bits(self.lay, cols, n, self.subset_source, self.policy))
        return out


def _report_cols(g):
    return report_columns(group_spec(g))


# ---------------------------------------------------------------------------- DDL
def _ddl(lay: Layout) -> str:
    cols = ", ".join(f"{_qi(c)} {t}" for c, t in lay.report_schema())
    return f"CREATE TABLE IF NOT EXISTS {_qi(lay.reports)} ({cols})"


def check_columns(lay: Layout, have: list[str]) -> None:
    """Refuse (55000, :class:`LayoutMismatch`) a report table whose columns ``have`` are not
    those ``lay`` stores."""
    want = [c for c, _ in lay.report_schema()]
    if set(have) != set(want):
        missing = [c for c in want if c not in have][:5]
        extra = [c for c in have if c not in want][:5]
        raise LayoutMismatch(
            f"the backend table {lay.reports} does not match local table "
            f"{lay.name}'s configuration (missing {missing or 'none'}, "
            f"unexpected {extra or 'none'})"
        )


def resolved_layout(lay: Layout, have: list[str]) -> Layout:
    """The layout of an existing report table (Subset levels as stored), checked."""
    lay = resolve_stored(lay, have)
    check_columns(lay, have)
    return lay


_COLUMNS_SQL = (
    "SELECT column_name FROM information_schema.columns WHERE table_name = {} "
    "AND table_schema = current_schema() ORDER BY ordinal_position"
)


def ensure_duckdb(cur, lay: Layout) -> Layout:
    """Create the report table in DuckDB if missing; check its columns otherwise. Returns the
    layout as stored (:func:`rewriter.local_subset.resolve_stored`)."""
    have = [r[0] for r in cur.execute(_COLUMNS_SQL.format("?"), [lay.reports]).fetchall()]
    if not have:
        cur.execute(_ddl(lay))
        return lay
    return resolved_layout(lay, have)


async def ensure_postgres(conn, lay: Layout) -> Layout:
    """Create the report table in Postgres if missing; check its columns otherwise (returns
    the layout as stored)."""
    cur = await conn.execute(_COLUMNS_SQL.format("%s"), [lay.reports])
    have = [r[0] for r in await cur.fetchall()]
    if not have:
        await conn.execute(_ddl(lay))
        return lay
    return resolved_layout(lay, have)


def encoder_for(lay: Layout, stored: Layout, source, reports: bool) -> Encoder:
    """The encoder of a load into the report table stored as ``stored``."""
    if reports and [c.levels for c in stored.categories] != [c.levels for c in lay.categories]:
        raise LayoutMismatch(
            f"{stored.reports} stores Subset levels "
            f"{[c.levels for c in stored.categories]}, the config's ladder gives "
            f"{[c.levels for c in lay.categories]}: a reports file cannot be mapped"
        )
    return Encoder(stored, source)


# ---------------------------------------------------------------------------- writers
_CAST = {
    "BIGINT": "BIGINT",
    "DOUBLE PRECISION": "DOUBLE",
    "TEXT": "VARCHAR",
    "BOOLEAN": "BOOLEAN",
    "SMALLINT": "SMALLINT",
}


def write_duckdb(cur, lay: Layout, data: dict) -> int:
    """Append encoded rows (see :meth:`Encoder.encode`) with one INSERT … SELECT."""
    schema = lay.report_schema()
    n = len(next(iter(data.values()))) if data else 0
    if n == 0:
        return 0
    src = {}
    for c, t in schema:
        v = data[c]
        src[c] = v.astype(np.int16) if t == "SMALLINT" else v
    name = f"_dpgate_ldp_src_{id(src)}"
    cur.register(name, src)
    try:
        cols = ", ".join(_qi(c) for c, _ in schema)
        sel = ", ".join(f"CAST({_qi(c)} AS {_CAST[t]})" for c, t in schema)
        cur.execute(f"INSERT INTO {_qi(lay.reports)} ({cols}) SELECT {sel} FROM {name}")
    finally:
        cur.unregister(name)
    return n


def _copy_text(v) -> bytes:
    if v is None:
        return b"\\N"
    if isinstance(v, bool):
        return b"t" if v else b"f"
    if isinstance(v, float):
        return repr(v).encode()
    s = str(v)
    if isinstance(v, str):
        s = s.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")
    return s.encode()


def copy_payload(lay: Layout, data: dict) -> bytes:
    """COPY … FROM STDIN (text format) payload: bits vectorised, public columns per row."""
    schema = lay.report_schema()
    bit_cols = [c for c, t in schema if t == "SMALLINT"]
    n = len(data[bit_cols[0]]) if bit_cols else len(next(iter(data.values())))
    if n == 0:
        return b""
    bits = np.stack([np.asarray(data[c], dtype=np.uint8) for c in bit_cols], axis=1)
    w = bits.shape[1]
    buf = np.empty((n, 2 * w), dtype=np.uint8)
    buf[:, 0::2] = bits + 48
    buf[:, 1::2] = 9
    buf[:, -1] = 10
    if not lay.public:
        return buf.tobytes()
    pubs = [data[c] for c in lay.public]
    lines = buf.reshape(n, -1)
    out = []
    for i in range(n):
        out.append(b"\t".join(_copy_text(col[i]) for col in pubs) + b"\t" + lines[i].tobytes())
    return b"".join(out)


async def write_postgres(conn, lay: Layout, data: dict) -> int:
    """Append encoded rows with COPY FROM STDIN."""
    payload = copy_payload(lay, data)
    if not payload:
        return 0
    cols = ", ".join(_qi(c) for c, _ in lay.report_schema())
    async with conn.cursor() as cur:
        async with cur.copy(f"COPY {_qi(lay.reports)} ({cols}) FROM STDIN") as cp:
            await cp.write(payload)
    return len(next(iter(data.values())))


# ---------------------------------------------------------------------------- batch loads
class Progress:
    """A progress line on stderr (plain text, rewritten in place on a terminal)."""

    def __init__(self, what: str, total: int | None = None, stream=None, quiet: bool = False):
        self.what, self.total, self.quiet = what, total, quiet
        self.stream = stream or sys.stderr
        self.t0 = time.perf_counter()
        self.n = 0
        self._last = 0.0

    def rate(self) -> float:
        return self.n / max(time.perf_counter() - self.t0, 1e-9)

    def update(self, k: int) -> None:
        self.n += k
        now = time.perf_counter()
        if self.quiet or now - self._last < (0.5 if self.stream.isatty() else 5.0):
            return
        self._last = now
        self._print("\r")

    def _print(self, lead: str) -> None:
        tot = f" / {self.total:,}" if self.total else ""
        pct = ""
        if self.total:
            done = int(30 * min(self.n / self.total, 1.0))
            pct = f" [{'#' * done}{'.' * (30 - done)}] {100 * self.n / self.total:5.1f}%"
        end = "" if self.stream.isatty() else "\n"
        self.stream.write(
            f"{lead}{self.what}: {self.n:,}{tot} rows{pct}  {self.rate() * 60 / 1e6:.1f}M rows/min{end}"
        )
        self.stream.flush()

    def done(self) -> None:
        if not self.quiet:
            self._print("\r")
            if self.stream.isatty():
                self.stream.write("\n")


def load_rows_duckdb(
    backend,
    lay: Layout,
    batches: Iterable[dict],
    *,
    source=None,
    reports: bool = False,
    progress: Progress | None = None,
) -> int:
    """Encode and append batches ({column: values}) into DuckDB in ONE transaction."""
    cur = backend._cursor()
    total = 0
    try:
        enc = encoder_for(lay, ensure_duckdb(cur, lay), source, reports)
        lay = enc.lay
        cur.begin()
        try:
            for cols in batches:
                n = batch_len(cols)
                if n == 0:
                    continue
                data = enc.from_bits(cols, n) if reports else enc.encode(cols, n)
                total += write_duckdb(cur, lay, data)
                if progress:
                    progress.update(n)
            cur.commit()
        except BaseException:
            cur.rollback()
            raise
    finally:
        cur.close()
    return total


async def load_rows_postgres(
    backend, lay: Layout, batches, *, source=None, reports: bool = False, progress: Progress | None = None
) -> int:
    """Encode and COPY batches into Postgres in ONE transaction. ``batches`` may be
    an iterable or an async iterable of {column: values}."""
    total = 0
    async with backend.writer.pool.connection() as conn:
        async with conn.transaction():
            enc = encoder_for(lay, await ensure_postgres(conn, lay), source, reports)
            lay = enc.lay
            async for cols in _aiter(batches):
                n = batch_len(cols)
                if n == 0:
                    continue
                data = enc.from_bits(cols, n) if reports else enc.encode(cols, n)
                total += await write_postgres(conn, lay, data)
                if progress:
                    progress.update(n)
    return total


async def _aiter(it):
    if hasattr(it, "__aiter__"):
        async for x in it:
            yield x
    else:
        for x in it:
            yield x


def batch_len(cols: dict) -> int:
    """The number of rows in a batch ({column: values})."""
    for v in cols.values():
        return len(v)
    return 0


# ---------------------------------------------------------------------------- readers
def iter_csv(path: str | Path, batch: int = BATCH, delimiter: str = ",") -> Iterator[dict]:
    """Stream a CSV with a header as {column: [strings; '' -> None]} batches."""
    f = sys.stdin if str(path) == "-" else open(path, newline="")
    try:
        rd = csv.reader(f, delimiter=delimiter)
        try:
            header = [h.strip().lower() for h in next(rd)]
        except StopIteration:
            return
        if len(set(header)) != len(header):
            raise IngestError("42701", f"{path}: duplicate column names in the header")
        rows = []
        for line, row in enumerate(rd, start=2):
            if not row:
                continue
            if len(row) != len(header):
                raise IngestError(
                    "22P04", f"{path}: line {line} has {len(row)} fields, the header has {len(header)}"
                )
            rows.append(row)
            if len(rows) >= batch:
                yield _columns(header, rows)
                rows = []
        if rows:
            yield _columns(header, rows)
    finally:
        if f is not sys.stdin:
            f.close()


def _columns(header, rows) -> dict:
    cols = list(zip(*rows))
    return {h: [v if v != "" else None for v in c] for h, c in zip(header, cols)}


def _keep(cols: dict, wanted: set) -> dict:
    return {k: v for k, v in cols.items() if k in wanted}


def _dupe_check(lay: Layout, header_cols: set, reports: bool) -> list[str]:
    """Columns of the input that will be ignored (not declared)."""
    if reports:
        wanted = set(lay.public) | {f"{c}_bits" for c in [*lay.where, *(c.name for c in lay.categories)]}
    else:
        wanted = set(lay.table.columns)
    return sorted(header_cols - wanted)


def csv_batches(lay: Layout, path, batch, delimiter, reports, warn) -> Iterator[dict]:
    """Batches of a raw CSV (``reports`` False) or a reports CSV for local table ``lay``:
    undeclared columns dropped (``warn``-ed once), a missing private column refused (42703)."""
    private = [*lay.where, *(c.name for c in lay.categories)]
    wanted = (set(lay.public) | {f"{c}_bits" for c in private}) if reports else set(lay.table.columns)
    first = True
    for cols in iter_csv(path, batch, delimiter):
        if first:
            ignored = _dupe_check(lay, set(cols), reports)
            if ignored:
                warn(f"ignoring undeclared column(s): {', '.join(ignored)}")
            if not reports:
                missing = [c for c in private if c not in cols]
                local = lay.table.local
                assert local is not None  # a layout is made for a local table
                if missing and local.null_policy != "lo":
                    raise IngestError(
                        "42703", f"{path}: the header lacks private column(s) {', '.join(missing)}"
                    )
            first = False
        yield _keep(cols, wanted)


def _source_columns_duckdb(backend, src: str) -> list[str]:
    rows = backend.query(
        "SELECT column_name FROM information_schema.columns WHERE table_name = ? ORDER BY ordinal_position",
        [src],
    )
    return [r[0] for r in rows]


def duck_table_batches(backend, lay: Layout, src: str, batch: int) -> Iterator[dict]:
    """Batches of raw rows read from table ``src`` of the DuckDB backend (``--from-table``)."""
    have = _source_columns_duckdb(backend, src)
    if not have:
        raise IngestError("42P01", f"source table {src} does not exist in the backend")
    cols = [c for c in lay.table.columns if c in have]
    cur = backend._cursor()
    try:
        cur.execute(f"SELECT {', '.join(_qi(c) for c in cols)} FROM {_qi(src)}")
        while True:
            rows = cur.fetchmany(batch)
            if not rows:
                break
            yield {c: list(v) for c, v in zip(cols, zip(*rows))}
    finally:
        cur.close()


async def pg_table_batches(backend, lay: Layout, src: str, batch: int):
    """Batches of raw rows read from table ``src`` of the Postgres backend (``--from-table``)."""
    async with backend.pool.connection() as conn:
        cur = await conn.execute(
            "SELECT column_name FROM information_schema.columns WHERE "
            "table_name = %s AND table_schema = current_schema() "
            "ORDER BY ordinal_position",
            [src],
        )
        have = [r[0] for r in await cur.fetchall()]
        if not have:
            raise IngestError("42P01", f"source table {src} does not exist in the backend")
        cols = [c for c in lay.table.columns if c in have]
        async with conn.transaction():
            async with conn.cursor(name="dpgate_ldp_src") as rc:
                await rc.execute(f"SELECT {', '.join(_qi(c) for c in cols)} FROM {_qi(src)}")
                while True:
                    rows = await rc.fetchmany(batch)
                    if not rows:
                        break
                    yield {
                        c: [float(x) if type(x).__name__ == "Decimal" else x for x in v]
                        for c, v in zip(cols, zip(*rows))
                    }
