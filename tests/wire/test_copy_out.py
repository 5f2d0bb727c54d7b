"""COPY … TO STDOUT framing (proxy/wire/copy.py) against PostgreSQL's formats: the bytes a
real Postgres sends for the same rows (text and CSV escaping and quoting rules; binary
signature, header, per-tuple count, length-prefixed send forms, trailer)."""

from __future__ import annotations

import datetime as dt
import struct
from decimal import Decimal

from proxy.wire.api import Column, CopyFormat
from proxy.wire.copy import SIGNATURE, copy_out
from proxy.wire.types import DATE, FLOAT8, INT8, NUMERIC, TEXT


def messages(data: bytes) -> list[tuple[bytes, bytes]]:
    out, i = [], 0
    while i < len(data):
        n = struct.unpack("!I", data[i + 1 : i + 5])[0]
        out.append((data[i : i + 1], data[i + 5 : i + 1 + n]))
        i += 1 + n
    return out


COLS = [Column("k", INT8), Column("name", TEXT), Column("x", FLOAT8)]
ROWS = [(1, "a\tb\\c\nd", 1.5), (2, None, None), (3, "", -0.25)]


def test_text_format_escapes_as_postgres():
    data, n = copy_out(COLS, CopyFormat("text"), ROWS)
    msgs = messages(data)
    assert n == 3
    assert msgs[0] == (b"H", struct.pack("!bHHHH", 0, 3, 0, 0, 0))
    assert [m for t, m in msgs[1:-1]] == [b"1\ta\\tb\\\\c\\nd\t1.5\n", b"2\t\\N\t\\N\n", b"3\t\t-0.25\n"]
    assert msgs[-1] == (b"c", b"")


def test_text_format_delimiter_null_header():
    data, _ = copy_out(COLS, CopyFormat("text", header=True, delimiter="|", null="NULL"), [(1, "x|y", None)])
    assert [m for _, m in messages(data)[1:-1]] == [b"k|name|x\n", b"1|x\\|y|NULL\n"]


def test_csv_quotes_as_postgres():
    data, _ = copy_out(
        COLS,
        CopyFormat("csv", header=True),
        [(1, 'say "hi", ok', 2.0), (2, "", None), (3, "two\nlines", 0.5), (4, "plain", 1.0)],
    )
    assert [m for _, m in messages(data)[1:-1]] == [
        b"k,name,x\n",
        b'1,"say ""hi"", ok",2\n',
        b'2,"",\n',
        b'3,"two\nlines",0.5\n',
        b"4,plain,1\n",
    ]


def test_csv_force_quote_escape_and_null():
    fmt = CopyFormat("csv", delimiter=";", null="NA", quote="'", escape="\\", force_quote=frozenset({1}))
    data, _ = copy_out(COLS, fmt, [(1, "it's", None), (2, "NA", 3.0), (3, None, 1.0)])
    assert [m for _, m in messages(data)[1:-1]] == [b"1;'it\\'s';NA\n", b"2;'NA';3\n", b"3;NA;1\n"]


def test_binary_format_is_pgcopy():
    cols = COLS + [Column("d", DATE), Column("m", NUMERIC)]
    rows = [(7, "é", 2.5, dt.date(2000, 1, 2), Decimal("12.5")), (8, None, None, None, None)]
    data, n = copy_out(cols, CopyFormat("binary"), rows)
    msgs = messages(data)
    assert n == 2 and msgs[0] == (b"H", struct.pack("!bH5H", 1, 5, *[1] * 5))
    first = msgs[1][1]
    assert first.startswith(SIGNATURE + struct.pack("!ii", 0, 0))  # header with the first row
    body = first[len(SIGNATURE) + 8 :]
    assert body[:2] == struct.pack("!h", 5)
    assert body[2:14] == struct.pack("!iq", 8, 7) and body[14:20] == struct.pack("!i", 2) + "é".encode()
    assert body[20:32] == struct.pack("!id", 8, 2.5) and body[32:40] == struct.pack("!ii", 4, 1)
    assert body[40:44] == struct.pack("!i", len(body) - 44)  # numeric's send form follows
    assert msgs[2][1] == struct.pack("!h", 5) + struct.pack("!iq", 8, 8) + struct.pack("!i", -1) * 4
    assert msgs[3] == (b"d", struct.pack("!h", -1)) and msgs[4] == (b"c", b"")


def test_binary_without_rows_is_header_and_trailer():
    data, n = copy_out(COLS, CopyFormat("binary"), [])
    msgs = messages(data)
    assert n == 0 and msgs[1] == (b"d", SIGNATURE + struct.pack("!iih", 0, 0, -1)) and msgs[2] == (b"c", b"")
