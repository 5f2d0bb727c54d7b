"""Compact release storage: ``proxy.stores.release_codec`` format 1 and
``proxy.stores.json_pieces``.

* every column kind comes back exactly as ``json.loads(json.dumps(answer))`` would give it
  (ints and floats bit for bit, their Python types, text, None, bools, big ints);
* an answer written in the old format (plain JSON) is still read, by the ledger and, end
  to end, served as a repeat;
* the ledger's own JSON reads (the ladder summary's ``json_extract``) still see a packed
  answer's metadata, on SQLite and on Postgres;
* a 10,000-cell COUNT + AVG release is stored in ≤ 2× the bytes measured when this was
  written (``STORED_10K``), and the SQLite ledger grows by ≤ 2× ``LEDGER_10K``.
"""

from __future__ import annotations

import json
import math
import random
import sys
import uuid
from pathlib import Path

import psycopg
import pytest

import proxy.stores.ledger as ledger_mod
from bench.cells import _plan_and_cells
from mechanisms import SeededSource
from proxy.pipeline.release import noisy_answer
from proxy.stores import json_pieces
from proxy.stores.ledger import Ledger
from proxy.stores.ledger_mac import Mac, read_key
from proxy.stores.release_codec import PACK_MIN_CELLS, PACKED, decode_answer, encode_answer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from support.loop_service import config as cells_config
from support.loop_service import create_cells
from support.service import Service, ask

STORED_10K = 100_000  # bytes of the stored text, measured: 99,676 (the plain JSON: 332,750)
LEDGER_10K = 100_000  # bytes the SQLite ledger grew by (checkpointed), measured: 98,304 (JSON: 331,776)


@pytest.fixture(params=["sqlite", "postgres"])
def ledger(request, tmp_path):
    if request.param == "sqlite":
        led = Ledger(tmp_path / "l.db")
    else:
        led = Ledger(None, dsn=request.getfixturevalue("postgres").dsn, schema="t_" + uuid.uuid4().hex[:12])
    yield led
    led.close()


def _answer(n: int, seed: int = 7) -> dict:
    """An answer with one key column of every kind the codec packs or falls back on."""
    rnd = random.Random(seed)
    keys = [[g, f"city-{g % 97}", 2**70 + g if g % 5 == 0 else g] for g in range(1, n + 1)]
    values = [
        [
            rnd.randrange(-5, 300),
            rnd.uniform(-1e6, 1e6),
            None if g % 7 == 0 else rnd.random(),
            g % 3 == 0,
            float(g) if g % 2 else g,
        ]
        for g in range(n)
    ]
    values[3][1], values[4][1], values[5][1] = -0.0, math.inf, -math.inf
    return {
        "keys": keys,
        "values": values,
        "half_width": [6.0, 1e5, 0.1, 0.0, 1.0],
        "mechanism": ["geometric_count", "hourglass_mean", "x", "y", "z"],
        "epsilon": [0.5] * 5,
        "labels": ["count(*)", "avg(a)", "b", "c", "d"],
        "ladder": {"id": 3, "level": 0.5, "tier": "bronze"},
    }


