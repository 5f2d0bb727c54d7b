"""Splitting a simple-Query string into statements, and the session statements
clients send on connect, answered locally (SET, SHOW, RESET, BEGIN/COMMIT/
ROLLBACK, DISCARD, DEALLOCATE, SELECT 1, SELECT version() …).

Nothing here touches data: these statements never reach the backend.
"""

from __future__ import annotations

import math
import re

from rewriter.errorbars import interval_level
from rewriter.errors import Refusal
from rewriter.local_options import SESSION_KEYS, session_overrides

from .rowcheck import SETTING as ROW_CHECK
from .rowcheck import setting_on

_DOLLAR = re.compile(r"\$([A-Za-z_][A-Za-z_0-9]*)?\$")


def split(sql: str) -> list[str]:
    """Split on top-level semicolons, respecting quotes, dollar quotes and comments.
    Empty statements and comment-only statements are dropped."""
    if not any(c in sql for c in _SPECIAL):  # nothing to split or strip: one statement
        s = sql.strip()
        return [s] if s else []
    return _scan(sql)


_SPECIAL = ";'\"-/$"


def _scan(sql: str) -> list[str]:
    out, buf, i, n = [], [], 0, len(sql)
    while i < n:
        c = sql[i]
        if c in ("'", '"'):
            j = i + 1
            while j < n:
                if sql[j] == c:
                    if j + 1 < n and sql[j + 1] == c:
                        j += 2
                        continue
                    break
                j += 1
            buf.append(sql[i : j + 1])
            i = j + 1
        elif c == "-" and sql.startswith("--", i):
            j = sql.find("\n", i)
            j = n if j < 0 else j
            buf.append(" ")
            i = j
        elif c == "/" and sql.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if sql.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif sql.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            buf.append(" ")
            i = j
        elif (
            c == "$"
            and (m := _DOLLAR.match(sql, i))
            and not (i > 0 and (sql[i - 1].isalnum() or sql[i - 1] == "_"))
        ):
            tag = m.group(0)
            j = sql.find(tag, m.end())
            j = n if j < 0 else j + len(tag)
            buf.append(sql[i:j])
            i = j
        elif c == ";":
            out.append("".join(buf))
            buf = []
            i += 1
        else:
            buf.append(c)
            i += 1
    out.append("".join(buf))
    return [s.strip() for s in out if s.strip()]


DEFAULT_SETTINGS = {
    "server_version": "16.0 (dpgate)",
    "server_version_num": "160000",
    "server_encoding": "UTF8",
    "client_encoding": "UTF8",
    "datestyle": "ISO, MDY",
    "timezone": "UTC",
    "intervalstyle": "postgres",
    "integer_datetimes": "on",
    "standard_conforming_strings": "on",
    "application_name": "",
    "search_path": '"$user", public',
    "transaction_isolation": "read committed",
    "default_transaction_isolation": "read committed",
    "default_transaction_read_only": "on",
    "transaction_read_only": "on",
    "extra_float_digits": "1",
    "lc_messages": "C",
    "lc_monetary": "C",
    "lc_numeric": "C",
    "lc_time": "C",
    "max_identifier_length": "63",
    "statement_timeout": "0",
    "bytea_output": "hex",
    "is_superuser": "off",
    "dpgate.intervals": "off",
    "dpgate.row_check": "on",
}
_REPORTED = {
    "application_name",
    "client_encoding",
    "datestyle",
    "timezone",
    "intervalstyle",
    "standard_conforming_strings",
    "integer_datetimes",
    "is_superuser",
    "server_version",
}
_ALIASES = {
    "transaction isolation level": "transaction_isolation",
    "time zone": "timezone",
    "session authorization": "session_authorization",
}
_CANON = {"datestyle": "DateStyle", "timezone": "TimeZone", "intervalstyle": "IntervalStyle"}

