"""docs/performance.md is what `python -m bench.report --render` writes from the kept bench
results (bench/results/*.json): one section per bench, each with its output and HEADLINE."""

from __future__ import annotations

from bench.report import BENCHES, PAGE, load, render


def test_the_page_is_rendered_from_the_kept_results():
    assert PAGE.read_text() == render(load()), "regenerate with `python -m bench.report --render`"


def test_every_bench_has_a_kept_result_with_its_headline():
    results = load()
    missing = [n for n, _ in BENCHES if n not in results]
    assert not missing, f"run `python -m bench.report [--quick] {' '.join(missing)}`"
    for name, r in results.items():
        assert r["headline"].startswith("HEADLINE: ") and r["headline"] in r["output"], name
        assert f"## bench.{name}\n" in PAGE.read_text() and r["headline"] in PAGE.read_text()


def test_a_result_shows_its_run_and_machine():
    r = {
        "bench": "svt",
        "command": "python -m bench.svt --quick",
        "quick": True,
        "date": "2026-01-02 03:04 UTC",
        "machine": "a CPU, 2 cores",
        "load": [0.5, 0.4, 0.3],
        "wall_s": 12.5,
        "cpu_s": 11.0,
        "returncode": 0,
        "headline": "HEADLINE: x | y PASS",
        "output": "table\nHEADLINE: x | y PASS",
        "stderr_tail": [],
    }
    page = render({"svt": r})
    assert "| [`bench.svt`](#benchsvt) | quick | 12.5 s (11 s) | x \\| y PASS |" in page  # a | is escaped
    assert "`python -m bench.svt --quick` — 2026-01-02 03:04 UTC; a CPU, 2 cores; load average 0.5" in page
    assert "```\ntable\nHEADLINE: x | y PASS\n```" in page
    failed = render({"svt": {**r, "returncode": 2, "headline": "", "stderr_tail": ["Traceback"]}})
    assert (
        "(no HEADLINE: exit status 2)" in failed and "exit status 2." in failed and "Traceback\n```" in failed
    )
