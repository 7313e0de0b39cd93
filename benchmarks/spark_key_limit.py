"""A memory limit per key on Spark (``SparkEngine(key_memory_limit=…)``; issue #13, design 021
"On Spark"), on data Spark reads itself, beside hand-written Structured Streaming.

The window join of ``benchmarks/spark_pipeline.py`` — ``Istream(select S.K, S.I as SI, T.I as TI
from S [Range 1 Second], T [Range 1 Second] where S.K = T.K)`` over two streams of ``--events / 2``
events each (one per millisecond each, 100,000 join keys), written once as Parquet and read by
Spark (``attach_directory``), the answer written by Spark (Parquet sink), on ``local[2]``:

- **exact**: no limit; its answer checked equal to the embedded engine's before any time counts;
- **measured**: a limit of 1 GB, which nothing reaches — what the keys' resource managers cost, and
  the most memory one key held (``peak_key_memory``), which sets the limits below;
- **limited**: that peak divided by 4 and by 16 — each key samples and sheds its input to stay
  under it. Checked: every element is counted (offered = kept + sampled out + shed, per stream),
  the answer is a sub-multiset of the exact one (each output pair is a pair of kept inputs);
  reported: the most memory a key measured against the limit (``peak_over_limit``: not asserted,
  a figure — a key's micro-batch brings all of S before all of T, which passed the limit until S's
  waiting elements were priced at what they will hold and shed from the queue: design 021, "A
  join fed one stream's big batch"), the fraction of the exact answer produced (measured)
  beside the recall the driver reports (1 − FN, each key's recall weighed by the output it
  stands for).

Beside them, Spark's own stream-stream join doing the same work (both watermarks 0, the same pairs
at the same instants; checked equal to the exact answer), in the same session. Each run is
repeated (``--repeat``, default 2, in turn) and the best kept; session start-up and one warm-up run
of each on 20,000 events are excluded.

    .venv/bin/python benchmarks/spark_key_limit.py [--events 1000000] [--repeat 2]

Writes ``benchmarks/results/spark_key_limit.json``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sluice.experiments.results import write_results  # noqa: E402
from spark_pipeline import JOIN, JOIN_DDL, JOIN_KEYS, MEMORY, check_hand, hand_written, netted, write_join_events  # noqa: E402

SHARES = (4, 16)


def expected_answer(data: Path) -> Any:
    """The embedded engine's answer (netted): the oracle of every run."""
    from sluice.backends.embedded import EmbeddedEngine

    eng = EmbeddedEngine(time_unit="millisecond")
    for ddl in JOIN_DDL:
        eng.execute(ddl)
    q = eng.register_query(JOIN)
    for s in ("S", "T"):
        eng.push(s, pq.read_table(data / s).select(["ts", "I", "K"]))
    eng.close()
    return netted(q.arrow())


