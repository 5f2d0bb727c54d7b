"""What ``dpgate init`` writes from what it reads: every name and value read from the data or
the command line reaches the TOML file (as a value, a key, or inside a comment) and the
progress lines through :func:`toml_quote`; :class:`InitError` is a one-line reason init cannot
go on."""

from __future__ import annotations

import re
import sys

__all__ = ["InitError", "progress", "shown", "toml_key", "toml_quote", "toml_value"]


class InitError(Exception):
    """A one-line reason init cannot read its input."""


# -- TOML text: every name and value read from the data or the command line reaches the file
# through toml_quote (as a value, a key, or inside a comment) ---------------------------------
_BARE = re.compile(r"[A-Za-z0-9_-]+")
_ESCAPES = {"\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r", '"': '\\"', "\\": "\\\\"}


def toml_quote(s: str) -> str:
    """``s`` as a TOML basic string on one printable line (TOML 1.0, "String"): ``"`` and ``\\``
    escaped, and every character that ``str.isprintable`` rejects — C0/C1 controls with NUL, DEL
    and NEL (U+0085), the line and paragraph separators U+2028/U+2029, format characters such as
    bidi overrides, unassigned code points — written as an escape. So a name or value read from
    the data can neither end the string nor start a line, in TOML or in any editor or tool that
    breaks lines at Unicode separators. A lone surrogate is no Unicode scalar value, which TOML
    cannot spell: InitError."""
    out = ['"']
    for ch in s:
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif ch.isprintable():
            out.append(ch)
        elif 0xD800 <= ord(ch) <= 0xDFFF:
            raise InitError(
                f"a name or value read from the data holds a lone surrogate (U+{ord(ch):04X}), "
                "which TOML cannot spell"
            )
        else:
            out.append(f"\\u{ord(ch):04X}" if ord(ch) <= 0xFFFF else f"\\U{ord(ch):08X}")
    return "".join(out) + '"'


def toml_key(name: str) -> str:
    """A TOML key: bare when it is one (``A-Za-z0-9_-``), else quoted by :func:`toml_quote`."""
    return name if _BARE.fullmatch(name) else toml_quote(name)


def toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return repr(v)
    return toml_quote(str(v))


def shown(text: str) -> str:
    """A name or type inside a comment or a progress line: as is when it is a bare word, else
    quoted by :func:`toml_quote` (so it cannot end the comment's line)."""
    return toml_key(text)


def progress(msg: str) -> None:
    print(f"dpgate init: {msg}", file=sys.stderr, flush=True)
