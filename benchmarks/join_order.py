"""The join-order rule (``order-joins-to-avoid-cross-products``, design 012) on and off, same data,
same run.

Three streams A, B, C (10 events per millisecond each, key K uniform over 10,000 values, V a
unique id) and a query written with its inputs in the order a user might list them — A, B, C —
though A and B share no conjunct:

    Istream(select A.V, B.V, C.V from A [Range 10], B [Range 10], C [Range 10]
            where A.K = C.K and B.K = C.K)

As written the plan joins A × B first (every pair of elements 10 ms apart); with the rule it
joins A ⋈ C, then B.  Batches of 10,000 per stream with a heartbeat after each.  The plan as
written is quadratic in the window's contents, so both plans run on the first ``--off-events``
(60,000 by default) and the rule's plan on all of them (1,000,000 by default) beside DuckDB.  Every
answer is checked equal, row by row, to the same answer hand-written for DuckDB — with unique V
the Istream is each triple within 10 ms, at its latest timestamp; DuckDB gets the key equalities
and the time bands as join conditions — timed in the same run (1 thread, the whole answer at
once, as Arrow).  Reported: the best of three runs each.

    .venv/bin/python benchmarks/join_order.py [--events N] [--off-events M]

Writes `benchmarks/results/join_order.json`.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import sluice.plan.rules as rules
from sluice.backends.embedded import EmbeddedEngine
from sluice.experiments.results import write_results

QUERY = "Istream(select A.V, B.V, C.V from A [Range 10], B [Range 10], C [Range 10] where A.K = C.K and B.K = C.K)"
DUCKDB = (
    "select greatest(a.ts, b.ts, c.ts), a.V, b.V, c.V from a "
    "join c on a.K = c.K and a.ts between c.ts - 10 and c.ts + 10 "
    "join b on b.K = c.K and b.ts between c.ts - 10 and c.ts + 10 "
    "where greatest(a.ts, b.ts, c.ts) - least(a.ts, b.ts, c.ts) <= 10"
)
RULE = "order-joins-to-avoid-cross-products"
Answer = list[tuple[int, int, int, int]]


def data(events: int) -> dict[str, pa.Table]:
    n = -(-events // 3)  # (at least ``events`` in all)
    rng = np.random.default_rng(1)
    ts = np.arange(n, dtype=np.int64) // 10
    keys = {s: rng.integers(0, 10_000, n) for s in "ABC"}
    return {s: pa.table({"ts": ts, "K": keys[s], "V": np.arange(n) + i * n}) for i, s in enumerate("ABC")}


def run(tabs: dict[str, pa.Table], with_rule: bool, batch: int = 10_000) -> tuple[dict[str, Any], Answer]:
    saved = rules.RULES
    rules.RULES = saved if with_rule else tuple(r for r in saved if r.name != RULE)
    try:
        return run_query(tabs, QUERY, batch)
    finally:
        rules.RULES = saved


def run_query(tabs: dict[str, pa.Table], query: str, batch: int) -> tuple[dict[str, Any], Answer]:
    """``query`` over streams A, B, C (K, V) given as tables of (ts, K, V): pushed ``batch``
    rows per stream at a time, a heartbeat after each; the answer as sorted (ts, row…) tuples.
    """
    eng = EmbeddedEngine(time_unit="millisecond", start=0)
    eng.execute(";".join(f"register stream {s} (K integer, V integer)" for s in "ABC"))
    q = eng.register_query(query)
    n = tabs["A"].num_rows
    ts = tabs["A"].column("ts").to_numpy()
    peak = 0
    t0 = time.perf_counter()
    for i in range(0, n, batch):
        for s in "ABC":
            eng.push(s, tabs[s].slice(i, batch))
        eng.heartbeat(int(ts[min(i + batch, n) - 1]))
        eng.run()
        peak = max(peak, sum(u.state_bytes() for u in eng.operators if u.stateful))
    eng.close()
    dt = time.perf_counter() - t0
    got = sorted((e.ts, *e.row) for e in q.results())
    return {"events": 3 * n, "seconds": round(dt, 3), "events_per_s": round(3 * n / dt), "output": len(got),
            "peak_state_bytes": peak, "rules": list(q.rewrites), "plan": eng.explain(q)}, got  # fmt: skip


def duckdb_answer(tabs: dict[str, pa.Table], sql: str = DUCKDB) -> tuple[Answer, float]:
    """``sql``'s answer over tables a, b, c (one thread; best of three) and its time."""
    con = duckdb.connect()
    con.execute("set threads = 1")
    for s, t in tabs.items():
        con.register(s.lower(), t)
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        answer = con.sql(sql).to_arrow_table()
        best = min(best, time.perf_counter() - t0)
    return sorted(zip(*(answer.column(i).to_pylist() for i in range(4)), strict=True)), best


def best_of(tabs: dict[str, pa.Table], with_rule: bool, want: Answer, name: str) -> dict[str, Any]:
    return best_of_runs(lambda: run(tabs, with_rule), want, f"{name:<34}")


def best_of_runs(run_once: Callable[[], tuple[dict[str, Any], Answer]], want: Answer, label: str) -> dict[str, Any]:
    """The fastest of three runs, each answer checked equal to DuckDB's ``want``; printed."""
    best: dict[str, Any] | None = None
    for _ in range(3):
        r, got = run_once()
        assert got == want, f"{label.strip()}: the answer differs from DuckDB's"
        best = r if best is None or r["seconds"] < best["seconds"] else best
    assert best is not None
    print(f"{label} {best['events']:>9,} events {best['events_per_s']:>12,} ev/s  peak state "
          f"{best['peak_state_bytes']:>12,} B  output {best['output']:,} (= DuckDB)", flush=True)  # fmt: skip
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--off-events", type=int, default=60_000)
    ap.add_argument("--out", default="benchmarks/results/join_order.json")
    args = ap.parse_args()
    small, large = data(args.off_events), data(args.events)
    want_small, _ = duckdb_answer(small)
    want, duck_s = duckdb_answer(large)
    runs = {
        "rule off (A × B first), prefix": best_of(small, False, want_small, "rule off (A × B first)"),
        "rule on (A ⋈ C, then B), prefix": best_of(small, True, want_small, "rule on (A ⋈ C, then B)"),
        "rule on (A ⋈ C, then B)": best_of(large, True, want, "rule on (A ⋈ C, then B)"),
    }
    events = 3 * large["A"].num_rows
    duck = {"seconds": round(duck_s, 3), "events_per_s": round(events / duck_s), "output": len(want)}
    print(f"{'DuckDB':<34} {events:>9,} events {duck['events_per_s']:>12,} ev/s  (1 thread, the whole answer at once)")
    off, on = runs["rule off (A × B first), prefix"], runs["rule on (A ⋈ C, then B), prefix"]
    ratios = {
        "speedup_on_prefix": round(off["seconds"] / on["seconds"], 1),
        "rule_on_vs_duckdb": round(runs["rule on (A ⋈ C, then B)"]["events_per_s"] / duck["events_per_s"], 3),
    }
    write_results(
        args.out, "join_order", query=QUERY, duckdb_sql=DUCKDB, batch=10_000, runs=runs, duckdb=duck, **ratios
    )


if __name__ == "__main__":
    main()
