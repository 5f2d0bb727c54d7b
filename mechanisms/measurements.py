"""Baseline central-DP measurements for COUNT and SUM (add-remove model).

A measurement is an object with a ``name``, an exact privacy map
(``privacy_map_exact(d_in) -> Fraction``, ``privacy_map(d_in) -> float``,
``epsilon`` = map at d_in = 1), ``release(true_value, source) -> Release`` and a
data-independent ``half_width(level)``. The map is computed from the noise
scale actually used (eps = d_in * sensitivity / scale, pure DP, add-remove mean spec
sections 1.1 and 2.2), so a wrong scale shows up in the map.

Noise is exact discrete Laplace (:func:`mechanisms.samplers.discrete_laplace`). A whole
release draws it at once with ``draw_many`` (:func:`mechanisms.batch.discrete_laplace_array`,
the same law row by row) and applies it with ``apply_many``.
"""

from __future__ import annotations

import math
import numbers
import operator
from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, TypeAlias

import numpy as np
from numpy.typing import NDArray

from .batch import discrete_laplace_array, fits_int64
from .dlap import dlap_half_width, dlap_variance
from .rng import RandomSource, default_source
from .samplers import discrete_laplace
from .scalars import RealLike

__all__ = [
    "Release",
    "BatchRelease",
    "Measurement",
    "GeometricCount",
    "LaplaceSum",
    "as_epsilon",
    "int_column",
]

# A column of cell values: a list of Python values, or a numpy array of them.
Column: TypeAlias = "Sequence[Any] | NDArray[Any]"

_INT_ROOM = 1 << 62  # |value| and |noise| below this: their int64 sum is exact


@dataclass(frozen=True)
class Release:
    """A DP output. ``half_width`` is the 95% half-width; ``scale`` is the noise
    scale in output units (None for derived outputs); ``parts`` holds the
    sub-releases a derived output was post-processed from."""

    value: Any
    epsilon: float
    half_width: float
    mechanism: str
    scale: float | None
    parts: tuple[Release, ...] = ()


class BatchRelease:
    """The releases of one measurement over many cells (``apply_many``): ``values[c]`` is what
    ``apply(cell c).value`` would be, ``half_width`` the largest 95% half-width over the cells,
    ``parts`` the derived outputs' BatchReleases (an AVG's SUM and COUNT). Made from a numpy
    array (int64 or float64, computed so), ``array`` holds it and ``values`` is its
    ``tolist()``, made on first use (a caller that stores the column as an array never
    pays for the list); made from a list, ``array`` is None."""

    __slots__ = ("_values", "array", "half_width", "mechanism", "parts")

    def __init__(
        self,
        values: list[Any] | NDArray[Any],
        half_width: float,
        mechanism: str,
        parts: tuple[BatchRelease, ...] = (),
    ) -> None:
        self.array: NDArray[Any] | None = values if isinstance(values, np.ndarray) else None
        self._values: list[Any] | None = None if isinstance(values, np.ndarray) else values
        self.half_width, self.mechanism, self.parts = half_width, mechanism, parts

    @property
    def values(self) -> list[Any]:
        if self._values is None:
            assert self.array is not None  # made from an array
            self._values = self.array.tolist()
        return self._values

    def __repr__(self) -> str:
        return (
            f"BatchRelease(values={self.values!r}, half_width={self.half_width!r}, "
            f"mechanism={self.mechanism!r}, parts={self.parts!r})"
        )


def int_column(values: Column) -> NDArray[np.int64] | None:
    """``values`` as an int64 array if they are all Python/numpy ints below 2^62 in magnitude
    (else None: the caller goes cell by cell, exactly)."""
    arr = np.asarray(values) if len(values) else np.zeros(0, dtype=np.int64)
    if arr.dtype.kind != "i" or arr.ndim != 1:
        return None
    arr = arr.astype(np.int64, copy=False)
    if arr.size and int(np.abs(arr).max()) >= _INT_ROOM:
        return None
    return arr


