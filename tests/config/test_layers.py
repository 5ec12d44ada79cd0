"""The product's imports point one way (issue 13), checked on the code itself:

- the import-linter contracts of pyproject.toml hold (`lint-imports`): one
  `layers` contract per app, and the contracts between apps;
- every app has its own layers contract, and every product module is in one of
  its app's layers (import-linter checks only what a contract lists);
- no import cycle at all, whatever the layers allow between siblings: a
  strongly connected component of the graph of every import, wherever it is
  written (grimp counts imports inside functions too);
- an import inside a function names a product module only where it cannot be
  at the top: in `AppConfig.ready` and in `config.celery`, both run before the
  models can be imported, or for a heavy dependency loaded on first use.
  Anywhere else it would be hiding a cycle or an upward import.
"""
from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("config", "foundations", "accounts_app", "tasks_app", "tools_app", "approvals_app",
            "notify_app", "audit_app", "workflows_app", "schedules_app", "memory_app",
            "retention_app", "evals_app", "a2a_app", "mcp_server_app")
# (file, imported module) -> why it is imported inside a function
LOCAL_IMPORTS_ALLOWED = {
    ("tasks_app/gateway/registry.py", "tasks_app.gateway.openai_backend"):
        "the OpenAI SDK is heavy and only profiles that use it load it",
}


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return grimp.build_graph(*PACKAGES, cache_dir=None)


def _product(module: str) -> bool:
    return module.split(".")[0] in PACKAGES and ".migrations" not in module


def _layers_contracts() -> list[dict]:  # type: ignore[type-arg]
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return [c for c in config["tool"]["importlinter"]["contracts"] if c["type"] == "layers"]


def _layer_modules() -> list[str]:
    """Every module named in a layer of the per-app layers contracts, in full."""
    names = []
    for contract in _layers_contracts():
        for container in contract.get("containers", [""]):
            for layer in contract["layers"]:
                for part in layer.replace("|", ":").split(":"):
                    name = part.strip().strip("()")
                    names.append(f"{container}.{name}" if container else name)
    return names


def test_every_app_has_its_own_layers_contract() -> None:
    """One contract per app (PostHog's way), not one list across the apps."""
    containers = [c.get("containers", []) for c in _layers_contracts()]
    assert all(len(c) == 1 for c in containers), containers
    assert sorted(c[0] for c in containers) == sorted(PACKAGES)


@pytest.mark.system  # runs lint-imports
def test_the_import_contracts_hold() -> None:
    run = subprocess.run([str(Path(sys.executable).parent / "lint-imports")], cwd=ROOT,
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr


def test_every_product_module_is_in_a_layer(graph: grimp.ImportGraph) -> None:
    layers = _layer_modules()

    def covered(module: str) -> bool:
        return any(module == m or module.startswith(m + ".") for m in layers)

    unplaced = []
    for module in sorted(filter(_product, graph.modules)):
        if covered(module):
            continue
        if any(m.startswith(module + ".") for m in layers):
            # A package whose children are the layers: it may import only them.
            outside = {m for m in graph.find_modules_directly_imported_by(module)
                       if not m.startswith(module + ".")}
            if not outside:
                continue
        unplaced.append(module)
    assert unplaced == [], f"modules in no layer of their app's layers contract: {unplaced}"


def test_no_import_cycle(graph: grimp.ImportGraph) -> None:
    cycles = [c for c in _strongly_connected(graph) if len(c) > 1]
    assert cycles == [], "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_imports_inside_functions_hide_nothing() -> None:
    found = []
    for path, line, module, function in _function_local_imports():
        rel = str(path.relative_to(ROOT))
        if not _product(module) or (function == "ready" and path.name == "apps.py"):
            continue
        if rel == "config/celery.py" or (rel, module) in LOCAL_IMPORTS_ALLOWED:
            continue
        found.append(f"{rel}:{line} imports {module} in {function}()")
    assert found == [], "imports inside functions (move them to the top):\n" + "\n".join(found)


def _function_local_imports():  # type: ignore[no-untyped-def]
    """(file, line, absolute module imported, function) of every import in a function."""
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            dotted = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            if "migrations" in path.parts:
                continue
            is_package = path.name == "__init__.py"
            here = dotted.removesuffix(".__init__").split(".")
            for func in ast.walk(ast.parse(path.read_text(), str(path))):
                if not isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef):
                    continue
                for node in ast.walk(func):
                    if isinstance(node, ast.Import):
                        for alias in node.names:
                            yield path, node.lineno, alias.name, func.name
                    elif isinstance(node, ast.ImportFrom):
                        base = here if is_package else here[:-1]
                        if node.level:
                            base = base[:len(base) - (node.level - 1)]
                            module = ".".join([*base, *filter(None, [node.module])])
                        else:
                            module = node.module or ""
                        yield path, node.lineno, module, func.name


def _strongly_connected(graph: grimp.ImportGraph) -> list[list[str]]:
    """Tarjan's algorithm, iterative (the graph is deep enough to exhaust recursion)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []
    edges = {m: sorted(graph.find_modules_directly_imported_by(m)) for m in graph.modules}
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            node, i = work.pop()
            if i == 0:
                index[node] = low[node] = len(index)
                stack.append(node)
                on_stack.add(node)
            if i < len(edges[node]):
                work.append((node, i + 1))
                nxt = edges[node][i]
                if nxt not in index:
                    work.append((nxt, 0))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                components.append(sorted(component))
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
    return components
