"""The config a command runs with, as the service reads it: a file (with the checks that
need the rewriter) or the demo's (with its generated passwords), and the state directory.
Shared by every command (:mod:`.main`, :mod:`.ldp`)."""

from __future__ import annotations

import tomllib
from pathlib import Path

from config import Config, ConfigError, load_config, parse_config

from ..stores.state_dir import default_state_dir
from ..wire.auth import make_verifier

__all__ = ["load_config_for_check", "load_service_config", "resolve"]


def _demo_config(state_dir: Path) -> tuple[Config, dict[str, str]]:
    from ..demo import demo_config_path, demo_passwords  # deferred: only without a config

    data = tomllib.loads(demo_config_path().read_text())
    pw = demo_passwords(state_dir, data["roles"])
    for role, spec in data["roles"].items():
        spec["scram"] = make_verifier(pw[role])
    return parse_config(data, str(demo_config_path())), pw


def validate_config(cfg: Config) -> list[str]:
    """The per-record policies' problems (Chen et al. 2025); their checker needs the
    rewriter, so it is imported only for a config that declares one."""
    if all(t.privacy is None for t in cfg.tables.values()):
        return []
    from ..pipeline.per_record_policy import validate_config as per_record_problems  # deferred: the rewriter

    return per_record_problems(cfg)


def load_service_config(path) -> Config:
    """A config file as the service reads it: the models' checks (:mod:`config`),
    then those that need the rewriter — per-record policies (Chen et al. 2025)."""
    cfg = load_config(path)
    if problems := validate_config(cfg):
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise ConfigError(f"{path}: {problems[0]}{more}")
    return cfg


def load_config_for_check(path) -> Config:
    """The config as ``serve`` would run it (``dpgate check-config``): a demo config
    (``demo = true``) gets its SCRAM verifiers at start, so a throwaway one stands in."""
    try:
        data = tomllib.loads(Path(path).read_text())
    except (OSError, tomllib.TOMLDecodeError):
        return load_service_config(path)  # its own error message
    if not data.get("demo"):
        return load_service_config(path)
    for spec in data.get("roles", {}).values():
        spec.setdefault("scram", make_verifier("check-config", iterations=4096))
    cfg = parse_config(data, str(path))
    if problems := validate_config(cfg):
        raise ConfigError(f"{path}: {problems[0]}")
    return cfg


def resolve(args) -> tuple[Config, Path, dict[str, str]]:
    """The config (file or demo), the state dir, and demo passwords (if any)."""
    if args.config:
        cfg = load_service_config(args.config)
        state = Path(args.state_dir or cfg.server.state_dir or default_state_dir())
        return cfg, state, {}
    state = Path(args.state_dir or default_state_dir())
    cfg, pw = _demo_config(state)
    return cfg, state, pw
