"""DISTINCT compressed into a Bloom filter under a memory limit (STREAM §5.2.1, design 021 "Bloom
filters"), at 1,000,000 events.

One stream of packets (one a millisecond; source and destination hosts drawn Zipf-like from
100,000 each, so pairs repeat and new ones keep coming) and the query
``Select Distinct Src, Dst From P`` — each (source, destination) pair at the instant it first
appears, since the stream began: state that grows for ever and that sampling may not shrink
(§5.1.1).  Run exact (no limit) and under limits of the exact run's peak divided by 4, 16 and 64,
same data, same process, pushed as Arrow batches of 10,000 with a heartbeat after each; output
taken by subscription (nothing retained).

Beside them, on the same data: plain Python (a set; a pair emitted when first added), and DuckDB
(one thread) computing the same answer (``min(ts) … group by Src, Dst``); the exact run's output
is checked equal to both before any time is reported, and each limited run's to be a subset of it.

Reported: events a second and the ratio to each baseline; peak memory (queues + synopses, measured
after every batch; and the engine's own, at every admission and run) against the limit; the
fraction of the exact answer the limited run produced (measured) beside the recall it reports
(1 − FN, from the filter's own false-positive rates); elements dropped (none: the filter, not the
input, loses values).

    .venv/bin/python benchmarks/bloom_distinct.py [--events N]

Writes ``benchmarks/results/bloom_distinct.json``.
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

QUERY = "Select Distinct Src, Dst From P"
BATCH = 10_000
SHARES = (4, 16, 64)


def data(events: int, seed: int = 1, hosts: int = 100_000) -> pa.Table:
    rng = np.random.default_rng(seed)

    def zipf(n: int) -> np.ndarray:
        return (rng.zipf(1.2, n) - 1) % hosts

    return pa.table({"ts": np.arange(events, dtype=np.int64), "Src": zipf(events), "Dst": zipf(events)})


def run(packets: pa.Table, limit: int | None) -> dict[str, Any]:
    eng = EmbeddedEngine(time_unit="millisecond", start=0, memory_limit=limit)
    eng.execute("register stream P (Src integer, Dst integer)")
    q = eng.register_query(QUERY, name="pairs", retain=0)
    got: list[pa.Table] = []
    q.subscribe_arrow(got.append)
    peak = 0
    n = packets.num_rows
    t0 = time.perf_counter()
    for lo in range(0, n, BATCH):
        eng.push("P", packets.slice(lo, BATCH))
        eng.heartbeat(min(lo + BATCH, n) - 1)
        eng.run()
        st = eng.statistics()
        peak = max(peak, st.queue_bytes + st.synopsis_bytes)
    eng.close(n)
    dt = time.perf_counter() - t0
    st = eng.statistics()
    out = pa.concat_tables(got) if got else None
    a = q.approximation
    return {
        "seconds": round(dt, 3),
        "events_per_s": round(n / dt),
        "peak_bytes": peak,
        "engine_peak_bytes": st.peak_memory if limit is not None else None,
        "pairs": set()
        if out is None
        else set(zip(*(out.column(i).to_pylist() for i in (0, 2, 3)), strict=True)),
        "dropped": sum(s.dropped for s in st.shedding),
        "compress_events": [e.detail for e in st.approx_events if e.action == "compress"],
        "approximation": a.describe(),
        "reported_recall": None if a.precision is None else round(1 - a.precision.fn, 4),
    }


def python_baseline(packets: pa.Table) -> tuple[set[tuple[int, int, int]], float]:
    ts, src, dst = (packets.column(c).to_pylist() for c in ("ts", "Src", "Dst"))
    t0 = time.perf_counter()
    seen: set[tuple[int, int]] = set()
    out = []
    for t, s, d in zip(ts, src, dst, strict=True):
        if (s, d) not in seen:
            seen.add((s, d))
            out.append((t, s, d))
    return set(out), time.perf_counter() - t0


def duckdb_baseline(packets: pa.Table) -> tuple[set[tuple[int, int, int]], float]:
    con = duckdb.connect()
    con.execute("SET threads TO 1")
    con.register("p", packets)
    t0 = time.perf_counter()
    rows = con.execute('select min(ts), "Src", "Dst" from p group by "Src", "Dst"').fetchall()
    dt = time.perf_counter() - t0
    return {(int(t), int(s), int(d)) for t, s, d in rows}, dt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--out", default="benchmarks/results/bloom_distinct.json")
    args = ap.parse_args()
    packets = data(args.events)
    py_pairs, py_s = python_baseline(packets)
    duck_pairs, duck_s = duckdb_baseline(packets)
    exact = run(packets, None)
    want = exact.pop("pairs")
    assert want == py_pairs == duck_pairs, (len(want), len(py_pairs), len(duck_pairs))  # checked before any time
    n = packets.num_rows
    rows = []
    print(f"exact: {len(want)} pairs, {exact['events_per_s']} ev/s, peak {exact['peak_bytes']} B")
    for share in SHARES:
        limit = exact["peak_bytes"] // share
        r = run(packets, limit)
        got = r.pop("pairs")
        assert got <= want and r["dropped"] == 0, (len(got - want), r["dropped"])
        assert max(r["peak_bytes"], r["engine_peak_bytes"]) <= limit, (r["peak_bytes"], r["engine_peak_bytes"], limit)
        r |= {
            "share": share,
            "limit_bytes": limit,
            "peak_over_limit": round(max(r["peak_bytes"], r["engine_peak_bytes"]) / limit, 3),
            "measured_recall": round(len(got) / len(want), 4),
            "speed_vs_exact": round(r["events_per_s"] / exact["events_per_s"], 3),
        }
        rows.append(r)
        print(
            f"limit 1/{share} ({limit} B): peak {r['peak_over_limit']:.3f} of it, recall measured "
            f"{r['measured_recall']:.4f} reported {r['reported_recall']}, {r['events_per_s']} ev/s"
        )
    baselines = {
        "python": {"seconds": round(py_s, 3), "events_per_s": round(n / py_s)},
        "duckdb": {"seconds": round(duck_s, 3), "events_per_s": round(n / duck_s), "note": "batch, one thread"},
    }
    ratios = {b: round(exact["events_per_s"] / v["events_per_s"], 3) for b, v in baselines.items()}
    print(f"python {baselines['python']['events_per_s']} ev/s, duckdb {baselines['duckdb']['events_per_s']} ev/s")
    write_results(
        args.out,
        "bloom_distinct",
        events=n,
        query=QUERY,
        distinct_pairs=len(want),
        exact=exact,
        limited=rows,
        baselines=baselines,
        exact_over_baseline=ratios,
    )


if __name__ == "__main__":
    main()