def as_epsilon(epsilon: RealLike) -> Fraction:
    """Validate eps (int, float or Fraction; finite, > 0) and return it exactly."""
    if isinstance(epsilon, bool) or not isinstance(epsilon, numbers.Real):
        raise TypeError(f"epsilon must be a real number, got {type(epsilon).__name__}")
    if not (math.isfinite(epsilon) and epsilon > 0):
        raise ValueError(f"epsilon must be finite and > 0, got {epsilon!r}")
    return Fraction(epsilon)


def as_int_bound(x: RealLike) -> int:
    """Integer bound; integral floats (e.g. ``0.0`` from a config) are accepted."""
    if isinstance(x, float) and x.is_integer():
        return int(x)
    return operator.index(x)  # type: ignore[arg-type]  # any other non-int raises TypeError


def sum_grid(lower: RealLike, upper: RealLike, integer: bool) -> tuple[float, float, float, float, int]:
    """A SUM's bounds checked, and its grid: ``(lower, upper, D, g, units)`` with D =
    max(|lower|, |upper|) the most one row moves the sum. ``integer``: g = 1, ``units`` = D.
    Otherwise g = 2^k with D/g in [2^20, 2^21) and ``units`` = floor(D/g) + 1 grid steps
    (rounding to the grid moves a sum by at most one more step)."""
    if integer:
        lower, upper = as_int_bound(lower), as_int_bound(upper)
    else:
        lower, upper = float(lower), float(upper)
        if not (math.isfinite(lower) and math.isfinite(upper)):
            raise ValueError("bounds must be finite")
    if lower > upper:
        raise ValueError(f"need lower <= upper, got [{lower}, {upper}]")
    delta = max(abs(lower), abs(upper))
    if delta == 0:
        raise ValueError("bounds [0, 0] give sensitivity 0; nothing to protect")
    if integer:
        return lower, upper, delta, 1, int(delta)
    grid = math.ldexp(1.0, math.frexp(delta)[1] - 21)
    return lower, upper, delta, grid, math.floor(delta / grid) + 1


def _check_d_in(d_in: int) -> int:
    d_in = operator.index(d_in)
    if d_in < 0:
        raise ValueError(f"d_in must be >= 0, got {d_in}")
    return d_in


class Measurement(ABC):
    """Base class: an eps-DP (add-remove) randomized release."""

    name: str = "measurement"

    @abstractmethod
    def privacy_map_exact(self, d_in: int) -> Fraction:
        """eps (exact) for inputs at add-remove distance ``d_in``."""

    def privacy_map(self, d_in: int) -> float:
        """eps for inputs at add-remove distance ``d_in`` (rounded to float)."""
        return float(self.privacy_map_exact(d_in))

    @property
    def epsilon(self) -> float:
        """eps for neighbouring datasets (d_in = 1); computed from the privacy map
        once, and again after any parameter of the measurement is changed."""
        eps = self.__dict__.get("_epsilon")
        if eps is None:
            eps = self.__dict__["_epsilon"] = self.privacy_map(1)
        return eps

    def __setattr__(self, name: str, value: Any) -> None:
        self.__dict__.pop("_epsilon", None)
        object.__setattr__(self, name, value)

    @abstractmethod
    def release(self, true_value: Any, source: RandomSource | None = None) -> Release:
        """Release ``true_value`` + noise; ``source=None`` means the CSPRNG."""

    @abstractmethod
    def half_width(self, level: float = 0.95) -> float:
        """Half-width of a ``level`` interval, from the noise law only."""

    def draw(self, source: RandomSource | None = None) -> Any:
        """The noise of ONE release, drawn before the data is known (its law does
        not depend on the data), so a server can draw it while the scan runs.
        ``apply(true_value, draw(source))`` has exactly the law of
        ``release(true_value, source)``; each draw must be applied at most once.
        ``None`` (this default) means: ``apply`` draws itself."""
        return None

    def apply(self, true_value: Any, noise: Any, source: RandomSource | None = None) -> Release:
        """Release ``true_value`` with pre-drawn ``noise`` (see :meth:`draw`)."""
        return self.release(true_value, source)

    def draw_many(self, n: int, source: RandomSource | None = None) -> Any:
        """The noise of ``n`` releases at once (a whole GROUP BY): ``apply_many(values,
        draw_many(len(values)))`` has exactly the law of ``len(values)`` independent
        ``release`` calls. ``None`` (this default) means: no batch form, go cell by cell."""
        return None

    def apply_many(self, values: Column, noises: Any) -> BatchRelease:
        """Release every ``values[c]`` with the noise ``draw_many`` drew for it."""
        raise NotImplementedError(f"{type(self).__name__} has no batch form")

    def __repr__(self) -> str:
        return f"{type(self).__name__}(epsilon={self.epsilon})"


