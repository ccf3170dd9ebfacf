# Two entry points for a fresh machine: `make demo` (the main job) and `make test`.
# Each bootstraps .venv from pyproject.toml on first use; nothing else needs installing.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test lint typecheck clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev,postgres]'
	touch $(STAMP)

demo: $(STAMP)
	$(PY) -m bridge.smoke

test: $(STAMP)
	$(PY) -m pytest $(PYTEST_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check bridge harness_examples tests
	$(VENV)/bin/ruff format --check bridge harness_examples tests

typecheck: $(STAMP)
	$(VENV)/bin/mypy

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
