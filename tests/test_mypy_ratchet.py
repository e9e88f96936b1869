"""The mypy ratchet (.ci/mypy_ratchet.py): the list of modules allowed errors is switched off
for the run, and only that override; file paths map to the module names the list uses."""

from __future__ import annotations

import importlib.util
import tomllib
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent


def ratchet() -> ModuleType:
    spec = importlib.util.spec_from_file_location("mypy_ratchet", ROOT / ".ci" / "mypy_ratchet.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_run_keeps_every_setting_but_the_ratchets_override() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    config, listed = ratchet().split_config(pyproject)
    written = tomllib.loads(config)["tool"]
    assert "ignore_errors" not in config
    assert written["django-stubs"] == pyproject["tool"]["django-stubs"]
    mypy = {key: value for key, value in pyproject["tool"]["mypy"].items() if key != "overrides"}
    assert {key: value for key, value in written["mypy"].items() if key != "overrides"} == mypy
    kept = [o for o in pyproject["tool"]["mypy"]["overrides"] if not o.get("ignore_errors")]
    assert written["mypy"]["overrides"] == kept
    assert "research.api" in listed and "research.workflow" not in listed


def test_paths_become_the_module_names_the_list_uses() -> None:
    module_of = ratchet().module_of
    assert module_of("research/pipeline/run.py") == "research.pipeline.run"
    assert module_of("mindsearch/clients/__init__.py") == "mindsearch.clients"
    assert module_of("tests/data/documents/make.py") == "tests.data.documents.make"
    assert module_of("manage.py") == "manage"
