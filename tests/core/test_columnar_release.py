"""A large central release column by column: DuckDB's numpy fetch
(``fetch(…, columnar=True)``), the completion by positions (``pipeline.columnar``), the
batch measurement on arrays and the :class:`~proxy.stores.answer.ColumnarAnswer`.

With the same seeded source the columnar path gives exactly the answer of the row path
(``rewriter.complete`` on the fetched rows, then ``noisy_answer`` on row tuples): every
value bit for bit and of the same Python type, the same stored bytes, the same rows — on
a fixture with NULL keys, NULL measures, groups outside the domain, empty cells, int and
float measures, one and two keys (an int and a text key)."""

from __future__ import annotations

import asyncio
import copy
import json
import math
import pickle
import random
import tomllib

import numpy as np
import pytest

from config import parse_config
from mechanisms import SeededSource
from proxy.backends import Columns, DuckDBBackend
from proxy.demo import demo_config_path
from proxy.pipeline.columnar import CellColumns, complete_columns
from proxy.pipeline.release import BATCH_MIN_CELLS, noisy_answer, releases_of
from proxy.pipeline.rows import answer_rows
from proxy.stores.answer import ColumnarAnswer, cell_count
from proxy.stores.release_codec import PACK_MIN_CELLS, decode_answer, encode_answer
from rewriter import build_plan, complete, parse, to_sql

EMPTY_G = 7  # multiples of 7: no rows (empty cells)
NULL_V_G = 5  # every v of this group is NULL (SUM(v) is NULL, COUNT(v) 0)


def _config():
    data = tomllib.loads(demo_config_path().read_text())
    data.pop("demo", None)
    data["server"].update(auth="trust", host="127.0.0.1")
    data["tables"] = {
        "t": {
            "columns": {
                "g": {"type": "int", "domain_range": [1, 70]},
                "b": {"type": "int", "domain_range": [1, 40]},
                "h": {"type": "text", "domain": ["a", "b", "c", "d"]},
                "age": {"type": "int", "lower": 0, "upper": 120},
                "v": {"type": "float", "lower": 0, "upper": 100},
            }
        }
    }
    data["tiers"] = {"t": {"epsilon": 1.0, "budget": 1e9, "period": "never"}}
    data["roles"] = {"t": {"tier": "t"}}
    return parse_config(data, "columnar-test")


def _rows(n: int = 3000, seed: int = 11) -> list[tuple]:
    rnd = random.Random(seed)
    out = []
    for _ in range(n):
        g = rnd.choice([None, 0, 71, 500] + [x for x in range(1, 71) if x % EMPTY_G] * 4)
        v = None if g == NULL_V_G or rnd.random() < 0.1 else rnd.uniform(-10, 110)
        out.append(
            (
                g,
                rnd.randint(1, 40),
                rnd.choice(["a", "b", "c", "d", "zz", None]),
                None if rnd.random() < 0.1 else rnd.randint(-5, 130),
                v,
            )
        )
    return out


@pytest.fixture(scope="module")
def backend():
    b = DuckDBBackend(None)
    b.execute_script("CREATE TABLE t (g BIGINT, b BIGINT, h VARCHAR, age BIGINT, v DOUBLE)")
    cur = b._cursor()
    cur.executemany("INSERT INTO t VALUES (?, ?, ?, ?, ?)", _rows())
    cur.close()
    yield b
    asyncio.run(b.close())


