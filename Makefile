# MindSearch: `make run` to use it, `make test` to check it. Nothing else needs installing.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := run

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-requirements
# Where `make run` / `make web` listen: `make run PORT=8001 HOST=0.0.0.0`.
HOST ?= 127.0.0.1
PORT ?= 8000
# `make run` and friends start in development mode unless DEBUG is already in the environment.
DEV := DEBUG=$${DEBUG-1}
# The machine's pip configuration may list package folders that do not exist; say nothing of them.
QUIET_PIP := { grep -v "is ignored: it is neither a file nor a directory" || true; }

# Test processes side by side (pytest-xdist): `make test WORKERS=1` runs them one after another.
WORKERS ?= auto
XDIST := -n $(WORKERS) --dist worksteal
# The slow tier mostly waits, and ran in 820-877 s instead of 1,009 s with two test processes per
# core (`make test-e2e E2E_WORKERS=4` here), but two browser tests then lost races with the page's
# live updates (docs/TESTING.md): one per core until they wait for them.
E2E_WORKERS ?= $(WORKERS)

.PHONY: help install run web worker migrate test test-e2e lint format clean

help:  ## List the targets, one line each
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/^([a-z-]+):.*## /\1\t/' | expand -t 12

$(STAMP): requirements.txt requirements-llm.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements.txt 2>&1 | $(QUIET_PIP)
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps -r requirements-llm.txt 2>&1 | $(QUIET_PIP)
	touch $(STAMP)

install: $(STAMP)  ## Create .venv and install requirements*.txt (and tesseract, as root)
	scripts/ensure-tesseract

# Migrations run once, before web and worker start: concurrent DDL from two processes races.
migrate: install  ## Apply database migrations
	$(DEV) $(PY) manage.py migrate --noinput

run: migrate  ## Web server and a worker together (HOST=127.0.0.1 PORT=8000 by default)
	$(DEV) $(PY) manage.py serve --host $(HOST) --port $(PORT)

web: migrate  ## The web server alone (daphne)
	$(DEV) $(PY) -m daphne -b $(HOST) -p $(PORT) mindsearch.asgi:application

worker: migrate  ## The background worker alone (qcluster)
	$(DEV) $(PY) manage.py qcluster

# The tiers write bytecode even where PYTHONDONTWRITEBYTECODE is set (as on the shared machine):
# the e2e tier reuses what the fast tier compiled and rewrote, and each daphne, qcluster and
# manage.py it starts imports the project from .pyc (docs/TESTING.md).
TEST_ENV := $(DEV) PYTHONDONTWRITEBYTECODE=

test: install  ## The fast tier: every in-process test, in parallel (Redis tests skip without a redis-server)
	$(TEST_ENV) $(PY) -m pytest $(XDIST) -m "not e2e"

test-e2e: install  ## The slow tier: real daphne/qcluster processes, the browser, a real model server
	scripts/ensure-chromium
	$(TEST_ENV) $(PY) -m pytest -n $(E2E_WORKERS) --dist worksteal -m e2e

# mypy's modules still allowed errors are listed in pyproject.toml; that list only shrinks.
# The import rules are configuration, in pyproject.toml: ruff's banned-API rule (TID251: HTTP and MCP
# clients only in mindsearch/clients/) and import-linter's contracts (apps depend downward, stages
# independent of each other, the pipeline's layers).
lint: install  ## ruff (with the banned-API rule), ruff format --check, import-linter, mypy, the migrations check
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(VENV)/bin/lint-imports
	$(PY) .ci/mypy_ratchet.py
	$(DEV) $(PY) manage.py makemigrations --check --dry-run

format: install  ## Format with ruff and apply its safe fixes
	$(PY) -m ruff format .
	$(PY) -m ruff check --fix .

clean:  ## Remove .venv and the tools' caches
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .import_linter_cache
