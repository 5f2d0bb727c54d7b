"""Scalar parameter types of the mechanisms (ε, δ, bounds, noise scales), for annotations.

A parameter is an exact rational -- ``int`` or ``Fraction``, what the exact samplers take -- or,
where the mechanism accepts one, a ``float`` (converted exactly where exactness matters). The
runtime checks use ``numbers.Rational`` and ``numbers.Real``; a type checker does not count
``int`` or ``Fraction`` as members of those ABCs, so annotations name the concrete unions.
"""

from __future__ import annotations

from fractions import Fraction
from typing import TypeAlias

__all__ = ["RationalLike", "RealLike", "Size"]

RationalLike: TypeAlias = int | Fraction
RealLike: TypeAlias = int | Fraction | float

# numpy's ``size`` argument of a sampler: one draw (None), n draws, or an array shape.
Size: TypeAlias = int | tuple[int, ...] | None
