"""A Spark standalone cluster on this machine, from the pyspark package's own ``spark-class``.

For tests and benchmarks (and to try a cluster without installing Spark): a master and ``workers``
workers of ``cores`` cores each, all on 127.0.0.1, started as their own process groups and stopped
on exit.  The same as, in a shell (the README's "Running on a cluster")::

    export SPARK_HOME=$(.venv/bin/python -c 'import pyspark, os; print(os.path.dirname(pyspark.__file__))')
    export SPARK_LOCAL_IP=127.0.0.1 PYSPARK_PYTHON=$PWD/.venv/bin/python
    $SPARK_HOME/bin/spark-class org.apache.spark.deploy.master.Master --host 127.0.0.1 --port 7077 &
    W=org.apache.spark.deploy.worker.Worker
    $SPARK_HOME/bin/spark-class $W spark://127.0.0.1:7077 --cores 1 --host 127.0.0.1 &   # twice
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sluice.errors import SluiceError


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


def cluster_env() -> dict[str, str]:
    """The environment for the cluster's processes and a driver submitted to it."""
    return {
        **os.environ,
        "SPARK_HOME": str(spark_home()),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
    }


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextmanager
def standalone_cluster(workers: int = 2, cores: int = 1, memory: str = "1g", timeout: float = 90) -> Iterator[str]:
    """Start the cluster, yield its master URL (``spark://127.0.0.1:PORT``), stop it."""
    logs = Path(tempfile.mkdtemp(prefix="sluice-cluster-"))
    spark_class = str(spark_home() / "bin" / "spark-class")
    port = _port()
    url = f"spark://127.0.0.1:{port}"
    commands = [
        [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port)]
        + ["--webui-port", str(_port())]
    ] + [
        [spark_class, "org.apache.spark.deploy.worker.Worker", url, "--cores", str(cores), "--memory", memory]
        + ["--host", "127.0.0.1", "--webui-port", str(_port()), "--work-dir", str(logs / f"work{i}")]
        for i in range(workers)
    ]
    procs = []
    try:
        for i, cmd in enumerate(commands):
            with (logs / f"{'master' if i == 0 else f'worker{i}'}.log").open("w") as out:
                procs.append(
                    subprocess.Popen(
                        cmd, stdout=out, stderr=subprocess.STDOUT, env=cluster_env(), start_new_session=True
                    )
                )
        master_log = logs / "master.log"
        deadline = time.monotonic() + timeout
        while master_log.read_text().count("Registering worker") < workers:
            if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                raise SluiceError(f"the Spark cluster did not start (logs in {logs}): {master_log.read_text()[-1500:]}")
            time.sleep(0.5)
        yield url
    finally:
        for p in procs:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
