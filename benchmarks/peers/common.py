"""Shared by the peer runners (each runs in its own virtual environment, without Sluice).

A runner reads the NEXMark events that ``sluice bench`` generated (Parquet, one file per stream),
runs one query, and writes JSON: the engine and its version, the seconds the query took (input
already in memory; the dataflow's construction, execution and the collection of its answer), and
the answer's rows — or ``unsupported`` with the reason.  ``sluice bench`` checks the rows against
the reference before the time counts.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

Q2_AUCTIONS = (1007, 1020, 2001, 2019, 2087)
Q3_STATES = ("OR", "ID", "CA")
# Rstream over windows, CURRENT_TIME, ALL-subqueries: CQL's per-instant answers (docs/design/009)
PER_INSTANT = ("q4", "q5", "q6", "q7", "q8")


def load(data: str) -> dict[str, list[dict[str, Any]]]:
    return {s: pq.read_table(Path(data) / f"{s}.parquet").to_pylist() for s in ("Person", "Auction", "Bid")}


def main(
    engine: str,
    version: str,
    queries: dict[str, Callable[[dict[str, list[dict[str, Any]]]], list[Any]]],
    unsupported: dict[str, str],
) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--query", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    doc: dict[str, Any] = {"engine": engine, "version": version, "query": args.query}
    if args.query in queries:
        data = load(args.data)
        # untimed warm-up on the first 1,000 events of each stream: start-up (a JVM, a runtime,
        # code paths) is not the query's cost, as for Spark in sluice bench
        t0 = time.perf_counter()
        queries[args.query]({s: rows[:1000] for s, rows in data.items()})
        doc["warmup_seconds"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        rows = queries[args.query](data)
        doc["seconds"] = time.perf_counter() - t0
        doc["rows"] = [list(r) for r in rows]
    else:
        doc["unsupported"] = unsupported.get(args.query, "not implemented for this engine")
    Path(args.out).write_text(json.dumps(doc, default=float))  # Decimal (Flink's price * 0.89) as float
    print(
        f"{engine} {args.query}: "
        + (f"{doc['seconds']:.3f} s, {len(doc['rows'])} rows" if "rows" in doc else doc["unsupported"]),
        file=sys.stderr,
    )
