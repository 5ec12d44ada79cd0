"""No function of the product or the bench is longer than 80 lines: a longer
one does several things, and is split by what it does (one function per
decision kind, per phase, per group of rows)."""
from __future__ import annotations

import ast
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LIMIT = 80


def _packages() -> list[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return config["tool"]["importlinter"]["root_packages"]


def _too_long() -> list[str]:
    found = []
    for package in _packages():
        for path in sorted((ROOT / package).rglob("*.py")):
            if "migrations" in path.parts:
                continue
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    lines = (node.end_lineno or node.lineno) - node.lineno + 1
                    if lines > LIMIT:
                        found.append(f"{path.relative_to(ROOT)}:{node.lineno} "
                                     f"{node.name} ({lines} lines)")
    return found


def test_every_function_is_at_most_80_lines() -> None:
    assert _packages(), "pyproject.toml names no root package"
    assert _too_long() == []
