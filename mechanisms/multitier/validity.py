"""Configuration-time validity checks for residual CFs (spec 2.4, 3.6, 3.7).

Alg. 1 needs Phi_lo / Phi_hi to be a CF. Two [EXT] checks from spec 2.4:

* :func:`bochner_min_eigenvalue` -- the smallest eigenvalue of M_ab = R(t_a - t_b);
  negative proves there is no residual (Bochner).
* :func:`fft_residual_pmf` -- for integer families, the pmf of the ratio on
  Z by inverse FFT; mass below -1e-12 proves invalidity (pitfall 7).

Also the CFs of the two refused families: discrete Gaussian (Remark 4.1) and
staircase (App. F, Eq. (4)-(5)). Pure numpy; analysis only, never sampling.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

# A characteristic function (or a ratio of two), vectorised over numpy arrays of t.
CF = Callable[[np.ndarray], Any]

__all__ = [
    "bochner_min_eigenvalue",
    "fft_residual_pmf",
    "residual_is_valid",
    "discrete_gaussian_cf",
    "staircase_cf",
]


def discrete_gaussian_cf(sigma: float, t: ArrayLike, kmax: int = 200) -> Any:
    """CF of DG(sigma^2): sum_k e^{-k^2/(2 s^2)} e^{jkt} / normaliser (real, even)."""
    k = np.arange(-kmax, kmax + 1)
    w = np.exp(-k * k / (2 * sigma * sigma))
    return np.cos(np.multiply.outer(np.asarray(t, dtype=float), k)) @ w / w.sum()


def staircase_cf(eps: float, t: ArrayLike, delta: float = 1.0) -> Any:
    """Staircase CF (spec 3.7; the paper's e^{-{3eps}{2}} read as e^{-3eps/2}); t != 0."""
    t = np.asarray(t, dtype=float)
    g = 1 / (math.exp(eps / 2) + 1)
    num = math.exp(eps) * np.sin(delta * g * t) + np.sin(delta * (1 - g) * t)
    return (
        math.exp(-1.5 * eps)
        * math.expm1(eps) ** 2
        * num
        / (2 * delta * t * (math.cosh(eps) - np.cos(delta * t)))
    )


def bochner_min_eigenvalue(ratio: CF, ts: ArrayLike) -> float:
    """min eigenvalue of the Hermitian matrix [ratio(t_a - t_b)] (spec 2.4)."""
    tsa = np.asarray(ts, dtype=float)
    diff = np.subtract.outer(tsa, tsa)
    with np.errstate(invalid="ignore", divide="ignore"):
        m = np.asarray(ratio(diff), dtype=complex)
    m[diff == 0] = 1.0
    return float(np.linalg.eigvalsh((m + m.conj().T) / 2).min())


def fft_residual_pmf(ratio: CF, n: int = 4096) -> tuple[np.ndarray, np.ndarray]:
    """pmf on k = -n/2 .. n/2-1 of an integer-supported ratio CF by inverse DFT."""
    t = 2 * np.pi * np.arange(n) / n
    vals = np.asarray(ratio(t), dtype=complex)
    pmf = np.fft.fft(vals) / n  # p(k) = (1/2pi) int R(t) e^{-jkt} dt
    pmf = np.fft.fftshift(pmf)
    return np.arange(-n // 2, n // 2), pmf


def residual_is_valid(ratio: CF, integer: bool, ts: ArrayLike | None = None, n: int = 4096) -> bool:
    """False when a Bochner counterexample or negative FFT mass (< -1e-12) exists."""
    ts = np.linspace(0, 2 * np.pi, 25)[:-1] if ts is None else ts
    if bochner_min_eigenvalue(ratio, ts) < -1e-12:
        return False
    if integer:
        _, pmf = fft_residual_pmf(ratio, n)
        if pmf.real.min() < -1e-12 or abs(pmf.imag).max() > 1e-9:
            return False
    return True
