"""The demo's second schema: people across tables, a foreign-key path and a
public lookup table, generated deterministically in SQL on first start.

* ``stores`` — PUBLIC (10 rows): store_id, area, opened. Anyone reads it as-is; it joins to
  ``purchases`` on ``purchases.store = stores.store_id``.
* ``customers`` — 5,000 customers: customer_id (the unit, and the key), segment, region.
* ``orders`` — 30,000 orders, heavy-tailed per customer: order_id (key), customer_id (unit),
  priority, total. Joins ``customers`` on the unit.
* ``order_items`` — 90,000 lines: order_id (a reference to ``orders``), item, quantity,
  price; its privacy unit is ``orders.customer_id``, read through that reference.
"""

from __future__ import annotations

CUSTOMERS, ORDERS, ITEMS = 5_000, 30_000, 90_000
TABLES = ("stores", "customers", "orders", "order_items")


def _q(k: int, var: str = "i") -> str:
    """A non-linear hash of the row number into [0, 1000003), stream ``k``."""
    i = f"CAST({var} AS BIGINT)"
    return f"(({i} * {i} * {7919 + 2 * k} + {i} * {k * 104729 + 7}) % 1000003)"


def _u(k: int) -> str:
    return f"(({_q(k)} + 0.5) / 1000003.0)"


def statements(series) -> list[str]:
    """CREATE TABLE … AS statements; ``series(n)`` is the backend's row-number relation
    with column ``i`` from 0 to n-1."""
    areas = "CASE i % 3 WHEN 0 THEN 'north' WHEN 1 THEN 'south' ELSE 'center' END"
    seg = f"CASE WHEN {_q(1)} % 5 = 0 THEN 'business' ELSE 'consumer' END"
    region = f"CASE {_q(2)} % 4 WHEN 0 THEN 'north' WHEN 1 THEN 'south' WHEN 2 THEN 'east' ELSE 'west' END"
    # orders: 20% of orders from 100 heavy customers (Zipf-like), the rest uniform over all
    cust = (
        f"CAST(CASE WHEN {_q(3)} % 5 = 0 THEN FLOOR(EXP({_u(4)} * LN(101.0))) "
        f"ELSE 1 + {_q(5)} % {CUSTOMERS} END AS INTEGER)"
    )
    prio = f"CASE {_q(6)} % 3 WHEN 0 THEN 'high' WHEN 1 THEN 'medium' ELSE 'low' END"
    return [
        f"CREATE TABLE stores AS SELECT CAST(i + 1 AS INTEGER) AS store_id, {areas} AS area, "
        f"CAST(2000 + i * 2 AS INTEGER) AS opened FROM {series(10)}",
        f"CREATE TABLE customers AS SELECT CAST(i + 1 AS INTEGER) AS customer_id, {seg} AS segment, "
        f"{region} AS region FROM {series(CUSTOMERS)}",
        f"CREATE TABLE orders AS SELECT CAST(i + 1 AS INTEGER) AS order_id, {cust} AS customer_id, {prio} AS priority, "
        f"CAST(({_q(7)} % 50000) / 100.0 AS DOUBLE PRECISION) AS total FROM {series(ORDERS)}",
        f"CREATE TABLE order_items AS SELECT CAST(1 + {_q(8)} % {ORDERS} AS INTEGER) AS order_id, "
        f"CAST(1 + {_q(9)} % 50 AS INTEGER) AS item, CAST(1 + {_q(10)} % 5 AS INTEGER) AS quantity, "
        f"CAST(({_q(11)} % 10000) / 100.0 AS DOUBLE PRECISION) AS price FROM {series(ITEMS)}",
    ]


def load_duckdb(backend) -> None:
    have = {r[0] for r in backend.query("SELECT table_name FROM information_schema.tables")}
    for name, sql in zip(TABLES, statements(lambda n: f"range(0, {n}) AS t(i)")):
        if name not in have:
            backend.execute_script(sql)


async def load_postgres(conn, have: set) -> None:
    for name, sql in zip(TABLES, statements(lambda n: f"generate_series(0, {n - 1}) AS t(i)")):
        if name not in have:
            await conn.execute(sql)
