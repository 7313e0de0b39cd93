"""A selection's conjuncts evaluated at once (as written) and in the order the adaptive monitor
picks (design 025), same data, same run, beside plain Python and DuckDB selecting the same rows.

1,000,000 events, millisecond timestamps, A in 0..9, B in 0..99, N "alpha" or "beta" (half
each); `Istream(select A, B from S [Range Unbounded] where …)` with three predicates — cheap
conjuncts, a costly one written first, a costly one written second — pushed in Arrow batches
of 10,000 and 1,000 with a heartbeat after each (batches end on a timestamp boundary).  Every
answer is checked equal to plain Python's (a list comprehension over the rows) before any time
is reported; DuckDB (one thread) runs the same WHERE over the whole table.  Best of three.

    .venv/bin/python benchmarks/filter_order.py [--events N]

Writes `benchmarks/results/filter_order.json`.
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
from sluice.runtime.operators import stateless
from sluice.runtime.operators.filter_order import FilterOrder

PREDICATES = {  # name: (CQL/SQL WHERE, the same test in Python)
    "cheap": ("B > 50 and A < 5", lambda a, b, n: b > 50 and a < 5),
    "costly first": ("upper(N) like '%LPH%' and A < 1", lambda a, b, n: "LPH" in n.upper() and a < 1),
    "costly second": ("B > 20 and upper(N) like '%LPH%'", lambda a, b, n: b > 20 and "LPH" in n.upper()),
}
BATCHES = (10_000, 1_000)


def data(events: int) -> pa.Table:
    rng = np.random.default_rng(1)
    ts = np.sort(rng.integers(0, events * 3 // 2, events))
    n = np.where(rng.random(events) < 0.5, "alpha", "beta")
    return pa.table({"ts": ts, "A": rng.integers(0, 10, events), "B": rng.integers(0, 100, events), "N": n})


def run(tab: pa.Table, where: str, batch: int, order: FilterOrder) -> tuple[float, list[tuple[Any, ...]]]:
    saved, stateless.FILTER_ORDER = stateless.FILTER_ORDER, order
    try:
        eng = EmbeddedEngine(time_unit="millisecond", start=0)
        eng.execute("register stream S (A integer, B integer, N varchar(8))")
        q = eng.register_query(f"Istream(select A, B from S [Range Unbounded] where {where})")
        ts = tab.column("ts").to_numpy()
        t0 = time.perf_counter()
        i = 0
        while i < len(ts):
            j = int(np.searchsorted(ts, ts[min(i + batch, len(ts)) - 1], side="right"))  # whole instants
            eng.push("S", tab.slice(i, j - i))
            eng.heartbeat(int(ts[j - 1]))
            eng.run()
            i = j
        eng.close()
        seconds = time.perf_counter() - t0
    finally:
        stateless.FILTER_ORDER = saved
    return seconds, sorted((e.ts, *e.row) for e in q.results())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--out", default="benchmarks/results/filter_order.json")
    args = ap.parse_args()
    tab = data(args.events)
    rows = list(zip(*(tab.column(c).to_pylist() for c in ("ts", "A", "B", "N")), strict=True))
    con = duckdb.connect()
    con.execute("set threads = 1")
    con.register("s", tab)
    results: dict[str, Any] = {}
    for name, (where, test) in PREDICATES.items():
        t0 = time.perf_counter()
        want = sorted((t, a, b) for t, a, b, n in rows if test(a, b, n))
        python_s = time.perf_counter() - t0
        duck_s = min(
            _timed(lambda w=where: con.sql(f"select ts, A, B from s where {w}").to_arrow_table()) for _ in range(3)
        )
        entry: dict[str, Any] = {
            "where": where,
            "output": len(want),
            "python_events_per_s": round(args.events / python_s),
            "duckdb_events_per_s": round(args.events / duck_s),
        }
        for batch in BATCHES:
            for order in (FilterOrder.WRITTEN, FilterOrder.ADAPTIVE):
                best = float("inf")
                for _ in range(3):
                    seconds, got = run(tab, where, batch, order)
                    assert got == want, f"{name}, {order.value}: the answer differs from plain Python's"
                    best = min(best, seconds)
                entry[f"{order.value} batch {batch}"] = round(args.events / best)
            ratio = entry[f"adaptive batch {batch}"] / entry[f"written batch {batch}"]
            entry[f"adaptive / written batch {batch}"] = round(ratio, 2)
            print(
                f"{name:<14} batch {batch:>6,}: written {entry[f'written batch {batch}']:>11,} ev/s, adaptive "
                f"{entry[f'adaptive batch {batch}']:>11,} ev/s ({ratio:.2f}×); python "
                f"{entry['python_events_per_s']:,}, duckdb {entry['duckdb_events_per_s']:,} (answer = python's, "
                f"{len(want):,} rows)",
                flush=True,
            )
        results[name] = entry
    write_results(args.out, "filter_order", events=args.events, batches=list(BATCHES), predicates=results)


def _timed(fn: Any) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


if __name__ == "__main__":
    main()
