"""The commands the documentation shows still start: every benchmark answers --help, and each
`bench/X.py`, `manage.py X` and `make X` that README.md, CONTRIBUTING.md, RELIABILITY.md and every
docs/*.md name exists with the flags they give it.

A benchmark that no longer imports (bench/binary.py after a name it used left bench/retrieval.py;
bench/images.py after research.images came to import models) fails here, in seconds, instead of
on the next person who copies the command."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest
from django.core.management import get_commands, load_command_class

ROOT = Path(__file__).resolve().parents[1]
# The README, the other top-level guides and every page of docs/ (a page added there is read too).
DOCUMENTS = (
    "README.md",
    "CONTRIBUTING.md",
    "RELIABILITY.md",
    *(f"docs/{path.name}" for path in sorted((ROOT / "docs").glob("*.md"))),
)
BENCHMARKS = sorted(
    path.name for path in (ROOT / "bench").glob("*.py") if path.stem not in {"__init__", "common"}
)
# A command runs from its name to the end of its code span, comment or line.
DOCUMENTED = re.compile(r"(bench/[a-z_]+\.py|manage\.py [a-z_]+|\bmake [a-z][a-z0-9-]*)([^`#\n)]*)")
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
FENCED = re.compile(r"^```[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
SPAN = re.compile(r"`([^`]+)`")


def code_of(text: str) -> str:
    """The fenced blocks and inline code spans of a Markdown text, one per line: "make" is also an
    English word ("built to make a pattern backtrack"), so `make X` is read from code only."""
    blocks = FENCED.findall(text)
    return "\n".join(blocks + SPAN.findall(FENCED.sub("", text)))


@cache
def documented() -> dict[str, set[str]]:
    """Each documented command (`bench/X.py`, `manage.py X`, `make X`) with the flags shown for it."""
    commands: dict[str, set[str]] = {}
    for name in DOCUMENTS:
        text = (ROOT / name).read_text(encoding="utf-8")
        found = [found for found in DOCUMENTED.findall(text) if not found[0].startswith("make ")]
        found += [found for found in DOCUMENTED.findall(code_of(text)) if found[0].startswith("make ")]
        for command, rest in found:
            commands.setdefault(command, set()).update(FLAG.findall(rest))
    return commands


@cache
def help_texts() -> dict[str, subprocess.CompletedProcess[str]]:
    """`python bench/X.py --help` for every benchmark, all started at once (a second or two each)."""
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    running = {
        name: subprocess.Popen(
            [sys.executable, f"bench/{name}", "--help"],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name in BENCHMARKS
    }
    done = {}
    for name, process in running.items():
        stdout, stderr = process.communicate(timeout=60)
        done[name] = subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)
    return done


def test_the_documents_name_commands() -> None:
    commands = documented()
    assert "bench/binary.py" in commands and "bench/images.py" in commands
    assert "manage.py serve" in commands and "make run" in commands
    # The pages the README sends its readers to are among those read.
    assert {"docs/BENCHMARKS.md", "docs/OPERATIONS.md", "docs/API.md", "docs/DOCUMENTS.md"} <= set(DOCUMENTS)


@pytest.mark.parametrize("name", BENCHMARKS)
def test_a_benchmark_answers_help(name: str) -> None:
    result = help_texts()[name]
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.startswith("usage:")


def test_documented_benchmarks_exist_with_their_flags() -> None:
    helps = help_texts()
    for command, flags in documented().items():
        if not command.startswith("bench/"):
            continue
        name = command.removeprefix("bench/")
        assert name in helps, f"{command} is documented but there is no such benchmark"
        missing = {flag for flag in flags if flag not in FLAG.findall(helps[name].stdout)}
        assert not missing, f"{command}: the documents give {sorted(missing)}, its --help does not know them"


def test_documented_management_commands_exist_with_their_flags() -> None:
    available = get_commands()
    for command, flags in documented().items():
        if not command.startswith("manage.py "):
            continue
        name = command.removeprefix("manage.py ")
        assert name in available, f"{command} is documented but there is no such command"
        parser = load_command_class(available[name], name).create_parser("manage.py", name)
        known = {option for action in parser._actions for option in action.option_strings}
        assert flags <= known, f"{command}: the documents give {sorted(flags - known)}, it does not know them"


def test_documented_make_targets_exist() -> None:
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    targets = set(re.findall(r"^([a-z][a-z0-9-]*):", makefile, re.MULTILINE))
    named = {command.removeprefix("make ") for command in documented() if command.startswith("make ")}
    assert named <= targets, f"documented but not in the Makefile: {sorted(named - targets)}"
