"""Sluice on Spark beside hand-written Structured Streaming, on data Spark reads itself.

Events (default 2,000,000, one per millisecond: distinct instants) are written once as Parquet
files; every run reads them with Spark (``attach_directory(..., "parquet")`` for Sluice,
``readStream.parquet`` for the hand-written pipeline) and writes its answer with Spark (Parquet
file sink).  Before any time counts, each answer is checked: Sluice's equal to the embedded
engine's over the same events, the hand-written pipeline's equal to the same answer in its own
shape.  Each master runs in its own process (a session's master is fixed per process); session
start-up and one warm-up run of every pipeline on a small data set are excluded and reported.
Sluice is given the input with one ``close(until)`` (attach, register, close), the hand-written
pipeline runs once with ``trigger(availableNow=True)``.
Each query runs ``--repeat`` times (default 3), Sluice and the hand-written pipeline in turn; the
best run of each is reported (a run of a second or two varies by ±40% on this shared machine).

    .venv/bin/python benchmarks/spark_pipeline.py [--events 2000000] [--masters local[1],local[2],cluster] [--repeat 3]

Queries (CQL, time unit millisecond) and the hand-written work they are compared with:

- ``select_project``: ``select A, B * 2 as B2 from S where K < 50`` — ``where`` + ``selectExpr``.
- ``slide_group_by``: ``select K, count(*), sum(A) from S [Range 10 Seconds Slide 1 Second] group
  by K`` — ``groupBy(window(et, '10001 milliseconds', '1 second'), K)`` with a watermark, append
  mode.  CQL's window at τ holds timestamps in [τ − 10 s, τ] (both ends), so the Spark window
  starting at s = τ − 10,000 ms must be 10,001 ms long: the same answer, row for row.
  Spark pre-aggregates it (design 015); ``slide_group_by_unaggregated`` runs the same query with
  ``preaggregate=False`` (every element reaches the processor), to show what that buys.
- ``range_group_by``: the issue's ``[Range 10 Seconds]`` (a new answer at every millisecond, ~1,000×
  the rows of the 1 s slide) — reported beside the same hand-written 10 s / 1 s aggregation, which
  is what Spark offers for a sliding window, not the same work.
- ``window_join``: ``Istream(select S.K, S.I as SI, T.I as TI from S [Range 1 Second], T [Range 1
  Second] where S.K = T.K)`` over two streams of half the events each (one per millisecond each,
  100,000 keys, ``I`` an event id) — Spark's stream-stream join on ``K`` with the time bound
  ``|S.et − T.et| ≤ 1 s``, both watermarks 0, append mode, each pair stamped with the later of its two
  timestamps: the same pairs at the same instants.  (``S.K`` is in the answer: an Istream of a
  relation without the join key cannot be split by it — two keys' changes could cancel — and
  would run on one key.)

The hand-written pipelines run on Spark's default state store (HDFS-backed: what a pipeline
written by hand gets); Sluice's stateful queries need RocksDB (``transformWithStateInPandas``).
The session is configured for Sluice; each hand-written query sets the default for itself.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from sluice.experiments.results import write_results

DDL = "register stream S (A integer, K integer, B integer)"
QUERIES = {
    "select_project": "select A, B * 2 as B2 from S where K < 50",
    "slide_group_by": "select K, count(*), sum(A) from S [Range 10 Seconds Slide 1 Second] group by K",
    "range_group_by": "select K, count(*), sum(A) from S [Range 10 Seconds] group by K",
}
JOIN_DDL = ["register stream S (I integer, K integer)", "register stream T (I integer, K integer)"]
JOIN = "Istream(select S.K, S.I as SI, T.I as TI from S [Range 1 Second], T [Range 1 Second] where S.K = T.K)"
JOIN_KEYS = 100_000
HAND = {
    "select_project": "select_project",
    "slide_group_by": "window",
    "range_group_by": "window",
    "window_join": "join",
}
# (run, query, Spark pre-aggregation on): the sliding group-by also without it, to show what it buys
RUNS = [(name, name, True) for name in QUERIES] + [
    ("slide_group_by_unaggregated", "slide_group_by", False),
    ("window_join", "window_join", True),
]
CQL = {**QUERIES, "window_join": JOIN}
DEFAULT_STORE = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"
STORE = "spark.sql.streaming.stateStore.providerClass"


def write_events(directory: Path, n: int, files: int) -> None:
    """``ts`` 0, 1, 2, … ms; ``K`` uniform over 100 keys; ``A``, ``B`` small integers."""
    rng = np.random.default_rng(7)
    directory.mkdir(parents=True, exist_ok=True)
    ts = np.arange(n, dtype=np.int64)
    k = rng.integers(0, 100, n, dtype=np.int64)
    a = rng.integers(0, 1000, n, dtype=np.int64)
    b = rng.integers(-500, 500, n, dtype=np.int64)
    for i, part in enumerate(np.array_split(np.arange(n), files)):
        t = pa.table({"ts": ts[part], "A": a[part], "K": k[part], "B": b[part]})
        pq.write_table(t, directory / f"events-{i:03d}.parquet")


def write_join_events(directory: Path, n: int, files: int) -> None:
    """Streams ``S`` and ``T`` of ``n // 2`` events each (``directory/S``, ``directory/T``): ``ts``
    0, 1, 2, … ms; ``K`` uniform over ``JOIN_KEYS`` keys; ``I`` = ``ts`` (an event id).
    """
    rng = np.random.default_rng(11)
    half = n // 2
    for name in ("S", "T"):
        (directory / name).mkdir(parents=True, exist_ok=True)
        ts = np.arange(half, dtype=np.int64)
        k = rng.integers(0, JOIN_KEYS, half, dtype=np.int64)
        for i, part in enumerate(np.array_split(np.arange(half), max(1, files // 2))):
            t = pa.table({"ts": ts[part], "I": ts[part], "K": k[part]})
            pq.write_table(t, directory / name / f"events-{i:03d}.parquet")


def netted(t: pa.Table) -> pa.Table:
    """Net sign per (ts, tuple), zero nets dropped, sorted: two answers compare as tables."""
    cols = [c for c in t.column_names if c != "sign"]
    g = t.group_by(cols, use_threads=False).aggregate([("sign", "sum")])
    g = g.filter(pc.not_equal(g.column("sign_sum"), 0))
    return g.sort_by([(c, "ascending") for c in cols])


def embedded_answers(events: Path, out: Path) -> dict[str, float]:
    """The embedded engine's answer to every query (netted, Parquet), and its time."""
    from sluice.backends.embedded import EmbeddedEngine

    data = pq.read_table(events).select(["ts", "A", "K", "B"])
    joined = {s: pq.read_table(events.parent / "join" / s).select(["ts", "I", "K"]) for s in ("S", "T")}
    # query -> (its DDL, its streams' events)
    inputs = {name: ([DDL], {"S": data}) for name in QUERIES} | {"window_join": (JOIN_DDL, joined)}
    seconds = {}
    for name, (ddl, streams) in inputs.items():
        eng = EmbeddedEngine(time_unit="millisecond")
        for line in ddl:
            eng.execute(line)
        q = eng.register_query(CQL[name])
        t0 = time.perf_counter()
        for stream, table in streams.items():
            eng.push(stream, table)
        eng.close()
        seconds[name] = time.perf_counter() - t0
        pq.write_table(netted(q.arrow()), out / f"{name}.parquet")
    return seconds


