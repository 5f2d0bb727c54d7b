"""The statement log (logger ``dpgate.statements``): one line per statement — role, a fingerprint
of its text, the decision, what the ledger did, time in the proxy and in the backend scan —
never an answer, a true value or the text itself. As JSON or as ``key=value`` text
(``[server] log_format``)."""

from __future__ import annotations

import hashlib
import json
import logging
import time

stmt_log = logging.getLogger("dpgate.statements")


def statement_fingerprint(sql: str) -> str:
    """The statement log's fingerprint: sha256 of the whitespace-normalised text (12 hex)."""
    return hashlib.sha256(" ".join(sql.split()).encode()).hexdigest()[:12]


class StatementLog:
    """Writes the statement log's lines; ``as_json`` chooses the format."""

    def __init__(self, as_json: bool) -> None:
        self.as_json = as_json

    def __call__(
        self,
        *,
        role: str,
        sql: str,
        decision: str,
        epsilon: float,
        ms: float,
        backend_ms: float | None = None,
        ledger: str = "none",
    ) -> None:
        """One line for a statement: ``ledger`` is ``charged`` (ε), ``refunded`` (the ε it had
        reserved) or ``none``; ``backend_ms`` is the scan's time, when one ran."""
        if not stmt_log.isEnabledFor(logging.INFO):
            return
        fp = statement_fingerprint(sql)
        if self.as_json:
            rec = {
                "ts": time.time(),
                "role": role,
                "fingerprint": fp,
                "decision": decision,
                "epsilon": epsilon,
                "ledger": ledger,
                "ms": round(ms, 3),
            }
            if backend_ms is not None:
                rec["backend_ms"] = round(backend_ms, 3)
            stmt_log.info(json.dumps(rec))
        else:
            scan = "" if backend_ms is None else f" backend_ms={backend_ms:.2f}"
            stmt_log.info(
                "role=%s fp=%s decision=%s ledger=%s epsilon=%g ms=%.2f%s",
                role,
                fp,
                decision,
                ledger,
                epsilon,
                ms,
                scan,
            )
