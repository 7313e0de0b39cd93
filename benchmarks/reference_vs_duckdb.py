"""Benchmark of what exists today: the CQL front end and the reference evaluator, beside DuckDB.

For each query, on the same generated input in the same process:
  * ``parse_bind_per_s`` — CQL parse + bind + EXPLAIN rate;
  * ``reference_s`` — the reference evaluator computing the *whole continuous answer* (every instant);
  * ``duckdb_final_s`` — DuckDB computing only the *final instant's* answer (one snapshot);
and it checks that the reference's final state equals DuckDB's answer before reporting times.
The reference evaluator is the oracle, not the engine: these numbers are a baseline for how slow
"by definition" is, not Sluice's throughput.  Writes JSON to benchmarks/results/.

    .venv/bin/python benchmarks/reference_vs_duckdb.py [--tuples N]
"""

from __future__ import annotations

import argparse
import time
from collections import Counter

import duckdb
import numpy as np
from sluice.catalog import Catalog
from sluice.experiments.results import write_results
from sluice.plan import bind_query, execute
from sluice.plan.explain import explain
from sluice.reference import evaluate

QUERIES = {
    "select_project": (
        "select A, B * 2 from S [Range Unbounded] where A % 3 = 0",
        "select A, B * 2 from S where A % 3 = 0",
    ),
    "window_group_by": (
        "select K, count(*), sum(B) from S [Range 100 Seconds] group by K",
        "select K, count(*), sum(B) from S where ts >= {last} - 100 group by K",
    ),
    "window_equi_join": (
        "select S.A, T.C from S [Range 10 Seconds], T [Range 10 Seconds] where S.K = T.K",
        "select S.A, T.C from S, T where S.K = T.K and S.ts >= {last} - 10 and T.ts >= {last} - 10",
    ),
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tuples", type=int, default=2000)
    ap.add_argument("--out", default="benchmarks/results/reference_vs_duckdb.json")
    args = ap.parse_args()
    n = args.tuples
    rng = np.random.default_rng(1)
    ts = np.sort(rng.integers(0, n // 2, n))
    s_rows = [(int(t), (int(i), int(rng.integers(0, 20)), float(rng.integers(0, 100)))) for i, t in enumerate(ts)]
    t_rows = [(int(t), (int(rng.integers(0, 20)), int(i))) for i, t in enumerate(ts)]
    last = int(ts[-1])

    cat = Catalog()
    execute(cat, "register stream S (A integer, K integer, B float); register stream T (K integer, C integer);")
    con = duckdb.connect()
    con.execute(
        "create table S (ts bigint, A integer, K integer, B double); create table T (ts bigint, K integer, C integer)"
    )
    con.executemany("insert into S values (?, ?, ?, ?)", [(t, *r) for t, r in s_rows])
    con.executemany("insert into T values (?, ?, ?)", [(t, *r) for t, r in t_rows])

    results = {}
    for name, (cql, sql) in QUERIES.items():
        t0 = time.perf_counter()
        reps = 200
        for _ in range(reps):
            explain(bind_query(cat, cql).plan)
        parse_rate = reps / (time.perf_counter() - t0)
        bq = bind_query(cat, cql)
        t0 = time.perf_counter()
        out = evaluate(bq, {"S": s_rows, "T": t_rows}, until=last)
        ref_s = time.perf_counter() - t0
        state: Counter = Counter()
        for e in out:
            state[tuple(round(v, 6) if isinstance(v, float) else v for v in e.row)] += 1 if e.sign == "+" else -1
        t0 = time.perf_counter()
        final = con.execute(sql.format(last=last)).fetchall()
        duck_s = time.perf_counter() - t0
        expected = Counter(tuple(round(v, 6) if isinstance(v, float) else v for v in r) for r in final)
        assert +state == expected, f"{name}: the reference's final state differs from DuckDB"
        results[name] = {
            "tuples_per_stream": n,
            "instants": last + 1,
            "output_elements": len(out),
            "parse_bind_per_s": round(parse_rate, 1),
            "reference_s": round(ref_s, 4),
            "duckdb_final_s": round(duck_s, 5),
            "final_answer_equal": True,
        }
        print(f"{name:18s} parse+bind {parse_rate:8.0f}/s  reference {ref_s:7.3f} s  duckdb(final) {duck_s:7.4f} s")
    write_results(args.out, "reference_vs_duckdb", results=results)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
