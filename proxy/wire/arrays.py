"""Decoding one-dimensional array Bind parameters (``= ANY($1)`` with a list, as psycopg sends it).

Text format: ``{1,2,NULL}``, ``{"a b","c\\"d"}`` (elements decoded as the element type);
binary format: ndim, has-null flag, element OID, (length, lower bound), then
length-prefixed elements. Multidimensional arrays are refused (0A000).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from .api import SqlError

MAX_ELEMENTS = 100_000  # the rewriter's IN-list cap is far lower; this only bounds decoding


def _bad(oid: int) -> SqlError:
    return SqlError("22P02", "malformed array literal in bind parameter")


def decode_text(oid: int, elem: int, s: str, decode_elem: Callable[[int, str], Any]) -> list[Any]:
    t = s.strip()
    if not (t.startswith("{") and t.endswith("}")):
        raise _bad(oid)
    body, out, i, n = t[1:-1], [], 0, len(t) - 2
    if not body.strip():
        return []
    while i <= n:
        while i < n and body[i] == " ":
            i += 1
        if i < n and body[i] == "{":
            raise SqlError("0A000", "multidimensional arrays are not supported as parameters")
        if i < n and body[i] == '"':
            j, buf = i + 1, []
            while j < n and body[j] != '"':
                if body[j] == "\\" and j + 1 < n:
                    j += 1
                buf.append(body[j])
                j += 1
            if j >= n:
                raise _bad(oid)
            item, quoted, j = "".join(buf), True, j + 1
        else:
            j = i
            while j < n and body[j] != ",":
                j += 1
            item, quoted = body[i:j].strip(), False
            if '"' in item or "\\" in item or not item:
                raise _bad(oid)
        while j < n and body[j] == " ":
            j += 1
        if j < n and body[j] != ",":
            raise _bad(oid)
        out.append(None if (not quoted and item.upper() == "NULL") else decode_elem(elem, item))
        if len(out) > MAX_ELEMENTS:
            raise SqlError("54000", "the array parameter has too many elements")
        i = j + 1
        if j >= n:
            break
    return out


def decode_binary(oid: int, elem: int, data: bytes, decode_elem: Callable[[int, bytes], Any]) -> list[Any]:
    try:
        ndim, _flags, _eoid = struct.unpack_from("!iiI", data)
        if ndim == 0:
            return []
        if ndim != 1:
            raise SqlError("0A000", "multidimensional arrays are not supported as parameters")
        count, _lb = struct.unpack_from("!ii", data, 12)
        if count < 0 or count > MAX_ELEMENTS:
            raise SqlError("54000", "the array parameter has too many elements")
        pos = 20
        out: list[Any] = []
        for _ in range(count):
            (size,) = struct.unpack_from("!i", data, pos)
            pos += 4
            if size < 0:
                out.append(None)
                continue
            if pos + size > len(data):
                raise ValueError
            out.append(decode_elem(elem, data[pos : pos + size]))
            pos += size
        if pos != len(data):
            raise ValueError
        return out
    except (struct.error, ValueError):
        raise SqlError("22P03", "incorrect binary data format in bind parameter") from None
