"""Millisecond instants: the regime users live in (issue #11), beside hand-written baselines.

1,000,000 events, 10 keys, millisecond timestamps (about 680,000 distinct instants), pushed as
typed Arrow batches of 100, 1,000 and 10,000 events with a heartbeat after each (the heartbeat
says the instants before the next batch's first timestamp are complete). Seven queries:

  filter    Istream(select A, B from S [Range Unbounded] where B > 50)
  tumbling  Istream(select A, count(*) from S [Range 1 Second Slide 1 Second] group by A)
  sliding   Istream(select A, count(*) from S [Range 1 Second] group by A)
  distinct-tumbling, distinct-sliding   the two windows with count(distinct B) (B in 0..99)
  max-sliding     Istream(select A, max(B) from S [Range 1 Second] group by A)
  mixed-sliding   Istream(select A, count(*), count(distinct B) from S [Range 1 Second] group by A)

``--keys`` sets how many values A takes (10 by default; MIN/MAX keep a queue per group and a
DISTINCT beside other aggregates a count per (group, value) pair: many groups is their test).

Beside each, in the same process and on the same data:
  python    a hand-written plain-Python program computing the *same answer* (a list
            comprehension; a dict per second; a deque per key with arrivals and expiries merged),
            checked equal to the engine's output element by element before any time is reported;
  duckdb    DuckDB (one thread) doing the work the issue names: the filter; ``count(*) group by
            second, A``; the per-event ``count(*) over (partition by A order by ts range between
            1000 preceding and current row)`` — the same computation, not the same answer stream
            (CQL also reports counts falling at instants with no arrival), so it is timed, not
            compared.

Memory (``--rss``): a ``[Range 10 Seconds]`` group-by over 2,000,000 and 20,000,000 events made
batch by batch (nothing held outside the engine; output delivered to a subscriber, the query
keeps none: ``retain=0``), each in its own process; peak RSS (``VmHWM``) of the two compared.

Before each timed section the objects alive then (the input as Python lists, the baseline's
answer) are frozen out of Python's cyclic garbage collector (``gc.freeze``): otherwise every
collection the timed code triggers scans millions of tuples the harness holds, and the engine (or
the baseline) is charged for it — 15–25% on the sliding count, measured.

Events/s = events ÷ wall time from the first push to the last output.  Latency per batch = the
wall time of push + heartbeat + run, i.e. from a batch's push to the delivery of its output (the
engine delivers synchronously); p50/p99 over batches.  Writes benchmarks/results/fine_time.json.

    .venv/bin/python benchmarks/fine_time.py [--events 1000000] [--batches 100,1000,10000]
"""

from __future__ import annotations

import argparse
import gc
import json
import resource
import subprocess
import sys
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
from sluice.backends.embedded import EmbeddedEngine
from sluice.datatypes import INTEGER
from sluice.experiments.results import write_results
from sluice.runtime.batch import make

WINDOW = 1000  # [Range 1 Second] in milliseconds

QUERIES = {
    "filter": "Istream(select A, B from S [Range Unbounded] where B > 50)",
    "tumbling": "Istream(select A, count(*) from S [Range 1 Second Slide 1 Second] group by A)",
    "sliding": "Istream(select A, count(*) from S [Range 1 Second] group by A)",
    "distinct-tumbling": "Istream(select A, count(distinct B) from S [Range 1 Second Slide 1 Second] group by A)",
    "distinct-sliding": "Istream(select A, count(distinct B) from S [Range 1 Second] group by A)",
    "max-sliding": "Istream(select A, max(B) from S [Range 1 Second] group by A)",
    "mixed-sliding": "Istream(select A, count(*), count(distinct B) from S [Range 1 Second] group by A)",
}
_OVER = "over (partition by A order by ts range between 1000 preceding and current row)"

