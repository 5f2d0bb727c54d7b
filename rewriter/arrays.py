"""PostgreSQL's array literal text (``'{r,p}'``, ``'{1,2,3}'``), read as ``array_in`` reads a
one-dimensional array: elements between braces, separated by commas, double-quoted with
backslash escapes, unquoted ``NULL`` the null element. Clients send arrays this way
(``= ANY('{r,p}')``, an array parameter sent as text). SQL only: no I/O.
"""

from __future__ import annotations


class ArrayLiteralError(ValueError):
    """Text that is not a one-dimensional PostgreSQL array literal."""


def parse_array_literal(text: str) -> list[str | None]:
    """The elements of a one-dimensional PostgreSQL array literal (``array_in``'s rules)."""
    s = text.strip()
    if not (s.startswith("{") and s.endswith("}")):
        raise ArrayLiteralError(f'malformed array literal: "{text}"')
    body, i = s[1:-1], 0
    out: list[str | None] = []
    if not body.strip():
        return []
    while True:
        while i < len(body) and body[i].isspace():
            i += 1
        if i < len(body) and body[i] == '"':
            i, buf = i + 1, []
            while i < len(body) and body[i] != '"':
                if body[i] == "\\" and i + 1 < len(body):
                    i += 1
                buf.append(body[i])
                i += 1
            if i >= len(body):
                raise ArrayLiteralError(f'malformed array literal: "{text}"')
            i += 1
            out.append("".join(buf))
        else:
            j, buf = i, []
            while j < len(body) and body[j] != ",":
                if body[j] in '{}"':
                    raise ArrayLiteralError(f'malformed array literal: "{text}" (one dimension only)')
                if body[j] == "\\" and j + 1 < len(body):
                    j += 1
                buf.append(body[j])
                j += 1
            item = "".join(buf).strip()
            if not item:
                raise ArrayLiteralError(f'malformed array literal: "{text}"')
            out.append(None if item.upper() == "NULL" else item)
            i = j
        while i < len(body) and body[i].isspace():
            i += 1
        if i >= len(body):
            return out
        if body[i] != ",":
            raise ArrayLiteralError(f'malformed array literal: "{text}"')
        i += 1