def relation_at_slides(changes: pa.Table, until: int) -> Counter[tuple[int, ...]]:
    """The CQL relation's rows at every 1 s instant, from its netted changes: (τ, K, count, sum)."""
    rows = changes.to_pylist()
    live: Counter[tuple[int, ...]] = Counter()
    out: Counter[tuple[int, ...]] = Counter()
    i = 0
    for tau in range(0, until + 1, 1000):
        while i < len(rows) and rows[i]["ts"] <= tau:
            r = rows[i]
            live[(r["K"], r["count"], r["sum"])] += r["sign_sum"]
            i += 1
        for row, c in live.items():
            if c:
                out[(tau, *row)] += c
    return out


def hand_written(spark: Any, kind: str, events: Path, out: Path, checkpoint: Path) -> Any:
    """The same work as plain Structured Streaming: Parquet in, Parquet out, run until done."""
    from pyspark.sql import functions as F

    if kind == "join":
        sides = []
        for name in ("S", "T"):
            side = spark.readStream.schema("ts long, I long, K long").parquet(str(events.parent / "join" / name))
            # event time one second past ts: Spark's first watermark is the epoch, and a row
            # stamped at it would be dropped as late
            side = side.withColumn("et", F.timestamp_millis(F.col("ts") + 1000)).withWatermark("et", "0 seconds")
            sides.append(side.select(*[F.col(c).alias(name + c) for c in ("ts", "I", "K", "et")]))
        bound = "TK = SK AND Tet >= Set - interval 1000 milliseconds AND Tet <= Set + interval 1000 milliseconds"
        result = (
            sides[0]
            .join(sides[1], F.expr(bound))
            .select(F.greatest("Sts", "Tts").alias("ts"), F.col("SK").alias("K"), "SI", "TI")
        )
        return _written(spark, result, out, checkpoint)
    frame = spark.readStream.schema("ts long, A long, K long, B long").parquet(str(events))
    if kind == "select_project":
        result = frame.where("K < 50").selectExpr("ts", "A", "B * 2 as B2")
    else:
        frame = frame.withColumn("et", F.timestamp_millis(F.col("ts"))).withWatermark("et", "0 seconds")
        result = (
            frame.groupBy(F.window("et", "10001 milliseconds", "1 second"), "K")
            .agg(F.count("*").alias("n"), F.sum("A").alias("total"))
            .select((F.unix_millis(F.col("window.start")) + 10_000).alias("tau"), "K", "n", "total")
        )
    return _written(spark, result, out, checkpoint)


