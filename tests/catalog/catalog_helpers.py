from __future__ import annotations

import json
from pathlib import Path

from config.models import Config

HERE = Path(__file__).parent


def make_config() -> Config:
    return Config.model_validate(
        {
            "server": {"auth": "trust"},
            "tiers": {"basic": {"epsilon": 1.0, "budget": 10.0}},
            "roles": {"analyst": {"tier": "basic"}},
            "tables": {
                "pums": {
                    "source": "pums_raw",
                    "description": "Census microdata",
                    "columns": {
                        "age": {"type": "int", "lower": 0, "upper": 100, "nullable": False},
                        "sex": {"type": "int", "domain": [1, 2]},
                        "income": {
                            "type": "float",
                            "lower": 0,
                            "upper": 500000,
                            "description": "yearly income",
                        },
                        "name": {"type": "text"},
                        "married": {"type": "bool"},
                    },
                },
                "people": {"columns": {"id": {"type": "int", "nullable": False}, "city": {"type": "text"}}},
            },
        }
    )


def psql_queries(name: str, oid: int | None = None) -> list[str]:
    text = (HERE / "psql_queries" / f"{name}.sql").read_text()
    chunks = [c.strip() for c in text.split("-- @@query\n")[1:]]
    return [c.replace("{oid}", str(oid)) if oid is not None else c for c in chunks]


def client_queries() -> dict[str, dict]:
    return {q["name"]: q for q in json.loads((HERE / "client_queries" / "captured.json").read_text())}
