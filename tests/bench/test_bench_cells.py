"""bench.cells runs end to end on a small grid: the whole query through the
pipeline beside the raw query, the step breakdown, and both HEADLINEs."""

from __future__ import annotations

import re

from bench import cells


def test_bench_cells_whole_query_small(capsys):
    assert (
        cells.main(["--cells", "64", "--repeat", "1", "--rows", "20000", "--groups", "50", "--queries", "3"])
        == 0
    )
    out = capsys.readouterr().out
    assert re.search(r"HEADLINE: a 64-cell COUNT\+AVG release adds [\d.]+ µs per cell", out)
    assert "20,000 rows, 50 groups" in out and "empty-cell completion (complete_columns)" in out
    m = re.search(r"HEADLINE: 20,000 rows, 50 groups, COUNT\+AVG: dpgate ([\d.]+)× raw DuckDB", out)
    assert m and float(m.group(1)) > 0
