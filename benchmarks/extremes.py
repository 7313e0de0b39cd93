"""MIN/MAX over a sliding window by key: the vectorised FIFO path (monotonic queues and range
maxima, ``runtime/operators/counting.py``) beside the general accumulator path and DuckDB, same
data, same run (issue #11: "vectorised MIN/MAX").

1,000,000 events, 10 keys, millisecond timestamps, typed Arrow batches of 10,000 with a heartbeat
after each; query `select A, max(B), min(B) from S [Range 1 Second] group by A`.  Before a figure
is reported, each run's final row per key is checked against the answer computed directly from
the data (max/min of the last second).  The general path (per-value accumulators, what ran before)
is timed on the first 100,000 events only (it is ~20× slower).  Beside them, the hand-written
baseline: DuckDB (1 thread) computing the per-event sliding MAX/MIN by key with a window function.

    .venv/bin/python benchmarks/extremes.py [--events N]

Writes `benchmarks/results/extremes.json`.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np
import sluice.runtime.planner as planner
from float_aggregates import duckdb_window, events, last_rows
from sluice.backends.embedded import EmbeddedEngine
from sluice.datatypes import INTEGER
from sluice.experiments.results import write_results
from sluice.runtime.batch import make

QUERY = "select A, max(B), min(B) from S [Range 1 Second] group by A"
WINDOW = 1000
DUCKDB = (
    "select A, max(B) over w, min(B) over w from s "
    "window w as (partition by A order by ts range between 1000 preceding and current row)"
)


def run(ts: np.ndarray, a: np.ndarray, b: np.ndarray, fifo: bool, batch: int = 10_000) -> tuple[float, dict[int, Any]]:
    saved = planner.Planner._fifo
    if not fifo:  # the general path: the planner makes no FIFO claim
        planner.Planner._fifo = lambda self, op: False  # type: ignore[method-assign]
    try:
        eng = EmbeddedEngine(time_unit="millisecond")
        eng.execute("register stream S (A integer, B integer)")
        q = eng.register_query(QUERY, retain=0)
    finally:
        planner.Planner._fifo = saved  # type: ignore[method-assign]
    assert ("insertion order" in eng.explain()) == fifo
    final = last_rows(q)  # per key, the last (max, min)
    t0 = time.perf_counter()
    for i in range(0, len(ts), batch):
        eng.push_batch("S", make(ts[i : i + batch], 1, [a[i : i + batch], b[i : i + batch]], [INTEGER, INTEGER]))
        eng.heartbeat(int(ts[min(i + batch, len(ts)) - 1]))
        eng.run()
    return time.perf_counter() - t0, final


def direct_final(ts: np.ndarray, a: np.ndarray, b: np.ndarray) -> dict[int, tuple[int, int]]:
    """Per key, MAX and MIN over the window at the last instant, straight from the data."""
    inside = ts >= int(ts[-1]) - WINDOW
    return {
        k: (int(b[inside & (a == k)].max()), int(b[inside & (a == k)].min())) for k in np.unique(a[inside]).tolist()
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--out", default="benchmarks/results/extremes.json")
    args = ap.parse_args()
    n = args.events
    ts, a, b, _ = events(n)  # the same events as float_aggregates.py
    run(ts[:20_000], a[:20_000], b[:20_000], True)  # warm-up: imports and first-call costs
    rows: dict[str, Any] = {}
    small = min(n, 100_000)
    for name, fifo, m in (("vectorised (FIFO)", True, n), ("general (accumulators)", False, small)):
        dt, final = run(ts[:m], a[:m], b[:m], fifo)
        want = direct_final(ts[:m], a[:m], b[:m])
        assert {k: final[k] for k in want} == want, f"{name}: the final rows are not the answers"
        rows[name] = {"events": m, "seconds": round(dt, 3), "events_per_s": round(m / dt), "checked": True}
        print(f"{name:<24} {m:>9,} events {m / dt:>12,.0f} ev/s  (final rows checked)", flush=True)
    secs = duckdb_window(ts, a, b, DUCKDB)
    rows["duckdb window function"] = {"events": n, "seconds": round(secs, 3), "events_per_s": round(n / secs)}
    print(f"{'DuckDB window function':<24} {n:>9,} events {n / secs:>12,.0f} ev/s", flush=True)
    fast = rows["vectorised (FIFO)"]["events_per_s"]
    ratios = {
        "vectorised_vs_general": round(fast / rows["general (accumulators)"]["events_per_s"], 2),
        "vectorised_vs_duckdb": round(fast / rows["duckdb window function"]["events_per_s"], 3),
    }
    print(ratios)
    write_results(args.out, "extremes", query=QUERY, duckdb_sql=DUCKDB, batch=10_000, runs=rows, ratios=ratios)
    print(f"-> {args.out}")


if __name__ == "__main__":
    main()
