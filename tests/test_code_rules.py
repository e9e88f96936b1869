"""Rules of the code that docs/ARCHITECTURE.md states, read off the source: which app may import
which (the few modules that close the circle of app dependencies are named there)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
APPS = ("mindsearch", "research", "retrieval", "mcphub")

# Where an app may import an app that depends on it (docs/ARCHITECTURE.md, "What depends on what").
CLOSES_THE_CIRCLE = {
    "mindsearch": {
        "mindsearch/api.py",
        "mindsearch/asgi.py",
        "mindsearch/worker.py",
        "mindsearch/metrics.py",
        "mindsearch/status.py",
    },
    "retrieval": set(),
    "research": {"research/pipeline/web_search.py"},
}
DEPENDS_ON = {"mindsearch": set(), "retrieval": {"mindsearch"}, "research": {"mindsearch", "retrieval"}}


def application_modules(app: str) -> Iterator[Path]:
    for path in sorted((ROOT / app).rglob("*.py")):
        if "migrations" not in path.parts:
            yield path


def imported_apps(path: Path) -> set[str]:
    """The apps a module imports, at its top or inside a function."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        found.update(name.split(".")[0] for name in names if name.split(".")[0] in APPS)
    return found


def test_apps_import_only_what_they_depend_on_outside_the_named_modules() -> None:
    strays = []
    for app, allowed in DEPENDS_ON.items():
        for path in application_modules(app):
            relative = path.relative_to(ROOT).as_posix()
            extra = imported_apps(path) - allowed - {app}
            if extra and relative not in CLOSES_THE_CIRCLE[app]:
                strays.append(f"{relative} imports {', '.join(sorted(extra))}")
    assert strays == [], "name it in docs/ARCHITECTURE.md and here, or avoid the import"


def test_the_named_modules_still_close_the_circle() -> None:
    for app, paths in CLOSES_THE_CIRCLE.items():
        for relative in paths:
            assert imported_apps(ROOT / relative) - DEPENDS_ON[app] - {app}, relative