class _DiscreteLaplaceMeasurement(Measurement):
    """Integer query on a grid: value/grid + DLap(sensitivity/eps) grid units."""

    grid: float = 1
    sensitivity: int  # in grid units
    scale: Fraction  # in grid units

    def _init_noise(self, sensitivity: int, epsilon: RealLike) -> None:
        self.sensitivity = sensitivity
        self.scale = Fraction(sensitivity) / as_epsilon(epsilon)
        self._hw95 = dlap_half_width(self.scale, 0.95)

    def privacy_map_exact(self, d_in: int) -> Fraction:
        # pure DP, group privacy: |q(D) - q(D')| <= d_in * sensitivity
        return _check_d_in(d_in) * self.sensitivity / self.scale

    def _noise(self, source: RandomSource | None) -> int:
        return discrete_laplace(self.scale, source if source is not None else default_source())

    def release(self, true_value: Any, source: RandomSource | None = None) -> Release:
        return self.apply(true_value, self._noise(source))

    def draw(self, source: RandomSource | None = None) -> int:
        """DLap(scale) grid units: independent of the data (see :meth:`Measurement.draw`)."""
        return self._noise(source)

    def draw_many(self, n: int, source: RandomSource | None = None) -> NDArray[np.int64] | None:
        """``n`` DLap(scale) draws (int64), the law of ``n`` :meth:`draw` calls."""
        if not fits_int64(self.scale):
            return None
        return discrete_laplace_array(n, self.scale, source if source is not None else default_source())

    def _apply_cells(self, values: Column, noises: Any) -> list[Any]:
        """Cell by cell (exact Python ints), for columns that are not plain int64 (a numpy
        column as its Python values, as a list of them would be)."""
        values = values.tolist() if isinstance(values, np.ndarray) else values
        return [self.apply(v, int(z)).value for v, z in zip(values, noises)]

    @property
    def noise_variance(self) -> float:
        """Variance of the added noise in output units."""
        return dlap_variance(self.scale) * float(self.grid) ** 2

    @property
    def output_scale(self) -> float:
        return float(self.scale) * self.grid


class GeometricCount(_DiscreteLaplaceMeasurement):
    """COUNT with two-sided geometric noise of scale 1/eps (sensitivity 1).

    Adding or removing one row changes COUNT by 1 (the add-remove model, add-remove mean spec 1.1);
    P[out = n + z] is proportional to exp(-eps |z|) (add-remove mean spec 2.2). Output: int.
    95% half-width: least k with P(|Z| > k) = 2p^(k+1)/(1+p) <= 0.05, p = e^-eps.
    """

    name = "geometric_count"

    def __init__(self, epsilon: RealLike) -> None:
        self._init_noise(1, epsilon)

    def apply(self, true_value: int, noise: int | None, source: RandomSource | None = None) -> Release:
        if noise is None:
            return self.release(true_value, source)
        return Release(
            operator.index(true_value) + noise, self.epsilon, self._hw95, self.name, self.output_scale
        )

    def apply_many(self, values: Column, noises: Any) -> BatchRelease:
        v = int_column(values)
        if v is None or int(np.abs(noises).max(initial=0)) >= _INT_ROOM:
            out = self._apply_cells(values, noises)
        else:
            out = v + noises
        return BatchRelease(out, float(self._hw95), self.name)

    def half_width(self, level: float = 0.95) -> int:
        return self._hw95 if level == 0.95 else dlap_half_width(self.scale, level)