def _written(spark: Any, result: Any, out: Path, checkpoint: Path) -> Any:
    """``result`` to Parquet files until its input is read, on Spark's default state store."""
    sluice_store = spark.conf.get(STORE)
    spark.conf.set(STORE, DEFAULT_STORE)  # read when the query starts
    try:
        q = (
            result.writeStream.format("parquet")
            .option("path", str(out))
            .option("checkpointLocation", str(checkpoint))
            .outputMode("append")
            .trigger(availableNow=True)
            .start()
        )
    finally:
        spark.conf.set(STORE, sluice_store)
    q.awaitTermination()
    return q


def check_hand(spark: Any, kind: str, out: Path, expected: pa.Table, until: int) -> None:
    from sluice.backends.spark.frames import read_committed

    got = read_committed(spark, str(out))  # collecting millions of rows would overflow the JVM heap
    assert got is not None, "the hand-written pipeline committed no output"
    if kind == "join":  # every pair once, inserted: the netted Istream's rows
        assert pc.all(pc.equal(expected.column("sign_sum"), 1)).as_py()
        want = expected.drop_columns(["sign_sum"])
        order = [(c, "ascending") for c in want.column_names]
        assert got.select(want.column_names).sort_by(order).equals(want), "hand-written join differs"
        return
    if kind == "select_project":
        want = expected.drop_columns(["sign_sum"]).rename_columns(["ts", "A", "B2"])
        assert want.num_rows == got.num_rows, (want.num_rows, got.num_rows)
        assert got.sort_by([("ts", "ascending")]).select(["ts", "A", "B2"]).equals(want), "hand-written differs"
        return
    rel = relation_at_slides(expected, until)
    # windows Spark has closed (its watermark passed their end): every 1 s instant up to the last event
    spark_rows = Counter(tuple(r.values()) for r in got.to_pylist() if r["tau"] <= until)
    assert spark_rows == rel, f"hand-written window aggregation differs ({len(spark_rows)} vs {len(rel)} rows)"


def sluice_run(
    spark: Any, cql: str, events: Path, workdir: Path, until: int, preaggregate: bool = True
) -> tuple[Any, Any]:
    from sluice.backends.spark.engine import SparkEngine

    eng = SparkEngine(spark=spark, workdir=workdir, time_unit="millisecond", preaggregate=preaggregate)
    if cql == JOIN:
        for ddl in JOIN_DDL:
            eng.execute(ddl)
        for name in ("S", "T"):
            eng.attach_directory(name, events.parent / "join" / name, "parquet")
    else:
        eng.execute(DDL)
        eng.attach_directory("S", events, "parquet")
    q = eng.register_query(cql, name="q", sink="parquet")
    # a bounded input handed over at once, as ``trigger(availableNow=True)`` is for the hand-written
    # pipeline: one ``close(until)``.  (``run()`` first would cost a stateful query two more
    # micro-batches — the markers' and the watermark's — ~0.8 s each on local[1]: benchmarks/README.md)
    eng.close(until)
    return eng, q


