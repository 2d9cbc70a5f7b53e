# Every documented way to run, test and check attachstore goes through these targets.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: run test lint bench fuzz venv clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

venv: $(STAMP)

run: $(STAMP)  ## start the daemon on 127.0.0.1:8731 with the default data dir
	$(BIN)/attachstore serve $(ARGS)

test: $(STAMP)  ## the whole test suite
	$(BIN)/python -m pytest $(PYTEST_ARGS)

lint: $(STAMP)  ## format check, lint, strict typing, the import contracts between layers
	$(BIN)/ruff format --check attachstore tests
	$(BIN)/ruff check attachstore tests
	$(BIN)/mypy
	$(BIN)/lint-imports

bench: $(STAMP)  ## throughput and latency against baselines measured in the same run
	$(BIN)/python -m tests.bench $(ARGS)

FUZZ_SECONDS ?= 60
fuzz: $(STAMP)  ## fuzz the admission gate for FUZZ_SECONDS (default 60); inputs that crash it go to build/fuzz
	$(BIN)/python -m pip install --quiet -e '.[fuzz]'
	$(BIN)/python -m tests.gate.fuzz -max_total_time=$(FUZZ_SECONDS) -timeout=30 \
		-artifact_prefix=build/fuzz/ build/fuzz/corpus

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .import_linter_cache *.egg-info
