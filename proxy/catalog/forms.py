"""PostgreSQL forms the emulated catalog's DuckDB reads differently, rewritten on the parse.

- ``x = ANY('{r,p}')`` / ``x <> ALL('{a,b}'::name[])``: an array given as PostgreSQL's array
  literal text (a bound array parameter arrives the same way) is read as PostgreSQL's
  ``array_in`` reads it — elements between braces, separated by commas, double-quoted
  with backslash escapes, unquoted ``NULL`` the null element — and becomes a list.
- ``CURRENT_SCHEMA`` without parentheses (SQL's niladic form) is the emulated function.
- ``typreceive != 0``: a ``regproc`` column of ``pg_type`` compared with the oid 0 (no
  function) — the emulated catalog holds regproc values as their text, where oid 0 is
  ``-`` (``regprocout``), so the comparison is made with ``'-'``.

Only one-dimensional arrays are read; anything else is refused (``CatalogError`` 22P02).
"""

from __future__ import annotations

from sqlglot import exp

from rewriter.arrays import ArrayLiteralError, parse_array_literal

__all__ = ["ArrayLiteralError", "NILADIC", "parse_array_literal", "rewrite"]

NILADIC = (exp.CurrentSchema,)
REGPROC_COLUMNS = frozenset(
    {"typinput", "typoutput", "typreceive", "typsend", "typmodin", "typmodout", "typanalyze"}
)


def _quantified(node: exp.Expr) -> bool:
    return isinstance(node, (exp.Any, exp.All)) or (
        isinstance(node, exp.Anonymous) and node.name.upper() in ("ANY", "ALL", "SOME")
    )


def _operand(node: exp.Expr) -> exp.Expression | None:
    arg = (
        node.this
        if isinstance(node, (exp.Any, exp.All))
        else (node.expressions[0] if len(node.expressions) == 1 else None)
    )
    while isinstance(arg, exp.Paren):
        arg = arg.this
    if isinstance(arg, (exp.Cast, exp.TryCast)) and arg.to.is_type(exp.DataType.Type.ARRAY):
        arg = arg.this
    return arg


def rewrite(tree: exp.Expr) -> exp.Expr:
    """``tree`` with array literal strings under ANY/ALL as lists and niladic functions
    as the emulated ones (in place; returns the new root)."""
    for node in list(tree.find_all(exp.Any, exp.All, exp.Anonymous)):
        if not _quantified(node):
            continue
        arg = _operand(node)
        if isinstance(arg, exp.Literal) and arg.is_string:
            items = parse_array_literal(arg.this)
            arg.replace(
                exp.Array(expressions=[exp.null() if v is None else exp.Literal.string(v) for v in items])
            )
    for cmp in list(tree.find_all(exp.EQ, exp.NEQ)):
        for col, other in ((cmp.this, cmp.expression), (cmp.expression, cmp.this)):
            if (
                isinstance(col, exp.Column)
                and col.name.lower() in REGPROC_COLUMNS
                and isinstance(other, exp.Literal)
                and not other.is_string
                and other.this == "0"
            ):
                other.replace(exp.Literal.string("-"))
    for node in list(tree.find_all(*NILADIC)):
        new = exp.Anonymous(this="pgc_current_schema", expressions=[])
        if node is tree:
            return new
        node.replace(new)
    return tree
