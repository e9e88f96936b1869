"""The application's own source, for the one test that reads a rule off it (tests/test_user_types.py):
one answer to "which modules are the application"."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Top-level packages of the repository that are no part of the application.
NOT_APPLICATION = ("tests", "bench")


def application_packages() -> tuple[str, ...]:
    """Every first-party package of the repository — the Django project and its apps (mindsearch,
    research, retrieval, mcphub) — but the tests and the benchmarks."""
    found = {path.parent.name for path in ROOT.glob("*/__init__.py")}
    return tuple(sorted(found - set(NOT_APPLICATION)))


def application_modules(*packages: str) -> list[Path]:
    """Every module of `packages` (by default all the application's), migrations left out."""
    return [
        path
        for package in packages or application_packages()
        for path in sorted((ROOT / package).rglob("*.py"))
        if "migrations" not in path.relative_to(ROOT).parts
    ]


def name_of(node: ast.AST | None) -> str:
    """The name a node is spelled with: `x` of `x` and of `a.b.x`; "" for anything else."""
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.id if isinstance(node, ast.Name) else ""
