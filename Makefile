# The README's commands. `make install` once, then `make serve` (or `make test`).
PY ?= python3
VENV ?= .venv
BIN = $(VENV)/bin

.PHONY: install serve test lint bench

install:
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,mem0,openai-agents,langgraph]'

serve:
	$(BIN)/tiermem serve

test:
	$(BIN)/python -m pytest -q

lint:
	$(BIN)/ruff check shared services workers tiermem tests bench
	$(BIN)/mypy shared services workers tiermem
	$(BIN)/lint-imports --no-cache

bench:
	$(BIN)/python -m bench.bench_embeddings
	$(BIN)/python -m bench.bench_cli
	$(BIN)/python -m bench.bench_ingest
	$(BIN)/python -m bench.bench_extraction
	$(BIN)/python -m bench.bench_context
	$(BIN)/python -m bench.bench_compression
	$(BIN)/python -m bench.bench_replay
	$(BIN)/python -m bench.bench_users --users 1000,10000
	$(BIN)/python -m bench.bench_hybrid
	$(BIN)/python -m bench.bench_recall
	$(BIN)/python -m bench.bench_offline_facts
	$(BIN)/python -m bench.bench_beliefs
	$(BIN)/python -m bench.bench_beliefs --data bench/data/beliefs_dev2.jsonl --output bench/results/beliefs-dev2.md
	$(BIN)/python -m bench.bench_beliefs --data bench/data/beliefs_holdout.jsonl --output bench/results/beliefs-holdout.md
