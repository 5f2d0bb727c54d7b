"""``python -m bench.auto_bounds`` (bounds dpgate chooses vs hand-picked ones) on a small TPC-H
(SF 0.01, one choice): every "auto" bound is chosen by a real gateway and used, both sides have
an error at every ε that falls from ε = 0.1 to 10 (the noise scale falls 100×), and one
HEADLINE line says PASS or MISS. tpchgen-cli is in the ``test`` extra; skipped without it."""

from __future__ import annotations

import pytest

from bench import auto_bounds, tpch

pytestmark = pytest.mark.skipif(
    tpch.tpchgen() is None, reason="tpchgen-cli not installed (pip install '.[test]')"
)


def test_every_bound_is_chosen_and_the_table_has_a_headline(capsys):
    res = auto_bounds.run(0.01, choices=1, runs=1, draws=3)
    assert res["missing"] == [] and res["n_bounds"] == len(auto_bounds.auto_fields())
    assert res["spent"] == pytest.approx(res["n_bounds"] * auto_bounds.AUTO_EPS)
    ((cfg, chosen),) = res["autos"]
    for t in ("lineitem", "orders"):
        assert isinstance(cfg.tables[t].max_rows_per_unit, int)
    for q, hand, auto, refused in res["rows"]:
        assert not refused, q.name
        for j in range(len(q.aggs)):
            for errs in (hand["err"], auto):
                assert errs[(10.0, j)] < errs[(0.1, j)], (q.name, j)
    auto_bounds.report(res, 0.01)
    heads = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("HEADLINE:")]
    assert len(heads) == 1 and heads[0].rstrip().endswith(("PASS", "MISS"))
