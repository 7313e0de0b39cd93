"""One suite for every backend and strategy: the golden files through the engine contract
(``sluice.Sluice``) on the embedded engine with every scheduling strategy, and on Spark.

Scheduling may change when results appear, never what they are; a backend may not change either.
Spark runs every file with round-robin and one file with every other strategy (its processors run
the embedded operators with the strategy given); a representative subset runs in ``make test``,
the rest are marked slow (``make test-all``).  The differential test (``test_engine_differential``)
draws the same strategies against the reference evaluator.
"""

from __future__ import annotations

import pytest

import golden
from backends import SCHEDULERS, query_cases, run_golden_file

FILES = [p for p in golden.all_files() if query_cases(golden.load(p))]
# (the other strategies on Spark are slow-marked: 60-90 s each on CI's 2 cores; that a processor
# runs the strategy given is test_spark_processors_run_the_strategy_given's, in the fast set)
FAST_ON_SPARK = {("aggregates", "round-robin"), ("streamops", "round-robin")}
SPARK_FILE_FOR_STRATEGIES = "streamops"


@pytest.mark.parametrize("scheduler", SCHEDULERS)
@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_golden_file_on_the_embedded_engine(path, scheduler) -> None:
    run_golden_file(path, "embedded", scheduler)


def _spark_params():
    for path in FILES:
        for scheduler in SCHEDULERS:
            if scheduler != "round-robin" and path.stem != SPARK_FILE_FOR_STRATEGIES:
                continue
            marks = [pytest.mark.spark] + ([] if (path.stem, scheduler) in FAST_ON_SPARK else [pytest.mark.slow])
            yield pytest.param(path, scheduler, id=f"{path.stem}-{scheduler}", marks=marks)


@pytest.mark.parametrize(("path", "scheduler"), list(_spark_params()))
def test_golden_file_on_spark(spark, path, scheduler, tmp_path) -> None:
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(golden)  # its UDFs reach the workers by value (tests/ is not installed)
    run_golden_file(path, "spark", scheduler, spark, tmp_path)


@pytest.mark.spark
def test_spark_processors_run_the_strategy_given(spark, tmp_path) -> None:
    """The strategy reaches the processor and the engine it builds per instance (a strategy that
    is not honoured fails here).
    """
    from sluice.backends.spark.engine import SparkEngine

    eng = SparkEngine(spark=spark, workdir=tmp_path, scheduler="chain+oldest-first")
    eng.execute("REGISTER STREAM S (K integer, V integer)")
    q = eng.register_query("select K, count(*) from S [Range 2] group by K")
    eng.push("S", [(1, 1, 1), (2, 2, 2)])
    eng.close()
    assert [e.row for e in q.results()] == [(1, 1), (2, 1)]
    assert q.processor.scheduler == "chain+oldest-first"
    assert q.processor._build().strategy.name == "chain+oldest-first"
    eng.stop()
