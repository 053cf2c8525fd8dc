"""The shape issue 32 gave service/, kept: small rooms (no module over 500 lines, no class over 30 methods), no
import cycle between files, a registry that knows no sandbox backend, and a run's lease never passed by hand
(``lease=``: the handle ``runs.under(lease)`` carries it). Read from the source with ``ast``, as a reviewer would."""

from __future__ import annotations

import ast
from pathlib import Path

SERVICE = Path(__file__).resolve().parents[2] / "service"


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(SERVICE.rglob("*.py")):
        parts = path.relative_to(SERVICE.parent).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The modules of service/ that ``name`` imports (``from . import x`` is an import of ``x``, not of the
    package that holds it)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = package.split(".")[:len(package.split(".")) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            subs = {f"{module}.{a.name}" for a in node.names} & modules.keys()
            out |= subs if len(subs) == len(node.names) else subs | {module}
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
    return (out & modules.keys()) - {name}


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = stack[stack.index(v):]
            del stack[stack.index(v):]
            if len(group) > 1:
                found.append(sorted(group))

    for v in edges:
        if v not in index:
            visit(v)
    return found


def test_no_module_of_the_service_is_over_500_lines_and_no_class_over_30_methods() -> None:
    too_big = []
    for path in _modules().values():
        text = path.read_text()
        if len(text.splitlines()) > 500:
            too_big.append(f"{path.relative_to(SERVICE.parent)}: {len(text.splitlines())} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ClassDef):
                methods = sum(isinstance(x, (ast.FunctionDef, ast.AsyncFunctionDef)) for x in node.body)
                if methods > 30:
                    too_big.append(f"{path.relative_to(SERVICE.parent)}: class {node.name}, {methods} methods")
    assert not too_big, too_big


def test_no_two_files_of_the_service_import_each_other_even_through_others() -> None:
    modules = _modules()
    edges = {name: _imports(name, path, modules) for name, path in modules.items()}
    assert _cycles(edges) == []


def test_the_cycle_check_sees_a_cycle() -> None:
    """The check above can fail: three modules importing in a ring are one group."""
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_registry_imports_no_sandbox_backend_and_no_lease_is_passed_by_hand() -> None:
    found = []
    for name, path in _modules().items():
        tree = ast.parse(path.read_text())
        if name.startswith("service.registry"):
            for node in ast.walk(tree):
                targets = ([node.module or ""] if isinstance(node, ast.ImportFrom)
                           else [a.name for a in node.names] if isinstance(node, ast.Import) else [])
                found += [f"{name} imports {t}" for t in targets if t.startswith("sandbox.backends")]
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and any(k.arg == "lease" for k in node.keywords):
                found.append(f"{path.relative_to(SERVICE.parent)}:{node.lineno} passes lease= by hand")
    assert not found, found
