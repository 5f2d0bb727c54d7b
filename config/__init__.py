"""dpgate configuration: pydantic models and the TOML loader."""
from .models import Backend, Column, Config, Limits, Role, Server, Table, Tier, TLS
from .load import ConfigError, load_config, parse_config

__all__ = ["Backend", "Column", "Config", "ConfigError", "Limits", "Role", "Server", "Table",
           "Tier", "TLS", "load_config", "parse_config"]
