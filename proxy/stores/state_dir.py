"""The state directory: where the ledger, the release cache, an embedded DuckDB file and
the demo's passwords live (``[server] state_dir``, else ``$DPGATE_STATE_DIR``, else the XDG
state directory)."""

from __future__ import annotations

import os
from pathlib import Path


def default_state_dir() -> Path:
    if env := os.environ.get("DPGATE_STATE_DIR"):
        return Path(env)
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "dpgate"


def secure_state_dir(path: Path) -> None:
    """The state dir (ledger, data, demo passwords): created 0700, and made 0700."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        os.chmod(path, 0o700)
    except OSError:  # not ours (e.g. a shared mount): leave it
        pass
