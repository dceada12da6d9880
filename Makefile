# The commands of the README: `make run`, `make test` and `make broker`. Each creates .venv
# and installs what it needs first, so all work on a fresh machine with Python 3.11 (+ Java 17).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP_BROKER := $(VENV)/.installed-broker
STAMP_RUN := $(VENV)/.installed-run
STAMP_DEV := $(VENV)/.installed-dev

.PHONY: run broker test test-quick test-under-load lint proto clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

# Each stamp says what the venv holds: the broker alone (no extra), + Spark, + the dev tools.
$(STAMP_BROKER): pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e .
	touch $@

$(STAMP_RUN): pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[spark]'
	touch $@ $(STAMP_BROKER)

$(STAMP_DEV): pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[dev,spark]'
	touch $@ $(STAMP_RUN) $(STAMP_BROKER)

## Run the main job: the smart city on an embedded broker, Spark pipeline, summary (docs/smart-city.md).
run: $(STAMP_RUN)
	$(BIN)/magnetar smart-city $(ARGS)

## Run the standalone broker on 127.0.0.1:6650 (Ctrl-C to stop); it needs no Spark, so none is installed.
broker: $(STAMP_BROKER)
	$(BIN)/magnetar standalone $(ARGS)

## Lint (ruff, mypy, import-linter) and run the whole test suite, on two workers (XDIST= runs it in one process); the 30 slowest tests are listed last, to keep the suite well under 15 minutes.
XDIST ?= -n 2 --dist loadfile
test: $(STAMP_DEV)
	.ci/system-packages
	$(BIN)/ruff check src tests bench
	$(BIN)/mypy
	$(BIN)/lint-imports --no-cache
	$(BIN)/python -m pytest -q $(XDIST) --durations=30 $(PYTEST_ARGS)

## The inner loop: the suite without the slow and the Spark tests (docs/testing.md), on two workers.
QUICK := -m "not slow and not spark"
test-quick: $(STAMP_DEV)
	.ci/system-packages
	$(BIN)/python -m pytest -q $(XDIST) $(QUICK) $(PYTEST_ARGS)

## The suite RUNS times in a row with every core busy (flakes show there): docs/testing.md.
RUNS ?= 20
test-under-load: $(STAMP_DEV)
	.ci/under-load $(RUNS) $(XDIST) $(PYTEST_ARGS)

## ruff (rules and format), mypy (strict on protocol and storage) and the import-linter contracts.
lint: $(STAMP_DEV)
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench
	$(BIN)/mypy
	$(BIN)/lint-imports --no-cache

## Benchmarks: Magnetar and the peer side by side into docs/benchmarks.md (ARGS="--smoke" for a quick one).
STAMP_BENCH := $(VENV)/.installed-bench

$(STAMP_BENCH): pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[dev,bench]'
	touch $@

.PHONY: bench
bench: $(STAMP_BENCH)
	$(BIN)/python -m bench $(ARGS)

## Regenerate the protobuf module from src/magnetar/protocol/pulsar_wire.proto.
proto: $(STAMP_DEV)
	cd src && PATH=../$(BIN):$$PATH ../$(BIN)/python -m grpc_tools.protoc -I. --python_out=. --mypy_out=. magnetar/protocol/pulsar_wire.proto

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info .pytest_cache .ruff_cache
