"""A Spark driver killed part-way (SIGKILL, JVM included) and restarted from its checkpoint gives
the output of an uninterrupted run: nothing lost, nothing repeated (issue: Spark pipeline, item 5).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from sluice.backends.embedded import EmbeddedEngine
from sluice.backends.spark.engine import SparkEngine
from sluice.reference.compare import diff_outputs

pytestmark = pytest.mark.spark

DDL = "register stream S (K integer, V integer)"
QUERY = "select K, count(*), sum(V) from S [Range 3 Seconds] group by K"
FILES = 12

DRIVER = textwrap.dedent(
    """
    import sys, time
    from sluice.backends.spark.engine import SparkEngine
    from sluice.backends.spark.session import get_session

    work, src, out, ddl, query = sys.argv[1:6]
    eng = SparkEngine(spark=get_session("local[1]"), workdir=work)
    eng.execute(ddl)
    eng.attach_directory("S", src, "csv", maxFilesPerTrigger="1")
    eng.register_query(query, name="agg", sink="parquet", path=out)
    eng.run()  # one file per micro-batch: killed somewhere in here
    time.sleep(600)
    """
)


def _rows(i: int) -> list[tuple[int, int, int]]:
    return [(t, t % 3, (t * 7) % 11) for t in range(i * 10, i * 10 + 10)]


def _commits(work: Path) -> int:
    d = work / "agg" / "checkpoint" / "commits"
    return len([p for p in d.glob("*") if p.name.isdigit()]) if d.exists() else 0


def test_driver_killed_part_way_restarts_from_its_checkpoint_with_identical_output(spark, tmp_path) -> None:
    src, work, out = tmp_path / "in", tmp_path / "w", tmp_path / "out"
    src.mkdir()
    for i in range(FILES):  # files in timestamp order, and Spark reads them by modification time
        f = src / f"part-{i:02d}.csv"
        f.write_text("ts,K,V\n" + "".join(f"{t},{k},{v}\n" for t, k, v in _rows(i)))
        os.utime(f, (1_000_000 + i, 1_000_000 + i))
    script = tmp_path / "driver.py"
    script.write_text(DRIVER)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    with (tmp_path / "driver.err").open("w") as err:
        driver = subprocess.Popen(
            [sys.executable, str(script), str(work), str(src), str(out), DDL, QUERY],
            stdout=subprocess.DEVNULL,
            stderr=err,
            env=env,
            start_new_session=True,  # its own process group: the kill takes the JVM too
        )
    try:
        deadline = time.monotonic() + 240
        while _commits(work) < 3 and driver.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        early = driver.poll()
    finally:
        try:  # in finally: whatever happened above, the driver and its JVM do not outlive the test
            os.killpg(driver.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        driver.wait(60)
    assert early is None, f"the driver exited by itself (exit {early}): {(tmp_path / 'driver.err').read_text()[-2000:]}"
    done = _commits(work)
    assert 3 <= done < FILES, f"the driver was not killed part-way ({done} of {FILES} micro-batches committed)"

    eng = SparkEngine(spark=spark, workdir=work)
    eng.execute(DDL)
    eng.attach_directory("S", src, "csv", maxFilesPerTrigger="1")
    q = eng.register_query(QUERY, name="agg", sink="parquet", path=out)
    eng.run()
    eng.close(FILES * 10 - 1)
    resumed = eng.results(q)
    assert eng.statistics()["queries"]["agg"]["rejected"] == []
    eng.stop()

    ref = EmbeddedEngine()
    ref.execute(DDL)
    rq = ref.register_query(QUERY)
    ref.push("S", [r for i in range(FILES) for r in _rows(i)])
    ref.close()
    assert not diff_outputs(rq.results(), resumed)
    assert len(resumed) == len(rq.results())