def _same(a, b) -> bool:
    """Equal, floats bit for bit and types kept (1 ≠ 1.0, 0.0 ≠ -0.0)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return math.copysign(1, a) == math.copysign(1, b) and (a == b or (math.isnan(a) and math.isnan(b)))
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return list(a.keys()) == list(b.keys()) and all(_same(a[k], b[k]) for k in a)
    return a == b


def _both(backend, sql: str):
    plan = build_plan(parse(sql), _config())
    scan = to_sql(plan, "duckdb")
    rows = asyncio.run(backend.fetch(scan))
    cols = asyncio.run(backend.fetch(scan, columnar=True))
    return plan, rows, cols


QUERIES = [
    "SELECT g, COUNT(*), AVG(v) FROM t GROUP BY g",  # 70 cells: packed
    "SELECT g, AVG(v), SUM(v), COUNT(v) FROM t GROUP BY g",  # an AVG's SUM and COUNT
    "SELECT b, COUNT(*), SUM(v) FROM t WHERE age > 20 GROUP BY b",  # 40 cells: stored as JSON
    "SELECT g, h, COUNT(*), AVG(v) FROM t GROUP BY g, h",  # two keys, a text key
    "SELECT h, g, COUNT(v) FROM t GROUP BY h, g ORDER BY g DESC, h LIMIT 9",
    "SELECT g, n FROM (SELECT g, COUNT(*) AS n, AVG(v) AS a FROM t GROUP BY g) s WHERE n > 40 ORDER BY n",
    "SELECT g, COUNT(*) * 2 AS twice FROM t GROUP BY g",
]


@pytest.mark.parametrize("sql", QUERIES)
@pytest.mark.parametrize("predraw", [False, True])
def test_columnar_path_gives_the_row_paths_answer_exactly(backend, sql, predraw):
    plan, rows, cols = _both(backend, sql)
    assert isinstance(cols, Columns) and not isinstance(rows, Columns)
    assert sorted(cols.rows(), key=repr) == sorted(rows, key=repr)  # the row adapter: fetchall's rows
    table = complete_columns(plan, cols)
    assert isinstance(table, CellColumns) and plan.n_cells >= BATCH_MIN_CELLS
    old_cells = complete(plan, rows)
    assert len(table) == len(old_cells)
    eps = 1.0

    def drawn(seed):
        return (
            [m.draw_many(plan.n_cells, SeededSource(seed)) for m in releases_of(plan, eps)[2]]
            if predraw
            else None
        )

    def new():
        return noisy_answer(plan, table, eps, SeededSource(3), predrawn=drawn(4))

    old = noisy_answer(plan, old_cells, eps, SeededSource(3), predrawn=drawn(4))
    assert isinstance(new(), ColumnarAnswer)
    assert encode_answer(new()) == encode_answer(old)  # the same stored bytes
    assert _same(answer_rows(plan, new()), answer_rows(plan, old))  # the same rows
    assert _same(decode_answer(encode_answer(new())), decode_answer(encode_answer(old)))
    a = new()
    assert cell_count(a) == len(old["keys"]) and a.columns is not None
    assert _same(dict(a.items()), dict(old.items()))  # and the dict it stands for
    # rows input with a ColumnarAnswer out: the same too
    assert _same(
        dict(noisy_answer(plan, old_cells, eps, SeededSource(3), predrawn=drawn(4)).items()),
        dict(old.items()),
    )


def test_null_keys_and_measures_and_empty_cells_are_completed_as_the_rows_are(backend):
    plan, rows, cols = _both(backend, "SELECT g, COUNT(*), SUM(v), COUNT(v) FROM t GROUP BY g")
    assert any(r[0] is None for r in rows) and any(r[0] in (0, 71, 500) for r in rows)
    assert np.ma.getmask(cols.arrays[0]) is not np.ma.nomask  # a NULL key: masked
    table = complete_columns(plan, cols)
    old = complete(plan, rows)
    assert _same(table.rows(), [tuple(r) for r in old])  # ints as ints, 0 where absent
    g5 = old[NULL_V_G - 1]
    assert g5[2] == 0 and type(g5[2]) is int and table.measures[1][NULL_V_G - 1] == 0.0
    assert old[EMPTY_G - 1][1:] == (0, 0, 0)


def test_int_measures_from_columns(backend):
    """SUM of a BIGINT is a HUGEINT in DuckDB, fetched as rows (numpy would make it a float);
    a backend giving it as int64 columns is completed and noised as the rows are."""
    sql = "SELECT g, COUNT(age), SUM(age), AVG(age) FROM t GROUP BY g"
    plan, rows, cols = _both(backend, sql)
    assert not isinstance(cols, Columns)  # HUGEINT: rows

    def column(j):  # as fetchnumpy gives a BIGINT column with NULLs
        return np.ma.masked_array(
            np.array([0 if r[j] is None else int(r[j]) for r in rows], dtype=np.int64),
            mask=[r[j] is None for r in rows],
        )

    cols = Columns([f"c{j}" for j in range(len(rows[0]))], [column(j) for j in range(len(rows[0]))])
    table = complete_columns(plan, cols)
    assert table is not None and all(m.dtype == np.int64 for m in table.measures)
    old = noisy_answer(plan, complete(plan, rows), 1.0, SeededSource(9))
    new = noisy_answer(plan, table, 1.0, SeededSource(9))
    assert encode_answer(new) == encode_answer(old)
    assert _same(dict(new.items()), dict(old.items()))


def test_a_measurement_without_a_batch_form_reads_the_row_forms_values(backend):
    plan, rows, cols = _both(backend, "SELECT g, VAR_POP(v) FROM t GROUP BY g")
    table = complete_columns(plan, cols) if isinstance(cols, Columns) else None
    if table is None:
        pytest.skip("this scan is fetched as rows")
    old = noisy_answer(plan, complete(plan, rows), 1.0, SeededSource(2))
    assert _same(dict(noisy_answer(plan, table, 1.0, SeededSource(2)).items()), dict(old.items()))


def test_a_columnar_answer_is_the_plain_dict_to_every_other_reader():
    def fresh():
        return ColumnarAnswer(
            [[1, 2, 3], ["a", "b", "c"]],
            [[10, 11, 12], [0.5, None, 1.5]],
            3,
            half_width=[1.0, 2.0],
            mechanism=["x", "y"],
            epsilon=[0.5, 0.5],
            labels=["c", "a"],
        )

    plain = {
        "keys": [[1, "a"], [2, "b"], [3, "c"]],
        "values": [[10, 0.5], [11, None], [12, 1.5]],
        "half_width": [1.0, 2.0],
        "mechanism": ["x", "y"],
        "epsilon": [0.5, 0.5],
        "labels": ["c", "a"],
    }
    assert fresh() == plain and plain == fresh() and not (fresh() != plain)
    assert fresh()["keys"] == plain["keys"] and fresh().get("values") == plain["values"]
    assert "keys" in fresh() and "values" in fresh() and "nope" not in fresh()
    assert json.dumps(fresh()) == json.dumps(plain)  # the order of the entries too
    assert list(fresh()) == list(plain) and len(fresh()) == len(plain)
    assert (
        dict(fresh()) == plain and {**fresh()} == plain and dict(fresh(), labels=[]) == dict(plain, labels=[])
    )
    assert copy.deepcopy(fresh()) == plain and pickle.loads(pickle.dumps(fresh())) == plain
    assert fresh().copy() == plain and repr(fresh()) == repr(plain)
    a = fresh()
    a["partitions"] = {"kept": 3}  # metadata added before the rows
    assert a.columns is not None and list(a) == [*plain, "partitions"]
    a = fresh()
    a["keys"] = [[9]]  # rows replaced: made first
    assert a["keys"] == [[9]] and a["values"] == plain["values"]
    assert cell_count(fresh()) == 3 and cell_count(plain) == 3
    with pytest.raises(KeyError):
        fresh()["nope"]


def test_large_columnar_answers_are_packed_and_small_ones_plain_json():
    n = PACK_MIN_CELLS
    big = ColumnarAnswer(
        [list(range(n))], [list(range(n)), [float(i) for i in range(n)]], n, labels=["a", "b"]
    )
    assert encode_answer(big) == encode_answer(
        {"keys": [[i] for i in range(n)], "values": [[i, float(i)] for i in range(n)], "labels": ["a", "b"]}
    )
    assert big.columns is not None  # packed from the columns
    small = ColumnarAnswer([[1, 2]], [[3, 4]], 2, labels=["a"])
    assert json.loads(encode_answer(small)) == {"keys": [[1], [2]], "values": [[3], [4]], "labels": ["a"]}


@pytest.mark.parametrize(
    "col",
    [
        np.arange(100, dtype=np.int64) * 3 - 7,  # narrow, differences
        np.array([2**40, -(2**50), 5] * 30, dtype=np.int64),  # beyond int32: the wide path
        np.array([0.5, -0.0, np.inf, -np.inf, np.nan, 1e300] * 20),
        np.array([True, False] * 40),  # not int64/float64: its list
        np.zeros(0, dtype=np.int64),
    ],
)
def test_a_numpy_column_is_stored_as_its_list_would_be(col):
    n = len(col)
    a = ColumnarAnswer([list(range(n))], [col], n, labels=["x"])
    plain = {"keys": [[i] for i in range(n)], "values": [[v] for v in col.tolist()], "labels": ["x"]}
    assert encode_answer(a) == encode_answer(plain)
    got = decode_answer(encode_answer(a))
    assert _same(got["values"], json.loads(json.dumps(plain))["values"]) or n == 0
    assert _same(a["values"], plain["values"])  # rows of Python values
