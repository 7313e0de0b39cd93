"""How close the memory limit's estimate holds each kind of state (design 021, "How much is
dropped"): the peak memory against the limit for queries whose state is not one row an element.

Two streams A and B, 1,000,000 elements (``--events``), one a millisecond in all (keys from
10,000), pushed as a user with two files would — 1,000 ms of A, 1,000 ms of B, a heartbeat, a
run — each query run first without
a limit (its exact peak) and then under the exact peak divided by each share.  Memory is read
after every push and every run (``statistics().memory_bytes``), and the engine's own peak
(``statistics().peak_memory``: at every admission and run) beside it.  No baseline: the figure
is a ratio to the limit, not a speed.  These are the cases a review used to compare the
admission's estimate before and after session 28 (the "before" figures in design 021 come from
the code before it, run with this feed).

    .venv/bin/python benchmarks/memory_limit_cases.py [--events N]

Writes ``benchmarks/results/memory_limit_cases.json``.
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np
import pyarrow as pa
from sluice.backends.embedded import EmbeddedEngine
from sluice.experiments.results import write_results

WINDOWS = "A [Range 6 seconds], B [Range 4500 milliseconds]"
SHRINKABLE = "A [Range 6 seconds At Least 1 second], B [Range 4500 milliseconds At Least 1 second]"
JOIN = f"select A.K, A.V, B.V from {WINDOWS} where A.K = B.K"
CASES: dict[str, tuple[list[tuple[str, dict[str, Any]]], list[float]]] = {  # name: (queries, shares)
    "self-join": (
        [("select X.K, X.V, Y.V from A [Range 3 seconds] as X, A [Range 3 seconds] as Y where X.K = Y.K", {})],
        [2, 4, 10],
    ),
    "distinct-join": ([(f"select distinct A.K, B.V from {WINDOWS} where A.K = B.K", {})], [2, 4]),
    "group-by": ([("select K, count(*) from A [Range 6 seconds] group by K", {})], [2, 4]),
    "istream-join": ([(f"select istream(A.K, A.V, B.V) from {WINDOWS} where A.K = B.K", {})], [2, 4]),
    "join-beside-group-by": ([(JOIN, {}), ("select K, count(*) from B [Range 6 seconds] group by K", {})], [2, 4]),
    "shrinkable-join-beside-exact-only": (
        [
            (f"select A.K, A.V, B.V from {SHRINKABLE} where A.K = B.K", {}),
            ("select * from A [Range 3 seconds] where V > 500", {"min_precision": 1}),
        ],
        [1.5, 3],
    ),
    "rows-at-least-join": (
        [("select A.K, A.V, B.V from A [Rows 3000 At Least 300], B [Rows 2000 At Least 200] where A.K = B.K", {})],
        [1.3, 2],
    ),
}


def data(events: int) -> dict[str, pa.Table]:
    rng = np.random.default_rng(1)
    ts = np.arange(events, dtype=np.int64)
    side = rng.random(events) < 0.5
    return {
        name: pa.table(
            {"ts": ts[m], "K": rng.integers(0, 10_000, int(m.sum())), "V": rng.integers(0, 1000, int(m.sum()))}
        )
        for name, m in (("A", side), ("B", ~side))
    }


def run(streams: dict[str, pa.Table], queries: list[tuple[str, dict[str, Any]]], limit: int | None) -> dict[str, Any]:
    eng = EmbeddedEngine(time_unit="millisecond", start=0, memory_limit=limit)
    eng.execute("register stream A (K integer, V integer); register stream B (K integer, V integer)")
    for q, kw in queries:
        eng.register_query(q, retain=0, **kw)
    events = max(int(t.column("ts").to_numpy()[-1]) for t in streams.values()) + 1
    peak = 0
    for lo in range(0, events, 1000):
        for name, t in streams.items():
            i, j = np.searchsorted(t.column("ts").to_numpy(), [lo, lo + 1000])
            eng.push(name, t.slice(int(i), int(j - i)))
            peak = max(peak, eng.statistics().memory_bytes)
        eng.heartbeat(lo + 999)
        eng.run()
        peak = max(peak, eng.statistics().memory_bytes)
    st = eng.statistics()
    return {
        "peak_bytes": peak,
        "engine_peak_bytes": st.peak_memory if limit is not None else None,
        "shed": sum(s.shed for s in st.shedding),
        "sampled_out": sum(s.sampled_out for s in st.shedding),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--out", default="benchmarks/results/memory_limit_cases.json")
    args = ap.parse_args()
    streams = data(args.events)
    results: dict[str, Any] = {}
    for name, (queries, shares) in CASES.items():
        exact = run(streams, queries, None)["peak_bytes"]
        rows = []
        for share in shares:
            limit = int(exact / share)
            r = run(streams, queries, limit)
            r |= {"share": share, "limit_bytes": limit, "peak_over_limit": round(r["peak_bytes"] / limit, 3)}
            rows.append(r)
            print(
                f"{name:36s} share {share:>4}: peak {r['peak_over_limit']:.3f} of the limit, shed {r['shed']}, "
                f"sampled {r['sampled_out']}"
            )
        results[name] = {"queries": [q for q, _ in queries], "exact_peak_bytes": exact, "runs": rows}
    write_results(args.out, "memory_limit_cases", events=args.events, cases=results)


if __name__ == "__main__":
    main()
