"""The ``dpgate`` command line (console script ``dpgate = "proxy.cli:main"``):
:mod:`.main` (serve, budget, config, …) and :mod:`.ldp` (ldp-load, ldp-perturb)."""

from .main import main

__all__ = ["main"]
