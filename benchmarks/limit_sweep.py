"""The memory limit across limits and batch sizes (design 021, "Two joins sharing a stream, and
what the windows hold (session 39)"): one window join, ``S [Range 1 Second] ⋈ T [Range 1
Second]``, and two joins sharing T, that one beside ``T [Range 3 Seconds] ⋈ U [Range 500
Milliseconds]``; 20,000 elements a stream (``--events``), one a millisecond, keys from 100,000,
pushed as Arrow tables — ``chunk`` ms of each stream in turn with a run between — under limits
of 60-250 KB, chunks of 0.5-5 s and whole: 84 runs.  Per run the engine's own peak
(``statistics().peak_memory``: at every admission and when each run starts and ends) over the
limit, and the most it held within runs too (``peak_memory_in_runs``: after every step), the
pairs each query produced, and that every element was kept or counted dropped.  No
baseline: the figures are ratios to the limit, not speeds.

    .venv/bin/python benchmarks/limit_sweep.py [--events N]

Writes ``benchmarks/results/limit_sweep.json``.
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np
import pyarrow as pa
from sluice.backends.embedded import EmbeddedEngine
from sluice.experiments.results import write_results

ONE = "Istream(select S.K, S.I as SI, T.I as TI from S [Range 1 Second], T [Range 1 Second] where S.K = T.K)"
TWO = "Istream(select T.K, T.I as TI, U.I as UI from T [Range 3 Seconds], U [Range 500 Milliseconds] where T.K = U.K)"
SHAPES = {"one join": ("ST", [ONE]), "two joins sharing T": ("STU", [ONE, TWO])}
LIMITS = (60_000, 80_000, 100_000, 120_000, 140_000, 160_000, 250_000)
CHUNKS = (500, 700, 1_000, 2_000, 5_000)  # and the whole of each stream at once


def data(events: int) -> dict[str, pa.Table]:
    rng = np.random.default_rng(11)
    ts = np.arange(events, dtype=np.int64)
    return {s: pa.table({"ts": ts, "I": ts, "K": rng.integers(0, 100_000, events)}) for s in "STU"}


def run(data: dict[str, pa.Table], streams: str, queries: list[str], limit: int, chunk: int) -> dict[str, Any]:
    eng = EmbeddedEngine(time_unit="millisecond", memory_limit=limit)
    eng.execute("; ".join(f"register stream {s} (I integer, K integer)" for s in streams))
    pairs = [0] * len(queries)
    for i, q in enumerate(queries):
        h = eng.register_query(q, retain=0)
        h.subscribe_arrow(lambda b, i=i: pairs.__setitem__(i, pairs[i] + b.num_rows))
    n = data["S"].num_rows
    for lo in range(0, n, chunk):
        for s in streams:
            eng.push(s, data[s].slice(lo, chunk))
        eng.run()
    eng.close()
    st = eng.statistics()
    return {
        "limit_bytes": limit,
        "chunk_ms": chunk,
        "peak_over_limit": round(st.peak_memory / limit, 3),
        "peak_in_runs_over_limit": round(st.peak_memory_in_runs / limit, 3),
        "pairs": pairs,
        "counted": all(x.offered == n == x.kept + x.dropped for x in st.shedding),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=20_000)
    ap.add_argument("--out", default="benchmarks/results/limit_sweep.json")
    args = ap.parse_args()
    d = data(args.events)
    rows = []
    for shape, (streams, queries) in SHAPES.items():
        for limit in LIMITS:
            for chunk in (*CHUNKS, args.events):
                rows.append({"shape": shape} | run(d, streams, queries, limit, chunk))
                r = rows[-1]
                print(f"{shape:20s} {limit:>7} B, {chunk:>6} ms: peak {r['peak_over_limit']:.3f}, pairs {r['pairs']}")
    worst = max(r["peak_over_limit"] for r in rows)
    total = sum(sum(r["pairs"]) for r in rows)
    over = sum(r["peak_over_limit"] > 1 for r in rows)
    in_runs = max(r["peak_in_runs_over_limit"] for r in rows)
    over_in_runs = sum(r["peak_in_runs_over_limit"] > 1 for r in rows)
    print(f"{len(rows)} runs: worst peak {worst} of the limit, {over} past it; {total} pairs in all")
    print(f"within runs: worst {in_runs} of the limit, {over_in_runs} past it")
    write_results(
        args.out, "limit_sweep", events=args.events, worst_peak_over_limit=worst, runs_past_limit=over,
        worst_peak_in_runs_over_limit=in_runs, runs_past_limit_in_runs=over_in_runs, pairs=total,
        every_element_counted=all(r["counted"] for r in rows), runs=rows,
    )  # fmt: skip


if __name__ == "__main__":
    main()
