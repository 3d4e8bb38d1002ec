# The two commands a new user needs: `make dev` and `make test`.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PORT ?= 2024
HOST ?= 127.0.0.1
# langgraph dev runs one job at a time unless told otherwise; a run that waits
# for its remote subagent runs (subagents.execution: remote) needs more slots.
N_JOBS ?= 10
# Extra flags for `langgraph dev`, e.g. DEV_FLAGS="--tunnel" (Safari and remote
# browsers) or DEV_FLAGS="--server-log-level INFO".
DEV_FLAGS ?=
STAMP := $(VENV)/.installed

export LANGGRAPH_CLI_NO_ANALYTICS := 1
export LANGGRAPH_NO_VERSION_CHECK := true
export LANGSMITH_TRACING ?= false

.PHONY: install dev test lint format typecheck pytest clean

install: $(STAMP) .env

# Reinstall only when the pinned set changes; the stamp makes a second run a no-op.
$(STAMP): requirements.lock pyproject.toml
	@test -x $(BIN)/python || { echo "make install: creating $(VENV)"; $(PYTHON) -m venv $(VENV); }
	$(BIN)/python -m pip install --quiet --upgrade "pip>=24,<27"
	@echo "make install: installing the $$(grep -c '^[A-Za-z0-9]' requirements.lock) pinned packages of requirements.lock (about a minute the first time)"
	$(BIN)/python -m pip install --progress-bar on --require-hashes --no-deps -r requirements.lock
	$(BIN)/python -m pip check
	@touch $(STAMP)

.env:
	cp .env.example .env

# scripts/dev.py refuses a busy port, checks config and database first, then
# runs `langgraph dev` (reload on) and exits non-zero if its start fails.
dev: install
	@$(BIN)/python scripts/dev.py --host $(HOST) --port $(PORT) -- --n-jobs-per-worker $(N_JOBS) $(DEV_FLAGS)

test: install
	@bash scripts/ensure-postgres.sh
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy .
	$(BIN)/lint-imports
	$(BIN)/pytest

# Style, format and the layer contract (pyproject.toml [tool.importlinter]).
lint:
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

format:
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

typecheck:
	$(BIN)/mypy .

pytest: install
	$(BIN)/pytest

# Checkpoint storage, write and read latency: our saver, in-memory, stock, stock + DeltaChannel
# (TURNS=200 by default);
# writes bench/results/checkpointer.md.
.PHONY: bench-checkpointer
bench-checkpointer: install
	@bash scripts/ensure-postgres.sh
	$(BIN)/python -m bench.checkpointer
# Per-step cost of the middleware chain vs a bare agent; writes bench/results/chain_overhead.md.
.PHONY: bench-chain
bench-chain: install
	$(BIN)/python -m bench.chain_overhead
# One compaction's cost and a 300-turn thread's storage; writes bench/results/long_conversation.md.
.PHONY: bench-long
bench-long: install
	$(BIN)/python -m bench.long_conversation
# Sandbox providers side by side (local and Kubernetes on the fake cluster).
.PHONY: bench-sandbox
bench-sandbox: install
	$(BIN)/python -m bench.sandbox_providers

clean:
	rm -rf $(VENV) .langgraph_api .mypy_cache .pytest_cache .ruff_cache
