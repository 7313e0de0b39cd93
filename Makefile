# Sluice — every target creates or refreshes the virtual environment it needs.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test test-all test-fast lint bench peers venv clean java chromium

venv: $(STAMP)

# Spark needs a JVM: install Debian's Java 17 if there is none.
java:
	@command -v java >/dev/null 2>&1 || { echo "installing openjdk-17-jre-headless"; apt-get update -qq && apt-get install -y -qq openjdk-17-jre-headless; }

# The server's browser test (tests/test_server_ui.py) drives Debian's headless Chromium: install it if there is none.
chromium:
	@command -v chromium >/dev/null 2>&1 || test -x /usr/lib/chromium/chromium || { echo "installing chromium"; apt-get update -qq && apt-get install -y -qq chromium; }

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

test: lint java chromium
	$(PY) -m pytest -q -m "not slow"

test-all: lint java chromium
	$(PY) -m pytest -q

test-fast: venv chromium
	$(PY) -m pytest -q -m "not slow and not spark"

# Benchmark peers, each in its own virtual environment: their pins conflict with Sluice's
# (Pathway: pyarrow < 26; PyFlink: pyarrow < 17, numpy < 2.2, pandas < 2.3).
PEERS := pathway bytewax flink
peers: $(PEERS:%=.venv-peers/%/.installed)

.venv-peers/%/.installed: benchmarks/peers/requirements-%.txt
	@test -x .venv-peers/$*/bin/python || $(PYTHON) -m venv .venv-peers/$*
	.venv-peers/$*/bin/python -m pip install -q -r $<
	@touch $@

bench: venv java
	-$(MAKE) peers  # a peer that cannot be installed is reported as "not installed" in the table
	$(PY) benchmarks/engine_throughput.py
	$(PY) benchmarks/fine_time.py
	$(PY) benchmarks/reference_vs_duckdb.py
	$(PY) benchmarks/rewrites.py
	$(PY) benchmarks/snapshots.py
	$(PY) benchmarks/extremes.py
	$(PY) benchmarks/float_aggregates.py
	$(PY) benchmarks/shared_joins.py --rss
	$(PY) benchmarks/constraints.py
	$(PY) benchmarks/window_compression.py
	$(PY) benchmarks/memory_limit_cases.py
	$(PY) benchmarks/join_backlog.py
	$(PY) benchmarks/limit_sweep.py
	$(PY) benchmarks/limit_overhead.py
	$(PY) benchmarks/limit_in_runs.py
	$(PY) benchmarks/bloom_distinct.py
	$(PY) benchmarks/time_moves.py
	$(PY) benchmarks/join_order.py
	$(PY) benchmarks/derived_join.py
	$(PY) benchmarks/dataflow_join.py
	$(PY) benchmarks/filter_order.py
	$(PY) benchmarks/pruning.py
	$(PY) benchmarks/spark_throughput.py
	$(PY) benchmarks/spark_pipeline.py
	$(PY) benchmarks/spark_key_limit.py
	$(PY) -m sluice bench --queries q0,q1,q2,q3,q4,q5,q6,q7 --events 100000

clean:
	rm -rf $(VENV) .venv-peers .pytest_cache .mypy_cache .ruff_cache .hypothesis