def spark_share(spark: Any, cql: str, events: Path, scratch: Path) -> float:
    """Seconds Spark takes for a pre-aggregated query's input alone — reading, shaping and
    aggregating every event into partials — run into Spark's ``noop`` sink (no processor, no output).
    """
    from sluice.backends.spark.engine import SparkEngine
    from sluice.backends.spark.frames import input_frame

    eng = SparkEngine(spark=spark, workdir=scratch / "share", time_unit="millisecond")
    eng.execute(DDL)
    eng.attach_directory("S", events, "parquet")
    q = eng.register_query(cql, name="q")
    q.preagg = eng.preagg_of(q)
    t0 = time.perf_counter()
    frame = input_frame(eng, q).writeStream.format("noop")
    frame.option("checkpointLocation", str(scratch / "share-cp")).trigger(availableNow=True).start().awaitTermination()
    return time.perf_counter() - t0


def last_ts(query: str, n: int) -> int:
    """The last event's ts (ms) of a query's input of ``n`` events (the join's two streams: n / 2 each)."""
    return n // 2 - 1 if query == "window_join" else n - 1


def one_master(master: str, data: Path, warm: Path, repeat: int = 3) -> dict[str, Any]:
    from sluice.backends.spark.session import get_session

    t0 = time.perf_counter()
    spark = get_session(master)
    out: dict[str, Any] = {"master": master, "session_start_s": round(time.perf_counter() - t0, 2), "queries": {}}
    n = sum(pq.read_metadata(f).num_rows for f in (data / "events").glob("*.parquet"))
    until = n - 1
    scratch = Path(tempfile.mkdtemp(prefix="sluice-pipeline-"))
    # the first streaming query of a session starts Python workers and compiles code paths: run
    # every pipeline once on the small data set, untimed
    t0 = time.perf_counter()
    warm_n = pq.read_table(warm / "events").num_rows
    for name, query, pre in RUNS:
        eng, _ = sluice_run(spark, CQL[query], warm / "events", scratch / f"warm-{name}", last_ts(query, warm_n), pre)
        eng.stop()
    for kind in set(HAND.values()):
        hand_written(spark, kind, warm / "events", scratch / f"warm-{kind}", scratch / f"warm-{kind}-cp")
    out["warmup_s"] = round(time.perf_counter() - t0, 2)
    for name, query, pre in RUNS:
        cql = CQL[query]
        expected = pq.read_table(data / "expected" / f"{query}.parquet")
        kind = HAND[query]
        sluice_runs, hand_runs = [], []
        for r in range(repeat):  # in turn, so that a slow minute of the machine hits both
            t0 = time.perf_counter()
            eng, q = sluice_run(spark, cql, data / "events", scratch / f"{name}-{r}", last_ts(query, n), pre)
            sluice_runs.append(time.perf_counter() - t0)
            got = eng.arrow(q)
            how = " / ".join(line.strip() for line in eng.explain(q).splitlines()[:2] if "Spark" in line)
            eng.stop()
            assert netted(got).equals(expected), f"{name}: Sluice on Spark differs from the embedded engine"
            t0 = time.perf_counter()
            hand_written(spark, kind, data / "events", scratch / f"{name}-hand-{r}", scratch / f"{name}-hand-cp-{r}")
            hand_runs.append(time.perf_counter() - t0)
            check_hand(spark, kind, scratch / f"{name}-hand-{r}", expected, until)
        sluice_s, hand_s = min(sluice_runs), min(hand_runs)
        out["queries"][name] = {
            "query": cql,
            "how": how,
            "output_rows": got.num_rows,
            "sluice_s": round(sluice_s, 2),
            "sluice_events_per_s": round(n / sluice_s),
            "hand_written": kind,
            "hand_s": round(hand_s, 2),
            "hand_events_per_s": round(n / hand_s),
            "ratio": round(hand_s / sluice_s, 4),
            "sluice_runs_s": [round(s, 2) for s in sluice_runs],
            "hand_runs_s": [round(s, 2) for s in hand_runs],
            "checked_equal": True,
        }
        if pre and "pre-aggregated" in how:  # what of its time is Spark's own aggregation
            out["queries"][name]["spark_aggregation_s"] = round(spark_share(spark, cql, data / "events", scratch), 2)
    shutil.rmtree(scratch, ignore_errors=True)
    return out


