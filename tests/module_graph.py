"""The project's modules and their imports, read from the source with `ast` (nothing is
imported), for the architecture tests (tests/unit/test_architecture.py, test_domains.py):
each function takes the tree's root, so a test can run it on a small tree of its own with a
deliberate violation."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("jobs", "pipelines", "udfs", "schemas")


@dataclass(frozen=True)
class Import:
    source: str  # the importing module, dotted
    target: str  # the imported module (a project module, or the top package of another)
    top_level: bool  # False: inside a function (runs when it is called)
    line: int


def module_files(root: Path = ROOT) -> dict[str, Path]:
    """Every project module by dotted name (a package by the name of its __init__)."""
    modules = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            modules[".".join(parts)] = path
    return modules


def python_files(folders: tuple[str, ...], root: Path = ROOT) -> dict[str, Path]:
    """Every .py file under `folders`, by its path from the root."""
    return {str(path.relative_to(root)): path for folder in folders
            for path in sorted((root / folder).rglob("*.py"))}


def imports_in(module: str, path: Path, known: set[str]) -> Iterator[Import]:
    tree = ast.parse(path.read_text(), str(path))
    is_package = path.name == "__init__.py"
    # top level: statements outside every function (a class body or an `if` still runs at
    # import), except `if TYPE_CHECKING:` blocks, which never run
    inside_function = {id(child) for node in ast.walk(tree) if _deferred(node)
                       for child in ast.walk(node) if child is not node}
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".") if is_package else module.split(".")[:-1]
                anchor = anchor[:len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            # `from package import module` imports the module; `from module import name`
            # the module
            names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base
                     for alias in node.names]
        for name in names:
            target = _project_module(name, known) or name.split(".")[0]
            if target != module:
                yield Import(module, target, id(node) not in inside_function, node.lineno)


def _deferred(node: ast.AST) -> bool:
    """A node whose body does not run when the module is imported."""
    return isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) or (
        isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test))


def _project_module(name: str, known: set[str]) -> str | None:
    parts = name.split(".")
    while parts:
        if ".".join(parts) in known:
            return ".".join(parts)
        parts.pop()
    return None


def import_graph(top_level_only: bool = True, root: Path = ROOT) -> dict[str, set[str]]:
    """Project module -> the project modules it imports."""
    files = module_files(root)
    known = set(files)
    graph: dict[str, set[str]] = {module: set() for module in files}
    for module, path in files.items():
        for imp in imports_in(module, path, known):
            if imp.target in known and (imp.top_level or not top_level_only):
                graph[module].add(imp.target)
    return graph


def all_imports(root: Path = ROOT) -> list[Import]:
    files = module_files(root)
    known = set(files)
    return [imp for module, path in files.items() for imp in imports_in(module, path, known)]


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)
