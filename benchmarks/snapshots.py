"""What the Spark processor pays per key and micro-batch to carry state: the whole embedded engine
pickled (cloudpickle, as the processor did until operator protocol v2) beside the operators' state
(``EmbeddedEngine.snapshot_state``, pickled, restored into an engine built once).

For each query and state size: an engine fed N elements (one per millisecond, 10 keys), then the
round trip — serialise, deserialise (whole engine) or restore into a built plan (operator state) —
timed over repetitions (output already handed on, as the processor does); after each way the
engine is fed N more elements and its answer must equal an engine that never stopped (checked,
not assumed).  Reported: bytes and milliseconds per round trip, and their ratio.

    .venv/bin/python benchmarks/snapshots.py [--reps 200]

Writes `benchmarks/results/snapshots.json`.
"""

from __future__ import annotations

import argparse
import pickle
import time
from typing import Any

from pyspark import cloudpickle
from sluice.backends.embedded import EmbeddedEngine
from sluice.experiments.results import write_results

QUERIES = {
    "count-sum by key": "select K, count(*), sum(V) from S [Range 10 Seconds] group by K",
    "max by key": "select K, max(V) from S [Range 10 Seconds] group by K",
    "join": "Istream(select S.K, S.V, T.V from S [Range 1 Seconds], T [Range 1 Seconds] where S.K = T.K)",
}


def build(query: str) -> EmbeddedEngine:
    e = EmbeddedEngine(time_unit="millisecond", start=0)
    e.execute("REGISTER STREAM S (K integer, V integer); REGISTER STREAM T (K integer, V integer);")
    e.register_query(query, name="q")
    return e


def feed(e: EmbeddedEngine, lo: int, hi: int) -> None:
    e.push("S", [(t, t % 10, (t * 7919) % 1000) for t in range(lo, hi)])
    e.push("T", [(t, (t + 3) % 10, t % 100) for t in range(lo, hi)])
    e.run()


def measure(query: str, n: int, reps: int) -> dict[str, Any]:
    eng = build(query)
    feed(eng, 0, n)
    out = eng.queries["q"]
    before = out.results()  # the processor hands a key's output to Spark after every micro-batch
    out.batches, out._held = [], 0
    whole = build(query)
    feed(whole, 0, 2 * n)
    whole.close()
    expected = whole.queries["q"].results()

    t0 = time.perf_counter()
    for _ in range(reps):
        blob_engine = cloudpickle.dumps(eng)
        copy = pickle.loads(blob_engine)
    engine_ms = (time.perf_counter() - t0) / reps * 1e3
    feed(copy, n, 2 * n)
    copy.close()
    assert before + copy.queries["q"].results() == expected, "whole-engine round trip changed the answer"

    plan = build(query)
    t0 = time.perf_counter()
    for _ in range(reps):
        blob_state = pickle.dumps(eng.snapshot_state(), protocol=pickle.HIGHEST_PROTOCOL)
        plan.restore_state(pickle.loads(blob_state))
    state_ms = (time.perf_counter() - t0) / reps * 1e3
    feed(plan, n, 2 * n)
    plan.close()
    assert before + plan.queries["q"].results() == expected, "operator-state round trip changed the answer"
    return {
        "query": query,
        "elements_before": n,
        "engine_bytes": len(blob_engine),
        "engine_ms": round(engine_ms, 3),
        "state_bytes": len(blob_state),
        "state_ms": round(state_ms, 3),
        "speedup": round(engine_ms / state_ms, 2),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--out", default="benchmarks/results/snapshots.json")
    args = ap.parse_args()
    rows = []
    for label, q in QUERIES.items():
        for n in (100, 10_000):
            r = measure(q, n, args.reps)
            rows.append({"name": label, **r})
            print(
                f"{label:18} {n:>6} elements: whole engine {r['engine_bytes']:>8} B {r['engine_ms']:6.2f} ms | "
                f"operator state {r['state_bytes']:>8} B {r['state_ms']:6.2f} ms | {r['speedup']}x",
                flush=True,
            )
    write_results(args.out, "snapshots", reps=args.reps, results=rows)


if __name__ == "__main__":
    main()
