"""Load a TOML file into :class:`config.models.Config`.

Errors are one line that names the file and the field, e.g.
``dpgate.toml: tables.pums.columns.age.lower: Input should be a valid number``.
"""
from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from .models import Config


class ConfigError(ValueError):
    """An invalid configuration; the message names the file and the field."""


def _where(loc: tuple) -> str:
    return ".".join(str(p) for p in loc if not (isinstance(p, str) and p.startswith("function-")))


def parse_config(data: dict[str, Any], source: str = "<config>") -> Config:
    try:
        cfg = Config.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        field = _where(err["loc"])
        msg = err["msg"].removeprefix("Value error, ")
        more = f" (and {len(e.errors()) - 1} more)" if len(e.errors()) > 1 else ""
        where = f"{field}: " if field else ""
        raise ConfigError(f"{source}: {where}{msg}{more}") from None
    from rewriter.per_record import validate_config   # seed 003: per-record policies
    if problems := validate_config(cfg):
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise ConfigError(f"{source}: {problems[0]}{more}")
    _prepare_mechanisms(cfg)
    return cfg


def _prepare_mechanisms(cfg: Config) -> None:
    """AVG/SUM/COUNT half-width constants for every (non-ladder) tier ε × bounded column of a
    central table, computed now rather than by the first statements (issue 24). Every one
    is a closed form or a table of at most ~0.2 s at any ε (mechanisms/mean/quantiles.py),
    so no ε needs refusing; other ε shares (several releases in one statement) are computed
    on first use, once (single flight). A column the mechanism rejects is left to the
    statement path, which refuses it with its own message."""
    from mechanisms.mean import make_mean
    eps = sorted({t.epsilon for t in cfg.tiers.values() if t.ladder is None})
    for table in cfg.tables.values():
        if table.mode != "central" or table.privacy is not None:
            continue
        for col in table.columns.values():
            if not col.bounded or not col.lower < col.upper:
                continue
            for e in eps:
                try:
                    make_mean(col.avg_mechanism, e, col.lower, col.upper, integer=col.type == "int").setup()
                except Exception:          # noqa: BLE001 -- an optimisation: never blocks loading
                    pass


def load_config(path: str | Path) -> Config:
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{path}: file not found") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: invalid TOML: {e}") from None
    cfg = parse_config(data, str(path))
    if cfg.server.state_dir is not None and not cfg.server.state_dir.is_absolute():
        cfg = cfg.model_copy(update={"server": cfg.server.model_copy(
            update={"state_dir": (path.parent / cfg.server.state_dir).resolve()})})
    return cfg
