"""Rules of the code, read off the source: which app may import which (docs/ARCHITECTURE.md names
the few modules that close the circle of app dependencies), and no `Any` for a user or an owner."""

from __future__ import annotations

import ast
import re
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


USER_PARAMETER = re.compile(r"(user|owner)[a-z_]*")


def test_no_user_or_owner_is_typed_any() -> None:
    """A user or owner is `User`, or `mindsearch.querysets.AnyUser` where an anonymous visitor
    may come (request.user before the login check, a websocket's scope)."""
    untyped = []
    for app in APPS:
        for path in application_modules(app):
            for node in ast.walk(ast.parse(path.read_text())):
                if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    continue
                arguments = node.args
                for argument in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]:
                    annotation = argument.annotation
                    if (
                        USER_PARAMETER.fullmatch(argument.arg)
                        and annotation is not None
                        and "Any" in re.findall(r"\w+", ast.unparse(annotation))
                    ):
                        untyped.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}({argument.arg})")
    assert untyped == []