_SET = re.compile(
    r"^SET\s+(?:SESSION\s+|LOCAL\s+)?(?P<name>TIME\s+ZONE|[A-Za-z_][\w.]*)\s*(?:=|\s+TO\s+|\s+)\s*(?P<value>.*)$",
    re.I | re.S,
)
_SET_TX = re.compile(r"^SET\s+(SESSION\s+CHARACTERISTICS\s+AS\s+)?TRANSACTION\b", re.I)
_SHOW = re.compile(r"^SHOW\s+(?P<name>.+)$", re.I | re.S)
_RESET = re.compile(r"^RESET\s+(?P<name>.+)$", re.I | re.S)
_TX = re.compile(
    r"^(BEGIN|START\s+TRANSACTION|COMMIT|END|ROLLBACK|ABORT)\b(?!\s+TO\b)(?!.*\bPREPARED\b)", re.I | re.S
)
_DISCARD = re.compile(r"^DISCARD\s+(ALL|PLANS|SEQUENCES|TEMP|TEMPORARY)$", re.I)
_DEALLOCATE = re.compile(r"^DEALLOCATE\s+(PREPARE\s+)?(\w+|ALL)$", re.I)
_IDENT = r'(?:\w+|"(?:[^"]|"")+")'
_SAVEPOINT = re.compile(
    r"^(SAVEPOINT|RELEASE(\s+SAVEPOINT)?|ROLLBACK(\s+(WORK|TRANSACTION))?\s+TO(\s+SAVEPOINT)?)\s+"
    + _IDENT
    + "$",
    re.I,
)
_CLOSE = re.compile(r"^CLOSE\s+(ALL|" + _IDENT + ")$", re.I)
_UNLISTEN = re.compile(r"^UNLISTEN\s+(\*|" + _IDENT + ")$", re.I)
_SELECT_CONST = re.compile(r"^SELECT\s+(?P<n>-?\d+)(\s+AS\s+(?P<a>\w+|\"[^\"]+\"))?$", re.I)


def _unquote(v: str) -> str:
    v = v.strip()
    if len(v) >= 2 and v[0] == v[-1] == "'":
        return v[1:-1].replace("''", "'")
    return v


def _check_threshold(value: str) -> None:
    """``dpgate.topc_threshold`` must be a finite number (SVT compares noisy counts with it):
    NaN and ±Infinity are refused when SET, with 22023, as the orchestrator does at use."""
    try:
        t = float(value)
    except ValueError:
        t = math.nan
    if not math.isfinite(t):
        raise Refusal(
            "22023",
            f'invalid value for parameter "dpgate.topc_threshold": {value!r}',
            hint="Give a finite number, e.g. SET dpgate.topc_threshold = 20.",
        )


def _check_intervals(value: str) -> None:
    """``dpgate.intervals``: on, off, or a confidence in (0, 1) (:func:`rewriter.errorbars.interval_level`)."""
    try:
        interval_level(value)
    except ValueError:
        raise Refusal(
            "22023",
            f'invalid value for parameter "dpgate.intervals": {value!r}',
            hint="SET dpgate.intervals = on (95% intervals), off, or a confidence such as 0.9.",
        ) from None


def _check_row_check(value: str) -> None:
    """``dpgate.row_check``: a boolean (:func:`.rowcheck.setting_on`)."""
    try:
        setting_on(value)
    except ValueError:
        raise Refusal(
            "22023",
            f'invalid value for parameter "{ROW_CHECK}": {value!r}',
            hint=f"SET {ROW_CHECK} = on (a noisy row count beside a lone MAX/MIN/percentile) or off.",
        ) from None


