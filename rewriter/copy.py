"""``COPY (<query>) TO STDOUT [options]``: the statement read from its tokens.

A COPY that writes a query's rows to the client is that query's answer in another
framing (PostgreSQL's COPY protocol): the query is planned, charged and released as
the same SELECT would be, and only the framing changes. Everything else COPY can do —
copy a whole table, read rows FROM somewhere, write a file or run a program on the
server — is refused.

sqlglot's parser does not read COPY's parenthesised option list (``(FORMAT binary)``),
so the statement is read here from the postgres dialect's tokens: the query is the
text between the parentheses that follow COPY (parsed later as any statement is), and
the options are read as PostgreSQL's grammar gives them — the option list
``[WITH] (name value, …)`` and the older ``[WITH] [BINARY] [CSV [HEADER]] [DELIMITER
[AS] 'c'] [NULL [AS] 's'] [QUOTE …] [ESCAPE …] [FORCE QUOTE cols|*]`` that psql's
``\\copy`` sends. An option that is not understood refuses (42601 / 0A000).
SQL only: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlglot.tokenizer_core import Token

from .errors import FEATURE_NOT_SUPPORTED, INSUFFICIENT_PRIVILEGE, INVALID_PARAMETER, SYNTAX_ERROR, Refusal
from .parsing import tokenize

COPY_HINT = (
    "Write COPY (SELECT …) TO STDOUT [WITH (FORMAT text|csv|binary, HEADER, DELIMITER ',', "
    "NULL '', FORCE_QUOTE *)]; in psql: \\copy (SELECT …) TO 'file.csv' CSV HEADER."
)
FORMATS = ("text", "csv", "binary")


@dataclass(frozen=True)
class CopyOut:
    """A ``COPY (query) TO STDOUT``: the query's text and the output format's options
    (``None``: that format's default)."""

    query: str
    format: str = "text"
    header: bool = False
    delimiter: str | None = None
    null: str | None = None
    quote: str | None = None
    escape: str | None = None
    force_quote: tuple[str, ...] | bool = ()  # column names, or True for every column


def _refuse(message: str, sqlstate: str = SYNTAX_ERROR) -> Refusal:
    return Refusal(sqlstate, message, hint=COPY_HINT)


def copy_statement(sql: str) -> CopyOut | None:
    """The COPY statement in ``sql``, or None if ``sql`` is not a COPY. A COPY other than
    ``COPY (query) TO STDOUT`` with options this reads is refused."""
    tokens = tokenize(sql)
    if not tokens or tokens[0].text.upper() != "COPY":
        return None
    if len(tokens) < 2 or tokens[1].text != "(":
        if any(t.token_type.name != "STRING" and t.text.upper() == "FROM" for t in tokens[1:]):
            raise _refuse(
                "COPY … FROM is not allowed: dpgate answers queries, it does not load rows.",
                INSUFFICIENT_PRIVILEGE,
            )
        raise _refuse(
            "COPY of a table is not allowed: a table's rows are never released, only a query's answer.",
            INSUFFICIENT_PRIVILEGE,
        )
    depth, close = 0, None
    for i in range(1, len(tokens)):
        if tokens[i].text == "(" and tokens[i].token_type.name == "L_PAREN":
            depth += 1
        elif tokens[i].text == ")" and tokens[i].token_type.name == "R_PAREN":
            depth -= 1
            if depth == 0:
                close = i
                break
    if close is None:
        raise _refuse("syntax error at end of input: COPY's query has no closing parenthesis.")
    query = sql[tokens[1].end + 1 : tokens[close].start].strip()
    if not query:
        raise _refuse("syntax error: COPY needs a query in its parentheses.")
    rest = tokens[close + 1 :]
    if not rest or rest[0].text.upper() not in ("TO", "FROM"):
        raise _refuse("syntax error: COPY (query) is followed by TO STDOUT.")
    if rest[0].text.upper() == "FROM":
        raise _refuse(
            "COPY … FROM is not allowed: dpgate answers queries, it does not load rows.",
            INSUFFICIENT_PRIVILEGE,
        )
    if len(rest) < 2 or rest[1].token_type.name == "STRING" or rest[1].text.upper() != "STDOUT":
        what = (
            "a file on the server"
            if len(rest) > 1 and rest[1].token_type.name == "STRING"
            else "anything but STDOUT"
        )
        raise _refuse(
            f"COPY … TO {what} is not allowed: the rows go to the client (TO STDOUT).", INSUFFICIENT_PRIVILEGE
        )
    return _Options(query, rest[2:]).read()


class _Options:
    """Reads COPY's options from the tokens after ``TO STDOUT``."""

    def __init__(self, query: str, tokens: list[Token]) -> None:
        self.query, self.t, self.i = query, tokens, 0
        self.opts: dict[str, Any] = {}

    # -- tokens ---------------------------------------------------------------
    def peek(self, k: int = 0) -> Token | None:
        return self.t[self.i + k] if self.i + k < len(self.t) else None

    def text(self) -> str | None:
        """The next token's text (None at the end)."""
        tok = self.peek()
        return None if tok is None else tok.text

    def word(self, k: int = 0) -> str:
        tok = self.peek(k)
        return "" if tok is None or tok.token_type.name == "STRING" else tok.text.upper()

    def take(self) -> Token:
        tok = self.peek()
        if tok is None:
            raise _refuse("syntax error at end of input in COPY's options.")
        self.i += 1
        return tok

    def string(self, option: str) -> str:
        if self.word() == "AS":
            self.i += 1
        tok = self.take()
        if tok.token_type.name != "STRING":
            raise _refuse(f'syntax error at or near "{tok.text}": COPY\'s {option} takes a quoted string.')
        return tok.text

    def set(self, name: str, value: object) -> None:
        if name in self.opts:
            raise _refuse(f"conflicting or redundant options: {name.upper()} is given twice.")
        self.opts[name] = value

    # -- grammar --------------------------------------------------------------
    def read(self) -> CopyOut:
        if self.word() == "WITH":
            self.i += 1
        tok = self.peek()
        if tok is not None and tok.text == "(" and tok.token_type.name == "L_PAREN":
            self.i += 1
            self.option_list()
        else:
            while self.peek() is not None:
                self.legacy_option()
        rest = self.text()
        if rest is not None:
            raise _refuse(f'syntax error at or near "{rest}" in COPY\'s options.')
        return self.checked()

    def option_list(self) -> None:
        while True:
            name = self.word()
            if not name:
                raise _refuse("syntax error in COPY's option list: an option name was expected.")
            self.i += 1
            self.option(name.lower())
            tok = self.take()
            if tok.text == ")":
                return
            if tok.text != ",":
                raise _refuse(f'syntax error at or near "{tok.text}" in COPY\'s option list.')

    def option(self, name: str) -> None:
        if name == "format":
            tok = self.take()
            fmt = tok.text.lower()
            if fmt not in FORMATS:
                raise _refuse(f'COPY format "{tok.text}" not recognized', INVALID_PARAMETER)
            self.set("format", fmt)
        elif name == "header":
            self.set("header", self.boolean())
        elif name in ("delimiter", "null", "quote", "escape"):
            self.set(name, self.string(name.upper()))
        elif name == "force_quote":
            self.set("force_quote", self.columns())
        elif name == "encoding":
            enc = self.string("ENCODING")
            if enc.upper().replace("-", "").replace("_", "") != "UTF8":
                raise _refuse(
                    f"COPY encoding {enc!r} is not supported; the output is UTF8.", FEATURE_NOT_SUPPORTED
                )
        elif name in (
            "force_not_null",
            "force_null",
            "freeze",
            "default",
            "on_error",
            "log_verbosity",
            "reject_limit",
        ):
            raise _refuse(
                f"COPY {name.upper()} only applies to COPY FROM, which is not supported.",
                FEATURE_NOT_SUPPORTED,
            )
        else:
            raise _refuse(f'option "{name}" not recognized')

    def boolean(self) -> bool:
        tok = self.peek()
        if tok is None or tok.text in (",", ")"):
            return True
        self.i += 1
        v = tok.text.lower()
        if v in ("true", "on", "1"):
            return True
        if v in ("false", "off", "0"):
            return False
        if v == "match":
            raise _refuse(
                "HEADER MATCH only applies to COPY FROM, which is not supported.", FEATURE_NOT_SUPPORTED
            )
        raise _refuse(f'header requires a Boolean value, not "{tok.text}"', INVALID_PARAMETER)

    def columns(self) -> tuple[str, ...] | bool:
        """``*`` or a column list, in parentheses in the option list or bare in the old form."""
        if self.text() == "*":
            self.i += 1
            return True
        paren = self.text() == "("
        if paren:
            self.i += 1
        names: list[str] = []
        while True:
            tok = self.take()
            if tok.token_type.name not in ("VAR", "IDENTIFIER") and not tok.text.isidentifier():
                raise _refuse(f'syntax error at or near "{tok.text}": FORCE_QUOTE takes column names or *.')
            names.append(tok.text if tok.token_type.name == "IDENTIFIER" else tok.text.lower())
            if self.text() == ",":
                self.i += 1
                continue
            break
        if paren and self.take().text != ")":
            raise _refuse("syntax error: FORCE_QUOTE's column list has no closing parenthesis.")
        return tuple(names)

    def legacy_option(self) -> None:
        w = self.word()
        self.i += 1
        if w == "BINARY":
            self.set("format", "binary")
        elif w == "CSV":
            self.set("format", "csv")
        elif w == "HEADER":
            self.set("header", True)
        elif w in ("DELIMITER", "NULL", "QUOTE", "ESCAPE"):
            self.set(w.lower(), self.string(w))
        elif w == "FORCE" and self.word() == "QUOTE":
            self.i += 1
            self.set("force_quote", self.columns())
        elif w == "ENCODING":
            self.option("encoding")
        else:
            tok = self.t[self.i - 1]
            raise _refuse(f'syntax error at or near "{tok.text}" in COPY\'s options.')

    def checked(self) -> CopyOut:
        """The options as PostgreSQL checks them for COPY TO."""
        o, fmt = self.opts, self.opts.get("format", "text")
        if fmt == "binary":
            for k in ("delimiter", "null", "header", "quote", "escape", "force_quote"):
                if k in o:
                    raise _refuse(f"cannot specify {k.upper()} in BINARY mode", SYNTAX_ERROR)
        if fmt != "csv":
            for k in ("quote", "escape", "force_quote"):
                if k in o:
                    raise _refuse(f"COPY {k.upper()} requires CSV mode", FEATURE_NOT_SUPPORTED)
        for k in ("delimiter", "quote", "escape"):
            v = o.get(k)
            if v is not None and (len(v) != 1 or len(v.encode()) != 1):
                raise _refuse(f"COPY {k} must be a single one-byte character", FEATURE_NOT_SUPPORTED)
        d = o.get("delimiter")
        if d is not None and (d in "\r\n" or (fmt == "text" and (d == "\\" or d.isalnum() or d == "."))):
            raise _refuse(f"COPY delimiter cannot be {d!r}", INVALID_PARAMETER)
        null = o.get("null")
        if null is not None and ("\r" in null or "\n" in null):
            raise _refuse("COPY null representation cannot use newline or carriage return", INVALID_PARAMETER)
        delim = d if d is not None else ("," if fmt == "csv" else "\t")
        if null is not None and delim in null:
            raise _refuse(
                "COPY delimiter character must not appear in the NULL specification", INVALID_PARAMETER
            )
        if fmt == "csv" and delim == o.get("quote", '"'):
            raise _refuse("COPY delimiter and quote must be different", INVALID_PARAMETER)
        return CopyOut(
            self.query,
            fmt,
            bool(o.get("header", False)),
            d,
            null,
            o.get("quote"),
            o.get("escape"),
            o.get("force_quote", ()),
        )
