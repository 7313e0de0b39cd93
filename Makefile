# Sluice — every target creates or refreshes the virtual environment it needs.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test test-all test-fast lint bench venv clean java

venv: $(STAMP)

# Spark needs a JVM: install Debian's Java 17 if there is none.
java:
	@command -v java >/dev/null 2>&1 || { echo "installing openjdk-17-jre-headless"; apt-get update -qq && apt-get install -y -qq openjdk-17-jre-headless; }

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

test: lint java
	$(PY) -m pytest -q -m "not slow"

test-all: lint java
	$(PY) -m pytest -q

test-fast: venv
	$(PY) -m pytest -q -m "not slow and not spark"

bench: venv
	$(PY) benchmarks/engine_throughput.py
	$(PY) benchmarks/reference_vs_duckdb.py
	$(PY) benchmarks/spark_throughput.py
	$(PY) -m sluice bench --queries q0,q1,q2,q3,q5,q7 --events 100000

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
