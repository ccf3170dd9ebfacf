# Two entry points for a fresh machine: `make demo` (the main job) and `make test`.
# Each bootstraps .venv from pyproject.toml on first use; nothing else needs installing.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# A second venv with an MCP SDK 1.x release: the 2025-11-25 experimental-tasks server that
# tests/test_mcp_legacy_tasks.py starts. Built once, reused while its pin is unchanged.
LEGACY_MCP_VENV := .venv-legacy-mcp
# Test files run in this many worker processes (a file stays on one worker, so its module
# fixtures start once; the tests of a file with none run side by side). Most tests wait on real
# servers and processes, not on the CPU. Work is handed out in collection order, the longest
# first (tests/support/scheduling.py).
TEST_WORKERS ?= 3

.PHONY: demo test bench lint typecheck clean legacy-mcp-venv bytecode

# The packages are installed by uv (itself installed by pip first): ~20 s against ~75 s for
# pip, same resolved versions. Compiled to bytecode at install, as pip does: where
# PYTHONDONTWRITEBYTECODE is set, nothing else would, and every process start would compile
# the SDKs again (~3 s). uv reads UV_INDEX_URL / UV_EXTRA_INDEX_URL, not pip's configuration:
# where only pip can reach the packages, pip installs them instead.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet uv \
	  && $(VENV)/bin/uv pip install --quiet --compile-bytecode --python $(PY) -e '.[dev,postgres]' \
	  || $(PY) -m pip install --quiet -e '.[dev,postgres]'
	touch $(STAMP)

# The repository's own modules compiled to bytecode (<1 s). Where PYTHONDONTWRITEBYTECODE is
# set, nothing else writes it, and every process the tests and the demo start (hundreds) would
# compile bridge/ again: ~0.45 s of CPU each. A stale file is ignored (its source is newer).
bytecode: $(STAMP)
	$(PY) -m compileall -q -j 0 bridge harness_examples bench tests

demo: $(STAMP) bytecode
	$(PY) -m harness_examples.demo

legacy-mcp-venv: $(STAMP)
	$(PY) -m tests.support.legacy_venv

test: $(STAMP) legacy-mcp-venv bytecode
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder $(PYTEST_ARGS)

bench: $(STAMP) bytecode
	$(PY) -m bench.run

lint: $(STAMP)
	$(VENV)/bin/ruff check bridge harness_examples tests bench
	$(VENV)/bin/ruff format --check bridge harness_examples tests bench

typecheck: $(STAMP)
	$(VENV)/bin/mypy

clean:
	rm -rf $(VENV) $(LEGACY_MCP_VENV) build .pytest_cache .mypy_cache .ruff_cache .hypothesis \
	  tests/interop/ts/node_modules tests/interop/ts/.install.lock