DUCKDB = {
    "filter": "select ts, A, B from S where B > 50",
    "tumbling": "select (ts + 999) // 1000 as w, A, count(*) from S group by w, A",
    "sliding": "select ts, A, count(*) over (partition by A order by ts range between 1000 preceding and current row) "
    "from S",
    "distinct-tumbling": "select (ts + 999) // 1000 as w, A, count(distinct B) from S group by w, A",
    "distinct-sliding": "select ts, A, count(distinct B) over (partition by A order by ts range between 1000 preceding "
    "and current row) from S",
    "max-sliding": f"select ts, A, max(B) {_OVER} from S",
    "mixed-sliding": f"select ts, A, count(*) {_OVER}, count(distinct B) {_OVER} from S",
}


def generate(n: int, seed: int = 7, keys: int = 10) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sorted millisecond stamps over 1.2·n ms (≈ 0.68·n distinct instants), ``keys`` keys, B in 0..99."""
    rng = np.random.default_rng(seed)
    ts = np.sort(rng.integers(0, int(n * 1.2), n)).astype(np.int64)
    return ts, rng.integers(0, keys, n).astype(np.int64), rng.integers(0, 100, n).astype(np.int64)


# -- hand-written plain Python: the same answers -------------------------------------------------
def py_filter(ts: list[int], a: list[int], b: list[int], last: int) -> list[tuple[int, int, int]]:
    return [(t, x, y) for t, x, y in zip(ts, a, b, strict=True) if y > 50]


def py_tumbling(ts: list[int], a: list[int], b: list[int], last: int) -> list[tuple[int, int, int]]:
    counts: dict[tuple[int, int], int] = {}
    for t, x in zip(ts, a, strict=True):
        w = -(-t // WINDOW)  # CQL windows are closed, [τ − 1000, τ]: the one as of ⌈t/1000⌉·1000 holds t,
        counts[w, x] = counts.get((w, x), 0) + 1
        if t % WINDOW == 0:  # and so does the next one when t is on a boundary
            counts[w + 1, x] = counts.get((w + 1, x), 0) + 1
    out = []
    for (w, x), c in counts.items():
        if w * WINDOW <= last and counts.get((w - 1, x)) != c:  # Istream: (A, c) new at this instant
            out.append((w * WINDOW, x, c))
    return out


def py_sliding(ts: list[int], a: list[int], b: list[int], last: int) -> list[tuple[int, int, int]]:
    per_key: dict[int, list[int]] = {}
    for t, x in zip(ts, a, strict=True):
        per_key.setdefault(x, []).append(t)
    out = []
    inf = 1 << 62
    for x, arrivals in per_key.items():
        window: deque[int] = deque()
        i, n = 0, len(arrivals)
        while i < n or window:
            t = min(arrivals[i] if i < n else inf, window[0] + WINDOW + 1 if window else inf)
            if t > last:
                break
            before = len(window)
            while window and window[0] + WINDOW + 1 <= t:
                window.popleft()
            while i < n and arrivals[i] == t:
                window.append(t)
                i += 1
            if len(window) != before and window:
                out.append((t, x, len(window)))
    return out


def py_distinct_tumbling(ts: list[int], a: list[int], b: list[int], last: int) -> list[tuple[int, int, int]]:
    values: dict[tuple[int, int], set[int]] = {}
    for t, x, y in zip(ts, a, b, strict=True):
        w = -(-t // WINDOW)  # (as py_tumbling: a timestamp on a boundary is in two windows)
        values.setdefault((w, x), set()).add(y)
        if t % WINDOW == 0:
            values.setdefault((w + 1, x), set()).add(y)
    out = []
    for (w, x), vs in values.items():
        c, prev = len(vs), values.get((w - 1, x))
        if w * WINDOW <= last and (prev is None or len(prev) != c):
            out.append((w * WINDOW, x, c))
    return out


def py_distinct_sliding(ts: list[int], a: list[int], b: list[int], last: int) -> list[tuple[int, int, int]]:
    per_key: dict[int, list[tuple[int, int]]] = {}
    for t, x, y in zip(ts, a, b, strict=True):
        per_key.setdefault(x, []).append((t, y))
    out = []
    inf = 1 << 62
    for x, arrivals in per_key.items():
        window: deque[tuple[int, int]] = deque()
        counts: dict[int, int] = {}
        i, n, shown = 0, len(arrivals), 0
        while i < n or window:
            t = min(arrivals[i][0] if i < n else inf, window[0][0] + WINDOW + 1 if window else inf)
            if t > last:
                break
            while window and window[0][0] + WINDOW + 1 <= t:
                _, y = window.popleft()
                counts[y] -= 1
                if not counts[y]:
                    del counts[y]
            while i < n and arrivals[i][0] == t:
                window.append(arrivals[i])
                counts[arrivals[i][1]] = counts.get(arrivals[i][1], 0) + 1
                i += 1
            if len(counts) != shown and counts:  # Istream: the group's row (A, c) is new
                out.append((t, x, len(counts)))
            shown = len(counts)
    return out


def py_max_sliding(ts: list[int], a: list[int], b: list[int], last: int) -> list[tuple[int, int, int]]:
    per_key: dict[int, list[tuple[int, int]]] = {}
    for t, x, y in zip(ts, a, b, strict=True):
        per_key.setdefault(x, []).append((t, y))
    out = []
    inf = 1 << 62
    for x, arrivals in per_key.items():
        alive: deque[int] = deque()  # the window's arrival times
        best: deque[tuple[int, int]] = deque()  # (t, B) no later arrival beats: B decreasing
        i, n, shown = 0, len(arrivals), None
        while i < n or alive:
            t = min(arrivals[i][0] if i < n else inf, alive[0] + WINDOW + 1 if alive else inf)
            if t > last:
                break
            while alive and alive[0] + WINDOW + 1 <= t:
                alive.popleft()
            while best and best[0][0] + WINDOW + 1 <= t:
                best.popleft()
            while i < n and arrivals[i][0] == t:
                while best and best[-1][1] <= arrivals[i][1]:
                    best.pop()
                best.append(arrivals[i])
                alive.append(t)
                i += 1
            m = best[0][1] if alive else None
            if m is not None and m != shown:  # Istream: the group's row (A, max) is new
                out.append((t, x, m))
            shown = m
    return out


def py_mixed_sliding(ts: list[int], a: list[int], b: list[int], last: int) -> list[tuple[int, ...]]:
    # (py_distinct_sliding's loop written out again, not shared through a generator: one measured
    # 12% slower as the baseline of distinct-sliding — each baseline is the fastest plain program)
    per_key: dict[int, list[tuple[int, int]]] = {}
    for t, x, y in zip(ts, a, b, strict=True):
        per_key.setdefault(x, []).append((t, y))
    out: list[tuple[int, ...]] = []
    inf = 1 << 62
    for x, arrivals in per_key.items():
        window: deque[tuple[int, int]] = deque()
        counts: dict[int, int] = {}
        i, n, shown = 0, len(arrivals), (0, 0)
        while i < n or window:
            t = min(arrivals[i][0] if i < n else inf, window[0][0] + WINDOW + 1 if window else inf)
            if t > last:
                break
            while window and window[0][0] + WINDOW + 1 <= t:
                _, y = window.popleft()
                counts[y] -= 1
                if not counts[y]:
                    del counts[y]
            while i < n and arrivals[i][0] == t:
                window.append(arrivals[i])
                counts[arrivals[i][1]] = counts.get(arrivals[i][1], 0) + 1
                i += 1
            now = (len(window), len(counts))
            if now != shown and window:  # Istream: the group's row (A, count, distinct) is new
                out.append((t, x, *now))
            shown = now
    return out


BASELINES: dict[str, Callable[..., list[tuple[int, ...]]]] = {
    "filter": py_filter,
    "tumbling": py_tumbling,
    "sliding": py_sliding,
    "distinct-tumbling": py_distinct_tumbling,
    "distinct-sliding": py_distinct_sliding,
    "max-sliding": py_max_sliding,
    "mixed-sliding": py_mixed_sliding,
}


def run_engine(query: str, ts: np.ndarray, a: np.ndarray, b: np.ndarray, batch: int) -> dict[str, Any]:
    eng = EmbeddedEngine(time_unit="millisecond")
    eng.execute("register stream S (A integer, B integer)")
    q = eng.register_query(query)
    n = len(ts)
    batches = [
        make(ts[i : i + batch], 1, [a[i : i + batch], b[i : i + batch]], [INTEGER, INTEGER]) for i in range(0, n, batch)
    ]
    beats = [int(ts[i + batch]) - 1 if i + batch < n else int(ts[-1]) for i in range(0, n, batch)]
    lat = np.empty(len(batches))
    t0 = time.perf_counter()
    for k, (bt, hb) in enumerate(zip(batches, beats, strict=True)):
        s = time.perf_counter()
        eng.push_batch("S", bt)
        eng.heartbeat(hb)
        eng.run()
        lat[k] = time.perf_counter() - s
    eng.close()
    dt = time.perf_counter() - t0
    out = q.arrow()
    assert not eng.rejected(), eng.rejected()[:3]
    return {"seconds": dt, "events_per_s": n / dt, "lat": lat, "out": out, "peak_memory": eng.statistics()}


RSS_QUERY = "select A, count(*), sum(B) from S [Range 10 Seconds] group by A"


def _peak_rss() -> int:
    """The peak resident set of this process (VmHWM: unlike ru_maxrss it does not carry over the RSS
    of the parent this process was forked from).
    """
    for line in open("/proc/self/status").read().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def rss_run(events: int, batch: int = 10_000) -> dict[str, Any]:
    """One process: ``events`` events generated batch by batch through the group-by; peak RSS."""
    rng = np.random.default_rng(3)
    eng = EmbeddedEngine(time_unit="millisecond")
    eng.execute("register stream S (A integer, B integer)")
    q = eng.register_query(RSS_QUERY, retain=0)
    out = [0]
    q.subscribe_arrow(lambda b: out.__setitem__(0, out[0] + b.num_rows))
    base = 0
    t0 = time.perf_counter()
    for _ in range(0, events, batch):
        ts = base + np.sort(rng.integers(0, int(batch * 1.2), batch))
        base = int(ts[-1]) + 1
        eng.push_batch("S", make(ts, 1, [rng.integers(0, 10, batch), rng.integers(0, 100, batch)], [INTEGER, INTEGER]))
        eng.heartbeat(base - 1)
        eng.run()
    eng.close()
    dt = time.perf_counter() - t0
    st = eng.statistics()
    return {
        "events": events,
        "seconds": round(dt, 2),
        "events_per_s": round(events / dt),
        "output_elements": out[0],
        "peak_rss_bytes": _peak_rss(),
        "engine_memory_bytes": st.queue_bytes + st.synopsis_bytes,
    }


def rss(small: int, large: int) -> dict[str, Any]:
    runs = []
    for n in (small, large):
        cmd = [sys.executable, __file__, "--rss-run", str(n)]
        runs.append(json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout))
        r = runs[-1]
        print(
            f"rss       {n:>12,} events: peak RSS {r['peak_rss_bytes'] / 2**20:7.1f} MiB, engine state "
            f"{r['engine_memory_bytes']:,} B, {r['events_per_s']:,} ev/s",
            flush=True,
        )
    ratio = runs[1]["peak_rss_bytes"] / runs[0]["peak_rss_bytes"]
    print(f"rss       {large:,} vs {small:,} events: peak RSS ratio {ratio:.3f}")
    return {"query": RSS_QUERY, "runs": runs, "peak_rss_ratio": round(ratio, 3)}


def _settle() -> None:
    """What is alive now stays out of the cyclic collector's scans during the next timed section."""
    gc.collect()
    gc.freeze()


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--rss-run":
        print(json.dumps(rss_run(int(sys.argv[2]))))
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--batches", default="100,1000,10000")
    ap.add_argument("--only", choices=list(QUERIES), action="append")
    ap.add_argument("--keys", type=int, default=10, help="values of the grouping key A")
    ap.add_argument("--out", default="benchmarks/results/fine_time.json")
    ap.add_argument("--rss", default="2000000,20000000", help="events of the two memory runs ('' to skip)")
    args = ap.parse_args()
    sizes = [int(x) for x in args.batches.split(",")]
    ts, a, b = generate(args.events, keys=args.keys)
    last = int(ts[-1])
    lists = ts.tolist(), a.tolist(), b.tolist()
    con = duckdb.connect()
    con.execute("set threads = 1")
    con.register("S", pa.table({"ts": ts, "A": a, "B": b}))
    print(f"{args.events:,} events, {len(np.unique(ts)):,} distinct millisecond instants, {args.keys:,} keys")
    results: dict[str, Any] = {}
    for name in args.only or list(QUERIES):
        _settle()
        p0 = time.perf_counter()
        expected = BASELINES[name](*lists, last)
        py_s = time.perf_counter() - p0
        d0 = time.perf_counter()
        con.execute(f"create or replace temp table r as {DUCKDB[name]}")
        duck_s = time.perf_counter() - d0
        row: dict[str, Any] = {
            "query": QUERIES[name],
            "python_events_per_s": round(args.events / py_s),
            "duckdb_events_per_s": round(args.events / duck_s),
            "duckdb_sql": DUCKDB[name],
            "output_elements": len(expected),
            "python_note": "timed without sorting its output into time order (the engine's is)",
            "by_batch": {},
        }
        expected = sorted(expected)
        for size in sizes:
            _settle()
            r = run_engine(QUERIES[name], ts, a, b, size)
            out = r["out"]
            cols = [0, *range(2, out.num_columns)]  # (all but the sign)
            got = sorted(zip(*(out.column(i).to_pylist() for i in cols), strict=True))
            assert set(out.column(1).to_pylist()) <= {1}, f"{name}: Istream emitted a deletion"
            assert got == expected, f"{name}: the engine's answer differs from the plain-Python program's"
            lat_ms = r["lat"] * 1000
            row["by_batch"][str(size)] = {
                "events_per_s": round(r["events_per_s"]),
                "p50_ms": round(float(np.percentile(lat_ms, 50)), 3),
                "p99_ms": round(float(np.percentile(lat_ms, 99)), 3),
                "vs_python": round(r["events_per_s"] * py_s / args.events, 2),
                "vs_duckdb": round(r["events_per_s"] * duck_s / args.events, 2),
                "peak_memory_bytes": r["peak_memory"].peak_queue_bytes + r["peak_memory"].synopsis_bytes,
                "checked_equal_to_python": True,
            }
            print(
                f"{name:9s} batch {size:>6,}: {r['events_per_s']:>12,.0f} ev/s  p50 {np.percentile(lat_ms, 50):7.2f} ms"
                f"  p99 {np.percentile(lat_ms, 99):8.2f} ms   python {row['python_events_per_s']:>12,} ev/s"
                f"  duckdb {row['duckdb_events_per_s']:>12,} ev/s  (answer = python's, {len(expected):,} elements)",
                flush=True,
            )
        results[name] = row
    memory = rss(*(int(x) for x in args.rss.split(","))) if args.rss else None
    write_results(
        args.out, "fine_time", events=args.events, keys=args.keys, batches=sizes, results=results, memory=memory
    )
    print(f"wrote {args.out}")
    gc.unfreeze()  # (what was frozen is freed at exit as usual)


if __name__ == "__main__":
    main()
