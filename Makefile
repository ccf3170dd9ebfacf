# Two entry points for a fresh machine: `make demo` (the main job) and `make test`.
# Each bootstraps .venv from pyproject.toml on first use; nothing else needs installing.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test bench lint typecheck clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev,postgres]'
	touch $(STAMP)

demo: $(STAMP)
	$(PY) -m harness_examples.demo

test: $(STAMP)
	$(PY) -m pytest $(PYTEST_ARGS)

bench: $(STAMP)
	$(PY) -m bench.run

lint: $(STAMP)
	$(VENV)/bin/ruff check bridge harness_examples tests bench
	$(VENV)/bin/ruff format --check bridge harness_examples tests bench

typecheck: $(STAMP)
	$(VENV)/bin/mypy

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
