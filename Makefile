# Sluice — every target creates or refreshes the virtual environment it needs.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test test-fast lint bench venv clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	@$(PYTHON) -m venv --help >/dev/null 2>&1 || { echo "installing python3-venv"; apt-get update -qq && apt-get install -y -qq python3-venv; }
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[dev]"
	@touch $(STAMP)

demo: venv
	$(PY) -m sluice demo

lint: venv
	$(PY) -m ruff check sluice tests
	$(PY) -m mypy

test: lint
	$(PY) -m pytest -q

test-fast: venv
	$(PY) -m pytest -q -m "not slow"

bench: venv
	$(PY) benchmarks/engine_throughput.py
	$(PY) benchmarks/reference_vs_duckdb.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
