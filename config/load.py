"""Load a TOML file into :class:`config.models.Config`.

Errors are one line that names the file and the field, e.g.
``dpgate.toml: tables.pums.columns.age.lower: Input should be a valid number``.
Checks that need the rewriter (per-record policies' SQL expressions) run where
the service loads the config (:func:`proxy.cli.load_service_config`), and the
mechanisms' set-up tables are computed when the service starts
(:func:`proxy.release.prepare_mechanisms`).
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
    return cfg


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
