"""The layers of README "Layout" and ARCHITECTURE.md hold: import-linter's contracts in
pyproject.toml (config imports nothing of ours; mechanisms no SQL, I/O or service; the
rewriter no service, backend or numpy; the wire layer no DP; the service's layers
cli > gateway | demo > pipeline > stores | ingest | backends | catalog > wire; no import
cycles between the modules of any package)."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_import_contracts_are_kept():
    exe = shutil.which("lint-imports") or str(Path(sys.executable).with_name("lint-imports"))
    if not Path(exe).exists():
        pytest.skip("import-linter is not installed (pip install '.[test]')")
    r = subprocess.run([exe, "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
