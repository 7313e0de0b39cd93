"""Sluice on a real Spark standalone cluster (issue #10, item 3), started and stopped by the test.

A master and two workers of one core each, from the pyspark package's own ``spark-class`` on
127.0.0.1; the driver (``tests/cluster_driver.py``) is submitted with ``spark-submit --master
spark://127.0.0.1:PORT`` and reads a Parquet directory on the executors.  Its answers — a native
selection, a pre-aggregated sliding group-by and a group-by in the processor — must equal the
embedded engine's over the same events.  The README's "Running on a cluster" shows the same
commands.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from sluice.backends.embedded import EmbeddedEngine
from sluice.backends.spark.cluster import cluster_env, spark_home, standalone_cluster

from cluster_driver import DDL, QUERIES

pytestmark = pytest.mark.spark

HERE = Path(__file__).parent


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    with standalone_cluster(workers=2, cores=1) as url:
        yield url


def _events(directory: Path, n: int) -> pa.Table:
    rng = np.random.default_rng(5)
    ts = np.arange(n, dtype=np.int64) * 3  # a row every 3 ms
    t = pa.table(
        {
            "ts": ts,
            "A": rng.integers(0, 100, n),
            "K": rng.integers(0, 10, n),
            "B": rng.integers(-50, 50, n),
        }
    )
    directory.mkdir()
    for i, part in enumerate(np.array_split(np.arange(n), 4)):
        pq.write_table(t.take(pa.array(part)), directory / f"part-{i}.parquet")
    return t


def _net(t: pa.Table) -> set[tuple[object, ...]]:
    """(ts, net sign, *row) of an answer, whatever its column names."""
    t = t.rename_columns(["ts", "sign"] + [f"c{j}" for j in range(t.num_columns - 2)])
    cols = [c for c in t.column_names if c != "sign"]
    g = t.group_by(cols, use_threads=False).aggregate([("sign", "sum")])
    return {tuple(r.values()) for r in g.to_pylist() if r["sign_sum"]}


def test_a_driver_submitted_to_a_standalone_cluster_answers_as_the_embedded_engine(
    cluster: str, tmp_path: Path
) -> None:
    events = _events(tmp_path / "events", 20_000)
    until = int(events.column("ts")[-1].as_py())
    out = tmp_path / "out"
    out.mkdir()
    submit = str(spark_home() / "bin" / "spark-submit")
    run = subprocess.run(
        [submit, "--master", cluster, "--conf", "spark.sql.shuffle.partitions=2", str(HERE / "cluster_driver.py")]
        + [str(tmp_path / "events"), str(out), str(until)],
        env=cluster_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    emb = EmbeddedEngine(time_unit="millisecond", start=0)
    emb.execute(DDL)
    handles = {name: emb.register_query(q, name=name) for name, q in QUERIES.items()}
    emb.push("S", events)
    emb.close(until)
    for name, h in handles.items():
        *_, master = (out / f"{name}.explain").read_text().splitlines()
        assert master == cluster
        want = h.arrow()
        got = pq.read_table(out / f"{name}.parquet")
        assert want.num_rows and _net(got) == _net(want), name
    assert "native Spark expressions" in (out / "select.explain").read_text()
    assert "pre-aggregated by Spark" in (out / "slide.explain").read_text()
    assert "partitioned into 2 hash buckets" in (out / "range.explain").read_text()
