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
    (outside ``if TYPE_CHECKING:``): the pattern that dodges an import cycle. An import
    marked ``# deferred: <why>`` is a part loaded on first use (a command that must start at
    once, an optional engine); it cannot dodge a cycle, since import-linter's graph (grimp)
    holds function-level imports too and the acyclic contracts see it."""
    import ast

    text = path.read_text()
    lines = text.splitlines()
    tree = ast.parse(text, str(path))
    found = []

    def visit(node, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            fn = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
            if isinstance(child, (ast.Import, ast.ImportFrom)) and "# deferred: " in lines[child.lineno - 1]:
                continue
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


def _sibling_imports(package: Path) -> dict[str, set[str]]:
    """For one package directory: each child module or subpackage → the siblings it imports,
    counting every import of the file (``if TYPE_CHECKING:`` blocks included: an annotation
    names the module as surely as a call does). A subpackage's edges are those of all its
    files."""
    import ast

    pkg = ".".join(package.relative_to(ROOT).parts)
    children = {p.stem for p in package.glob("*.py") if p.stem != "__init__"} | {
        p.name for p in package.iterdir() if p.is_dir() and (p / "__init__.py").exists()
    }
    edges: dict[str, set[str]] = {c: set() for c in children}
    for child in children:
        path = package / f"{child}.py"
        files = [path] if path.exists() else sorted((package / child).rglob("*.py"))
        for f in files:
            mod = ".".join(f.relative_to(ROOT).with_suffix("").parts)
            here = mod.rsplit(".", 1)[0] if f.stem != "__init__" else mod
            for node in ast.walk(ast.parse(f.read_text(), str(f))):
                names: list[str] = []
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom):
                    base = node.module or ""
                    if node.level:
                        up = here.split(".")[: len(here.split(".")) - (node.level - 1)]
                        base = ".".join(up + ([base] if base else []))
                    names = [base] + [f"{base}.{a.name}" for a in node.names]
                for name in names:
                    if name.startswith(pkg + "."):
                        target = name[len(pkg) + 1 :].split(".")[0]
                        if target in children and target != child:
                            edges[child].add(target)
    return edges


def _cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One cycle of the graph ``edges`` (as a path that returns to its start), or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        stack.append(n)
        for m in sorted(edges[n]):
            if state.get(m) == 1:
                return stack[stack.index(m) :] + [m]
            if m not in state and (found := visit(m)) is not None:
                return found
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(edges):
        if n not in state and (found := visit(n)) is not None:
            return found
    return None


def _packages() -> list[Path]:
    return [p.parent for pkg in OURS for p in sorted((ROOT / pkg).rglob("__init__.py"))]


def test_no_import_cycles_even_at_type_level():
    """ARCHITECTURE.md: no import cycle between the modules of any package — including the
    imports made only for annotations (``if TYPE_CHECKING:``), which import-linter is told to
    ignore (they never run, but a circle of names is still a circle a reader must untangle)."""
    found = {
        ".".join(p.relative_to(ROOT).parts): c for p in _packages() if (c := _cycle(_sibling_imports(p)))
    }
    assert found == {}, found


def test_the_cycle_check_sees_a_type_level_import():
    """The check above can fail: it finds an edge that exists only under TYPE_CHECKING
    (rewriter.local_sql names the local plan only in annotations) and a cycle in a graph."""
    edges = _sibling_imports(ROOT / "rewriter")
    assert "local_plan" in edges["local_sql"]
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


# -- the backend seam ------------------------------------------------------------------------
#: backend and ledger store kinds: named only where they are implemented
BACKEND_NAMES = frozenset({"duckdb", "postgres", "postgresql", "spark", "sqlite"})
SEAM = ("proxy/backends/", "rewriter/dialects/", "proxy/stores/ledger_store.py")
#: a string that reads as a backend name but names something else, by file: the SQL language
#: clients write (the wire is Postgres's; sqlglot calls it "postgres") is allowed anywhere as a
#: sqlglot dialect argument; these are the other meanings
OTHER_MEANINGS = {
    # the engine dpgate embeds for its own catalog (pg_catalog) and dpgate.* views, whatever the backend
    ("proxy/catalog/__init__.py", "duckdb"),
    ("proxy/pipeline/views.py", "duckdb"),
    # the session user the catalog's own statistics queries run as
    ("proxy/catalog/__init__.py", "postgres"),
    # the value of Postgres's IntervalStyle setting, reported to clients
    ("proxy/catalog/schema.py", "postgres"),
    ("proxy/pipeline/statements.py", "postgres"),
    ("proxy/wire/server.py", "postgres"),
    # ``[ledger] kind = "postgres"`` in a docstring
    ("proxy/stores/pgstore.py", "postgres"),
}
_SQLGLOT_DIALECT_ARGS = ("read", "write", "dialect")
_SQLGLOT_CALLS = ("sql", "parse", "parse_one", "transpile")


def _backend_names(path: Path, rel: str | None = None) -> list[str]:
    """``file:line name`` of every string constant of ``path`` that is a backend or ledger kind
    name, but for the clients' SQL language given to sqlglot (``read=``/``write=``/``dialect=``
    or the first argument of ``.sql()``) and :data:`OTHER_MEANINGS`. Outside the seam, code
    that needs what differs between backends asks the backend (``proxy.backends.base.Backend``),
    its dialect (``rewriter.dialects.SQLDialect``) or the ledger's store, never the name."""
    import ast

    rel = rel or str(path.relative_to(ROOT))
    tree = ast.parse(path.read_text(), rel)
    language = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg in _SQLGLOT_DIALECT_ARGS:
            language.add(id(node.value))
        if isinstance(node, ast.Call) and node.args:
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if name in _SQLGLOT_CALLS:
                language.add(id(node.args[0]))
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
            continue
        name = node.value.lower()
        if name not in BACKEND_NAMES or (rel, name) in OTHER_MEANINGS:
            continue
        if id(node) in language and name == "postgres":
            continue
        found.append(f"{rel}:{node.lineno} {node.value!r}")
    return found


