"""`dpgate config-reference` lists every config key, with its type, default and a
description taken from the models (attribute docstrings / Field(description=...))."""

from __future__ import annotations

import typing

from pydantic import BaseModel

from config import Config
from proxy.cli import main
from proxy.cli.reference import NO_DESCRIPTION, reference_rows


def _models(model: type[BaseModel], seen: set) -> None:
    """Every model reachable from Config, walked independently of the reference's own walk."""
    seen.add(model)
    for f in model.model_fields.values():
        for a in (f.annotation, *typing.get_args(f.annotation)):
            if isinstance(a, type) and issubclass(a, BaseModel) and a not in seen:
                _models(a, seen)


def test_every_key_is_listed_once_with_a_description():
    seen: set = set()
    _models(Config, seen)
    fields = sum(len(m.model_fields) for m in seen)
    rows = reference_rows()
    assert len(rows) == fields  # a leaf key or a section per field
    missing = [f"{s}.{k}" for s, k, _t, _d, desc in rows if desc == NO_DESCRIPTION]
    assert not missing, f"describe these fields in config/models.py (a docstring line under each): {missing}"
    keys = {(s, k) for s, k, *_ in rows}
    assert ("tables.<table>", "source") in keys and ("ledger", "schema") in keys  # the alias, as written
    assert ("tables.<table>.columns.<column>", "domain") in keys and ("tiers.<tier>", "ladder") in keys


def test_command_prints_types_defaults_and_markdown(capsys):
    assert main(["config-reference"]) == 0
    out = capsys.readouterr().out
    assert "[tables.<table>.columns.<column>]" in out
    line = next(x for x in out.splitlines() if x.strip().startswith("period "))
    assert '"day" | "week" | "month" | "never"' in line and '[default: "day"]' in line
    assert "read_parquet(" in out  # the documented source forms
    assert main(["config-reference", "--markdown"]) == 0
    md = capsys.readouterr().out
    assert "## [server.limits]" in md and "| `max_connections` | integer (>= 1) | 100 |" in md


def test_the_documented_reference_is_the_commands_output(capsys):
    """docs/config-reference.md is `dpgate config-reference --markdown` as it prints now (its header
    says how to regenerate it)."""
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs" / "config-reference.md").read_text()
    assert main(["config-reference", "--markdown"]) == 0
    generated = doc.rsplit("<!-- generated -->", 1)[1].lstrip("\n")
    assert generated == capsys.readouterr().out, "regenerate docs/config-reference.md (its header says how)"
