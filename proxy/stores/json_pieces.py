"""JSON of large stored documents, encoded and decoded a piece at a time, so that
nothing heavy holds the event loop.

``json.dumps`` / ``json.loads`` run in C and hold the GIL for the whole call, whichever
thread makes it: for a large document (a data-market ladder's body for 10,000 cells) the
event loop, waiting for the GIL, answers nobody for the whole call, however small the switch
interval. These functions give the
same results from many short C calls, so a worker thread doing them gives the GIL back
between two pieces:

* :func:`dumps` returns exactly ``json.dumps(obj)`` (default separators): the members of a
  top-level object, and the elements of a long top-level list or of a long list held by
  the top-level object, are encoded :data:`PIECE` elements per call and joined.
* :func:`loads` equals ``json.loads(text)``: a top-level object or list is walked by
  hand and each of its members, and each element of a list directly under it, is
  decoded by one ``raw_decode`` call (a few microseconds each).

Deeper structure is encoded and decoded whole (it is one element's worth).
"""

from __future__ import annotations

import json
from typing import Any

PIECE = 256  # list elements per json.dumps call
SMALL = 32_768  # texts (characters) shorter than this are decoded in one call

_decoder = json.JSONDecoder()
_WS = " \t\n\r"


def dumps(obj) -> str:
    """``json.dumps(obj)``, in pieces (see the module's docstring)."""
    if isinstance(obj, dict) and all(type(k) is str for k in obj):
        return "{" + ", ".join(f"{json.dumps(k)}: {_list(v)}" for k, v in obj.items()) + "}"
    return _list(obj)


def _list(v) -> str:
    if type(v) is not list or len(v) <= PIECE:
        return json.dumps(v)
    return "[" + ", ".join(json.dumps(v[i : i + PIECE])[1:-1] for i in range(0, len(v), PIECE)) + "]"


def loads(text: str):
    """``json.loads(text)``, in pieces (see the module's docstring)."""
    if len(text) < SMALL:
        return json.loads(text)
    i = _skip(text, 0)
    if text[i : i + 1] not in ("{", "["):
        return json.loads(text)
    value, end = _container(text, i, depth=0)
    if _skip(text, end) != len(text):
        raise json.JSONDecodeError("Extra data", text, end)
    return value


def _skip(s: str, i: int) -> int:
    while i < len(s) and s[i] in _WS:
        i += 1
    return i


def _value(s: str, i: int, depth: int):
    if depth < 1 and s[i : i + 1] in ("{", "["):
        return _container(s, i, depth + 1)
    return _decoder.raw_decode(s, i)


def _container(s: str, i: int, depth: int):
    """The object or list starting at ``s[i]``: (value, index after it)."""
    close = "}" if s[i] == "{" else "]"
    obj: dict[str, Any] = {}
    arr: list[Any] = []
    out: dict[str, Any] | list[Any] = obj if close == "}" else arr
    i = _skip(s, i + 1)
    if s[i : i + 1] == close:
        return out, i + 1
    while True:
        if close == "}":
            key, i = _decoder.raw_decode(s, i)
            if not isinstance(key, str):
                raise json.JSONDecodeError("Expecting property name", s, i)
            i = _skip(s, i)
            if s[i : i + 1] != ":":
                raise json.JSONDecodeError("Expecting ':' delimiter", s, i)
            value, i = _value(s, _skip(s, i + 1), depth)
            obj[key] = value
        else:
            value, i = _value(s, i, depth)
            arr.append(value)
        i = _skip(s, i)
        if s[i : i + 1] == close:
            return out, i + 1
        if s[i : i + 1] != ",":
            raise json.JSONDecodeError(f"Expecting ',' or '{close}'", s, i)
        i = _skip(s, i + 1)