class SessionState:
    """Per-connection settings answered locally."""

    def __init__(self, user: str, database: str, params: dict[str, str]):
        self.settings = dict(DEFAULT_SETTINGS)
        self.settings["session_authorization"] = user
        for k, v in params.items():
            if k.lower() in self.settings and k.lower() not in ("server_version", "is_superuser"):
                self.settings[k.lower()] = v
        self.user, self.database = user, database

    def match(self, sql: str):
        """Return (tag, columns, rows, parameter_status) if ``sql`` is a session
        statement, else None. Columns are (name, 'text'|'int')."""
        s = sql.strip().rstrip(";").strip()
        if m := _TX.match(s):
            word = m.group(1).split()[0].upper()
            tag = {"START": "START TRANSACTION", "END": "COMMIT", "ABORT": "ROLLBACK"}.get(word, word)
            return tag, None, [], {}
        if _SAVEPOINT.match(s):
            return s.split()[0].upper(), None, [], {}
        if _SET_TX.match(s):
            return "SET", None, [], {}
        if re.match(r"^SET\s+(SESSION\s+|LOCAL\s+)?(SESSION\s+AUTHORIZATION|ROLE)\b", s, re.I):
            raise Refusal(
                "42501",
                "the role of a connection is fixed at login; SET ROLE and SET SESSION "
                "AUTHORIZATION are not allowed",
                hint="Connect as the role you want to use.",
            )
        if m := _SET.match(s):
            name = _ALIASES.get(" ".join(m.group("name").lower().split()), m.group("name").lower())
            value = m.group("value").strip()
            if value.upper() == "DEFAULT":
                value = DEFAULT_SETTINGS.get(name, "")
            value = (
                ", ".join(_unquote(p) for p in value.split(","))
                if name in ("datestyle", "search_path")
                else _unquote(value)
            )
            if name in ("server_version", "is_superuser", "session_authorization", "role"):
                raise Refusal(
                    "42501",
                    f'parameter "{name}" cannot be changed through dpgate',
                    hint="SET is accepted for client settings such as application_name or extra_float_digits.",
                )
            if name.startswith("dpgate.local_") and value:  # checked now, as Postgres does
                if name not in SESSION_KEYS.values():
                    raise Refusal(
                        "42704",
                        f'unrecognized configuration parameter "{name}"',
                        hint="dpgate's local-table settings: " + ", ".join(SESSION_KEYS.values()),
                    )
                session_overrides({name: value})
            if name == "dpgate.topc_threshold" and value:  # a finite number (NaN/±inf refused now)
                _check_threshold(value)
            if name == "dpgate.intervals":  # on / off / a confidence in (0, 1), checked now
                _check_intervals(value)
            if name == ROW_CHECK:  # on / off, checked now
                _check_row_check(value)
            self.settings[name] = value
            ps = {_CANON.get(name, name): value} if name in _REPORTED else {}
            return "SET", None, [], ps
        if m := _RESET.match(s):
            name = m.group("name").strip().lower()
            if name == "all":
                self.settings = {**DEFAULT_SETTINGS, "session_authorization": self.user}
            else:
                self.settings[name] = DEFAULT_SETTINGS.get(name, "")
            return "RESET", None, [], {}
        if m := _SHOW.match(s):
            name = _ALIASES.get(" ".join(m.group("name").lower().split()), m.group("name").strip().lower())
            if name == "all":
                rows = [(k, v, "") for k, v in sorted(self.settings.items())]
                return "SHOW", [("name", "text"), ("setting", "text"), ("description", "text")], rows, {}
            if name not in self.settings:
                raise Refusal("42704", f'unrecognized configuration parameter "{name}"', hint=None)
            return "SHOW", [(name, "text")], [(self.settings[name],)], {}
        if m := _CLOSE.match(s):
            return ("CLOSE CURSOR ALL" if m.group(1).upper() == "ALL" else "CLOSE CURSOR"), None, [], {}
        if _UNLISTEN.match(s):
            return "UNLISTEN", None, [], {}
        if _DISCARD.match(s):
            return "DISCARD " + s.split()[1].upper(), None, [], {}
        if _DEALLOCATE.match(s):
            return "DEALLOCATE" + (" ALL" if s.upper().endswith(" ALL") else ""), None, [], {}
        if m := _SELECT_CONST.match(s):
            name = (m.group("a") or "?column?").strip('"')
            return "SELECT 1", [(name, "int4")], [(int(m.group("n")),)], {}
        return None
