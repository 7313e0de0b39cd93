"""The rewrite rules (``sluice.plan.rules``) on and off, same data, same run.

1,000,000 events on S (K: 100 keys, V uniform 0..99, one per millisecond), a 100-row relation D,
query ``Istream(select S.V, D.N from S [Range 10 Seconds], D where S.K = D.K and S.V > 95)``,
typed Arrow batches of 10,000 with a heartbeat after each.  With the rules, ``S.V > 95`` runs on the
stream before the window and the join (the window holds 4% of what it held); without, it is the
join's residual.  Both runs' outputs are checked equal, element by element, to the same answer
hand-written for DuckDB (an arrival is an insertion unless the equal element leaving the window
at that instant cancels it: CQL's bag difference), which is timed in the same run (1 thread, the
whole answer at once) as the baseline.  Reported: the better of two runs each.

    .venv/bin/python benchmarks/rewrites.py [--events N]

Writes `benchmarks/results/rewrites.json`.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import sluice.plan.rules as rules
from sluice.backends.embedded import EmbeddedEngine
from sluice.experiments.results import write_results

QUERY = "Istream(select S.V, D.N from S [Range 10 Seconds], D where S.K = D.K and S.V > 95)"
# The same answer hand-written for DuckDB: Istream is a bag difference per instant, so an arrival
# equal to the element leaving the window at that instant (ts − 10,001) is no insertion.
DUCKDB = (
    "select a.ts, a.V, d.N from s a join d on a.K = d.K where a.V > 95 and not exists "
    "(select 1 from s b where b.ts = a.ts - 10001 and b.K = a.K and b.V = a.V)"
)


def run(ts: np.ndarray, k: np.ndarray, v: np.ndarray, with_rules: bool, batch: int = 10_000) -> dict[str, Any]:
    saved = rules.RULES
    rules.RULES = saved if with_rules else ()
    try:
        eng = EmbeddedEngine(time_unit="millisecond", start=0)
        eng.execute("register stream S (K integer, V integer); register relation D (K integer, N integer)")
        eng.push("D", [(0, "+", i, i * 10) for i in range(100)])
        q = eng.register_query(QUERY)
        peak = 0
        t0 = time.perf_counter()
        for i in range(0, len(ts), batch):
            eng.push("S", pa.table({"ts": ts[i : i + batch], "K": k[i : i + batch], "V": v[i : i + batch]}))
            eng.heartbeat(int(ts[min(i + batch, len(ts)) - 1]))
            eng.run()
            peak = max(peak, sum(u.state_bytes() for u in eng.operators if u.stateful))
        eng.close()
        dt = time.perf_counter() - t0
        got = sorted((e.ts, *e.row) for e in q.results())
        return {"answer": got, "seconds": round(dt, 3), "events_per_s": round(len(ts) / dt), "output": q.delivered,
                "peak_synopsis_bytes": peak, "rules": list(q.rewrites)}  # fmt: skip
    finally:
        rules.RULES = saved


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--out", default="benchmarks/results/rewrites.json")
    args = ap.parse_args()
    n = args.events
    rng = np.random.default_rng(1)
    ts = np.arange(n, dtype=np.int64)
    k = rng.integers(0, 100, n)
    v = rng.integers(0, 100, n)
    s = pa.table({"ts": ts, "K": k, "V": v})  # noqa: F841 - read by DuckDB below
    # Istream is a bag difference per instant: an arrival equal to the element leaving the window at
    # the same instant (ts − 10,001) is no insertion.  Every K has its D row.
    con = duckdb.connect()
    con.execute("set threads = 1")
    d = pa.table({"K": np.arange(100), "N": np.arange(100) * 10})  # noqa: F841 - read by DuckDB
    t0 = time.perf_counter()
    answer = con.sql(DUCKDB).to_arrow_table()
    duck_s = time.perf_counter() - t0
    want = sorted(zip(*(answer.column(i).to_pylist() for i in range(3)), strict=True))
    run(ts[:20_000], k[:20_000], v[:20_000], True)  # warm-up
    runs: dict[str, Any] = {}
    for name, on in (("rules off", False), ("rules on", True)):
        best: dict[str, Any] | None = None
        for _ in range(2):
            r = run(ts, k, v, on)
            assert r.pop("answer") == want, f"{name}: the answer differs from DuckDB's"
            best = r if best is None or r["seconds"] < best["seconds"] else best
        assert best is not None
        runs[name] = best
        print(f"{name:<10} {best['events_per_s']:>12,} ev/s  peak synopses {best['peak_synopsis_bytes']:>10,} B"
              f"  output {best['output']:,} (= DuckDB)", flush=True)  # fmt: skip
    ratio = runs["rules on"]["events_per_s"] / runs["rules off"]["events_per_s"]
    duck = {"seconds": round(duck_s, 3), "events_per_s": round(n / duck_s), "output": len(want)}
    vs_duck = runs["rules on"]["events_per_s"] / duck["events_per_s"]
    print(f"{'DuckDB':<10} {duck['events_per_s']:>12,} ev/s  (1 thread, the whole answer at once)")
    write_results(args.out, "rewrites", events=n, query=QUERY, duckdb_sql=DUCKDB, batch=10_000, runs=runs,
                  duckdb=duck, speedup=round(ratio, 2), rules_on_vs_duckdb=round(vs_duck, 3))  # fmt: skip
    print(f"rules on / off: {ratio:.2f}x; rules on / DuckDB: {vs_duck:.2f}x -> {args.out}")


if __name__ == "__main__":
    main()
