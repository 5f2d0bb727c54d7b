"""`dpgate ldp-load` and `dpgate ldp-perturb`: the command-line side of local-table
ingestion (the pipeline itself is :mod:`proxy.ingest.ldp_load`)."""

from __future__ import annotations

import asyncio
import csv
import sys
import time

from rewriter.local import Layout, layout

from ..backends import DuckDBBackend, PostgresBackend, SparkBackend, for_backend, open_backend
from ..ingest.ldp_load import (
    BATCH,
    Encoder,
    IngestError,
    Progress,
    batch_len,
    csv_batches,
    duck_table_batches,
    load_rows_duckdb,
    load_rows_postgres,
    pg_table_batches,
)
from ..ingest.ldp_spark import load_rows_spark
from ..ingest.ldp_specs import guarantee
from .service import resolve


def describe_layout(lay: Layout) -> str:
    g = "; ".join("(" + ", ".join(grp.columns) + ")" for grp in lay.groups) or "none"
    cats = "".join(
        f", Subset column {c.name} (d = {c.d}, ladder {c.ladder_name}: levels "
        f"{', '.join(f'{e:g}' for e in c.levels)}, each row perturbed once)"
        for c in lay.categories
    )
    return (
        f"local table {lay.name}: reports in {lay.reports}, joint groups {g}{cats}, "
        f"estimator {lay.estimator}; guarantee per record {guarantee(lay)}"
    )


def _local_layout(cfg, name: str) -> Layout:
    t = cfg.tables.get(name)
    if t is None:
        raise IngestError(
            "42P01", f"table {name} is not declared in the config (declared: {', '.join(sorted(cfg.tables))})"
        )
    if t.mode != "local":
        raise IngestError("42501", f"table {name} is not a local (metric-LDP) table")
    return layout(name, t, cfg.tiers)


def _count_lines(path) -> int | None:
    if str(path) == "-":
        return None
    try:
        with open(path, "rb") as f:
            return max(sum(buf.count(b"\n") for buf in iter(lambda: f.read(1 << 20), b"")) - 1, 0)
    except OSError:
        return None


def _load_duckdb(backend, lay, path, args, reports, warn, prog) -> int:
    try:
        src = (
            csv_batches(lay, path, args.batch, args.delimiter, reports, warn)
            if path
            else duck_table_batches(backend, lay, args.from_table, args.batch)
        )
        return load_rows_duckdb(backend, lay, src, reports=reports, progress=prog)
    finally:
        asyncio.run(backend.close())


def _load_spark(backend, lay, path, args, reports, warn, prog) -> int:
    try:
        if path is None:
            raise IngestError(
                "0A000",
                "--from-table is not implemented on Spark: load a CSV (raw rows, "
                "perturbed here), or a reports CSV made by ldp-perturb (--reports)",
            )
        return load_rows_spark(
            backend,
            lay,
            csv_batches(lay, path, args.batch, args.delimiter, reports, warn),
            reports=reports,
            progress=prog,
        )
    finally:
        asyncio.run(backend.close())


def _load_postgres(backend, lay, path, args, reports, warn, prog) -> int:
    async def run():
        await backend.connect()
        try:
            src = (
                csv_batches(lay, path, args.batch, args.delimiter, reports, warn)
                if path
                else pg_table_batches(backend, lay, args.from_table, args.batch)
            )
            return await load_rows_postgres(backend, lay, src, reports=reports, progress=prog)
        finally:
            await backend.close()

    return asyncio.run(run())


#: how reports are appended, per backend class that stores a local table's reports
LOADERS = {DuckDBBackend: _load_duckdb, SparkBackend: _load_spark, PostgresBackend: _load_postgres}


