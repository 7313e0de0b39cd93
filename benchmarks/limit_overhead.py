"""What a memory limit costs when it has nothing to drop (design 021, "Memory within a run"):
the same queries on the same data with no limit and under one far above their need, in the same
process, answers checked equal before any time is reported.

- ``group-by``: ``select K, max(V), count(distinct V) from S group by K`` over 1,000,000 events
  (``--events``), one a millisecond, 20,000 keys, pushed as Arrow tables of 1,000 with a run after
  each — the engine measures memory at every admission, when each run starts and ends and after
  every step (``peak_memory_in_runs``); an aggregate's state is walked to size it.  Beside it,
  DuckDB (one thread) computing the same final relation from the same table, checked equal to
  the engine's (its output netted).
- ``one-row pushes``: the two joins of ``benchmarks/limit_sweep.py`` over three streams,
  ``--pushes`` one-row pushes to each in turn with no run between them (one run at the end) —
  every admission reads what waits at the sources (``Source._pending_ts``).  Beside it, the same
  pushes with no limit; the figure is pushes a second.

    .venv/bin/python benchmarks/limit_overhead.py [--events N] [--pushes N]

Writes ``benchmarks/results/limit_overhead.json``.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
from limit_sweep import ONE, TWO
from sluice.backends.embedded import EmbeddedEngine
from sluice.experiments.results import write_results

GROUP_BY = "select K, max(V), count(distinct V) from S group by K"
GENEROUS = "2GB"  # far above either run's need: nothing is dropped


def group_by(events: int, limit: str | None) -> tuple[float, pa.Table, Any]:
    rng = np.random.default_rng(5)
    ts = np.arange(events, dtype=np.int64)
    data = pa.table({"ts": ts, "K": rng.integers(0, 20_000, events), "V": rng.integers(0, 100, events)})
    eng = EmbeddedEngine(time_unit="millisecond", memory_limit=limit)
    eng.execute("register stream S (K integer, V integer)")
    q = eng.register_query(GROUP_BY, retain=0)
    out: list[pa.Table] = []
    q.subscribe_arrow(out.append)
    t0 = time.perf_counter()
    for lo in range(0, events, 1_000):
        eng.push("S", data.slice(lo, 1_000))
        eng.run()
    eng.close()
    seconds = time.perf_counter() - t0
    return seconds, pa.concat_tables(out), (data, eng.statistics())


def final_relation(changes: pa.Table) -> list[tuple[Any, ...]]:
    """The relation the changes leave (``__sign`` +1 / −1), sorted."""
    con = duckdb.connect()
    con.register("c", changes)
    sign = "case when __sign > 0 then 1 else -1 end"
    return con.execute(
        f"select c0, c1, c2 from c group by c0, c1, c2 having sum({sign}) > 0 order by c0, c1, c2"
    ).fetchall()


def duckdb_group_by(data: pa.Table) -> tuple[float, list[tuple[Any, ...]]]:
    con = duckdb.connect()
    con.execute("set threads = 1")
    con.register("s", data)
    t0 = time.perf_counter()
    rows = con.execute('select "K", max("V"), count(distinct "V") from s group by "K" order by 1, 2, 3').fetchall()
    return time.perf_counter() - t0, rows


def one_row_pushes(pushes: int, limit: str | None) -> tuple[float, int]:
    rng = np.random.default_rng(11)
    keys = rng.integers(0, 1_000, (pushes, 3))
    eng = EmbeddedEngine(time_unit="millisecond", memory_limit=limit)
    eng.execute("; ".join(f"register stream {s} (I integer, K integer)" for s in "STU"))
    pairs = [0]
    for q in (ONE, TWO):
        eng.register_query(q, retain=0).subscribe_arrow(lambda b: pairs.__setitem__(0, pairs[0] + b.num_rows))
    t0 = time.perf_counter()
    for i in range(pushes):
        for j, s in enumerate("STU"):
            eng.push(s, [(i, i, int(keys[i, j]))])
    eng.close()
    return time.perf_counter() - t0, pairs[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--pushes", type=int, default=6_000)
    ap.add_argument("--out", default="benchmarks/results/limit_overhead.json")
    args = ap.parse_args()
    free_s, free_out, (data, _) = group_by(args.events, None)
    limited_s, limited_out, (_, st) = group_by(args.events, GENEROUS)
    assert free_out.equals(limited_out), "the limited run's answer differs"
    assert st.shed == 0
    duck_s, duck = duckdb_group_by(data)
    assert final_relation(free_out) == duck, "the engine's final relation differs from DuckDB's"
    rows: dict[str, Any] = {
        "group-by": {
            "events": args.events,
            "no_limit_ev_s": round(args.events / free_s),
            "limit_ev_s": round(args.events / limited_s),
            "limit_over_no_limit": round(free_s / limited_s, 3),
            "duckdb_final_relation_ev_s": round(args.events / duck_s),
            "peak_memory": st.peak_memory,
            "peak_memory_in_runs": st.peak_memory_in_runs,
        }
    }
    print(f"group-by: {rows['group-by']}")
    free_p, free_pairs = one_row_pushes(args.pushes, None)
    lim_p, lim_pairs = one_row_pushes(args.pushes, GENEROUS)
    assert free_pairs == lim_pairs, (free_pairs, lim_pairs)
    n = 3 * args.pushes
    rows["one-row pushes"] = {
        "pushes": n,
        "no_limit_pushes_s": round(n / free_p),
        "limit_pushes_s": round(n / lim_p),
        "limit_over_no_limit": round(free_p / lim_p, 3),
        "pairs": free_pairs,
    }
    print(f"one-row pushes: {rows['one-row pushes']}")
    write_results(args.out, "limit_overhead", **rows)


if __name__ == "__main__":
    main()
