"""The count of checks run (tests/support/assertion_count.py) counts what it says: each passing
assert of a test, each time it runs, and each pytest.raises / pytest.warns met; not a failed one,
nor an assert outside tests/. A sample suite runs in a pytest subprocess with the plugin."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

pytest_plugins = ("pytester",)

SAMPLE = """
import warnings
import pytest

def test_loop():
    for n in range(10):
        assert n < 10

def test_refusals():
    with pytest.raises(ValueError):
        int("x")
    with pytest.warns(UserWarning):
        warnings.warn("w", UserWarning)

def test_a_failed_assert_is_not_counted():
    assert 1 == 1
    assert 1 == 2

def test_a_raises_that_did_not_raise_is_not_counted():
    with pytest.raises(ValueError):
        pass

def test_a_subtest_per_case(subtests):
    for n in range(3):
        with subtests.test(n=n), pytest.raises(ZeroDivisionError):
            1 / 0
"""


@pytest.mark.parametrize(
    "workers",
    [
        pytest.param([], id="one-process"),
        # Three processes start (16 s on a loaded machine): the slow tier.
        pytest.param(["-n", "2"], id="xdist-workers-summed", marks=pytest.mark.e2e),
    ],
)
def test_the_count_of_checks(
    pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, workers: list[str]
) -> None:
    # The sample's module is tests.test_sample, as every test module here is (only tests.* count);
    # the plugin is copied beside it, as a module of its own.
    package = pytester.mkpydir("tests")
    (package / "test_sample.py").write_text(SAMPLE, encoding="utf-8")
    plugin = Path(__file__).parent / "support" / "assertion_count.py"
    (pytester.path / "assertion_count.py").write_text(plugin.read_text(encoding="utf-8"), encoding="utf-8")
    pytester.makeini("[pytest]\nenable_assertion_pass_hook = true\n")
    monkeypatch.setenv("PYTHONPATH", str(pytester.path))
    figures = tmp_path / "checks.json"
    result = pytester.runpytest_subprocess(
        "-p", "assertion_count", "-p", "no:django", "-p", "no:cacheprovider",
        "--checks-json", str(figures), *workers, str(package),
    )  # fmt: skip
    result.assert_outcomes(passed=3, failed=2)
    # 10 in the loop + 1 before the failing one; raises, warns and the three subtests' raises.
    assert json.loads(figures.read_text()) == {
        "asserts passed": 11,
        "pytest.raises/warns met": 5,
        "tests": 5,
        "checks": 16,
    }
    result.stdout.fnmatch_lines(["checks run: 16 (asserts passed 11, pytest.raises/warns met 5) in 5 tests"])


def test_warns_is_counted_in_this_process() -> None:
    from tests.support import assertion_count

    before = assertion_count.COUNTS[assertion_count.RAISES]
    with pytest.warns(UserWarning):
        warnings.warn("counted", UserWarning, stacklevel=1)
    assert assertion_count.COUNTS[assertion_count.RAISES] == before + 1


def test_only_the_modules_of_tests_are_rewritten() -> None:
    """tests/support/rewrite_scope.py: the plugins' packages (schemathesis, hypothesis, anyio,
    pytest-django, xdist) are imported as they are, not rewritten in every test process; the
    asserts of tests/ still are (the count above depends on it)."""
    import hypothesis.core
    import pytest_django.fixtures
    import schemathesis.pytest.plugin
    from _pytest.assertion.rewrite import AssertionRewritingHook

    for plugin_module in (hypothesis.core, pytest_django.fixtures, schemathesis.pytest.plugin):
        assert not isinstance(plugin_module.__loader__, AssertionRewritingHook), plugin_module.__name__
    assert isinstance(__loader__, AssertionRewritingHook)  # type: ignore[name-defined]
