"""A Sluice driver submitted to a Spark standalone cluster by ``tests/test_spark_cluster.py``.

    spark-submit --master spark://127.0.0.1:PORT tests/cluster_driver.py EVENTS_DIR OUT_DIR UNTIL

Reads the Parquet files in EVENTS_DIR (attached: read by the executors), runs the queries of
``QUERIES`` and writes each answer as ``OUT_DIR/<name>.parquet`` (ts, sign, columns), with the
EXPLAIN and the master's URL in ``OUT_DIR/<name>.explain``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pyarrow.parquet as pq

DDL = "register stream S (A integer, K integer, B integer)"
QUERIES = {
    "select": "select A, B * 2 as B2 from S where K < 5",
    "slide": "select K, count(*), sum(A) from S [Range 10 Seconds Slide 1 Second] group by K",
    "range": "select K, max(B), count(*) from S [Range 2 Seconds] group by K",
}


def main() -> None:
    from sluice.backends.spark.engine import SparkEngine
    from sluice.backends.spark.session import get_session

    events, out, until = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
    spark = get_session(master=None)  # spark-submit's --master
    eng = SparkEngine(spark=spark, workdir=out / "work", time_unit="millisecond", start=0)
    eng.execute(DDL)
    eng.attach_directory("S", events, "parquet")
    handles = {name: eng.register_query(q, name=name, sink="parquet") for name, q in QUERIES.items()}
    eng.run()
    eng.close(until)
    for name, h in handles.items():
        pq.write_table(eng.arrow(h), out / f"{name}.parquet")
        (out / f"{name}.explain").write_text(eng.explain(h) + "\n" + spark.sparkContext.master)
    eng.stop()


if __name__ == "__main__":
    main()
