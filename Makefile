# Every target sets itself up from nothing: a fresh clone needs only python3 and make.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The Kafka suite runs against both brokers from PyPI, noida-db and tansu: two independent
# implementations catch reliance on one broker's quirks. `RECALL_TEST_BROKER=noida` (or tansu)
# runs one of them only.
RECALL_TEST_BROKER ?= both
export RECALL_TEST_BROKER

.PHONY: setup demo test lint unit bench chaos clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test,bench,mcp]'
	touch $(STAMP)

setup: $(STAMP)

demo: $(STAMP)
	$(BIN)/recall demo

lint: $(STAMP)
	$(BIN)/ruff check projections indexer streams tests bench
	$(BIN)/mypy projections indexer
	$(BIN)/mypy streams

test: lint
	$(BIN)/pytest

unit: $(STAMP)
	$(BIN)/pytest -m "not kafka and not chaos"

bench: $(STAMP)
	$(BIN)/python -m bench

chaos: $(STAMP)
	$(BIN)/pytest -m chaos

clean:
	rm -rf $(VENV) build *.egg-info .mypy_cache .ruff_cache
