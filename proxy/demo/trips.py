"""The demo's ``trips`` local table (metric LDP, Xiang et al. 2020): synthetic taxi trips stored ONLY as
metric-LDP reports.

The raw trips are generated deterministically in memory (numpy PCG64, fixed seed:
the same trips on every machine), then go through the bulk ingestion path
(:mod:`proxy.ingest.ldp_load`, perturbed with the CSPRNG) on first start; the backend only
ever sees ``trips_reports``. Private: pickup ``hour`` (int 0–23), trip
``distance`` (km, 0–30) and ``fare`` (USD, the private weight of paper §4.3.2),
collected as one joint group. Public: ``vendor``, ``payment``, ``passengers``.
Private categorical: pickup ``zone`` (6 zones, skewed), perturbed ONCE per row by the
multi-tier Subset mechanism for the ``market`` ladder (bronze/silver/gold, Wang et al. 2026 §5).

``TRIPS_TOML`` is the seed-002 part; ``ZONE_TOML`` adds ``zone`` (it needs a config whose
tiers have ``ladder = "market"``). ``config/demo.toml`` has both.
"""

from __future__ import annotations

import tomllib

import numpy as np

from rewriter.local import layout
from rewriter.local_subset import resolve_stored

from ..ingest.ldp_load import LayoutMismatch, check_columns, load_rows_duckdb, load_rows_postgres

TRIPS_ROWS = 200_000
SEED = 2002

# The [tables.trips] block of config/demo.toml (kept here too so tests can add it).
TRIPS_TOML = """
[tables.trips]
description = "200,000 synthetic taxi trips, stored only as metric-LDP reports (Xiang et al. 2020)"
mode = "local"
[tables.trips.columns]
hour       = { type = "int",   description = "pickup hour 0-23 (private: perturbed at ingestion)" }
distance   = { type = "float", description = "trip distance in km, 0-30 (private)" }
fare       = { type = "float", description = "fare in USD, 0-100 (private weight: SUM/AVG only)" }
vendor     = { type = "int",   domain = [1, 2], description = "taxi company (public)" }
payment    = { type = "text",  domain = ["card", "cash"], description = "payment type (public)" }
passengers = { type = "int",   lower = 1, upper = 6, description = "passengers (public)" }
[tables.trips.local]
estimator = "known_n"        # exact n: unconstrained columns of the group add no noise
null_policy = "refuse"
weight = "fare"              # private weight: rounded to {0, 100} at random, one more dimension
joint = [["hour", "distance", "fare"]]
[tables.trips.local.columns]
hour     = { lo = 0, hi = 24,  buckets = 24, epsilon = 1.0 }   # ε 1 per hour
distance = { lo = 0, hi = 30,  buckets = 30, epsilon = 0.5 }   # ε 0.5 per km
fare     = { lo = 0, hi = 100, buckets = 2,  epsilon = 1.0 }   # Δ = 100 USD
"""
ZONES = ("downtown", "midtown", "uptown", "airport", "harbor", "suburbs")
ZONE_P = (0.30, 0.25, 0.12, 0.15, 0.10, 0.08)
ZONE_TOML = """
[tables.trips.columns]
zone = { type = "text", domain = ["downtown", "midtown", "uptown", "airport", "harbor", "suburbs"], description = "pickup zone (private: Subset reports for the market tiers)" }
[tables.trips.local.categories]    # perturbed once per row for bronze/silver/gold (multi-tier Subset, Wang et al. 2026 §5)
zone = { ladder = "market", variant = 2 }
"""
BASE_COLUMNS = ("hour", "distance", "fare", "vendor", "payment", "passengers")


def trips_table_dict(zone: bool = True) -> dict:
    """``[tables.trips]`` as a dict (for a config built in code); ``zone`` adds the Subset column."""
    t = tomllib.loads(TRIPS_TOML)["tables"]["trips"]
    if zone:
        z = tomllib.loads(ZONE_TOML)["tables"]["trips"]
        t["columns"].update(z["columns"])
        t["local"]["categories"] = z["local"]["categories"]
    return t


