"""Engine throughput on 1M generated tuples, beside DuckDB computing the same final answers.

Queries (one engine run each, data pushed as Arrow batches of ``--batch`` rows, then closed):
  select_project   Istream of a selection + projection over S (default Istream, insert-only)
  window_group_by  count(*), sum(B) per K over [Range 10 Seconds]   (a relation, kept current)
  window_join      S [Range 1 Second] ⋈ T [Range 1 Second] on K       (a relation, kept current)

For each: tuples/s end to end (push → last output), output elements, and a check that the
engine's final state (netting every output element) equals DuckDB's answer at the last instant —
only a checked run is reported.  Writes JSON to benchmarks/results/engine_throughput.json.

    .venv/bin/python benchmarks/engine_throughput.py [--tuples 1000000] [--batch 100000]
"""

from __future__ import annotations

import argparse
import time
from collections import Counter

import duckdb
import numpy as np
import pyarrow as pa
from sluice.backends.embedded import EmbeddedEngine
from sluice.datatypes import FLOAT, INTEGER
from sluice.experiments.results import write_results
from sluice.runtime.batch import make

QUERIES = {
    "select_project": (
        "select A, B * 2 as B2 from S where K < 50",
        "select A, B * 2 from S where K < 50",
        "stream",
    ),
    "window_group_by": (
        "select K, count(*), sum(A) from S [Range 10 Seconds] group by K",
        "select K, count(*), sum(A) from S where ts >= {last} - 10 group by K",
        "relation",
    ),
    "window_join": (
        "select S.A, T.C from S [Range 1 Second], T [Range 1 Second] where S.K = T.K",
        "select S.A, T.C from S, T where S.K = T.K and S.ts >= {last} - 1 and T.ts >= {last} - 1",
        "relation",
    ),
}


def generate(n: int, seed: int = 1) -> tuple[np.ndarray, dict[str, np.ndarray], dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    ts = np.sort(rng.integers(0, max(1, n // 1000), n))  # ~1000 tuples per second
    s = {"A": np.arange(n, dtype=np.int64), "K": rng.integers(0, 100, n), "B": rng.random(n)}
    t = {"K": rng.integers(0, 100_000, n), "C": np.arange(n, dtype=np.int64)}
    return ts, s, t


def run(name: str, n: int, batch: int) -> dict[str, object]:
    cql, sql, kind = QUERIES[name]
    ts, s, t = generate(n)
    eng = EmbeddedEngine()
    eng.execute("register stream S (A integer, K integer, B float); register stream T (K integer, C integer)")
    q = eng.register_query(cql)
    s_types, t_types = [INTEGER, INTEGER, FLOAT], [INTEGER, INTEGER]
    batches = []
    for i in range(0, n, batch):
        sl = slice(i, i + batch)
        sb = make(ts[sl], 1, [pa.array(s["A"][sl]), pa.array(s["K"][sl]), pa.array(s["B"][sl])], s_types)
        tb = make(ts[sl], 1, [pa.array(t["K"][sl]), pa.array(t["C"][sl])], t_types) if name == "window_join" else None
        batches.append((sb, tb))
    counted = n * (2 if name == "window_join" else 1)
    t0 = time.perf_counter()
    for sb, tb in batches:
        eng.push_batch("S", sb)
        if tb is not None:
            eng.push_batch("T", tb)
        eng.run()
    eng.close()
    dt = time.perf_counter() - t0
    # check against DuckDB: the engine's final state vs DuckDB's answer at the last instant
    last = int(ts[-1])
    con = duckdb.connect()
    con.register("S", pa.table({"ts": ts, **s}))
    con.register("T", pa.table({"ts": ts, **t}))
    d0 = time.perf_counter()
    final = con.execute(sql.format(last=last)).fetchall()
    duck_s = time.perf_counter() - d0
    out = q.arrow()
    state: Counter = Counter()
    cols = [c.to_pylist() for c in out.columns[2:]]
    signs = out.column(1).to_pylist()
    for sign, *row in zip(signs, *cols, strict=True):
        state[tuple(round(v, 6) if isinstance(v, float) else v for v in row)] += sign
    expected = Counter(tuple(round(v, 6) if isinstance(v, float) else v for v in r) for r in final)
    assert +state == expected, f"{name}: the engine's final answer differs from DuckDB's"
    stats = eng.statistics()
    return {
        "query": cql,
        "kind": kind,
        "input_tuples": counted,
        "seconds": round(dt, 3),
        "tuples_per_s": round(counted / dt),
        "output_elements": q.count,
        "peak_queue_bytes": stats.peak_queue_bytes,
        "duckdb_final_answer_s": round(duck_s, 4),
        "checked_against_duckdb": True,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tuples", type=int, default=1_000_000)
    ap.add_argument("--batch", type=int, default=100_000)
    ap.add_argument("--only", choices=list(QUERIES), action="append")
    ap.add_argument("--out", default="benchmarks/results/engine_throughput.json")
    args = ap.parse_args()
    results = {}
    for name in args.only or list(QUERIES):
        r = run(name, args.tuples, args.batch)
        results[name] = r
        print(
            f"{name:16s} {r['tuples_per_s']:>12,} tuples/s  ({r['seconds']} s, {r['output_elements']:,} out; "
            f"DuckDB final answer {r['duckdb_final_answer_s']} s)"
        )
    write_results(args.out, "engine_throughput", tuples=args.tuples, batch=args.batch, results=results)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
