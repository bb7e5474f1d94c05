# Every target sets itself up from nothing: a fresh clone needs only python3 and make.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The Kafka suite runs against Apache Kafka (KRaft), the reference broker: `make kafka` fetches
# it once with Maven into ~/.cache/session-recall (needs Maven and Java >= 17). Other values:
# `noida` (noida-db from PyPI, a Kafka-protocol emulator: no Java needed), `apache,noida` or
# `all` (both).
RECALL_TEST_BROKER ?= apache
export RECALL_TEST_BROKER
comma := ,
# `kafka` when the chosen brokers include Apache Kafka, so a Java-less `noida` run needs no Maven
NEED_KAFKA := $(if $(filter apache all,$(subst $(comma), ,$(RECALL_TEST_BROKER))),kafka)

.PHONY: setup demo test lint unit bench bench-scale chaos fuzz lowest clean kafka

$(STAMP): pyproject.toml setup.py indexer/_matchcount.c
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test,bench,mcp,ui]'
	touch $(STAMP)

setup: $(STAMP)

# The demo needs the package alone: no test, bench, mcp or ui extras (linters, brokers, a
# browser driver). A venv `make setup` already made is used as it is.
DEMO_STAMP := $(VENV)/.installed-demo
$(DEMO_STAMP): pyproject.toml setup.py indexer/_matchcount.c
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e .
	touch $(DEMO_STAMP)

demo: $(if $(wildcard $(STAMP)),$(STAMP),$(DEMO_STAMP))
	$(BIN)/recall demo

lint: $(STAMP)
	$(BIN)/ruff check projections indexer streams tests bench
	$(BIN)/mypy projections indexer
	$(BIN)/mypy streams
	$(BIN)/lint-imports

# The Apache Kafka broker's jars (docker/kafka/pom.xml), fetched once into a cache; a no-op after.
kafka:
	bash docker/kafka/fetch.sh

# The failover and network-namespace fleet scenarios (marker `cluster`: a three-node cluster
# each, several minutes) run in `make chaos`.
test: lint $(NEED_KAFKA)
	$(BIN)/pytest -m "not cluster"

unit: $(STAMP)
	$(BIN)/pytest -m "not kafka and not chaos"

# The pipeline section runs on Apache Kafka unless RECALL_BENCH_BROKERS=noida.
RECALL_BENCH_BROKERS ?= apache
export RECALL_BENCH_BROKERS
bench: $(STAMP) $(if $(filter apache,$(subst $(comma), ,$(RECALL_BENCH_BROKERS))),kafka)
	$(BIN)/python -m bench

# Opt-in (most of an hour at 10M events): RECALL_BENCH_SCALE_SIZES=100k,1m picks fewer sizes.
bench-scale: $(STAMP)
	$(BIN)/python -m bench scale

# Needs root for the fleet scenario (ip netns); prints the measured unavailability windows and
# the cross-host latency.
chaos: $(STAMP) $(NEED_KAFKA)
	$(BIN)/pytest -m chaos

# Every runtime dependency (and the mcp extra) at the lower bound pyproject.toml declares, in a
# venv of its own; runs the suite without the wheel check (noida-db only, to keep it short).
# The ui extra is installed unpinned (its Starlette and uvicorn follow mcp's floors).
lowest:
	rm -rf .venv-lowest && $(PY) -m venv .venv-lowest
	.venv-lowest/bin/python -m pip install -q --upgrade pip
	$(PY) tests/packaging/lowest.py mcp > .venv-lowest/constraints.txt
	.venv-lowest/bin/python -m pip install -q -c .venv-lowest/constraints.txt -e '.[test,mcp,ui]'
	.venv-lowest/bin/python -m pip freeze | grep -iE '^(faust-streaming|aiokafka|cramjam|orjson|pydantic|pydantic-settings|zstandard|apsw|click|rich|filelock|detect-secrets|ahocorasick-rs|watchfiles|mcp)=='
	RECALL_TEST_BROKER=noida .venv-lowest/bin/pytest -m "not packaging"

# The hostile-input suite with many more examples than the bounded default run of `make test`.
fuzz: $(STAMP)
	RECALL_FUZZ_EXAMPLES=$${RECALL_FUZZ_EXAMPLES:-1500} $(BIN)/pytest tests/hostile

clean:
	rm -rf $(VENV) .venv-lowest build dist *.egg-info .mypy_cache .ruff_cache
