"""Window compression under a memory limit (STREAM §5.2.1, design 021), at 1,000,000 events.

Two streams A and B (one element a millisecond in all, keys from 100,000), the join
``select A.K, A.V, B.V from A [Range 60 seconds At Least 2 seconds], B [Range 45 seconds At Least
1 second] where A.K = B.K`` (the windows hold ~52,000 elements: state, not the batches, is what
the limit is about) — run exact (no limit) and under a memory limit of half the exact run's peak,
same data, same process, pushed as Arrow batches of 10,000 with a heartbeat after each; output
taken by subscription (nothing retained).  Beside them, DuckDB's band join of the same tables:
a pair enters the exact answer once, when its later element arrives while the earlier is still
in its window (``b.ts − a.ts ≤ 60,000`` or ``a.ts − b.ts ≤ 45,000``), so its count is the exact run's
number of insertions — a check of the exact run, and the baseline's time.

Reported: events a second for each, peak memory (queues + synopses, measured after every batch)
against the limit, what the manager did (compress events, elements sampled or shed), the FN the
limited run reports (time-integrated, the tuple model) and the fraction of the exact insertions
it produced (pair-level: a different measure, both given).  The engine's own peak
(``statistics().peak_memory``, measured at every admission and after every run) is reported and
held under the limit too.  Beside them, the same join over windows that may not shrink
(``[Range 60 seconds]``, ``[Range 45 seconds]``), exact and under half its own exact peak: the
path where only sampling and shedding hold the limit.

    .venv/bin/python benchmarks/window_compression.py [--events N]

Writes ``benchmarks/results/window_compression.json``.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
from sluice.backends.embedded import EmbeddedEngine
from sluice.experiments.results import write_results

QUERY = (
    "select A.K, A.V, B.V from A [Range 60 seconds At Least 2 seconds], "
    "B [Range 45 seconds At Least 1 second] where A.K = B.K"
)
# the same join over windows that may not shrink: under a limit only sampling and shedding hold it
EXACT_WINDOWS = QUERY.replace(" At Least 2 seconds", "").replace(" At Least 1 second", "")
BATCH = 10_000


def data(events: int, seed: int = 1, keys: int = 100_000) -> dict[str, pa.Table]:
    rng = np.random.default_rng(seed)
    ts = np.arange(events, dtype=np.int64)  # one element a millisecond, distinct stamps
    side = rng.random(events) < 0.5
    out = {}
    for name, mask in (("A", side), ("B", ~side)):
        n = int(mask.sum())
        out[name] = pa.table({"ts": ts[mask], "K": rng.integers(0, keys, n), "V": rng.integers(0, 1000, n)})
    return out


def run(streams: dict[str, pa.Table], limit: int | None, query: str = QUERY) -> dict[str, Any]:
    eng = EmbeddedEngine(time_unit="millisecond", start=0, memory_limit=limit)
    eng.execute("register stream A (K integer, V integer); register stream B (K integer, V integer)")
    q = eng.register_query(query, name="join", retain=0)
    counts = [0, 0]

    def take(b: pa.Table) -> None:
        signs = b.column(1).to_numpy()
        counts[0] += int((signs > 0).sum())
        counts[1] += int((signs < 0).sum())

    q.subscribe_arrow(take)
    a_ts, b_ts = (streams[s].column("ts").to_numpy() for s in ("A", "B"))
    end = int(max(a_ts[-1], b_ts[-1]))
    peak = 0
    t0 = time.perf_counter()
    for lo in range(0, end + 1, BATCH):
        hi = lo + BATCH
        for s, ts in (("A", a_ts), ("B", b_ts)):
            i, j = np.searchsorted(ts, [lo, hi])
            if j > i:
                eng.push(s, streams[s].slice(int(i), int(j - i)))
        eng.heartbeat(hi - 1)
        eng.run()
        st = eng.statistics()
        peak = max(peak, st.queue_bytes + st.synopsis_bytes)
    eng.close(end)
    dt = time.perf_counter() - t0
    st = eng.statistics()
    events = sum(t.num_rows for t in streams.values())
    a = q.approximation
    out = {
        "seconds": round(dt, 3),
        "events_per_s": round(events / dt),
        "peak_bytes": peak,
        # the engine's own: measured at every admission and after every run (also between a
        # batch's slices and between one stream's push and the next's)
        "engine_peak_bytes": st.peak_memory if limit is not None else None,
        "insertions": counts[0],
        "deletions": counts[1],
        "compress_events": sum(1 for e in st.approx_events if e.action == "compress"),
        "sampled_out": sum(s.sampled_out for s in st.shedding),
        "shed": sum(s.shed for s in st.shedding),
        "approximation": a.describe(),
        "reported_fn": None if a.precision is None else round(a.precision.fn, 4),
    }
    return out


def duckdb_pairs(streams: dict[str, pa.Table]) -> tuple[int, float]:
    con = duckdb.connect()
    con.execute("SET threads TO 1")
    con.register("a", streams["A"])
    con.register("b", streams["B"])
    t0 = time.perf_counter()
    n = con.execute(
        "select count(*) from a join b on a.K = b.K "
        "where (b.ts >= a.ts and b.ts - a.ts <= 60000) or (a.ts > b.ts and a.ts - b.ts <= 45000)"
    ).fetchone()
    dt = time.perf_counter() - t0
    assert n is not None
    return int(n[0]), dt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--out", default="benchmarks/results/window_compression.json")
    args = ap.parse_args()
    streams = data(args.events)
    pairs, duck_s = duckdb_pairs(streams)
    exact = run(streams, None)
    assert exact["insertions"] == pairs, (exact["insertions"], pairs)  # the exact run, checked
    limit = exact["peak_bytes"] // 2
    limited = run(streams, limit)
    assert max(limited["peak_bytes"], limited["engine_peak_bytes"]) <= limit, (limited, limit)
    assert limited["insertions"] <= pairs
    # beside it: windows that may not shrink, under half their own exact peak
    fixed_exact = run(streams, None, EXACT_WINDOWS)
    assert fixed_exact["insertions"] == pairs
    fixed_limit = fixed_exact["peak_bytes"] // 2
    fixed = run(streams, fixed_limit, EXACT_WINDOWS)
    assert max(fixed["peak_bytes"], fixed["engine_peak_bytes"]) <= fixed_limit, (fixed, fixed_limit)
    events = args.events
    out = {
        "events": events,
        "query": QUERY,
        "batch": BATCH,
        "duckdb_band_join_seconds": round(duck_s, 3),
        "exact_pairs": pairs,
        "exact": exact,
        "limit_bytes": limit,
        "limited": limited,
        "limited_over_exact_speed": round(limited["events_per_s"] / exact["events_per_s"], 3),
        "pairs_produced": round(limited["insertions"] / pairs, 4),
        "exact_windows_query": EXACT_WINDOWS,
        "exact_windows_exact": fixed_exact,
        "exact_windows_limit_bytes": fixed_limit,
        "exact_windows_limited": fixed,
        "exact_windows_pairs_produced": round(fixed["insertions"] / pairs, 4),
        "exact_vs_duckdb": round(duck_s / exact["seconds"], 4),
    }
    print(f"exact:   {exact}")
    print(f"limited: {limited}")
    print(f"windows that may not shrink, exact: {fixed_exact}")
    print(f"windows that may not shrink, limited to {fixed_limit} B: {fixed}")
    print(f"DuckDB band join {duck_s:.3f} s; {pairs} pairs; limit {limit} B")
    write_results(args.out, "window_compression", **out)


if __name__ == "__main__":
    main()
