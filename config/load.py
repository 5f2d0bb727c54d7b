"""Load a TOML file into :class:`config.models.Config`.

Errors are one line that names the file and the field, e.g.
``dpgate.toml: tables.pums.columns.age.lower: Input should be a valid number``.
Checks that need the rewriter (per-record policies' SQL expressions) run where
the service loads the config (:func:`proxy.cli.service.load_service_config`), and the
mechanisms' set-up tables are computed when the service starts
(:func:`proxy.pipeline.release.prepare_mechanisms`).
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from .models import Config


class ConfigError(ValueError):
    """An invalid configuration; the message names the file and the field."""


def _where(loc: tuple[int | str, ...]) -> str:
    return ".".join(str(p) for p in loc if not (isinstance(p, str) and p.startswith("function-")))


def insert_grant_problems(cfg: Config) -> list[str]:
    """``roles.<r>.insert`` may only name declared local tables (each once): writes through the
    proxy are perturbed on the way in, which only a local table does."""
    out = []
    local = sorted(n for n, t in cfg.tables.items() if t.mode == "local")
    for name, role in cfg.roles.items():
        for i, table in enumerate(role.insert):
            where = f"roles.{name}.insert.{i}"
            if table not in cfg.tables:
                out.append(f"{where}: unknown table {table!r} (local tables: {', '.join(local) or 'none'})")
            elif cfg.tables[table].mode != "local":
                out.append(
                    f"{where}: table {table!r} is not a local table (mode = 'local'); only "
                    f"local tables take INSERTs (local tables: {', '.join(local) or 'none'})"
                )
            elif table in role.insert[:i]:
                out.append(f"{where}: table {table!r} is listed twice")
    return out


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
    if problems := insert_grant_problems(cfg):
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise ConfigError(f"{source}: {problems[0]}{more}")
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
        cfg = cfg.model_copy(
            update={
                "server": cfg.server.model_copy(
                    update={"state_dir": (path.parent / cfg.server.state_dir).resolve()}
                )
            }
        )
    return cfg
