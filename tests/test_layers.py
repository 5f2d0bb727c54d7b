"""The layers of README "Layout" and ARCHITECTURE.md hold: import-linter's contracts in
pyproject.toml (config imports nothing of ours; mechanisms no SQL, I/O or service; the
rewriter no service, backend, numpy or mechanisms; the wire layer no DP; the service's layers
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


OURS = ("proxy", "rewriter", "mechanisms", "config")


def _nested_imports(path: Path) -> list[str]:
    """``file:line module`` of every import of our own code inside a function or method
    (outside ``if TYPE_CHECKING:``): the pattern that dodges an import cycle."""
    import ast

    tree = ast.parse(path.read_text(), str(path))
    found = []

    def visit(node, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            fn = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
            if in_function and isinstance(child, ast.ImportFrom):
                if child.level > 0 or (child.module or "").split(".")[0] in OURS:
                    found.append(
                        f"{path.relative_to(ROOT)}:{child.lineno} {'.' * child.level}{child.module or ''}"
                    )
            elif in_function and isinstance(child, ast.Import):
                found.extend(
                    f"{path.relative_to(ROOT)}:{child.lineno} {a.name}"
                    for a in child.names
                    if a.name.split(".")[0] in OURS
                )
            visit(child, fn)

    visit(tree, False)
    return found


def test_no_function_level_imports_of_our_own_modules():
    """ARCHITECTURE.md: no function-level imports to dodge cycles (the layers and the
    acyclic contract only mean something if every import is at module level)."""
    found = [hit for pkg in OURS for f in sorted((ROOT / pkg).rglob("*.py")) for hit in _nested_imports(f)]
    assert found == [], found


def test_no_private_names_imported_across_modules():
    """ARCHITECTURE.md: a module's ``_private`` names are its own (no ``from x import _y``)."""
    import ast

    found = []
    for pkg in OURS:
        for f in sorted((ROOT / pkg).rglob("*.py")):
            for node in ast.walk(ast.parse(f.read_text(), str(f))):
                if isinstance(node, ast.ImportFrom) and node.module != "__future__":
                    found += [
                        f"{f.relative_to(ROOT)}:{node.lineno} {a.name}"
                        for a in node.names
                        if a.name.startswith("_") and not a.name.startswith("__")
                    ]
    assert found == [], found


SQL_WORDS = (
    "SELECT ",
    "CASE ",
    "WHEN ",
    " THEN ",
    "FROM ",
    "GROUP BY",
    "COUNT(",
    "SUM(",
    "COALESCE(",
    " AS DOUBLE PRECISION",
)


def _sql_strings(path: Path) -> list[str]:
    """``file:line text`` of every string constant (f-string parts included) of ``path`` that
    reads as SQL (an upper-case keyword of :data:`SQL_WORDS`), docstrings excepted (they may
    quote the SQL the rewriter writes)."""
    import ast

    tree = ast.parse(path.read_text(), str(path))
    docs = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                docs.add(id(body[0].value))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            if any(w in node.value for w in SQL_WORDS):  # upper case: SQL, not prose
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.value[:60]!r}")
    return found


def test_mechanisms_write_no_sql():
    """Mechanisms are pure math; the SQL of their inputs is written by the rewriter
    (rewriter.local_sql, rewriter.per_record_sql) from plain numbers the proxy computes."""
    found = [hit for f in sorted((ROOT / "mechanisms").rglob("*.py")) for hit in _sql_strings(f)]
    assert found == [], found


def test_the_sql_check_sees_sql():
    """The check above can fail: it finds the SQL the rewriter writes (f-strings included)."""
    assert _sql_strings(ROOT / "rewriter" / "per_record_sql.py")
    assert _sql_strings(ROOT / "rewriter" / "local_sql.py")
