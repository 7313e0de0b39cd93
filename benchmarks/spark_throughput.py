"""Events/s of benchmark queries on the Spark backend (local[1], local[2]) beside the embedded engine.

Each master runs in its own process (a SparkSession's master is fixed per process).  Every run is
checked: the Spark answer must equal the embedded engine's before its time is reported.  Spark's
time includes writing the event files, the streaming micro-batch and reading the results back;
it excludes session start-up and one untimed warm-up run per query (both reported).

    .venv/bin/python benchmarks/spark_throughput.py [--tuples 100000] [--masters local[1],local[2]]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time

import numpy as np
from sluice.experiments.results import write_results

QUERIES = {
    "select_project": "select A, B * 2 as B2 from S where K < 50",
    "group_by_partitioned": "select K, count(*), sum(A) from S [Range 10 Seconds] group by K",
}


def _rows(n: int) -> list[tuple[int, int, int, float]]:
    rng = np.random.default_rng(1)
    ts = np.sort(rng.integers(0, max(1, n // 1000), n))
    return [
        (int(t), int(i), int(k), float(b))
        for i, (t, k, b) in enumerate(zip(ts, rng.integers(0, 100, n), rng.random(n), strict=True))
    ]


def one_master(master: str, n: int) -> dict[str, object]:
    from sluice.backends.embedded import EmbeddedEngine
    from sluice.backends.spark.engine import SparkEngine
    from sluice.backends.spark.session import get_session
    from sluice.reference.compare import diff_outputs

    rows = _rows(n)
    t0 = time.perf_counter()
    spark = get_session(master)
    startup = time.perf_counter() - t0
    out: dict[str, object] = {"master": master, "session_start_s": round(startup, 2), "tuples": n, "queries": {}}
    # the first streaming query of a session starts Python workers and compiles code paths
    # (~8 s here): run each query once on a few rows first, untimed, and report it separately
    t0 = time.perf_counter()
    for cql in QUERIES.values():
        warm = SparkEngine(spark=spark, workdir=tempfile.mkdtemp(prefix="sluice-bench-"))
        warm.execute("register stream S (A integer, K integer, B float)")
        wq = warm.register_query(cql)
        warm.push("S", rows[:1000])
        warm.close()
        warm.results(wq)
        warm.stop()
    out["warmup_s"] = round(time.perf_counter() - t0, 2)
    for name, cql in QUERIES.items():
        emb = EmbeddedEngine()
        emb.execute("register stream S (A integer, K integer, B float)")
        eq = emb.register_query(cql)
        t0 = time.perf_counter()
        emb.push("S", rows)
        emb.close()
        emb_s = time.perf_counter() - t0
        eng = SparkEngine(spark=spark, workdir=tempfile.mkdtemp(prefix="sluice-bench-"))
        eng.execute("register stream S (A integer, K integer, B float)")
        q = eng.register_query(cql)
        t0 = time.perf_counter()
        eng.push("S", rows)
        eng.close()
        got = eng.results(q)
        spark_s = time.perf_counter() - t0
        eng.stop()
        assert not diff_outputs(eq.results(), got), f"{name}: Spark differs from the embedded engine"
        out["queries"][name] = {  # type: ignore[index]
            "query": cql,
            "partitioning": eng.explain(q).splitlines()[0],
            "spark_s": round(spark_s, 2),
            "spark_events_per_s": round(n / spark_s),
            "embedded_s": round(emb_s, 3),
            "embedded_events_per_s": round(n / emb_s),
            "checked_equal": True,
        }
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tuples", type=int, default=100_000)
    ap.add_argument("--masters", default="local[1],local[2]")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    ap.add_argument("--out", default="benchmarks/results/spark_throughput.json")
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one_master(args.one, args.tuples)))
        return
    runs = []
    for m in args.masters.split(","):
        p = subprocess.run(
            [sys.executable, __file__, "--one", m, "--tuples", str(args.tuples)],
            capture_output=True,
            text=True,
            check=True,
        )
        r = json.loads(p.stdout.strip().splitlines()[-1])
        runs.append(r)
        for name, q in r["queries"].items():
            print(
                f"{m:9s} {name:22s} spark {q['spark_events_per_s']:>9,} ev/s  embedded "
                f"{q['embedded_events_per_s']:>11,} ev/s  ({q['partitioning']})"
            )
    write_results(args.out, "spark_throughput", runs=runs)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
