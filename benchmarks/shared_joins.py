"""Shared window joins (issue #12 item 6; Hammad et al. 2003, design 020): ten queries joining the
same two streams on the same key, windows from 1 second to 10 minutes, run by one shared join
against one private join per query, beside a hand-written baseline.

Queries, for w in WINDOWS (seconds)::

    Istream(SELECT * FROM A [Range w Seconds], B [Range w Seconds] WHERE A.K = B.K)

The windows are spaced evenly, 1, 68, 134, 201, 267, 334, 400, 467, 533 and 600 s (``1 + 599·i/9``
rounded): the regime the shared join exists for (§2.2, containment) — the private joins scan
Σw = 5.0× the largest window, the shared one the largest window once.

Data: ``--events`` events (default 1,000,000) split at random between A(K, V) and B(K, W), each
at its own millisecond (distinct timestamps over 2 ms per event on average: ≈ 33 minutes, so the
10-minute windows are full for most of the run); V and W number the events (every joined row is
distinct); K uniform over ``--keys`` ids (default 500,000: an id turns up about once per stream
over the run, as a user or session id would). Over 1,000,000 events this gives 1,336,123 output
elements over the ten queries — 253,214 (0.25 per event) in the largest window, 518 in the
1-second one: the output is real work but not most of it.

Runs, each fed the same typed Arrow batches (``--batch`` events, default 10,000, split by stream)
with a heartbeat after each:

  shared   ``EmbeddedEngine(shared_join="greedy")``, also ``"swf"`` and ``"lwo"``: one SharedWindowJoin;
  unshared ``shared_join="off"``: a window per input and a private Join per query;
  off-largest  the 600-second query alone, unshared: what "one largest window" costs the engine;
  numpy    hand-written: both streams sorted by (key, time), every pair within the largest window
           found by binary search, each query's answer a mask over them (batch, not incremental);
  duckdb   DuckDB (1 thread): one range join per query, ``A.K = B.K AND B.ts BETWEEN A.ts − w AND
           A.ts + w``, the answer fetched as Arrow (batch).

Before any figure is reported, every run's answer to every query must equal the NumPy baseline's:
its element count and an order-insensitive checksum (the sum modulo 2**64 of a 64-bit mix of each
element's timestamp and columns); every Istream element must be an insertion.

Throughput: events ÷ the wall time of push + heartbeat + run over all batches (the engine delivers
synchronously; the subscriber that counts and checksums the output is inside the timing), and ÷
the CPU time of the same (``time.process_time``: the machine may be shared, and CPU time moves
less with other jobs). Memory:
the engine's synopsis bytes (``statistics().synopsis_bytes``, which includes the shared join's held
output) sampled after every batch, outside the timing, its peak reported; and, with ``--rss``, each
engine configuration again in a fresh process (this file with ``--child``), whose peak resident
set (``VmHWM``) is compared with that of a child that only builds the batches.

    .venv/bin/python benchmarks/shared_joins.py [--events 1000000] [--configs greedy,swf,lwo,off,off-largest] [--rss]

Writes ``benchmarks/results/shared_joins.json``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
from sluice.backends.embedded import EmbeddedEngine
from sluice.datatypes import INTEGER
from sluice.experiments.results import write_results
from sluice.runtime.batch import make

WINDOWS = [round(1 + 599 * i / 9) for i in range(10)]  # seconds: 1, 67, 134, …, 600
MS = 1000
DDL = "register stream A (K integer, V integer); register stream B (K integer, W integer)"
QUERY = "Istream(SELECT * FROM A [Range {w} Seconds], B [Range {w} Seconds] WHERE A.K = B.K)"
MULTIPLIERS = (0xBF58476D1CE4E5B9, 0x94D049BB133111EB, 0xD6E8FEB86659FD93, 0xA0761D6478BD642F)

Data = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]  # ts, on_a, key, id


def generate(n: int, keys: int, seed: int = 12) -> Data:
    """``n`` events at distinct milliseconds over ``2n`` ms, each on A or B (fair coin), K uniform
    over ``keys`` ids, the event's index as its V / W.
    """
    rng = np.random.default_rng(seed)
    ts = np.sort(rng.choice(2 * n, size=n, replace=False)).astype(np.int64)
    return ts, rng.random(n) < 0.5, rng.integers(0, keys, n).astype(np.int64), np.arange(n, dtype=np.int64)


def checksum(ts: np.ndarray, ak: np.ndarray, av: np.ndarray, bk: np.ndarray, bw: np.ndarray) -> int:
    """Order-insensitive: Σ mix(row) mod 2**64 (splitmix64's finaliser over a linear combination)."""
    with np.errstate(over="ignore"):
        x = ts.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)
        for c, m in zip((ak, av, bk, bw), MULTIPLIERS, strict=True):
            x = (x ^ c.astype(np.uint64)) * np.uint64(m)
        x ^= x >> np.uint64(31)
        x *= np.uint64(0xBF58476D1CE4E5B9)
        x ^= x >> np.uint64(29)
        return int(np.sum(x, dtype=np.uint64))


