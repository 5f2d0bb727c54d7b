"""M2 (metric SHE under E_S, paper 3.2) and M3 (Laplace prefix, paper 3.3): 1-D clients.

Reports are integers on the grid 1/K (K = 2^grid_bits): column c carries
K*a_c(x) + Z_c with Z_c discrete Laplace, P[Z = z] proportional to b_c^|z|,
b_c = exp(-1/(K s_c)). Shifting the data part by K*Delta changes the log-likelihood
by at most |Delta|/s_c (attained), exactly the continuous-Laplace loss of Prop. 2, so the
privacy constraints of problems (1)-(2) carry over unchanged. Integer outputs avoid the
floating-point Laplace attack (Mironov 2012). Z is drawn as a difference of two numpy
geometric variates (float-accurate probabilities, integer support); Var Z = 2b/(1-b)^2
grid units (-> 2 s^2 K^2 as K grows). M4 (bits) is the default mechanism; these are
alternatives for D = 1.

* M3 (spec 2.2): A = L_m, columns k = 1..m-1 with a_k(x) = 1[x <= k], s_k = 1/eps;
  prefix m is the (public) report count. Loss eps|x - x'| (line metric).
* M2 (spec 2.1): A = I_m, column x carries 1[x_i = x], scales from problem (2) under E_S.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from .spec import GroupSpec

__all__ = [
    "m2_scales",
    "m2_scales_numeric",
    "m2_total_error",
    "she_total_error",
    "fig1_ratio",
    "column_scales",
    "column_variances",
    "perturb_laplace",
    "laplace_log_ratio",
    "es_metric",
    "m3_total_error",
]


def m2_scales(m: int, eps: float, sensitive: Iterable[int] | None) -> np.ndarray:
    """Optimal noise scales s_x of problem (2) under E_S (closed form, spec 2.1 [DERIVED]).

    t = 1/s: a on S and eps - a off S with a = eps/(1 + ((m-k)/k)^(1/3)) if 1 <= k < m/2;
    t = eps/2 everywhere if k >= m/2; t = eps if k = 0.
    """
    S = frozenset(sensitive or ())
    k = len(S)
    if k == 0:
        t = np.full(m, float(eps))
    elif 2 * k >= m:
        t = np.full(m, eps / 2.0)
    else:
        a = eps / (1.0 + ((m - k) / k) ** (1.0 / 3.0))
        t = np.array([a if x in S else eps - a for x in range(1, m + 1)])
    return 1.0 / t


def es_metric(m: int, eps: float, sensitive: Iterable[int] | None) -> np.ndarray:
    """m x m matrix of E_S(x, x') (paper 3.2); 1-based bucket x at index x-1."""
    ins = np.array([x in frozenset(sensitive or ()) for x in range(1, m + 1)])
    E = np.where(ins[:, None] | ins[None, :], eps, 2.0 * eps)
    np.fill_diagonal(E, 0.0)
    return E


def m2_scales_numeric(E: np.ndarray) -> np.ndarray:
    """Solve problem (2) for an arbitrary metric E (m x m): minimise sum t^-2 subject to
    t_x + t_y <= E(x, y), x != y (SLSQP, implementation choice of spec 2.1); returns s = 1/t."""
    from scipy.optimize import minimize

    m = E.shape[0]
    iu = np.triu_indices(m, 1)
    A = np.zeros((len(iu[0]), m))
    A[np.arange(len(iu[0])), iu[0]] = 1.0
    A[np.arange(len(iu[0])), iu[1]] = 1.0
    b = E[iu]
    t0 = np.full(m, 0.5 * b.min() / 2.0)  # strictly interior start (0.99 can stall SLSQP)
    res = minimize(
        lambda t: np.sum(t**-2.0),
        t0,
        jac=lambda t: -2.0 * t**-3.0,
        method="SLSQP",
        bounds=[(1e-9, None)] * m,
        constraints=[{"type": "ineq", "fun": lambda t: b - A @ t, "jac": lambda t: -A}],
        options={"maxiter": 500, "ftol": 1e-12},
    )
    # "Positive directional derivative" = line search stalled at machine precision: accept
    # a feasible point then; anything else is a failure.
    if not res.success and (res.status != 8 or np.max(A @ res.x - b) > 1e-9 or res.x.min() <= 0):
        raise RuntimeError(f"SLSQP failed: {res.message}")
    scales: np.ndarray = 1.0 / res.x
    return scales


def m2_total_error(scales: np.ndarray, n: int = 1) -> float:
    """Prop. 3 with W = A = B = I: total expected squared error 2n sum s_x^2."""
    return 2.0 * n * float(np.sum(np.asarray(scales) ** 2))


def she_total_error(m: int, eps: float, n: int = 1) -> float:
    """eps-LDP SHE baseline [41]: Lap(2/eps) per coordinate, total 8 n m / eps^2."""
    return 8.0 * n * m / eps**2


def fig1_ratio(m: int, k: int, eps: float = 1.0) -> float:
    """Figure 1: E_S-optimal M2 total error / eps-LDP SHE total error (n-, eps-free)."""
    return m2_total_error(m2_scales(m, eps, range(1, k + 1))) / she_total_error(m, eps)


def column_scales(spec: GroupSpec) -> np.ndarray:
    """Noise scale s_c (count units) of each report column of an M2/M3 spec."""
    dim = spec.dims[0]
    if spec.mechanism == "M3":
        return np.full(dim.m - 1, 1.0 / dim.epsilon)
    if spec.mechanism == "M2":
        return m2_scales(dim.m, dim.epsilon, spec.sensitive)
    raise ValueError("column_scales is for M2/M3")


def _b(spec: GroupSpec) -> np.ndarray:
    return np.exp(-1.0 / (spec.grid * column_scales(spec)))


def column_variances(spec: GroupSpec) -> np.ndarray:
    """Exact Var Z_c in grid units: 2b/(1-b)^2, b = exp(-1/(K s_c))."""
    b = _b(spec)
    var: np.ndarray = 2.0 * b / (-np.expm1(np.log(b))) ** 2
    return var


def perturb_laplace(x: np.ndarray, spec: GroupSpec, gen: np.random.Generator) -> np.ndarray:
    """(n, width) int64 M2/M3 reports for 1-based buckets x (see module doc)."""
    m, K = spec.dims[0].m, spec.grid
    x = np.asarray(x, dtype=np.int64).reshape(-1, 1)
    if spec.mechanism == "M3":
        data = (x <= np.arange(1, m)[None, :]).astype(np.int64) * K
    else:
        data = (x == np.arange(1, m + 1)[None, :]).astype(np.int64) * K
    p = -np.expm1(-1.0 / (K * column_scales(spec)))  # success prob 1 - b per column
    shape = data.shape
    z = gen.geometric(np.broadcast_to(p, shape)) - gen.geometric(np.broadcast_to(p, shape))
    return data + z.astype(np.int64)


def laplace_log_ratio(spec: GroupSpec, x: int, y: int, scales: np.ndarray | None = None) -> float:
    """Exact max over outputs of ln P[report | x]/P[report | y] = sum_c |a_c(x)-a_c(y)|/s_c
    (discrete Laplace: P(z)/P(z+K Delta) <= b^(-K|Delta|), attained; Prop. 2)."""
    m = spec.dims[0].m
    s = column_scales(spec) if scales is None else scales
    ks = np.arange(1, m) if spec.mechanism == "M3" else np.arange(1, m + 1)
    ax = (ks >= x) if spec.mechanism == "M3" else (ks == x)
    ay = (ks >= y) if spec.mechanism == "M3" else (ks == y)
    return float(np.sum(np.abs(ax.astype(float) - ay) / s))


def m3_total_error(m: int, eps: float, n: int = 1) -> float:
    """M3 total error 2nm(m-1)/eps^2 (paper 3.3): the sum of the per-range variances
    (2n/eps^2)(1[l>=2] + 1[r<=m-1]) over all m(m+1)/2 ranges [l, r] (spec 7.5)."""
    return 2.0 * n * m * (m - 1) / eps**2
