"""The errors a command reports in one line (and its exit code) instead of a traceback.

A command's module is imported only when it runs (:mod:`.main`), so the error classes are
looked up among the modules already imported: an exception of a class whose module was
never imported cannot have been raised."""

from __future__ import annotations

import sys

#: (module, class): the config is wrong (exit 2), the ledger cannot be used, the backend failed
FAILURES = (
    ("config.load", "ConfigError"),
    ("proxy.stores.errors", "LedgerUnavailable"),
    ("proxy.backends.base", "BackendError"),
)


def _imported(module: str, name: str) -> type[BaseException] | None:
    m = sys.modules.get(module)
    return getattr(m, name) if m is not None else None


def failures() -> tuple[type[BaseException], ...]:
    """The failure classes among the imported modules."""
    return tuple(c for mod, name in FAILURES if (c := _imported(mod, name)) is not None)


def _is(e: BaseException, module: str, name: str) -> bool:
    cls = _imported(module, name)
    return cls is not None and isinstance(e, cls)


def failed(e: BaseException) -> int:
    """One line on stderr and the exit code: a config error 2; the ledger unavailable
    (lost, damaged, unreachable: serve refuses to start, saying how to recover) or a
    backend error (e.g. the DuckDB file is held by another process) 1."""
    message = getattr(e, "message", None) if _is(e, *FAILURES[2]) else None
    print(f"dpgate: {message or getattr(e, 'line', None) or e}", file=sys.stderr)
    return 2 if _is(e, *FAILURES[0]) else 1