def batches(data: Data, size: int) -> list[tuple[pa.Table, pa.Table, int]]:
    """(A part, B part, heartbeat) per ``size`` consecutive events; the heartbeat says every
    instant before the next batch's first timestamp is complete.
    """
    ts, on_a, key, ident = data
    out = []
    n = len(ts)
    for i in range(0, n, size):
        sl = slice(i, i + size)
        a = on_a[sl]
        t, k, v = ts[sl], key[sl], ident[sl]
        ta = make(t[a], 1, [k[a], v[a]], [INTEGER, INTEGER])
        tb = make(t[~a], 1, [k[~a], v[~a]], [INTEGER, INTEGER])
        beat = int(ts[i + size]) - 1 if i + size < n else int(ts[-1])
        out.append((ta, tb, beat))
    return out


def windows_of(config: str) -> list[int]:
    """``greedy``, ``off`` …: every query; ``off-largest``: the 600-second query alone."""
    return [max(WINDOWS)] if config.endswith("-largest") else WINDOWS


def run_engine(config: str, feed: list[tuple[pa.Table, pa.Table, int]], sample: bool = True) -> dict[str, Any]:
    """The queries on one engine with ``shared_join=config``: wall and CPU time, per-query answer
    digests, peak synopsis bytes (sampled after each batch, outside the timing).
    """
    windows = windows_of(config)
    eng = EmbeddedEngine(time_unit="millisecond", shared_join=config.removesuffix("-largest"))
    eng.execute(DDL)
    digests: list[list[int]] = [[0, 0, 0] for _ in windows]  # count, checksum, deletions

    def digest(d: list[int]) -> Any:
        def take(b: pa.Table) -> None:
            cols = [b.column(i).to_numpy() for i in (0, 2, 3, 4, 5)]
            d[0] += b.num_rows
            d[1] = (d[1] + checksum(*cols)) & 0xFFFFFFFFFFFFFFFF
            d[2] += int(np.count_nonzero(b.column(1).to_numpy() < 0))

        return take

    for w, d in zip(windows, digests, strict=True):
        q = eng.register_query(QUERY.format(w=w), retain=0)
        q.subscribe_arrow(digest(d))
    peak_syn = peak_q = 0
    spent = cpu = 0.0
    for ta, tb, beat in feed:
        t0, c0 = time.perf_counter(), time.process_time()
        eng.push_batch("A", ta)
        eng.push_batch("B", tb)
        eng.heartbeat(beat)
        eng.run()
        spent += time.perf_counter() - t0
        cpu += time.process_time() - c0
        if sample:
            st = eng.statistics()
            peak_syn = max(peak_syn, st.synopsis_bytes)
            peak_q = max(peak_q, st.peak_queue_bytes)
    t0, c0 = time.perf_counter(), time.process_time()
    eng.close()
    eng.run()
    spent += time.perf_counter() - t0
    cpu += time.process_time() - c0
    assert not eng.rejected(), eng.rejected()[:3]
    events = sum(ta.num_rows + tb.num_rows for ta, tb, _ in feed)
    return {
        "config": config,
        "windows_s": windows,
        "seconds": spent,
        "events_per_s": events / spent,
        "cpu_seconds": cpu,
        "events_per_cpu_s": events / cpu,
        "answers": [(c, s) for c, s, _ in digests],
        "deletions": sum(x for _, _, x in digests),
        "peak_synopsis_bytes": peak_syn,
        "peak_queue_bytes": peak_q,
        "operators": len(eng.operators),
    }


