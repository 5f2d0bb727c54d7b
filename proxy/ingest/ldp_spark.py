"""Local (metric-LDP) report tables stored in Spark (metric LDP, Xiang et al. 2020; metric-LDP spec §8): the
report table is created through Spark Connect if missing (the catalog's default format:
Parquet on a local server, Delta on Databricks) or checked against the layout, and
``dpgate ldp-load`` appends its encoded batches (:class:`.ldp_load.Encoder`: raw values
are perturbed in the proxy, only reports are sent) as ONE Spark job
(``SparkBackend.append``: batches staged, then one INSERT … SELECT). INSERT … VALUES
through the proxy writes with one Spark SQL INSERT (:func:`proxy.pipeline.local.insert_local`)."""

from __future__ import annotations

from collections.abc import Iterable

from rewriter.local import Layout

from .ldp_load import Progress, batch_len, encoder_for, resolved_layout

__all__ = ["ensure_spark", "load_rows_spark", "quoted"]

SPARK_TYPES = {
    "BIGINT": "BIGINT",
    "DOUBLE PRECISION": "DOUBLE",
    "TEXT": "STRING",
    "BOOLEAN": "BOOLEAN",
    "SMALLINT": "SMALLINT",
}


def quoted(name: str) -> str:
    """``name`` as a Spark (backquoted) identifier."""
    return "`" + name.replace("`", "``") + "`"


def ensure_spark(backend, lay: Layout) -> Layout:
    """Blocking: create the report table in Spark if missing; check its columns otherwise.
    Returns the layout as stored (:func:`.ldp_load.resolved_layout`)."""
    have = backend.describe_now(quoted(lay.reports))
    if have is None:
        cols = ", ".join(f"{quoted(c)} {SPARK_TYPES[t]}" for c, t in lay.report_schema())
        backend.execute_script(f"CREATE TABLE IF NOT EXISTS {quoted(lay.reports)} ({cols})")
        return lay
    return resolved_layout(lay, list(have))


def load_rows_spark(
    backend,
    lay: Layout,
    batches: Iterable[dict],
    *,
    source=None,
    reports: bool = False,
    progress: Progress | None = None,
) -> int:
    """Blocking: encode batches ({column: values}) and append them to the Spark report table
    in ONE job (all rows or none)."""
    enc = encoder_for(lay, ensure_spark(backend, lay), source, reports)
    lay = enc.lay
    total = 0

    def encoded():
        nonlocal total
        for cols in batches:
            n = batch_len(cols)
            if n == 0:
                continue
            yield enc.from_bits(cols, n) if reports else enc.encode(cols, n)
            total += n
            if progress:
                progress.update(n)

    backend.append(lay.reports, [(c, SPARK_TYPES[t]) for c, t in lay.report_schema()], encoded())
    return total
