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

.PHONY: install run web worker migrate test lint format bench clean

$(STAMP): requirements.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements.txt 2>&1 | $(QUIET_PIP)
	touch $(STAMP)

install: $(STAMP)
	scripts/ensure-tesseract

# Migrations run once, before web and worker start: concurrent DDL from two processes races.
migrate: install
	$(DEV) $(PY) manage.py migrate --noinput

run: migrate
	$(DEV) $(PY) manage.py serve --host $(HOST) --port $(PORT)

web: migrate
	$(DEV) $(PY) -m daphne -b $(HOST) -p $(PORT) mindsearch.asgi:application

worker: migrate
	$(DEV) $(PY) manage.py qcluster

test: install
	scripts/ensure-chromium
	$(DEV) $(PY) -m pytest

lint: install
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

format: install
	$(PY) -m ruff format .
	$(PY) -m ruff check --fix .

clean:
	rm -rf $(VENV) .pytest_cache
