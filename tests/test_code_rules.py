"""Rules of the code, read off the source: which app may import which (docs/ARCHITECTURE.md names
the few modules that close the circle of app dependencies), and no `Any` for a user or an owner."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from django.apps import apps

from tests.support.code import ROOT, application_modules, application_packages, name_of

APPS = application_packages()

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
    "research": {"research/pipeline/stages/search.py"},
}
DEPENDS_ON = {"mindsearch": set(), "retrieval": {"mindsearch"}, "research": {"mindsearch", "retrieval"}}


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


def test_the_application_is_the_projects_own_django_apps() -> None:
    """tests/support/code.py finds the same packages Django runs as the project's own."""
    own = {
        config.name.split(".")[0]
        for config in apps.get_app_configs()
        if Path(config.path).parent == ROOT  # not the libraries in the .venv inside it
    }
    assert set(APPS) == own == {"mindsearch", "research", "retrieval", "mcphub"}


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


USER_NAME = re.compile(r"(?:^|_)(?:user|owner)")  # user, owner_id, _owner, request_user, get_owner


def _says_any(annotation: ast.expr | None) -> bool:
    return annotation is not None and "Any" in re.findall(r"\w+", ast.unparse(annotation))


def any_users(source: str) -> list[str]:
    """Where `source` types a user or an owner `Any`: a parameter, what a function returns, an
    annotated variable or attribute (`self.owner: Any = ...`) whose name says user or owner."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            arguments = node.args
            found += [
                f"{node.lineno} {node.name}({argument.arg})"
                for argument in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]
                if USER_NAME.search(argument.arg) and _says_any(argument.annotation)
            ]
            if USER_NAME.search(node.name) and _says_any(node.returns):
                found.append(f"{node.lineno} {node.name}() -> Any")
        elif isinstance(node, ast.AnnAssign):
            name = name_of(node.target)
            if USER_NAME.search(name) and _says_any(node.annotation):
                found.append(f"{node.lineno} {name}: Any")
    return found


def test_any_users_sees_parameters_returns_and_annotated_names() -> None:
    source = """
def mine(owner: Any, request_user: Any | None, *, user: str, other: Any) -> Any: ...
def _owner(self, username: str) -> Any: ...
async def get_user(scope) -> dict[str, Any]: ...
self.owner: Any = None
user: Any
owner_id: int
count: Any = 0
def users_of(topic) -> list[User]: ...
"""
    assert any_users(source) == [
        "2 mine(owner)",
        "2 mine(request_user)",
        "3 _owner() -> Any",
        "4 get_user() -> Any",
        "5 owner: Any",
        "6 user: Any",
    ]


def test_no_user_or_owner_is_typed_any() -> None:
    """A user or owner is `User`, or `mindsearch.querysets.AnyUser` where an anonymous visitor
    may come (request.user before the login check, a websocket's scope): as a parameter, as what a
    function returns, as an annotated variable or attribute."""
    untyped = [
        f"{path.relative_to(ROOT)}:{where}"
        for app in APPS
        for path in application_modules(app)
        for where in any_users(path.read_text())
    ]
    assert untyped == []
