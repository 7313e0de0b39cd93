"""``sluice bench``: NEXMark queries on the embedded engine beside DuckDB, on the same events.

For each query: events/s end to end; p50/p99 latency from the wall-clock moment an event's batch
was pushed to the moment the output element for it was delivered; peak queue + synopsis memory;
and DuckDB computing the same final answer in the same process.  A timing is reported only if the
engine's answer equals DuckDB's.  Q4–Q8 (Rstream / CURRENT_TIME / slides) have no SQL snapshot
equivalent; their answers are checked against the reference evaluator in ``tests/test_nexmark.py``,
and here they are timed on the engine alone.
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from sluice.experiments.results import write_results
from sluice.workloads.nexmark import DDL, NexmarkGenerator, as_rows, categories

QUERY_DIR = Path(__file__).resolve().parents[2] / "benchmarks" / "nexmark"

# DuckDB's final answer for the stream queries: the multiset of everything they emit.
DUCKDB = {
    "q0": "select auction, bidder, price, dateTime from bid",
    "q1": "select auction, price * 0.89, bidder, dateTime from bid",
    "q2": "select auction, price from bid where auction in (1007, 1020, 2001, 2019, 2087)",
    "q3": "select p.name, p.city, p.state, a.id from auction a, person p "
    "where a.seller = p.id and p.state in ('OR', 'ID', 'CA') and a.category = 10",
}


def doltoeur(x: int) -> float:
    return x * 0.89


def _norm(row: tuple[Any, ...]) -> tuple[Any, ...]:
    from decimal import Decimal

    # DuckDB computes bigint * 0.89 in exact DECIMAL; compare as floats to 6 places
    return tuple(round(float(v), 6) if isinstance(v, float | Decimal) else v for v in row)


def run_query(name: str, events: int, batch: int, rate: int) -> dict[str, Any]:
    from sluice.backends.embedded import EmbeddedEngine
    from sluice.catalog import Catalog
    from sluice.cql.ast import TimeUnit
    from sluice.plan import execute

    rows: dict[str, list[Any]] = dict(as_rows(NexmarkGenerator(rate=rate).events(events)))
    text = (QUERY_DIR / f"{name}.cql").read_text()
    cat = Catalog(time_unit=TimeUnit.MILLISECOND)
    execute(cat, DDL)
    cat.register_function("DOLTOEUR", doltoeur, "float", ["bigint"])
    eng = EmbeddedEngine(cat, start=0)
    q = eng.register_query(text)
    latencies: list[float] = []
    pushed: list[tuple[int, float]] = []  # (last event ts of the batch, wall time pushed)

    def on_output(els: list[Any]) -> None:
        now = time.perf_counter()
        stamps = [p[0] for p in pushed]
        for e in els:
            k = int(np.searchsorted(stamps, e.ts, side="left"))
            if k < len(pushed):
                latencies.append(now - pushed[k][1])

    q.subscribe(on_output)
    eng.push("Category", categories())
    merged: list[Any] = sorted(
        [(r[0], "Person", r) for r in rows["Person"]]
        + [(r[0], "Auction", r) for r in rows["Auction"]]
        + [(r[0], "Bid", r) for r in rows["Bid"]],
        key=lambda x: x[0],
    )
    peak = 0
    t0 = time.perf_counter()
    for i in range(0, len(merged), batch):
        part = merged[i : i + batch]
        by: dict[str, list[Any]] = {}
        for _, s, r in part:
            by.setdefault(s, []).append(r)
        pushed.append((part[-1][0], time.perf_counter()))
        for s, rs in by.items():
            eng.push(s, rs)
        eng.heartbeat(part[-1][0] - 1)
        eng.run()
        peak = max(peak, eng.statistics().memory_bytes)
    eng.close()
    seconds = time.perf_counter() - t0
    out: dict[str, Any] = {
        "query": " ".join(line for line in text.splitlines() if not line.startswith("--")),
        "events": events,
        "embedded": {
            "events_per_s": round(events / seconds),
            "seconds": round(seconds, 3),
            "p50_latency_ms": round(float(np.percentile(latencies, 50)) * 1000, 2) if latencies else None,
            "p99_latency_ms": round(float(np.percentile(latencies, 99)) * 1000, 2) if latencies else None,
            "peak_memory_bytes": peak,
            "output_elements": q.count,
        },
    }
    if name in DUCKDB:
        import duckdb
        import pyarrow as pa

        from sluice.workloads.nexmark import COLUMNS

        con = duckdb.connect()
        for s in ("Person", "Auction", "Bid"):
            cols: list[list[Any]] = [list(c) for c in zip(*rows[s], strict=True)]
            if not cols:
                cols = [[] for _ in range(len(COLUMNS[s]) + 1)]
            con.register(s.lower(), pa.table({c: list(v) for c, v in zip(COLUMNS[s], cols[1:], strict=True)}))
        d0 = time.perf_counter()
        final = con.execute(DUCKDB[name]).fetchall()
        duck_s = time.perf_counter() - d0
        got = Counter(_norm(e.row) for e in q.results() if e.sign == "+")
        equal = got == Counter(_norm(tuple(r)) for r in final)
        if not equal:
            raise AssertionError(f"{name}: the engine's answer differs from DuckDB's")
        out["duckdb"] = {"seconds": round(duck_s, 4), "events_per_s": round(events / duck_s), "answer_equal": True}
    else:
        out["duckdb"] = None
    return out


def bench(
    queries: list[str],
    events: int,
    batch: int = 10_000,
    rate: int = 10_000,
    out: str | Path = "benchmarks/results/nexmark.json",
) -> dict[str, Any]:
    results = {q: run_query(q, events, batch, rate) for q in queries}
    doc = write_results(out, "nexmark", events=events, batch=batch, rate=rate, results=results)
    return doc


def table(doc: dict[str, Any]) -> str:
    lines = [
        "| query | engine events/s | p50 ms | p99 ms | peak memory | DuckDB final answer |",
        "|---|---|---|---|---|---|",
    ]
    for q, r in doc["results"].items():
        e = r["embedded"]
        d = r["duckdb"]
        duck = f"{d['seconds']} s ({d['events_per_s']:,} ev/s), equal" if d else "n/a (no SQL snapshot)"
        lines.append(
            f"| {q} | {e['events_per_s']:,} | {e['p50_latency_ms']} | {e['p99_latency_ms']} | "
            f"{e['peak_memory_bytes']:,} B | {duck} |"
        )
    return "\n".join(lines)
