"""pytest rewrites the asserts of tests/ only, not those of its plugins' packages.

pytest marks every installed plugin's whole distribution for assertion rewriting (schemathesis,
hypothesis, anyio, pytest-django, xdist: about 285 modules here). Rewriting is an AST pass per
module, made heavier by `enable_assertion_pass_hook`, and with PYTHONDONTWRITEBYTECODE (set on
this machine) nothing is cached: every test process, each xdist worker of both tiers, paid it on
every start. Their asserts were never counted (tests/support/assertion_count.py counts only an
assert written in tests/), and a failing one still raises AssertionError, only without pytest's
explanation of the operands.

Loaded with `-p` from pyproject.toml's addopts, so it is imported after pytest has marked the
plugins' packages and before it imports them; it keeps the marks of `tests` only. Test files
and conftest.py are rewritten by their names, as before."""

from __future__ import annotations

import sys

from _pytest.assertion.rewrite import AssertionRewritingHook


def keep_tests_only() -> int:
    """Unmark every package outside tests/ for rewriting; returns how many marks were dropped."""
    dropped = 0
    for finder in sys.meta_path:
        if isinstance(finder, AssertionRewritingHook):
            kept = {name for name in finder._must_rewrite if name == "tests" or name.startswith("tests.")}
            dropped += len(finder._must_rewrite) - len(kept)
            finder._must_rewrite = kept
            finder._marked_for_rewrite_cache.clear()
    return dropped


keep_tests_only()
