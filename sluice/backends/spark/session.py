"""One SparkSession per process, configured for Sluice's stateful processors.

``transformWithStateInPandas`` needs pandas, pyarrow and protobuf on the workers, the RocksDB
state-store provider, and ``PYSPARK_PYTHON`` pointing at this interpreter.  Starting a session
takes seconds, so it is created once and reused.
"""

from __future__ import annotations

import os
import shutil
import sys
from typing import Any

_SESSION: Any = None


def java_available() -> bool:
    return shutil.which("java") is not None


def get_session(master: str | None = "local[2]", app: str = "sluice") -> Any:
    """The process's session; ``master`` None takes the one ``spark-submit --master`` gave."""
    global _SESSION
    if _SESSION is not None:
        return _SESSION
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = SparkSession.builder if master is None else SparkSession.builder.master(master)
    if (master or "").startswith("local"):  # nothing listens beyond this machine (driver RPC, block manager)
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # read when the JVM starts
        builder = builder.config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
    _SESSION = (
        builder.appName(app)
        .config("spark.sql.shuffle.partitions", "2")
        .config(
            "spark.sql.streaming.stateStore.providerClass",
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
        )
        # RocksDB commits a changelog per micro-batch instead of uploading its files, and puts
        # state without first reading it to count rows (a metric Sluice does not read).  The
        # pre-aggregated 10 s / 1 s group-by of benchmarks/spark_pipeline.py, 2 M events, local[1]:
        # 7.2–7.8 → 6.5–6.6 s in two interleaved pairs, but its best of three is the same (6.5, 6.4 s)
        .config("spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled", "true")
        .config("spark.sql.streaming.stateStore.rocksdb.trackTotalNumberOfRows", "false")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")  # no [Stage 0:> …] bars over the user's output
        .config("spark.sql.streaming.forceDeleteTempCheckpointLocation", "true")
        .getOrCreate()
    )
    _SESSION.sparkContext.setLogLevel("ERROR")
    return _SESSION
