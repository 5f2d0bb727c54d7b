"""Backend errors. Their messages never carry data values."""
from __future__ import annotations


class BackendError(Exception):
    """The backend failed; ``sqlstate`` goes to the client, nothing is charged."""

    def __init__(self, sqlstate: str, message: str):
        super().__init__(message)
        self.sqlstate = sqlstate
        self.message = message


class BackendTimeout(BackendError):
    def __init__(self, timeout_s: float):
        super().__init__("57014", f"canceling statement due to statement timeout ({timeout_s:g} s)")
