"""Shared helpers for tests/metric_ldp (not a conftest on purpose)."""

from __future__ import annotations

import duckdb
import numpy as np

from mechanisms.metric_ldp import dim_affine, report_columns


def per_record(reports, spec, query, estimator):
    """Per-record estimate terms via the SQL path's affine coefficients (vectorised)."""
    rep = np.asarray(reports, dtype=float)
    prod = np.full(rep.shape[0], float(query.scale))
    for d, s in enumerate(spec.column_slices()):
        const, cs = dim_affine(spec, d, query.weight(spec, d), estimator)
        g = np.full(rep.shape[0], const)
        for j, a in cs.items():
            g += a * rep[:, s][:, j]
        prod *= g
    return prod


def duck_table(reports, spec, extra=None):
    """In-memory DuckDB with table r holding the reports in the documented schema."""
    con = duckdb.connect()
    cols = report_columns(spec)
    ddl = ", ".join(f"{n} {t}" for n, t in cols)
    extra = extra or {}
    ddl += "".join(f", {k} DOUBLE" for k in extra)
    con.execute(f"CREATE TABLE r ({ddl})")
    data = {
        n: np.asarray(reports)[:, i].astype(np.int16 if t == "SMALLINT" else np.int64)
        for i, (n, t) in enumerate(cols)
    }
    data.update({k: np.asarray(v, dtype=float) for k, v in extra.items()})
    con.register("src", data)
    con.execute("INSERT INTO r SELECT * FROM src")
    return con


def spec_paper_variance(spec, ranges, buckets):
    """Spec 4.2 estimator=paper formula, literally (lambda = tanh(eps/2), equal eps per dim)."""
    eps = spec.dims[0].epsilon
    lam = np.tanh(eps / 2)
    kap = 1 / lam
    D = spec.D
    x = np.asarray(buckets).reshape(len(buckets), -1)
    nt = [d for d, (l, r) in ranges.items() if not (l == 1 and r == spec.dims[d].m)]
    inside = np.ones(len(x), bool)
    prod = np.ones(len(x))
    for d, (l, r) in ranges.items():
        s = (x[:, d] >= l) & (x[:, d] <= r)
        inside &= s
        if d in nt:
            prod *= 1 + lam**2 * np.where(s, 1, -1)
    return kap ** (2 * D) * np.sum(2.0 ** -len(nt) * prod - lam ** (2 * D) * inside)


def spec_known_n_variance(spec, ranges, buckets):
    """Spec 4.2 estimator=known_n formula, literally (unlisted dimensions are trivial)."""
    x = np.asarray(buckets).reshape(len(buckets), -1)
    inside = np.ones(len(x), bool)
    prod = np.ones(len(x))
    for d, dim in enumerate(spec.dims):
        l, r = ranges.get(d, (1, dim.m))
        kap2 = 1 / np.tanh(dim.epsilon / 2) ** 2
        a = lambda k: 1.0 if k in (0, dim.m) else kap2
        s = (x[:, d] >= l) & (x[:, d] <= r)
        inside &= s
        prod *= (a(r) + a(l - 1) + 2 * np.where(s, 1, -1)) / 4
    return np.sum(prod - inside)
