"""The dataflow join (Getta & Vossough §2.3; ``join_intermediates="drop"``, the default before any
input is seen) against the tree of binary joins that keeps the intermediate result A ⋈ C
(``"keep"``), same data, same run, beside DuckDB computing the same answer.

Three streams A, B, C (millisecond timestamps; K uniform over ``keys`` values; V a unique id) and

    Istream(select A.V, B.V, C.V from A [Range 10], B [Range 10], C [Range 10]
            where A.K = C.K and B.K = C.K)

in three regimes: sparse keys (10,000 values, 10 events per ms per stream — the join-order
benchmark's data), dense keys (100 values: each element has partners, the intermediate result is
large), and skewed rates (B nine times as frequent as A and C, 1,000 keys — eq. 1 says that a B much
more frequent than A and C makes A ⋈ C worth keeping).  Input is pushed up to each 1,000 ms of
event time (about 10,000 events per stream), a heartbeat after each.  Every answer is checked
equal, row by row, to DuckDB's (1 thread, the whole answer at once, as Arrow; best of three).
Reported per plan: best of three runs, events/s and the peak bytes of operator state.

    .venv/bin/python benchmarks/dataflow_join.py [--events N]

Writes `benchmarks/results/dataflow_join.json`.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np
import pyarrow as pa
from join_order import QUERY, best_of_runs, duckdb_answer  # (benchmarks/ is the script's directory)
from sluice.backends.embedded import EmbeddedEngine
from sluice.experiments.results import write_results
from sluice.workloads.live import time_slices

Answer = list[tuple[int, int, int, int]]
REGIMES = {  # name: (keys, events per ms of A, B, C)
    "sparse keys": (10_000, (10, 10, 10)),
    "dense keys": (100, (10, 10, 10)),
    "skewed rates (B 9x)": (1_000, (3, 27, 3)),
}


def data(events: int, keys: int, per_ms: tuple[int, int, int]) -> dict[str, pa.Table]:
    rng = np.random.default_rng(1)
    ms = -(-events // sum(per_ms))
    out, base = {}, 0
    for s, rate in zip("ABC", per_ms, strict=True):
        n = ms * rate
        out[s] = pa.table(
            {"ts": np.arange(n, dtype=np.int64) // rate, "K": rng.integers(0, keys, n), "V": np.arange(n) + base}
        )
        base += n
    return out


def run(tabs: dict[str, pa.Table], mode: str, step_ms: int = 1_000) -> tuple[dict[str, Any], Answer]:
    eng = EmbeddedEngine(time_unit="millisecond", start=0, join_intermediates=mode)
    eng.execute(";".join(f"register stream {s} (K integer, V integer)" for s in "ABC"))
    q = eng.register_query(QUERY)
    peak = 0
    t0 = time.perf_counter()
    for cut, parts in time_slices(tabs, step_ms):
        for s, part in parts.items():
            eng.push(s, part)
        eng.heartbeat(cut)
        eng.run()
        peak = max(peak, sum(u.state_bytes() for u in eng.operators if u.stateful))
    eng.close()
    dt = time.perf_counter() - t0
    got = sorted((e.ts, *e.row) for e in q.results())
    events = sum(t.num_rows for t in tabs.values())
    plan = [o.kind for o in eng.operators if o.stateful]
    return {"events": events, "seconds": round(dt, 3), "events_per_s": round(events / dt), "output": len(got),
            "peak_state_bytes": peak, "stateful_operators": plan}, got  # fmt: skip


def best_of(tabs: dict[str, pa.Table], mode: str, want: Answer, name: str) -> dict[str, Any]:
    return best_of_runs(lambda: run(tabs, mode), want, f"  {name}, {mode}:")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--out", default="benchmarks/results/dataflow_join.json")
    args = ap.parse_args()
    regimes = {}
    for name, (keys, per_ms) in REGIMES.items():
        tabs = data(args.events, keys, per_ms)
        want, duck_s = duckdb_answer(tabs)
        events = sum(t.num_rows for t in tabs.values())
        print(f"{name}: {keys:,} keys, {per_ms} events/ms", flush=True)
        drop, keep = best_of(tabs, "drop", want, name), best_of(tabs, "keep", want, name)
        duck = {"seconds": round(duck_s, 3), "events_per_s": round(events / duck_s)}
        print(f"  DuckDB {events:>9,} events {duck['events_per_s']:>11,} ev/s (1 thread, the whole answer at once)")
        regimes[name] = {
            "keys": keys,
            "events_per_ms": per_ms,
            "drop": drop,
            "keep": keep,
            "duckdb": duck,
            "drop_vs_keep_speed": round(keep["seconds"] / drop["seconds"], 2),
            "drop_vs_keep_state": round(drop["peak_state_bytes"] / max(1, keep["peak_state_bytes"]), 3),
            "drop_vs_duckdb": round(drop["events_per_s"] / duck["events_per_s"], 3),
        }
    write_results(args.out, "dataflow_join", query=QUERY, step_ms=1_000, regimes=regimes)


if __name__ == "__main__":
    main()
