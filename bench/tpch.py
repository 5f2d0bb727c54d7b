"""TPC-H data for the privacy-unit benchmark (``bench/user_level.py``).

The tables come from ``tpchgen-cli`` (the ``bench`` extra; a registry package that
writes TPC-H parquet at a given scale factor). They are loaded as they are into a DuckDB
file; dpgate reads them through its own declarations (``bench/user_level.py``):

* ``lineitem``: no customer column; its privacy unit is ``orders.o_custkey``, found
  through the declared reference ``l_orderkey = "orders"`` (docs/sql.md "Joins": the
  foreign-key path, :mod:`rewriter.joins`), so the bench exercises the real join rewrite.
* ``orders``: ``o_custkey`` as the unit, ``o_orderkey`` its key.

Money columns are DECIMAL in TPC-H; dpgate's clamping casts them to DOUBLE.
:data:`LINEITEM_UNIT` (lineitem ⋈ orders carrying ``o_custkey``) is the bench's own
reading of the raw data: for the bounds' percentiles and for SmartNoise SQL, which has no
foreign-key paths (its ``private_id`` must be a column of the table it reads).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import duckdb

TABLES = ("customer", "orders", "lineitem")

LINEITEM_UNIT = """(SELECT o.o_custkey, l.l_quantity::DOUBLE AS l_quantity,
       l.l_extendedprice::DOUBLE AS l_extendedprice, l.l_discount::DOUBLE AS l_discount,
       l.l_returnflag, l.l_linestatus, l.l_shipdate
FROM lineitem l JOIN orders o ON l.l_orderkey = o.o_orderkey)"""


def tpchgen() -> str | None:
    """The ``tpchgen-cli`` executable (beside this interpreter, or on PATH), or None."""
    here = Path(sys.executable).with_name("tpchgen-cli")
    return str(here) if here.exists() else shutil.which("tpchgen-cli")


def generate(scale: float, out: Path) -> Path:
    """TPC-H customer/orders/lineitem at ``scale`` as parquet files under ``out``."""
    exe = tpchgen()
    if exe is None:
        raise FileNotFoundError("tpchgen-cli is not installed (pip install '.[bench]')")
    subprocess.run(
        [exe, "parquet", "-s", str(scale), "-o", str(out), "--tables", ",".join(TABLES)],
        check=True,
        capture_output=True,
    )
    return out


def load(parquet_dir: Path, db: Path) -> None:
    """The parquet files into a DuckDB file ``db``."""
    con = duckdb.connect(str(db))
    try:
        for t in TABLES:
            con.execute(f"CREATE TABLE {t} AS SELECT * FROM read_parquet('{parquet_dir / (t + '.parquet')}')")
    finally:
        con.close()


def percentile(con, sql: str, p: float) -> int:
    """The ``p``-quantile (nearest rank, rounded up) of the single column ``n`` of ``sql``."""
    ((v,),) = con.execute(f"SELECT quantile_disc(n, {p}) FROM ({sql})").fetchall()
    return max(1, int(v))


def bounds(con, source: str, unit: str, group: list[str], p: float = 0.95, total: int = 0) -> tuple[int, int]:
    """(G, R) from the data's per-unit distribution: R = the ``p``-quantile of rows per
    (unit, cell of ``group``), G = the ``p``-quantile of cells per unit (1 without a group).
    ``total`` > 0 (``max_rows_scope = "total"``): R = the ``p``-quantile of rows per unit
    in all, G = ``total``, the number of cells of the group's public domain (binds nothing,
    so the scan has no L0 ranking).
    Read from the raw data by the owner, outside any budget: in a real deployment these
    come from public knowledge of the schema (a bench shortcut, said in its footnote)."""
    keys = ", ".join([unit, *([] if total else group)])
    r = percentile(con, f"SELECT COUNT(*) AS n FROM {source} GROUP BY {keys}", p)
    if not group:
        return 1, r
    cells = ", ".join(group)
    if total:
        return total, r
    g = percentile(con, f"SELECT COUNT(DISTINCT ({cells})) AS n FROM {source} GROUP BY {unit}", p)
    return g, r