def _same(a, b) -> bool:
    """Equal, floats bit for bit (so -0.0 ≠ 0.0) and types kept (1 ≠ 1.0); a decoded answer
    may be a :class:`~proxy.stores.answer.ColumnarAnswer` (the dict it stands for)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return math.copysign(1, a) == math.copysign(1, b) and (a == b or (math.isnan(a) and math.isnan(b)))
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return a == b


def test_every_column_kind_round_trips_exactly():
    a = _answer(1000)
    text = encode_answer(a)
    assert PACKED in json.loads(text)  # format 1: packed
    assert _same(decode_answer(text), json.loads(json.dumps(a)))
    assert len(text) < len(json.dumps(a)) / 2


def test_small_or_irregular_answers_stay_plain_json():
    small = _answer(PACK_MIN_CELLS - 1)
    assert encode_answer(small) == json.dumps(small)
    ragged = _answer(200)
    ragged["values"][10] = ragged["values"][10][:2]  # rows of two widths: not packed
    assert encode_answer(ragged) == json.dumps(ragged)
    assert _same(decode_answer(json.dumps(ragged)), json.loads(json.dumps(ragged)))


def test_a_stored_text_given_as_bytes_decodes_as_its_string():
    """The stored text may come back as bytes (UTF-8): a plain JSON answer long enough to be
    read in pieces decodes as the same text given as a string."""
    plain = {"keys": [[i] for i in range(20_000)], "values": [[1.5] for _ in range(20_000)], "labels": ["n"]}
    text = json.dumps(plain)
    assert _same(decode_answer(text.encode()), decode_answer(text))
    assert _same(decode_answer(encode_answer(_answer(1000)).encode()), json.loads(json.dumps(_answer(1000))))


def test_an_unknown_format_is_refused_not_misread():
    text = json.loads(encode_answer(_answer(100)))
    text[PACKED] = "9:" + text[PACKED].split(":", 1)[1]
    with pytest.raises(ValueError, match="unknown format"):
        decode_answer(json.dumps(text))


def test_json_pieces_is_json():
    doc = {
        "family": "tsg",
        "cells": [{"key": [g], "raw": {"c": {"2.0": g, "0.5": -g}}} for g in range(5000)],
        "v": [1.5, None, 'x\n"y"', math.inf],
        "nested": {"deep": list(range(2000))},
    }
    text = json_pieces.dumps(doc)
    assert text == json.dumps(doc)
    assert _same(json_pieces.loads(text), json.loads(text))
    assert _same(json_pieces.loads(json.dumps(doc, indent=1)), doc)
    for bad in ('{"a": 1,' + " " * 40_000 + "}", "[1 2]" + " " * 40_000, '{"a": 1} x' + " " * 40_000):
        with pytest.raises(json.JSONDecodeError):
            json_pieces.loads(bad)


def _record(led: Ledger, answer: dict, key: str = "k", role: str = "r"):
    res = led.reserve(role=role, epsilon=1.0, budget=1e6, period="day")
    return led.record(
        res, key=key, data_version=1, canonical=key, statement="s", mechanism="m", answer=answer
    )


def test_packed_and_old_plain_releases_are_read_back(ledger, monkeypatch):
    a = _answer(500)
    _record(ledger, a, key="new")
    monkeypatch.setattr(ledger_mod, "_encode", json.dumps)  # what dpgate wrote before format 1
    _record(ledger, a, key="old")
    want = json.loads(json.dumps(a))
    for key in ("new", "old"):
        _, _, stored = ledger.snapshot("r", key, "day")
        assert stored.heavy  # decoded off the event loop by kind.run
        assert _same(stored.answer, want)
        assert _same(ledger.lookup("r", key, 1).answer, want)


def test_the_ledgers_json_reads_see_a_packed_answers_metadata(ledger):
    _record(ledger, _answer(500))
    db = ledger.new_connection()
    try:  # ladder_store.ladder_summaries' read (translated to jsonb on Postgres)
        rows = db.execute(
            "SELECT json_extract(answer, '$.ladder.id'), json_extract(answer, '$.ladder.tier') "
            "FROM releases WHERE instr(answer, '\"ladder\"') > 0"
        ).fetchall()
    finally:
        db.close()
    assert [(int(i), t) for i, t in rows] == [(3, "bronze")]


def _release_10k() -> dict:
    """A 10,000-cell COUNT + AVG release as the pipeline makes it (bench.cells' cells)."""
    plan, cells = _plan_and_cells(10_000, "age", int)
    return noisy_answer(plan, cells, 1.0, SeededSource(21))


def _ledger_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.parent.glob(path.name + "*"))


def test_a_10k_cell_release_is_stored_compactly(tmp_path):
    answer = _release_10k()
    text = encode_answer(answer)
    print(
        f"10,000-cell COUNT+AVG release: stored {len(text):,} bytes (plain JSON {len(json.dumps(answer)):,})"
    )
    assert len(text) <= 2 * STORED_10K
    led = Ledger(tmp_path / "l.db")
    try:
        _record(led, _answer(10), key="warm")
        db = led.new_connection()
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        before = _ledger_bytes(led.path)
        _record(led, answer)
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        grew = _ledger_bytes(led.path) - before
        db.close()
    finally:
        led.close()
    print(f"  the SQLite ledger grew by {grew:,} bytes")
    assert grew <= 2 * LEDGER_10K


