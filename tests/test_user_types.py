"""No `Any` for a user or an owner: a user is `User`, or `mindsearch.querysets.AnyUser` where an
anonymous visitor may come. Read off the source, as no linter has the rule (ruff's ANN401 is off:
`Any` is honest for Django's **kwargs). Which app may import which is `make lint`'s, in
import-linter's contracts (pyproject.toml); this file also checks those contracts cover every app."""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

from django.apps import apps

from tests.support.code import ROOT, application_modules, application_packages, name_of

APPS = application_packages()


def test_the_import_contracts_cover_the_projects_own_django_apps() -> None:
    """tests/support/code.py and import-linter (`root_packages`) see the packages Django runs as
    the project's own: a new app is checked by `make lint`'s contracts from its first commit."""
    own = {
        config.name.split(".")[0]
        for config in apps.get_app_configs()
        if Path(config.path).parent == ROOT  # not the libraries in the .venv inside it
    }
    linted = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["root_packages"]
    assert set(APPS) == own == set(linted) == {"mindsearch", "research", "retrieval", "mcphub"}


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