def numpy_answers(data: Data) -> tuple[float, list[tuple[int, int]]]:
    """The hand-written baseline: every query's Istream answer as (count, checksum).  A pair
    (a, b) with equal keys is in query w's answer once, at max(ts_a, ts_b), iff |ts_a − ts_b| ≤ w.
    """
    t0 = time.perf_counter()
    ts, on_a, key, ident = data
    wmax = max(WINDOWS) * MS
    a = np.flatnonzero(on_a)
    b = np.flatnonzero(~on_a)
    order = np.lexsort((ts[b], key[b]))
    b = b[order]
    # both sides as one sortable number: key · span + ts (ts < span)
    span = int(ts[-1]) + 2 * wmax + 2
    bk = key[b] * span + ts[b] + wmax
    ak = key[a] * span + ts[a] + wmax
    lo = np.searchsorted(bk, ak - wmax, side="left")
    hi = np.searchsorted(bk, ak + wmax, side="right")
    n = hi - lo
    i = np.repeat(a, n)
    j = b[np.repeat(lo - np.concatenate([[0], np.cumsum(n)[:-1]]), n) + np.arange(int(n.sum()))]
    gap = np.abs(ts[i] - ts[j])
    at = np.maximum(ts[i], ts[j])
    out = []
    for w in WINDOWS:
        m = gap <= w * MS
        ii, jj = i[m], j[m]
        out.append((int(m.sum()), checksum(at[m], key[ii], ident[ii], key[jj], ident[jj])))
    return time.perf_counter() - t0, out


def duckdb_answers(data: Data) -> tuple[float, list[tuple[int, int]]]:
    """DuckDB (1 thread): one range join per query, answers fetched as Arrow (then checksummed,
    outside the timing).
    """
    ts, on_a, key, ident = data
    con = duckdb.connect()
    con.execute("set threads = 1")
    con.register("A", pa.table({"ts": ts[on_a], "K": key[on_a], "V": ident[on_a]}))
    con.register("B", pa.table({"ts": ts[~on_a], "K": key[~on_a], "W": ident[~on_a]}))
    spent = 0.0
    out = []
    for w in WINDOWS:
        sql = (
            "select greatest(A.ts, B.ts) as ts, A.K as ak, A.V, B.K as bk, B.W from A join B "
            f"on A.K = B.K and B.ts between A.ts - {w * MS} and A.ts + {w * MS}"
        )
        t0 = time.perf_counter()
        r = con.sql(sql).to_arrow_table()
        spent += time.perf_counter() - t0
        out.append((r.num_rows, checksum(*(r.column(c).to_numpy() for c in range(5)))))
    return spent, out


def _peak_rss() -> int:
    for line in open("/proc/self/status").read().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def child(config: str, events: int, keys: int, batch: int) -> dict[str, Any]:
    """One configuration in this fresh process ('feed': only build the batches), with its peak RSS."""
    feed = batches(generate(events, keys), batch)
    r: dict[str, Any] = {"config": config}
    if config != "feed":
        r = run_engine(config, feed, sample=False)
    r["peak_rss_bytes"] = _peak_rss()
    return r


