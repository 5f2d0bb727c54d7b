"""Checking and converting one ingested value (both ingestion paths: :mod:`.ldp_load`
metric LDP and :mod:`.subset_ingest` Subset), and the error they raise."""

from __future__ import annotations

import math

import numpy as np

__all__ = ["IngestError", "public_value", "bits_matrix"]


class IngestError(ValueError):
    """A row cannot be ingested; ``sqlstate`` for the wire, message names the row/column."""

    def __init__(self, sqlstate: str, message: str, hint: str | None = None):
        super().__init__(message)
        self.sqlstate, self.message, self.hint = sqlstate, message, hint


_TRUE = {"t", "true", "yes", "y", "on", "1"}
_FALSE = {"f", "false", "no", "n", "off", "0"}


def public_value(v, typ: str, col: str, domain):
    """A public column's raw value (string from a CSV, or a Python/numpy value) as a value
    of its declared type ``typ``, checked against its ``domain`` (None: any); '' and None
    are NULL. A value that is not one: 22P02; outside the domain: 23514."""
    if v is None or (isinstance(v, str) and v == ""):
        return None
    out: int | float | bool | str
    try:
        if typ == "int":
            if isinstance(v, bool):
                raise ValueError
            if isinstance(v, str):
                v = v.strip()
                out = int(v) if v.lstrip("+-").isdigit() else float(v)
            else:
                out = v
            if isinstance(out, float):
                if not out.is_integer():
                    raise ValueError
                out = int(out)
            out = int(out)
        elif typ == "float":
            if isinstance(v, bool):
                raise ValueError
            out = float(v)
            if not math.isfinite(out):
                raise ValueError
        elif typ == "bool":
            if isinstance(v, bool):
                out = v
            elif str(v).strip().lower() in _TRUE | _FALSE:
                out = str(v).strip().lower() in _TRUE
            else:
                raise ValueError
        else:
            out = str(v)
    except (ValueError, TypeError, OverflowError):
        raise IngestError("22P02", f"invalid {typ} value {v!r} for column {col}") from None
    if domain is not None and out not in domain:
        shown = ", ".join(map(repr, domain[:8])) + (", …" if len(domain) > 8 else "")
        raise IngestError("23514", f"value {out!r} for column {col} is not in its declared domain ({shown})")
    return out


def bits_matrix(cols: dict, key: str, n: int, width: int, what: str = "") -> np.ndarray:
    """The n × width 0/1 matrix of a reports-CSV column ``key`` (strings of 0/1)."""
    vals = cols.get(key)
    if vals is None:
        raise IngestError("42703", f"the reports file has no column {key}")
    try:
        raw = "".join(vals).encode("ascii")
    except (TypeError, UnicodeEncodeError):
        raise IngestError("22P02", f"column {key} must hold strings of 0/1") from None
    if len(raw) != n * width or any(len(v) != width for v in vals):
        raise IngestError("22P02", f"every {key} value must be {width} characters of 0/1{what}")
    bits = np.frombuffer(raw, dtype=np.uint8).reshape(n, width) - 48
    if bits.size and bits.max() > 1:
        raise IngestError("22P02", f"column {key} must hold only 0 and 1")
    return bits
