"""A window join fed one stream's backlog before the other's, under a memory limit (design 021,
"A join fed one stream's big batch before the other's"): the shape of a Spark key's micro-batch.

``Istream(S [Range 1 Second] ⋈ T [Range 1 Second] on K)``, 50,000 elements a stream (``--events``)
one a millisecond, keys from 100,000, pushed as Arrow tables: all of S then all of T ("whole"),
or 5,000 of S then 5,000 of T with a run between ("chunks"); exact, then under each limit.  The
engine's own peak (``statistics().peak_memory``: at every admission and run) against the limit;
the pairs produced against the exact run's (measured recall) and the recall the query reports
(``1 − FN``).  No hand-written baseline: the figures are ratios to the limit and to the exact
answer, not speeds.

    .venv/bin/python benchmarks/join_backlog.py [--events N]

Writes ``benchmarks/results/join_backlog.json``.
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np
import pyarrow as pa
from sluice.backends.embedded import EmbeddedEngine
from sluice.experiments.results import write_results

QUERY = "Istream(select S.K, S.I as SI, T.I as TI from S [Range 1 Second], T [Range 1 Second] where S.K = T.K)"
LIMITS = (60_000, 157_000, 400_000)


def data(events: int) -> dict[str, pa.Table]:
    rng = np.random.default_rng(11)
    ts = np.arange(events, dtype=np.int64)
    return {s: pa.table({"ts": ts, "I": ts, "K": rng.integers(0, 100_000, events)}) for s in ("S", "T")}


def run(streams: dict[str, pa.Table], limit: int | None, chunk: int) -> dict[str, Any]:
    eng = EmbeddedEngine(time_unit="millisecond", memory_limit=limit)
    eng.execute("register stream S (I integer, K integer); register stream T (I integer, K integer)")
    q = eng.register_query(QUERY, retain=0)
    pairs = [0]
    q.subscribe_arrow(lambda b: pairs.__setitem__(0, pairs[0] + b.num_rows))
    n = streams["S"].num_rows
    for lo in range(0, n, chunk):
        for s, t in streams.items():
            eng.push(s, t.slice(lo, chunk))
        eng.run()
    eng.close()
    st = eng.statistics()
    fn = q.approximation.precision.fn if q.approximation.precision is not None else None
    return {
        "pairs": pairs[0],
        "engine_peak_bytes": st.peak_memory if limit is not None else None,
        "kept": {s.name: s.kept for s in st.shedding},
        "shed": sum(s.shed for s in st.shedding),
        "sampled_out": sum(s.sampled_out for s in st.shedding),
        "recall_reported": None if fn is None else round(1 - fn, 4),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=50_000)
    ap.add_argument("--out", default="benchmarks/results/join_backlog.json")
    args = ap.parse_args()
    streams = data(args.events)
    exact = run(streams, None, args.events)["pairs"]
    rows = []
    for limit in LIMITS:
        for feed, chunk in (("whole", args.events), ("chunks", 5_000)):
            r = run(streams, limit, chunk)
            r |= {
                "limit_bytes": limit,
                "feed": feed,
                "peak_over_limit": round(r["engine_peak_bytes"] / limit, 3),
                "recall_measured": round(r["pairs"] / exact, 4),
            }
            rows.append(r)
            print(
                f"limit {limit:>7} B, {feed:6s}: peak {r['peak_over_limit']:.3f} of it, pairs {r['pairs']}/{exact} "
                f"(recall {r['recall_measured']:.4f}, reported {r['recall_reported']}), kept {r['kept']}"
            )
    write_results(args.out, "join_backlog", events=args.events, query=QUERY, exact_pairs=exact, runs=rows)


if __name__ == "__main__":
    main()