def sluice_run(spark: Any, data: Path, workdir: Path, until: int, limit: int | None) -> dict[str, Any]:
    from sluice.backends.spark.engine import SparkEngine

    t0 = time.perf_counter()
    eng = SparkEngine(spark=spark, workdir=workdir, time_unit="millisecond", key_memory_limit=limit)
    for ddl in JOIN_DDL:
        eng.execute(ddl)
    for s in ("S", "T"):
        eng.attach_directory(s, data / s, "parquet")
    q = eng.register_query(JOIN, name="q", sink="parquet")
    eng.close(until)  # (the bounded input at once, as trigger(availableNow=True) is for Spark's own)
    seconds = time.perf_counter() - t0
    got = netted(eng.arrow(q))
    out: dict[str, Any] = {"seconds": seconds, "answer": got}
    if limit is not None:
        mine = eng.statistics()["queries"]["q"]
        a = q.approximation
        out |= {
            "peak_key_memory": mine["peak_key_memory"],
            "keys": mine["keys"],
            "streams": {
                s.name: {"offered": s.offered, "kept": s.kept, "sampled_out": s.sampled_out, "shed": s.shed}
                for s in mine["shedding"]
            },
            "dropped": a.dropped,
            "reported_recall": None if a.precision is None else round(1 - a.precision.fn, 4),
            "approximation": a.describe(),
        }
    eng.stop()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--files", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--out", default="benchmarks/results/spark_key_limit.json")
    args = ap.parse_args()
    os.environ.setdefault("PYSPARK_SUBMIT_ARGS", MEMORY)  # (before the JVM starts: the hand-written join's heap)
    from sluice.backends.spark.session import get_session

    root = Path(tempfile.mkdtemp(prefix="sluice-key-limit-"))
    write_join_events(root / "join", args.events, args.files)
    write_join_events(root / "warm" / "join", 20_000, 2)
    n, until = args.events, args.events // 2 - 1
    print(f"{n:,} events written; the embedded engine's answer (the check) …", flush=True)
    want = expected_answer(root / "join")
    exact_rows = Counter(tuple(r.values()) for r in want.drop_columns(["sign_sum"]).to_pylist())
    t0 = time.perf_counter()
    spark = get_session("local[2]")
    session_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    for limit in (None, 10**9):
        sluice_run(spark, root / "warm" / "join", root / f"warm-{limit}", 9_999, limit)
    hand_written(spark, "join", root / "warm" / "events", root / "warm-hand", root / "warm-hand-cp")  # (reads …/join)
    warm_s = time.perf_counter() - t0

    def best(tag: str, limit: int | None) -> dict[str, Any]:
        runs = [sluice_run(spark, root / "join", root / f"{tag}-{r}", until, limit) for r in range(args.repeat)]
        r = min(runs, key=lambda x: x["seconds"])
        r["runs_s"] = [round(x["seconds"], 2) for x in runs]
        return r

    hand_runs = []
    for r in range(args.repeat):
        t = time.perf_counter()
        hand_written(spark, "join", root / "events", root / f"hand-{r}", root / f"hand-cp-{r}")
        hand_runs.append(time.perf_counter() - t)
        check_hand(spark, "join", root / f"hand-{r}", want, until)
    hand_s = min(hand_runs)
    rows: dict[str, Any] = {}
    exact = best("exact", None)
    assert exact.pop("answer").equals(want), "Sluice on Spark differs from the embedded engine"
    rows["exact"] = exact
    measured = best("measured", 10**9)
    assert measured.pop("answer").equals(want) and measured["dropped"] == 0, (
        "a limit nothing reaches changed the answer"
    )
    rows["measured"] = measured
    peak = measured["peak_key_memory"]
    for share in SHARES:
        limit = peak // share
        r = best(f"limit-{share}", limit)
        got = Counter(tuple(x.values()) for x in r.pop("answer").drop_columns(["sign_sum"]).to_pylist())
        assert not got - exact_rows, "a limited run produced a pair the exact answer does not have"
        assert all(s["offered"] == s["kept"] + s["sampled_out"] + s["shed"] for s in r["streams"].values())
        assert sum(s["offered"] for s in r["streams"].values()) >= n  # (every element reached a key)
        r |= {
            "share": share,
            "limit_bytes": limit,
            "peak_over_limit": round(r["peak_key_memory"] / limit, 3),
            "measured_recall": round(sum(got.values()) / sum(exact_rows.values()), 4),
        }
        rows[f"limit 1/{share}"] = r
    for tag, r in rows.items():
        r["seconds"] = round(r["seconds"], 2)
        r["events_per_s"] = round(n / r["seconds"])
        r["over_hand_written"] = round(hand_s / r["seconds"], 3)
        extra = (
            f"; peak {r['peak_key_memory']:,} B on one key of {r['keys']}"
            + (f", limit {r['limit_bytes']:,} B ({r['peak_over_limit']}×)" if "share" in r else "")
            + (f"; recall measured {r['measured_recall']}" if "share" in r else "")
            + (f" reported {r['reported_recall']}; {r['dropped']:,} dropped" if "share" in r else "")
            if "peak_key_memory" in r
            else ""
        )
        print(f"{tag:12s} {r['events_per_s']:>9,} ev/s ({r['over_hand_written']:.2f}× hand-written){extra}", flush=True)
    print(f"hand-written {round(n / hand_s):>9,} ev/s", flush=True)
    write_results(
        args.out,
        "spark_key_limit",
        events=n,
        master="local[2]",
        query=JOIN,
        join_keys=JOIN_KEYS,
        output_rows=sum(exact_rows.values()),
        session_start_s=round(session_s, 2),
        warmup_s=round(warm_s, 2),
        runs=rows,
        hand_written={
            "seconds": round(hand_s, 2),
            "events_per_s": round(n / hand_s),
            "runs_s": [round(x, 2) for x in hand_runs],
        },
    )
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
