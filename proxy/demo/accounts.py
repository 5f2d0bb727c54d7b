"""The demo's ``accounts`` table (per-record DP, Chen et al. 2025): 100,000 synthetic bank
accounts with heavy-tailed balances, generated deterministically in SQL.

Every row is a function of its row number i only, computed with integer arithmetic
(BIGINT, no overflow) and correctly rounded IEEE float8 operations (+, ×, ÷, sqrt,
floor) — never a library function such as ln or exp — so DuckDB, Postgres and the
numpy mirror :func:`accounts_numpy` produce identical rows on every machine.

* four hash streams h_k(i) in [0, p), p = 2^31 − 1: an affine map of i followed by
  two rounds of x → x² + c (mod p);
* ``kind``: 'savings' for 40 % of the rows, else 'checking'; ``branch`` 1–5;
* ``balance`` = min(1e9, floor(C / (u₁u₂)^(3/8))), u_k = (h_k + ½)/p uniform on (0, 1),
  C = 600 (checking) or 2500 (savings): median ≈ 1.3 C, a power-law tail
  P(balance > x) ≈ (C/x)^(8/3)·(1 + (8/3) ln(x/C)); the largest of 100,000 is ~10^5–10^6.
"""

from __future__ import annotations

import numpy as np

ACCOUNTS_ROWS = 100_000
P = 2147483647
_STREAMS = [(48271, 11, 7, 13), (69621, 12345, 101, 977), (16807, 777, 3, 31337), (39373, 4242, 55, 8191)]
_C = {"checking": 600.0, "savings": 2500.0}
CREATE_COLUMNS = "balance BIGINT, branch INTEGER, kind TEXT"


def accounts_select(series: str) -> str:
    """SELECT balance, branch, kind FROM <series> (a relation with an integer column i)."""
    d = "DOUBLE PRECISION"
    a = ", ".join(f"(i * {m} + {b}) % {P} AS a{k}" for k, (m, b, _, _) in enumerate(_STREAMS))
    b = ", ".join(f"(a{k} * a{k} + {c}) % {P} AS b{k}" for k, (_, _, c, _) in enumerate(_STREAMS))
    h = ", ".join(f"(b{k} * b{k} + {e}) % {P} AS h{k}" for k, (_, _, _, e) in enumerate(_STREAMS))
    u = [f"((CAST(h{k} AS {d}) + CAST('0.5' AS {d})) / CAST('{P}.0' AS {d}))" for k in (0, 1)]
    w = f"({u[0]} * {u[1]})"
    kind = "CASE WHEN h2 % 10 < 4 THEN 'savings' ELSE 'checking' END"
    c = f"CASE WHEN h2 % 10 < 4 THEN CAST('{_C['savings']}' AS {d}) ELSE CAST('{_C['checking']}' AS {d}) END"
    bal = f"CAST(LEAST(FLOOR({c} / SQRT(SQRT(SQRT({w} * {w} * {w})))), CAST('1e9' AS {d})) AS BIGINT)"
    return (
        f"SELECT {bal} AS balance, CAST(1 + h3 % 5 AS INTEGER) AS branch, {kind} AS kind "
        f"FROM (SELECT i, {h} FROM (SELECT i, {b} FROM (SELECT i, {a} FROM "
        f"(SELECT CAST(i AS BIGINT) AS i FROM {series}) AS t0) AS t1) AS t2) AS t3"
    )


def accounts_numpy(n: int = ACCOUNTS_ROWS) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The same rows in numpy: (balance int64, branch int64, kind str) for i = 0..n-1."""
    i = np.arange(n, dtype=np.int64)
    hs = []
    for m, b, c, e in _STREAMS:
        a = (i * m + b) % P
        bb = (a * a + c) % P
        hs.append((bb * bb + e) % P)
    u0, u1 = ((h.astype(np.float64) + 0.5) / float(P) for h in hs[:2])
    w = u0 * u1
    savings = hs[2] % 10 < 4
    cap = np.where(savings, _C["savings"], _C["checking"])
    bal = np.minimum(np.floor(cap / np.sqrt(np.sqrt(np.sqrt(w * w * w)))), 1e9).astype(np.int64)
    return bal, 1 + hs[3] % 5, np.where(savings, "savings", "checking")


def load_duckdb(backend, n: int = ACCOUNTS_ROWS) -> None:
    """Create ``accounts`` in an embedded DuckDB if it is missing (one transaction)."""
    have = {r[0] for r in backend.query("SELECT table_name FROM information_schema.tables")}
    if "accounts" in have:
        return
    cur = backend._cursor()
    try:
        cur.begin()
        cur.execute(f"CREATE TABLE accounts ({CREATE_COLUMNS})")
        cur.execute(f"INSERT INTO accounts {accounts_select(f'range(0, {int(n)}) AS s(i)')}")
        cur.commit()
    finally:
        cur.close()


async def load_postgres(backend, n: int = ACCOUNTS_ROWS) -> None:
    """Create ``accounts`` in Postgres if it is missing (one transaction)."""
    async with backend.writer.pool.connection() as conn:
        async with conn.transaction():
            cur = await conn.execute(
                "SELECT 1 FROM information_schema.tables WHERE table_schema = 'public' "
                "AND table_name = 'accounts'"
            )
            if await cur.fetchone() is not None:
                return
            await conn.execute(f"CREATE TABLE accounts ({CREATE_COLUMNS})")
            await conn.execute(
                f"INSERT INTO accounts {accounts_select(f'generate_series(0, {int(n) - 1}) AS s(i)')}"
            )