# the hand-written join keeps both streams' rows in the JVM heap (Spark's default state store) until
# the batch ends: at 2 M events Spark's default 1 GB driver (local) and executors ran out of it
MEMORY = "--driver-memory 4g --executor-memory 3g pyspark-shell"
MASTER_TIMEOUT = 3600  # seconds for one master's runs (~10 min each on the 2-core machine)


def one_process(master: str, data: Path, env: dict[str, str] | None, repeat: int) -> dict[str, Any]:
    """``one_master`` in a process of its own (a session's master is fixed per process)."""
    env = dict(env or os.environ)
    given = env.get("PYSPARK_SUBMIT_ARGS", "pyspark-shell")  # (the user's own flags kept, after ours)
    env["PYSPARK_SUBMIT_ARGS"] = f"{MEMORY.removesuffix(' pyspark-shell')} {given}"
    log = Path(tempfile.mkstemp(prefix="sluice-pipeline-", suffix=".log")[1])
    with log.open("w") as err:  # Spark's own output: kept for a failed run
        try:
            p = subprocess.run(
                [sys.executable, __file__, "--one", master, "--data", str(data), "--repeat", str(repeat)],
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
                env=env,
                timeout=MASTER_TIMEOUT,  # (a cluster whose workers cannot take the executors waits for ever)
            )
        except subprocess.TimeoutExpired:
            raise SystemExit(f"{master}: no result in {MASTER_TIMEOUT} s; Spark's output: {log}") from None
    if p.returncode:
        raise SystemExit(f"{master}: failed (exit {p.returncode}); Spark's output: {log}")
    log.unlink()
    out: dict[str, Any] = json.loads(p.stdout.strip().splitlines()[-1])
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=2_000_000)
    ap.add_argument("--files", type=int, default=8)
    ap.add_argument(
        "--masters", default="local[1],local[2],cluster", help="'cluster': 2 workers x 1 core, started here"
    )
    ap.add_argument("--repeat", type=int, default=3, help="runs of each pipeline; the best is reported")
    ap.add_argument("--data", help=argparse.SUPPRESS)
    ap.add_argument("--one", help=argparse.SUPPRESS)
    ap.add_argument("--out", default="benchmarks/results/spark_pipeline.json")
    args = ap.parse_args()
    if args.one:
        data = Path(args.data)
        print(json.dumps(one_master(args.one, data, data / "warm", args.repeat)))
        return
    data = Path(tempfile.mkdtemp(prefix="sluice-pipeline-data-"))
    print(f"writing {args.events:,} events in {args.files} Parquet files …", flush=True)
    write_events(data / "events", args.events, args.files)
    write_join_events(data / "join", args.events, args.files)
    write_events(data / "warm" / "events", 20_000, 2)
    write_join_events(data / "warm" / "join", 20_000, 2)
    (data / "expected").mkdir()
    print("embedded engine answers (the check) …", flush=True)
    emb = embedded_answers(data / "events", data / "expected")
    for name, s in emb.items():
        print(f"  embedded {name:15s} {args.events / s:>12,.0f} ev/s", flush=True)
    runs = []
    for m in args.masters.split(","):
        print(f"{m}: running …", flush=True)
        if m == "cluster":  # a standalone master and two 1-core workers on this machine
            from sluice.backends.spark.cluster import cluster_env, standalone_cluster

            with standalone_cluster(workers=2, cores=1, memory="4g") as url:
                r = one_process(url, data, cluster_env(), args.repeat)
            r["master"] = f"cluster: {url}, 2 workers x 1 core"
        else:
            r = one_process(m, data, None, args.repeat)
        runs.append(r)
        for name, q in r["queries"].items():
            print(
                f"  {m:9s} {name:27s} sluice {q['sluice_events_per_s']:>10,} ev/s  hand-written "
                f"{q['hand_events_per_s']:>10,} ev/s  ratio {q['ratio']:.2f}  ({q['how']})",
                flush=True,
            )
        write_results(  # after every master: a later one failing keeps what was measured
            args.out,
            "spark_pipeline",
            events=args.events,
            files=args.files,
            repeat=args.repeat,
            join_keys=JOIN_KEYS,
            spark_memory=MEMORY.removesuffix(" pyspark-shell"),
            hand_written_state_store=DEFAULT_STORE.rsplit(".", 1)[1] + " (Spark's default)",
            embedded={k: round(args.events / s) for k, s in emb.items()},
            runs=runs,
        )
    shutil.rmtree(data, ignore_errors=True)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
