# Every documented way to run, test and check attachstore goes through these targets.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# One environment, two stamps: `make run` installs what serving needs (the package and its dependencies);
# the other targets add the dev extras to the same environment, so `make run` then `make test` installs only
# the extras, and `make test` then `make run` installs nothing.
BASE   := $(VENV)/.installed-base
DEV    := $(VENV)/.installed-dev

.PHONY: run test docs lint bench fuzz venv clean lock dist

$(BASE): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e .
	touch $(BASE)

$(DEV): $(BASE)
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(DEV)

venv: $(DEV)

run: $(BASE)  ## start the daemon on 127.0.0.1:8731 with the default data dir
	$(BIN)/attachstore serve $(ARGS)

test: $(DEV)  ## the whole test suite
	$(BIN)/python -m pytest $(PYTEST_ARGS)

docs: $(DEV)  ## run the README and the docs' console examples against a live daemon, rewrite their outputs
	$(BIN)/python -m tests.docs --update $(ARGS)

lint: $(DEV)  ## format check, lint, strict typing, the import contracts between layers
	$(BIN)/ruff format --check attachstore tests
	$(BIN)/ruff check attachstore tests
	$(BIN)/mypy
	$(BIN)/lint-imports

bench: $(DEV)  ## throughput and latency against baselines measured in the same run
	$(BIN)/python -m tests.bench $(ARGS)

dist: $(DEV)  ## dist/: the sdist and the wheel, checked as a package index would check them
	rm -rf dist
	$(BIN)/python -m build --outdir dist .
	$(BIN)/twine check --strict dist/*

lock: $(DEV)  ## deploy/requirements.lock: the container's dependencies, pinned with their hashes
	$(BIN)/uv pip compile pyproject.toml --quiet --generate-hashes --universal --python-version 3.11 \
		--custom-compile-command "make lock" -o deploy/requirements.lock

FUZZ_SECONDS ?= 60
fuzz: $(DEV)  ## fuzz the admission gate for FUZZ_SECONDS (default 60); inputs that crash it go to build/fuzz
	$(BIN)/python -m pip install --quiet -e '.[fuzz]'
	$(BIN)/python -m tests.gate.fuzz -max_total_time=$(FUZZ_SECONDS) -timeout=30 \
		-artifact_prefix=build/fuzz/ build/fuzz/corpus

clean:
	rm -rf $(VENV) dist build .pytest_cache .mypy_cache .ruff_cache .import_linter_cache *.egg-info
