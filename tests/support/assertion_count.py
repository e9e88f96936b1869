"""How many checks the tests ran: the measure that a faster suite lost no coverage.

Counted in every test process and summed over pytest-xdist's workers, shown at the end of each
run (`make test`, `make test-e2e`, CI) as one line:

    checks run: 41234 (asserts passed 38012, pytest.raises/warns met 3222) in 3120 tests

- **asserts passed**: each `assert` statement that passed, each time it ran (one inside a loop of
  ten counts ten), through pytest's assertion-rewrite hook `pytest_assertion_pass`, which
  `enable_assertion_pass_hook = true` in pyproject.toml switches on. Only modules pytest
  rewrites count, and of those only the ones in tests/: the test files and conftest.py (an assert
  in a helper of tests/support/ is not seen, nor one in pytest-django's fixtures).
- **pytest.raises/warns met**: each `with pytest.raises(...)` (or `pytest.warns`) block whose
  exception (or warning) came as expected, since a test that checks a refusal asserts with
  these instead.

Merging parametrized cases into one test, or a loop into a table, keeps the count; dropping a
case lowers it. `--checks-json FILE` also writes the figures as JSON, for comparing two runs."""

from __future__ import annotations

import functools
import json
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
from _pytest.raises import RaisesExc, RaisesGroup
from _pytest.recwarn import WarningsChecker

COUNTS: Counter[str] = Counter()
ASSERTS, RAISES, TESTS = "asserts passed", "pytest.raises/warns met", "tests"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--checks-json", default=None, help="also write the count of checks run to this file")


def pytest_configure(config: pytest.Config) -> None:
    _count_met(RaisesExc)
    _count_met(RaisesGroup)
    _count_met(WarningsChecker)


def _count_met(checker: Any) -> None:
    """Wrap the checker's __exit__ once: a block that ends without a failure was a check met."""
    exit_ = checker.__exit__
    if getattr(exit_, "counts_checks", False):
        return

    @functools.wraps(exit_)
    def counting_exit(self: Any, *exc: Any) -> Any:
        result = exit_(self, *exc)  # raises when the check failed
        # pytest.raises returns True when it caught what it expected (False lets another through);
        # pytest.warns returns None, and is met when the block itself ended without an exception.
        if result is True or (isinstance(self, WarningsChecker) and exc[0] is None):
            COUNTS[RAISES] += 1
        return result

    counting_exit.counts_checks = True  # type: ignore[attr-defined]
    checker.__exit__ = counting_exit


FRAMEWORK = ("_pytest.", "pluggy.", __name__)


def pytest_assertion_pass(item: pytest.Item, lineno: int, orig: str, expl: str) -> None:
    # Plugins' own modules are rewritten too (pytest-django's fixtures assert): only an assert
    # written in tests/ counts, found as the first frame outside pytest, pluggy and this module.
    frame: FrameType | None = sys._getframe(1)
    while frame is not None and frame.f_globals.get("__name__", "").startswith(FRAMEWORK):
        frame = frame.f_back
    if frame is not None and frame.f_globals.get("__name__", "").startswith("tests."):
        COUNTS[ASSERTS] += 1


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    COUNTS[TESTS] += 1
    return (yield)


def pytest_sessionfinish(session: pytest.Session) -> None:
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # an xdist worker hands its figures to the controller
        workeroutput["checks"] = dict(COUNTS)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    COUNTS.update(getattr(node, "workeroutput", {}).get("checks", {}))


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    if getattr(config, "workeroutput", None) is not None:
        return
    terminalreporter.write_line(summary(COUNTS))
    path = config.getoption("checks_json")
    if path:
        figures = {key: COUNTS[key] for key in (ASSERTS, RAISES, TESTS)}
        figures["checks"] = COUNTS[ASSERTS] + COUNTS[RAISES]
        Path(path).write_text(json.dumps(figures, indent=1) + "\n", encoding="utf-8")


def summary(counts: Counter[str]) -> str:
    total = counts[ASSERTS] + counts[RAISES]
    return (
        f"checks run: {total} ({ASSERTS} {counts[ASSERTS]}, {RAISES} {counts[RAISES]})"
        f" in {counts[TESTS]} tests"
    )