class LaplaceSum(_DiscreteLaplaceMeasurement):
    """SUM of values clamped to [lower, upper], discrete Laplace on a fixed grid.

    Sensitivity (add-remove): D = max(|lower|, |upper|) -- one added/removed
    row moves the clamped sum by its own value (add-remove mean spec 1.1-1.2, 2.2).

    * ``integer=True``: grid g = 1; release S + DLap(D/eps); output int.
    * ``integer=False``: grid g = 2^k with D/g in [2^20, 2^21) (a power of two,
      so S/g is exact in binary). Release g*(round(S/g) + Z), Z ~ DLap(D_g/eps)
      in grid units, where D_g = floor(D/g) + 1: rounding adds at most one grid
      unit of sensitivity, |round(a) - round(b)| <= |a - b| + 1. Output float.

    The true sum should be computed exactly (ints, or ``math.fsum`` for floats;
    see :meth:`clamp_sum`). Scales are exact Fractions (eps itself is taken as
    the exact rational value of the float), so the privacy map is exactly
    d_in * eps. Half-width: discrete Laplace tail (see GeometricCount), times g.
    """

    name = "discrete_laplace_sum"

    def __init__(self, epsilon: RealLike, lower: RealLike, upper: RealLike, integer: bool = False) -> None:
        self.integer = bool(integer)
        self.lower, self.upper, self.delta, self.grid, units = sum_grid(lower, upper, self.integer)
        self._init_noise(units, epsilon)

    def clamp_sum(self, values: Iterable[Any]) -> float:
        """Exact (int) or correctly rounded (``math.fsum``) sum of clamped values."""
        lo, hi = self.lower, self.upper
        if self.integer:
            return sum(min(max(operator.index(v), lo), hi) for v in values)
        vals = [float(v) for v in values]
        if any(math.isnan(v) for v in vals):
            raise ValueError("NaN in values")
        return math.fsum(min(max(v, lo), hi) for v in vals)

    def apply(self, true_value: Any, noise: int | None, source: RandomSource | None = None) -> Release:
        if noise is None:
            return self.release(true_value, source)
        value: float
        if self.integer:
            value = operator.index(true_value) + noise
        else:
            s = float(true_value)
            if not math.isfinite(s):
                raise ValueError(f"sum must be finite, got {s}")
            q = round(s / self.grid)  # exact int; S/g is exact since g = 2^k
            value = float(q + noise) * self.grid
        return Release(value, self.epsilon, self.half_width(), self.name, self.output_scale)

    def apply_many(self, values: Column, noises: Any) -> BatchRelease:
        """As :meth:`apply` per cell: the int path adds in int64 (exact below 2^62); the float
        path is round(S/g) + Z times g, g = 2^k: S/g is exact, ``np.rint`` rounds half to even
        as ``round`` does, and int64 -> float64 rounds to nearest even as ``float(int)`` does."""
        hw = float(self.half_width())
        big = int(np.abs(noises).max(initial=0)) >= _INT_ROOM
        if self.integer:
            v = int_column(values)
            out = self._apply_cells(values, noises) if v is None or big else v + noises
            return BatchRelease(out, hw, self.name)
        arr = np.asarray(values) if len(values) else np.zeros(0)
        ok = arr.ndim == 1 and (
            arr.dtype.kind == "f" or (arr.dtype.kind == "i" and arr.size and int(np.abs(arr).max()) < 1 << 53)
        )
        if ok and not big:
            q = arr.astype(np.float64) / self.grid
            ok = bool(np.isfinite(q).all()) and (not q.size or float(np.abs(q).max()) < 2.0**61)
        if not ok or big:
            return BatchRelease(self._apply_cells(values, noises), hw, self.name)
        out = (np.rint(q).astype(np.int64) + noises).astype(np.float64) * self.grid
        return BatchRelease(out, hw, self.name)

    def half_width(self, level: float = 0.95) -> float:
        k = self._hw95 if level == 0.95 else dlap_half_width(self.scale, level)
        return k if self.integer else k * self.grid
