# The two commands a new user needs: `make dev` and `make test`.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PORT ?= 2024
HOST ?= 127.0.0.1
STAMP := $(VENV)/.installed

export LANGGRAPH_CLI_NO_ANALYTICS := 1
export LANGGRAPH_NO_VERSION_CHECK := true
export LANGSMITH_TRACING ?= false

.PHONY: install dev test lint format typecheck pytest bench bench-sandbox clean

install: $(STAMP) .env

# Reinstall only when the pinned set changes; the stamp makes a second run a no-op.
$(STAMP): requirements.lock pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade "pip>=24,<27"
	$(BIN)/python -m pip install --quiet --require-hashes --no-deps -r requirements.lock
	$(BIN)/python -m pip check
	@touch $(STAMP)

.env:
	cp .env.example .env

dev: install
	$(BIN)/langgraph dev --host $(HOST) --port $(PORT) --no-browser

test: install
	@bash scripts/ensure-postgres.sh
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy .
	$(BIN)/pytest

lint:
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format:
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

typecheck:
	$(BIN)/mypy .

pytest: install
	$(BIN)/pytest

# Sandbox providers side by side (local and Kubernetes on the fake cluster).
bench-sandbox: install
	$(BIN)/python -m bench.sandbox_providers

clean:
	rm -rf $(VENV) .langgraph_api .mypy_cache .pytest_cache .ruff_cache
