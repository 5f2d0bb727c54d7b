"""Noise families by name (config time): the discrete ones (:mod:`.families`) and the
floating-point ones (:mod:`.continuous`), above both."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..scalars import RealLike
from .continuous import Gaussian, Laplace, Skellam
from .families import ALIASES, REFUSED, TSG, MSDLap, NoiseFamily

__all__ = ["get_family"]


def get_family(family: str | NoiseFamily, sensitivity: RealLike = 1, **kw: Any) -> NoiseFamily:
    """Family by name (config time). DG and staircase are refused (spec 3.6-3.7)."""
    if isinstance(family, NoiseFamily):
        return family
    key = ALIASES.get(str(family).lower(), str(family).lower())
    if key in REFUSED:
        raise ValueError(f"noise family {family!r} cannot be used for multi-tier release: {REFUSED[key]}")
    families: dict[str, Callable[..., NoiseFamily]] = {
        "tsg": TSG,
        "msdlap": MSDLap,
        "laplace": Laplace,
        "gaussian": Gaussian,
        "skellam": Skellam,
    }
    if key not in families:
        raise ValueError(f"unknown noise family {family!r}; choose one of {sorted(families)}")
    return families[key](sensitivity, **kw)
