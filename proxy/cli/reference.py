"""``dpgate config-reference``: every config key with its type, default and description,
generated from the pydantic models (:mod:`config.models`; the descriptions are the fields'
attribute docstrings or ``Field(description=...)``), so it cannot drift from what loads.

    dpgate config-reference              # text, one section per TOML table
    dpgate config-reference --markdown   # the same as Markdown tables
"""

from __future__ import annotations

import sys
import types
import typing
from pathlib import Path
from types import SimpleNamespace

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from config import Config

__all__ = ["add_parser", "cmd_reference", "reference_rows"]

NO_DESCRIPTION = "(no description)"


def _model_of(ann) -> type[BaseModel] | None:
    """The model a field holds (itself, or inside ``X | None``)."""
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return ann
    if typing.get_origin(ann) in (typing.Union, types.UnionType):
        models = [a for a in typing.get_args(ann) if isinstance(a, type) and issubclass(a, BaseModel)]
        return models[0] if len(models) == 1 else None
    return None


def _type_name(ann) -> str:
    origin, args = typing.get_origin(ann), typing.get_args(ann)
    if origin is typing.Annotated:  # a constrained member of a union: `integer (>= 1) | "auto"`
        cons = _constraints(
            SimpleNamespace(metadata=[m for a in args[1:] for m in getattr(a, "metadata", [a])])
        )
        return _type_name(args[0]) + (f" ({cons})" if cons else "")
    if origin is typing.Literal:
        return " | ".join(f'"{a}"' if isinstance(a, str) else str(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return " | ".join(_type_name(a) for a in args if a is not type(None)) + (
            " (optional)" if type(None) in args else ""
        )
    if origin is list:
        return f"list of {_type_name(args[0])}"
    if origin is tuple:
        return "[" + ", ".join(_type_name(a) for a in args) + "]"
    if origin is dict:
        return f"table of {_type_name(args[1])}"
    if ann is Path:
        return "path"
    if isinstance(ann, type):
        return {"str": "string", "int": "integer", "float": "number", "bool": "boolean"}.get(
            ann.__name__, ann.__name__
        )
    return str(ann)


def _constraints(field) -> str:
    out = []
    for m in field.metadata:
        for attr, sym in (("gt", ">"), ("ge", ">="), ("lt", "<"), ("le", "<="), ("pattern", "matches")):
            v = getattr(m, attr, None)
            if v is not None:
                out.append(f"{sym} {v}")
    return ", ".join(out)


def _default(field) -> str:
    if field.is_required():
        return "required"
    v = field.get_default(call_default_factory=True)
    if v is None:
        return "unset"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (str, Path)):
        return f'"{v}"'
    if isinstance(v, (list, dict)) and not v:
        return "[]" if isinstance(v, list) else "{}"
    return repr(v)


def reference_rows(model: type[BaseModel] = Config, prefix: str = "") -> list[tuple[str, str, str, str, str]]:
    """(section, key, type, default, description) of every leaf key, sections first-seen order."""
    rows: list[tuple[str, str, str, str, str]] = []
    nested: list[tuple[str, type[BaseModel], FieldInfo]] = []
    for name, f in model.model_fields.items():
        key = f.alias or name
        ann = f.annotation
        sub = _model_of(ann)
        value_model = _model_of(typing.get_args(ann)[1]) if typing.get_origin(ann) is dict else None
        if value_model is not None:
            what = {
                "tiers": "tier",
                "roles": "role",
                "tables": "table",
                "columns": "column",
                "categories": "column",
            }.get(key, "name")
            nested.append((f"{prefix}{key}.<{what}>", value_model, f))
            continue
        if sub is not None:
            nested.append((f"{prefix}{key}", sub, f))
            continue
        desc = " ".join((f.description or NO_DESCRIPTION).split())
        cons = _constraints(f)
        rows.append(
            (prefix.rstrip("."), key, _type_name(ann) + (f" ({cons})" if cons else ""), _default(f), desc)
        )
    for path, sub, f in nested:
        desc = " ".join((f.description or NO_DESCRIPTION).split())
        rows.append((path, "", "section", "", desc))
        rows += reference_rows(sub, path + ".")
    return rows


def cmd_reference(args) -> int:
    rows = reference_rows()
    out, section = [], None
    for sec, key, typ, default, desc in rows:
        if key == "":
            out += ["", f"## [{sec}]" if args.markdown else f"[{sec}]", desc, ""]
            if args.markdown:
                out += ["| key | type | default | description |", "|---|---|---|---|"]
            section = sec
            continue
        if sec != section:  # top-level keys
            section = sec
            out += ["", "## top level" if args.markdown else "(top level)", ""]
            if args.markdown:
                out += ["| key | type | default | description |", "|---|---|---|---|"]
        if args.markdown:
            out.append(
                f"| `{key}` | {typ.replace('|', '&#124;')} | {default.replace('|', '&#124;')} | {desc} |"
            )
        else:
            out.append(f"  {key:<26} {typ}  [default: {default}]")
            out.append(f"  {'':<26} {desc}")
    sys.stdout.write("\n".join(out).lstrip("\n") + "\n")
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser("config-reference", help="every config key: type, default, description")
    p.add_argument("--markdown", action="store_true", help="Markdown tables")
    p.set_defaults(fn=cmd_reference)
