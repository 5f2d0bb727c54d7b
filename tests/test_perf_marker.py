"""Speed is measured, not asserted by default: tests that hold a wall-clock goal carry the
``perf`` marker, which the default run deselects (pyproject ``addopts``) and ``-m perf`` selects."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TIMED = ["tests/core/test_event_loop_latency.py", "tests/mechanisms/test_mech_setup.py"]


def collected(*args: str) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-p", "no:cacheprovider", *args, *TIMED],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return {line for line in out.stdout.splitlines() if "::" in line}


def test_the_default_run_deselects_perf_and_minus_m_perf_selects_it():
    default, perf = collected(), collected("-m", "perf")
    setup = "tests/mechanisms/test_mech_setup.py::test_small_eps_setup"
    assert setup in default and setup + "_under_a_second" in perf  # behaviour stays, speed moves
    assert not any(t.startswith(TIMED[0]) for t in default)  # the loop-latency goals
    assert sum(t.startswith(TIMED[0]) for t in perf) >= 3
    assert not default & perf