def main() -> None:
    if len(sys.argv) == 6 and sys.argv[1] == "--child":
        print(json.dumps(child(sys.argv[2], *(int(x) for x in sys.argv[3:]))))
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--keys", type=int, default=500_000)
    ap.add_argument("--batch", type=int, default=10_000)
    configs = "greedy,swf,lwo,off,off-largest"
    ap.add_argument("--configs", default=configs, help="shared_join values; X-largest: the 600 s query alone")
    ap.add_argument("--rss", action="store_true", help="also run each configuration in a fresh process for peak RSS")
    ap.add_argument("--out", default="benchmarks/results/shared_joins.json")
    args = ap.parse_args()
    data = generate(args.events, args.keys)
    n = args.events
    feed = batches(data, args.batch)
    print(
        f"{n:,} events ({int(data[1].sum()):,} on A), {len(np.unique(data[0])):,} distinct ms over "
        f"{(int(data[0][-1]) + 1) / 1000:,.0f} s, {args.keys:,} keys, windows {WINDOWS} s, batches of {args.batch:,}",
        flush=True,
    )
    np_s, expected = numpy_answers(data)
    total = sum(c for c, _ in expected)
    print(f"numpy     {n / np_s:>12,.0f} ev/s  {total:,} output elements: {[c for c, _ in expected]}", flush=True)
    duck_s, duck = duckdb_answers(data)
    assert duck == expected, "DuckDB's answers differ from the NumPy baseline's"
    print(f"duckdb    {n / duck_s:>12,.0f} ev/s  (answers equal the NumPy baseline's)", flush=True)
    runs: dict[str, Any] = {}
    for config in args.configs.split(","):
        r = run_engine(config, feed)
        want_all = expected[-1:] if config.endswith("-largest") else expected
        for w, got, want in zip(r["windows_s"], r["answers"], want_all, strict=True):
            assert got == want, f"{config}, [Range {w} Seconds]: (count, checksum) {got} != {want}"
        assert r["deletions"] == 0, f"{config}: Istream emitted deletions"
        r["checked_equal_to_numpy"] = True
        r["vs_numpy"] = r["events_per_s"] * np_s / n
        r["vs_duckdb"] = r["events_per_s"] * duck_s / n
        runs[config] = r
        print(
            f"{config:11s} {r['events_per_s']:>10,.0f} ev/s ({r['events_per_cpu_s']:>10,.0f} per CPU s)  "
            f"{r['vs_numpy']:.3f}× numpy  {r['vs_duckdb']:.3f}× duckdb  peak synopses {r['peak_synopsis_bytes']:>12,} B"
            f"  ({r['operators']} operators; answers equal numpy's)",
            flush=True,
        )
    if "off" in runs:
        base = runs["off"]
        for r in runs.values():
            r["vs_unshared"] = r["events_per_s"] / base["events_per_s"]
            r["cpu_vs_unshared"] = r["events_per_cpu_s"] / base["events_per_cpu_s"]
            r["synopsis_vs_unshared"] = r["peak_synopsis_bytes"] / base["peak_synopsis_bytes"]
        for c, r in runs.items():
            if c != "off":
                ratio, cpu, mem = r["vs_unshared"], r["cpu_vs_unshared"], r["synopsis_vs_unshared"]
                print(f"{c:11s} / unshared: throughput {ratio:.2f}× (CPU {cpu:.2f}×), peak synopses {mem:.3f}×")
    if "off-largest" in runs:  # "memory ≈ one largest window": the largest query's own plan holds it
        one = runs["off-largest"]["peak_synopsis_bytes"]
        for c, r in runs.items():
            r["synopsis_vs_largest_alone"] = r["peak_synopsis_bytes"] / one
            print(f"{c:11s} peak synopses / the 600 s query's alone: {r['synopsis_vs_largest_alone']:.2f}×")
    memory = None
    if args.rss:
        memory = {}
        for config in ["feed", *args.configs.split(",")]:
            cmd = [sys.executable, __file__, "--child", config, str(n), str(args.keys), str(args.batch)]
            r = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
            memory[config] = r
            extra = f", {r['events_per_s']:,.0f} ev/s" if config != "feed" else " (data and batches only)"
            print(f"rss {config:11s} peak RSS {r['peak_rss_bytes'] / 2**20:8.1f} MiB{extra}", flush=True)
            if config != "feed":
                want = [list(x) for x in (expected[-1:] if config.endswith("-largest") else expected)]
                assert [list(x) for x in r["answers"]] == want, f"{config} (child): answers differ"
    write_results(
        args.out,
        "shared_joins",
        events=n,
        keys=args.keys,
        batch=args.batch,
        windows_s=WINDOWS,
        query=QUERY,
        output_elements=[c for c, _ in expected],
        numpy={"seconds": np_s, "events_per_s": n / np_s},
        duckdb={"seconds": duck_s, "events_per_s": n / duck_s},
        runs=runs,
        memory=memory,
    )
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
