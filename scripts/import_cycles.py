"""Measure the product's imports: module-level cycles and function-local imports.

    python scripts/import_cycles.py            # report; exit 1 when a cycle exists

A cycle is a strongly connected component (more than one module) of the graph
of imports executed when a module is loaded (imports inside `if TYPE_CHECKING:`
excluded, as import-linter and grimp do with `exclude_type_checking_imports`).
A function-local import is an `import` statement nested in a `def`; each is
listed with its line so a reader can say why it is not at the top.
"""
from __future__ import annotations

import ast
import sys
from pathlib import Path

import grimp

PACKAGES = ("config", "tasks_app", "tools_app", "approvals_app", "notify_app", "audit_app")
ROOT = Path(__file__).resolve().parent.parent


def module_graph() -> grimp.ImportGraph:
    return grimp.build_graph(*PACKAGES, exclude_type_checking_imports=True, cache_dir=None)


def cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """Tarjan's strongly connected components of more than one module (or a self-import)."""
    modules = sorted(graph.modules)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    sys.setrecursionlimit(10000)

    def visit(v: str) -> None:
        nonlocal counter
        index[v] = low[v] = counter
        counter += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.find_modules_directly_imported_by(v)):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for m in modules:
        if m not in index:
            visit(m)
    return found


def function_local_imports() -> list[tuple[str, int, str]]:
    """(file, line, imported) for every import statement inside a function body."""
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "migrations" in path.parts:
                continue
            tree = ast.parse(path.read_text(), str(path))
            for func in ast.walk(tree):
                if not isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef):
                    continue
                for node in ast.walk(func):
                    if isinstance(node, ast.Import):
                        names = ", ".join(a.name for a in node.names)
                    elif isinstance(node, ast.ImportFrom):
                        names = "." * node.level + (node.module or "") + " : " + ", ".join(
                            a.name for a in node.names)
                    else:
                        continue
                    found.append((str(path.relative_to(ROOT)), node.lineno, names))
    return sorted(set(found))


def main() -> int:
    graph = module_graph()
    found = cycles(graph)
    for component in found:
        print(f"cycle of {len(component)} modules:")
        for m in component:
            print("   ", m)
    print(f"{len(found)} module-level cycle(s)")
    local = function_local_imports()
    for path, line, names in local:
        print(f"local import {path}:{line}: {names}")
    print(f"{len(local)} function-local import(s)")
    return 1 if found else 0


if __name__ == "__main__":
    raise SystemExit(main())