def test_an_old_format_release_is_served_as_a_repeat(tmp_path):
    """A release the ledger holds in the old plain-JSON format is served again, unchanged
    and free, by the running service (a 10,000-cell one, rewritten in place)."""
    svc = Service(cells_config(), tmp_path, people_rows=5_000).start()
    try:
        create_cells(svc, rows=30_000)
        sql = "SELECT g, COUNT(*), AVG(x) FROM cells WHERE x > 10 GROUP BY g ORDER BY g DESC"
        first, _ = ask(svc, sql)  # simple query protocol: 10,000 rows
        db = svc.gw.ledger.new_connection()
        ((rid, text, key, dv, eps, delta, mech, period),) = db.execute(
            "SELECT id, answer, key, data_version, epsilon_nano, delta_femto, mechanism, period FROM releases "
            "WHERE role = 'analyst'"
        ).fetchall()
        assert PACKED in json.loads(text)
        old = json.dumps(decode_answer(text))
        mac = Mac(read_key(svc.gw.ledger.key_file)).release("analyst", key, dv, eps, delta, mech, old, period)
        db.execute(
            "UPDATE releases SET answer = ?, mac = ? WHERE id = ?", (old, mac, rid)
        )  # as dpgate wrote it
        db.close()
        again, notes = ask(svc, sql)
        notes_ext: list[str] = []
        with psycopg.connect(svc.dsn(), autocommit=True) as c:
            c.add_notice_handler(lambda d: notes_ext.append(d.message_primary))
            extended = c.execute(sql, prepare=True).fetchall()  # Parse / Bind / Execute
    finally:
        svc.close()
    assert len(first) == 10_000 and [r[0] for r in first] == list(range(10_000, 0, -1))
    assert again == first and "repeat of an earlier release" in notes[0]
    assert extended == first and "repeat of an earlier release" in notes_ext[0]


def test_random_byte_planes_are_stored_raw_and_every_choice_round_trips(monkeypatch):
    """Format 2: the random-looking planes of a noisy AVG's floats go uncompressed (the header's
    ``raw`` masks say which); whatever planes the test picks, the answer comes back exact."""
    import base64
    import zlib

    import proxy.stores.release_codec as codec

    answer = _release_10k()
    want = json.loads(json.dumps(answer))
    text = encode_answer(answer)
    version, body = json.loads(text)[PACKED].split(":", 1)
    data = base64.b64decode(body)
    zlen = int.from_bytes(data[:4], "little")
    payload = zlib.decompress(data[4 : 4 + zlen])
    header = json.loads(payload[4 : 4 + int.from_bytes(payload[:4], "little")])
    assert version == "2" and header["types"][-1] == "d"
    raw = header["raw"][-1]  # AVG: mantissa bytes that look random
    assert raw != 0 and raw >> 6 == 0  # the sign / exponent bytes: compressed
    assert len(data) - 4 - zlen == 10_000 * sum(bin(m).count("1") for m in header["raw"])
    assert _same(decode_answer(text), want)
    assert json.loads(text).keys() == {k for k in want if k not in ("keys", "values")} | {PACKED}
    for bits in (0.0, 9.0):  # every plane raw; none raw
        monkeypatch.setattr(codec, "RAW_BITS", bits)
        other = encode_answer(_release_10k())
        assert _same(decode_answer(other), want)
    a = _answer(3000)  # ints, floats, JSON columns
    monkeypatch.setattr(codec, "RAW_BITS", 0.0)
    assert _same(decode_answer(encode_answer(a)), json.loads(json.dumps(a)))


def test_format_1_texts_are_still_read():
    """A format-1 text (the whole payload compressed, no raw planes) decodes as it did."""
    import base64

    a = _answer(500)  # < RAW_MIN_CELLS: nothing raw
    doc = json.loads(encode_answer(a))
    data = base64.b64decode(doc[PACKED].split(":", 1)[1])
    doc[PACKED] = "1:" + base64.b64encode(data[4:]).decode()  # format 1: base64 of zlib(payload)
    assert _same(decode_answer(json.dumps(doc)), json.loads(json.dumps(a)))


def test_a_format_2_text_that_does_not_add_up_is_refused():
    """Raw planes cut short, or bytes left over after them: a ValueError, never a misread."""
    import base64

    doc = json.loads(encode_answer(_release_10k()))
    data = base64.b64decode(doc[PACKED].split(":", 1)[1])
    for bad in (data[:-1], data + b"\0"):
        doc[PACKED] = "2:" + base64.b64encode(bad).decode()
        with pytest.raises(ValueError, match="stored answer"):
            decode_answer(json.dumps(doc))