def trips_rows(n: int = TRIPS_ROWS, seed: int = SEED) -> dict:
    """The raw synthetic trips (deterministic): {column: numpy array}."""
    rng = np.random.default_rng(seed)
    kind = rng.choice(3, size=n, p=[0.35, 0.40, 0.25])
    h = np.where(
        kind == 0,
        rng.normal(8.5, 1.5, n),
        np.where(kind == 1, rng.normal(18.0, 2.5, n), rng.uniform(0, 24, n)),
    )
    hour = np.mod(np.floor(h), 24).astype(np.int64)
    distance = np.round(np.clip(rng.lognormal(np.log(3.0), 0.8, n), 0.1, 30.0), 1)
    fare = np.round(np.clip(3.0 + 2.2 * distance + rng.normal(0, 2.0, n), 2.5, 100.0), 2)
    vendor = np.where(rng.random(n) < 0.55, 1, 2)
    card = rng.random(n) < np.clip(0.45 + 0.03 * distance, 0, 0.95)
    payment = np.where(card, "card", "cash").astype(object)
    passengers = rng.choice(np.arange(1, 7), size=n, p=[0.70, 0.15, 0.06, 0.04, 0.03, 0.02])
    zone_rng = np.random.default_rng([seed, 1])  # its own stream: the columns above are unchanged
    zone = np.array(ZONES, dtype=object)[zone_rng.choice(len(ZONES), size=n, p=ZONE_P)]
    return {
        "hour": hour,
        "distance": distance,
        "fare": fare,
        "vendor": vendor,
        "payment": payment,
        "passengers": passengers,
        "zone": zone,
    }


def trips_batches(n: int = TRIPS_ROWS, batch: int = 65536, columns=BASE_COLUMNS):
    """Raw trips in batches, restricted to ``columns`` (default: the seed-002 columns)."""
    rows = trips_rows(n)
    for s in range(0, n, batch):
        yield {k: v[s : s + batch] for k, v in rows.items() if k in columns}


def _trips_layout(cfg):
    t = cfg.tables.get("trips")
    if t is None or t.mode != "local":
        return None
    return layout("trips", t, cfg.tiers)


def _current(lay, have: list[str]) -> bool:
    """An existing reports table made for this layout (a demo state from before a column was
    added is regenerated: the demo's trips are synthetic)."""
    try:
        check_columns(resolve_stored(lay, have), have)  # a tier added later: kept
        return True
    except LayoutMismatch:
        return False


def load_duckdb(backend, cfg, n: int = TRIPS_ROWS, source=None) -> bool:
    """Load the demo trips into DuckDB if the reports table is missing (True if loaded)."""
    lay = _trips_layout(cfg)
    if lay is None:
        return False
    have = [
        r[0]
        for r in backend.query(
            "SELECT column_name FROM information_schema.columns WHERE "
            "table_name = ? AND table_schema = current_schema()",
            [lay.reports],
        )
    ]
    if have and _current(lay, have):
        return False
    if have:
        backend.query(f'DROP TABLE "{lay.reports}"')
    load_rows_duckdb(backend, lay, trips_batches(n, columns=lay.table.columns), source=source)
    return True


async def load_postgres(backend, cfg, n: int = TRIPS_ROWS, source=None) -> bool:
    """Load the demo trips into Postgres if the reports table is missing (True if loaded)."""
    lay = _trips_layout(cfg)
    if lay is None:
        return False
    async with backend.writer.pool.connection() as conn:
        cur = await conn.execute(
            "SELECT column_name FROM information_schema.columns WHERE "
            "table_name = %s AND table_schema = current_schema()",
            [lay.reports],
        )
        have = [r[0] for r in await cur.fetchall()]
        if have and _current(lay, have):
            return False
        if have:
            await conn.execute(f'DROP TABLE "{lay.reports}"')
            await conn.commit()
    await load_rows_postgres(backend, lay, trips_batches(n, columns=lay.table.columns), source=source)
    return True
