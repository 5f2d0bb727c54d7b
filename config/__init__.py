"""dpgate configuration: pydantic models and the TOML loader."""

from .load import ConfigError, load_config, parse_config
from .models import TLS, Backend, Column, Config, Limits, Role, Server, Table, Tier

__all__ = [
    "Backend",
    "Column",
    "Config",
    "ConfigError",
    "Limits",
    "Role",
    "Server",
    "Table",
    "Tier",
    "TLS",
    "load_config",
    "parse_config",
]
