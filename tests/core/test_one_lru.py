"""One LRU cache class: every bounded cache of the service and the rewriter is a
:class:`rewriter.lru.LRU`, none a hand-written ``OrderedDict`` that drops its oldest entry.
(``mechanisms`` may import neither ``rewriter`` nor ``proxy``: its single-flight memo,
``mechanisms/once.py``, keeps its own.)"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ALLOWED = {"rewriter/lru.py", "mechanisms/once.py"}


def _evicts_oldest(tree: ast.AST) -> list[int]:
    """Lines that call ``<x>.popitem(last=False)``: an OrderedDict dropping its oldest entry."""
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "popitem"
        and any(
            k.arg == "last" and isinstance(k.value, ast.Constant) and k.value.value is False
            for k in node.keywords
        )
    ]


def test_every_bounded_cache_is_the_one_lru_class():
    found = [
        f"{path.relative_to(ROOT)}:{line}"
        for pkg in ("proxy", "rewriter", "mechanisms", "config")
        for path in sorted((ROOT / pkg).rglob("*.py"))
        if str(path.relative_to(ROOT)) not in ALLOWED
        for line in _evicts_oldest(ast.parse(path.read_text(), str(path)))
    ]
    assert not found, "use rewriter.lru.LRU:\n" + "\n".join(found)


def test_the_check_finds_a_hand_written_lru():
    assert _evicts_oldest(ast.parse("cache.popitem(last=False)")) == [1]
    assert _evicts_oldest(ast.parse("cache.popitem()")) == []
