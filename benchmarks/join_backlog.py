"""A window join fed one stream's backlog before the other's, under a memory limit (design 021,
"A join fed one stream's big batch before the other's"): the shape of a Spark key's micro-batch.

``Istream(S [Range 1 Second] ⋈ T [Range 1 Second] on K)``, 50,000 elements a stream (``--events``)
one a millisecond, keys from 100,000, pushed as Arrow tables: all of S then all of T ("whole"),
or 5,000 of S then 5,000 of T with a run between ("chunks"); exact, then under each limit.  The
engine's own peak (``statistics().peak_memory``: at every admission and run) against the limit;
the pairs produced against the exact run's (measured recall), the recall the query reports
(``1 − FN``), and the fraction of all pairs within both windows whose two elements were kept
("formed": from the elements handed to ``on_shed``; what the model estimates, where the pairs
measured differ from it by the keys' chance).  No hand-written baseline: the figures are
ratios to the limit and to the exact answer, not speeds.

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


def formed(ts: np.ndarray, ks: np.ndarray, kt: np.ndarray, span: int) -> float:
    """Kept pairs over all pairs (an S at x, a T at y, ``|y − x| ≤ span``), one element of each
    stream a tick (``tests/test_timeline.formed_pairs``, both windows ``span``).
    """
    n = len(ts)
    ct, ca = np.concatenate([[0], np.cumsum(kt)]), np.arange(n + 1)
    lo, hi = np.clip(ts - span, 0, n), np.clip(ts + span + 1, 0, n)
    return float((ks * (ct[hi] - ct[lo])).sum() / (ca[hi] - ca[lo]).sum())


def run(streams: dict[str, pa.Table], limit: int | None, chunk: int) -> dict[str, Any]:
    eng = EmbeddedEngine(time_unit="millisecond", memory_limit=limit)
    eng.execute("register stream S (I integer, K integer); register stream T (I integer, K integer)")
    q = eng.register_query(QUERY, retain=0)
    pairs = [0]
    q.subscribe_arrow(lambda b: pairs.__setitem__(0, pairs[0] + b.num_rows))
    gone: dict[str, list[np.ndarray]] = {"S": [], "T": []}
    eng.on_shed(lambda s, b, _: gone[s].append(b.column(2).to_numpy()))  # (__ts, __sign, I, K: I is unique)
    n = streams["S"].num_rows
    for lo in range(0, n, chunk):
        for s, t in streams.items():
            eng.push(s, t.slice(lo, chunk))
        eng.run()
    eng.close()
    st = eng.statistics()
    fn = q.approximation.precision.fn if q.approximation.precision is not None else None
    ts = streams["S"].column(0).to_numpy()
    ks, kt = (~np.isin(ts, np.concatenate([np.empty(0, np.int64), *gone[s]])) for s in ("S", "T"))
    return {
        "pairs": pairs[0],
        "formed": round(formed(ts, ks, kt, 1000), 4),
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
                f"(recall {r['recall_measured']:.4f}, reported {r['recall_reported']}, formed {r['formed']}), "
                f"kept {r['kept']}"
            )
    write_results(args.out, "join_backlog", events=args.events, query=QUERY, exact_pairs=exact, runs=rows)


if __name__ == "__main__":
    main()