def cmd_ldp_load(args) -> int:
    """``dpgate ldp-load --table T (FILE.csv | --from-table SRC | --reports FILE.csv)``."""
    cfg, state, _ = resolve(args)
    try:
        lay = _local_layout(cfg, args.table)
    except IngestError as e:
        print(f"dpgate: {e.message}", file=sys.stderr)
        return 2
    reports = args.reports is not None
    path = args.reports if reports else args.file
    if path is None and args.from_table is None:
        print("dpgate: give a CSV file, --from-table SRC or --reports FILE", file=sys.stderr)
        return 2

    def warn(msg):
        print(f"dpgate: {msg}", file=sys.stderr)

    prog = Progress(
        f"ldp-load {lay.name}", _count_lines(path) if path else None, quiet=getattr(args, "quiet", False)
    )
    print(f"dpgate: {describe_layout(lay)}", file=sys.stderr)
    try:
        backend = open_backend(cfg, state)
    except Exception as e:  # DuckDB file locked by a running server, …
        print(
            f"dpgate: cannot open the backend: {e}\n(an embedded DuckDB file is used by one "
            "process at a time: stop `dpgate serve`, load, then start it again)",
            file=sys.stderr,
        )
        return 1
    t0 = time.perf_counter()
    try:
        load = for_backend(LOADERS, backend)
        if load is None:
            asyncio.run(backend.close())
            raise IngestError("0A000", f"ldp-load does not write reports into a {backend.kind} backend")
        n = load(backend, lay, path, args, reports, warn, prog)
    except IngestError as e:
        print(f"\ndpgate: {e.message}; nothing was loaded", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"\ndpgate: {e}; nothing was loaded", file=sys.stderr)
        return 1
    prog.done()
    dt = time.perf_counter() - t0
    how = "reports loaded as-is" if reports else "perturbed; raw values were not stored"
    print(
        f"dpgate: {n:,} reports appended to {lay.reports} in {dt:.1f} s "
        f"({n / max(dt, 1e-9) * 60 / 1e6:.1f}M rows/min; {how})",
        file=sys.stderr,
    )
    return 0


def cmd_ldp_perturb(args) -> int:
    """``dpgate ldp-perturb --table T RAW.csv [-o REPORTS.csv]``: the producer side,
    no server and no backend: raw CSV in, reports CSV out (only the config is read)."""
    cfg, _, _ = resolve(args)
    try:
        lay = _local_layout(cfg, args.table)
    except IngestError as e:
        print(f"dpgate: {e.message}", file=sys.stderr)
        return 2
    enc = Encoder(lay)
    header = (
        list(lay.public)
        + [f"{c}_bits" for g in lay.groups for c in g.columns]
        + [f"{c.name}_bits" for c in lay.categories]
    )
    out = open(args.output, "w", newline="") if args.output not in (None, "-") else sys.stdout
    prog = Progress(f"ldp-perturb {lay.name}", _count_lines(args.file), quiet=args.output in (None, "-"))
    try:
        wr = csv.writer(out)
        wr.writerow(header)
        for cols in csv_batches(
            lay,
            args.file,
            args.batch,
            args.delimiter,
            False,
            lambda m: print(f"dpgate: {m}", file=sys.stderr),
        ):
            n = batch_len(cols)
            data = enc.to_bits(cols, n)
            wr.writerows(zip(*[[("" if v is None else v) for v in data[h]] for h in header]))
            prog.update(n)
    except IngestError as e:
        print(f"\ndpgate: {e.message}", file=sys.stderr)
        return 1
    finally:
        if out is not sys.stdout:
            out.close()
    prog.done()
    return 0


def add_parsers(sub, common) -> None:
    """Register ``ldp-load`` and ``ldp-perturb`` on the dpgate CLI's subparsers."""
    p = sub.add_parser(
        "ldp-load",
        help="perturb raw rows into a local table's reports "
        "(CSV or a backend table), or load reports made elsewhere",
    )
    common(p)
    p.add_argument("--table", required=True, help="the local table (mode = 'local')")
    p.add_argument("file", nargs="?", help="raw CSV with a header (- for stdin)")
    p.add_argument("--from-table", help="read raw rows from this backend table instead")
    p.add_argument("--reports", help="a reports CSV (public columns + <col>_bits) loaded as-is")
    p.add_argument("--batch", type=int, default=BATCH, help="rows per batch (default 65536)")
    p.add_argument("--delimiter", default=",")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress line")
    p.set_defaults(fn=cmd_ldp_load)
    q = sub.add_parser("ldp-perturb", help="producer side: raw CSV -> reports CSV (no server)")
    common(q)
    q.add_argument("--table", required=True)
    q.add_argument("file", help="raw CSV with a header (- for stdin)")
    q.add_argument("--output", "-o", help="reports CSV (default stdout)")
    q.add_argument("--batch", type=int, default=BATCH)
    q.add_argument("--delimiter", default=",")
    q.set_defaults(fn=cmd_ldp_perturb)
