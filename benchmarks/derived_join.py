"""A join whose input is a derived relation (issue #11; design 010 "A join of relations reads
lifetimes"), beside DuckDB in the same run.

Three streams A, B, C, one event per millisecond each (distinct timestamps), key K uniform over
``--keys`` values (100 by default), V a unique id, and a three-way window join:

    Istream(select A.V, B.V, C.V from A [Range 100], B [Range 100], C [Range 100]
            where A.K = B.K and B.K = C.K)

The engine joins A and B in a shared window join; the join of that derived relation with C's
window is the binary ``Join``, whose run of changes spans 10,000 instants per batch.  Pairing
every change of a run with every change of the other side (insertions with deletions of copies
that left long before) made it 13,574 ev/s on 60,000 events per stream before lifetimes (design
010); this script measures it at ≥ 1,000,000 events.  Each triple is in the window join from the
instant the last of the three arrives until the first leaves, and V is unique, so the Istream is
each triple whose stamps lie within 100 ms, at its latest stamp: DuckDB gets the key equalities
and the time bands as join conditions (1 thread, the whole answer at once, as Arrow), and the
engine's answer must equal it row by row before any time is reported.  Best of three runs each.

    .venv/bin/python benchmarks/derived_join.py [--events N] [--keys K] [--batch B]

Writes `benchmarks/results/derived_join.json`.
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np
import pyarrow as pa
from join_order import duckdb_answer, run_query  # (benchmarks/ is the script's directory)
from sluice.experiments.results import write_results

RANGE = 100
QUERY = (
    f"Istream(select A.V, B.V, C.V from A [Range {RANGE}], B [Range {RANGE}], C [Range {RANGE}] "
    "where A.K = B.K and B.K = C.K)"
)
DUCKDB = (
    "select greatest(a.ts, b.ts, c.ts), a.V, b.V, c.V from a "
    f"join b on a.K = b.K and b.ts between a.ts - {RANGE} and a.ts + {RANGE} "
    f"join c on b.K = c.K and c.ts between b.ts - {RANGE} and b.ts + {RANGE} "
    f"where greatest(a.ts, b.ts, c.ts) - least(a.ts, b.ts, c.ts) <= {RANGE}"
)


def data(events: int, keys: int) -> dict[str, pa.Table]:
    n = -(-events // 3)  # (at least ``events`` in all)
    rng = np.random.default_rng(1)
    ts = np.arange(n, dtype=np.int64)
    return {
        s: pa.table({"ts": ts, "K": rng.integers(0, keys, n), "V": np.arange(n) + i * n}) for i, s in enumerate("ABC")
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--keys", type=int, default=100)
    ap.add_argument("--batch", type=int, default=10_000)
    ap.add_argument("--out", default="benchmarks/results/derived_join.json")
    args = ap.parse_args()
    tabs = data(args.events, args.keys)
    want, duck_s = duckdb_answer(tabs, DUCKDB)
    best: dict[str, Any] | None = None
    for _ in range(3):
        r, got = run_query(tabs, QUERY, args.batch)
        assert got == want, "the engine's answer differs from DuckDB's"
        best = r if best is None or r["seconds"] < best["seconds"] else best
    assert best is not None
    events = best["events"]
    duck = {"seconds": round(duck_s, 3), "events_per_s": round(events / duck_s), "output": len(want)}
    ratio = round(best["events_per_s"] / duck["events_per_s"], 3)
    print(f"Sluice  {events:>10,} events {best['events_per_s']:>12,} ev/s  peak state {best['peak_state_bytes']:>12,} B"
          f"  output {best['output']:,} (= DuckDB)")  # fmt: skip
    print(f"DuckDB  {events:>10,} events {duck['events_per_s']:>12,} ev/s  (1 thread, the whole answer at once)")
    print(f"Sluice / DuckDB: {ratio}x")
    write_results(
        args.out, "derived_join", query=QUERY, duckdb_sql=DUCKDB, keys=args.keys, batch=args.batch,
        sluice=best, duckdb=duck, sluice_vs_duckdb=ratio,
    )  # fmt: skip


if __name__ == "__main__":
    main()