def _outside_the_seam() -> list[Path]:
    files = [f for pkg in ("proxy", "rewriter") for f in sorted((ROOT / pkg).rglob("*.py"))]
    return [f for f in files if not str(f.relative_to(ROOT)).startswith(SEAM)]


def test_no_backend_names_outside_backends_dialects_and_stores():
    """A new backend is its module (``proxy/backends/``), its SQL dialect (``rewriter/dialects/``)
    and one ``register`` line; the ledger's kinds live in ``proxy/stores/ledger_store.py``. No
    other module names a backend or ledger kind (so none branches on one)."""
    found = [hit for f in _outside_the_seam() for hit in _backend_names(f)]
    assert found == [], found


def test_the_backend_name_check_sees_backend_names(tmp_path):
    """The check above can fail: it finds a branch on a kind's name, a dispatch table keyed by
    names and a dialect named to the emitter, and lets the clients' language through."""
    probe = tmp_path / "probe.py"
    probe.write_text(
        'def f(b, plan, to_sql, tree):\n    if b.dialect == "spark":\n        pass\n'
        '    loaders = {"duckdb": 1}\n    to_sql(plan, "postgres")\n'
        '    return tree.sql("postgres"), tree.sql(dialect="postgres")\n'
    )
    found = _backend_names(probe, "proxy/pipeline/probe.py")
    assert [hit.split(" ", 1)[1] for hit in found] == ["'spark'", "'duckdb'", "'postgres'"]
    assert all(not str(f.relative_to(ROOT)).startswith(SEAM) for f in _outside_the_seam())
    assert _backend_names(ROOT / "proxy" / "backends" / "spark.py")  # the seam itself names them
