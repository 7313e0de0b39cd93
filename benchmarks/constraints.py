"""k-constraints (STREAM §4.1, design 023) on and off, same data, same run.

STREAM §4.1's example: Orders (one per millisecond) joined with Fulfillments (1 to 5 per
order, each 0 to 5 ms after it), ``Istream(select O.oid, F.qty from O, F where O.oid = F.oid)``
over ``[Range Unbounded]`` — 1,000,000 events in all by default, pushed as typed Arrow batches
of 10,000 per stream with a heartbeat after each.  Without constraints both join synopses hold
every element; declared ``ORDERED BY oid`` (Orders) and ``ORDERED BY oid WITHIN k``
(Fulfillments, k the smallest that holds, computed from the data), the join keeps what can
still pair.  A fourth run declares ``PUNCTUATED BY oid`` on Fulfillments instead and, after each
batch, punctuates every oid whose fulfillments are all in (``upto`` the batch's last order minus
the 5 ms they may lag): no adherence parameter to know in advance, the same forgetting.  A fifth
declares STREAM §4.1's referential integrity instead — ``UNIQUE BY oid`` on Orders and
``FOREIGN KEY (oid) REFERENCES O(oid) WITHIN 0`` on Fulfillments (each order comes before its
fulfillments): the join keeps no fulfillment, but every order (nothing says an order is done).
Without constraints the default plan is a shared window join; a third run
turns it off (``shared_join="off"``: the same binary join as with constraints), so the two effects
— the plan and the forgetting — read apart.  Every run's answer is checked equal to DuckDB's hash
join of the same tables (the whole answer at once, 1 thread), timed in the same run as the
baseline.  Reported: the best of three runs each, and the peak state (the join's synopses, what
it tracks, and what the sources keep to check the constraints).

    .venv/bin/python benchmarks/constraints.py [--events N]

Writes `benchmarks/results/constraints.json`.
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

QUERY = "Istream(select O.oid, F.qty from O, F where O.oid = F.oid)"


def data(events: int, seed: int = 1) -> tuple[pa.Table, pa.Table]:
    rng = np.random.default_rng(seed)
    pieces = rng.integers(1, 6, events)  # 1 order : 3 fulfillments on average
    n = int(np.searchsorted(np.arange(1, events + 1) + np.cumsum(pieces), events)) + 1  # orders: ≥ events in all
    pieces = pieces[:n]
    oid = np.arange(n, dtype=np.int64)
    f_oid = np.repeat(oid, pieces)
    f_ts = f_oid + rng.integers(0, 6, len(f_oid))
    order = np.argsort(f_ts, kind="stable")
    orders = pa.table({"ts": oid, "oid": oid, "x": np.zeros(n, np.int64)})
    fills = pa.table({"ts": f_ts[order], "oid": f_oid[order], "qty": rng.integers(1, 10, len(f_oid))[order]})
    return orders, fills


def smallest_k(v: np.ndarray) -> int:
    """The least k with ``ORDERED BY … WITHIN k`` true of ``v``: for each element, how far back
    the first larger value is (prefix maxima are sorted, so a binary search finds it).
    """
    pm = np.maximum.accumulate(v)
    first = np.searchsorted(pm, v, side="right")
    return int(np.max(np.where(first < np.arange(len(v)), np.arange(len(v)) - first, 0)))


LAG = 5  # ms a fulfillment may follow its order (``data``)


def run(
    orders: pa.Table, fills: pa.Table, ddl: str, shared_join: str | None, punctuate: bool = False, batch: int = 10_000
) -> dict[str, Any]:
    eng = EmbeddedEngine(time_unit="millisecond", start=0, shared_join=shared_join)
    eng.execute(ddl)
    q = eng.register_query(QUERY)
    peak = 0
    t0 = time.perf_counter()
    end = int(max(orders.column("ts")[-1].as_py(), fills.column("ts")[-1].as_py()))
    fts = fills.column("ts").to_numpy()
    lo_f = 0
    for i in range(0, orders.num_rows, batch):
        o = orders.slice(i, batch)
        upto = int(o.column("ts")[-1].as_py())
        hi_f = int(np.searchsorted(fts, upto, side="right"))
        eng.push("O", o)
        eng.push("F", fills.slice(lo_f, hi_f - lo_f))
        lo_f = hi_f
        eng.heartbeat(upto)
        if punctuate and upto >= LAG:
            eng.punctuate("F", "oid", upto=upto - LAG, ts=upto)
        eng.run()
        # the join's synopses and what it tracks, and what the sources keep to check the constraints
        state = sum(u.state_bytes() for u in eng.operators if u.stateful)
        kept = sum(s.checker.nbytes() + s.punctuations.nbytes() for s in eng.sources.values())
        peak = max(peak, state + kept)
    eng.push("F", fills.slice(lo_f))
    eng.close(end)
    dt = time.perf_counter() - t0
    joins = [u for u in eng.operators if u.kind in ("Join", "SharedWindowJoin")]
    got = sorted(e.row for e in q.results())
    assert not eng.rejected(), eng.rejected()[:3]
    events = orders.num_rows + fills.num_rows
    return {"answer": got, "seconds": round(dt, 3), "events_per_s": round(events / dt), "output": len(got),
            "peak_state_bytes": peak, "join": joins[0].kind}  # fmt: skip


def duckdb_join(orders: pa.Table, fills: pa.Table) -> tuple[list[tuple[int, int]], float]:
    con = duckdb.connect()
    con.execute("SET threads TO 1")
    con.register("o", orders)
    con.register("f", fills)
    t0 = time.perf_counter()
    t = con.execute("select o.oid, f.qty from o join f on o.oid = f.oid").to_arrow_table()
    dt = time.perf_counter() - t0  # (the answer as Arrow; made Python tuples to compare, untimed)
    return sorted(zip(t.column(0).to_pylist(), t.column(1).to_pylist(), strict=True)), dt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--out", default="benchmarks/results/constraints.json")
    args = ap.parse_args()
    orders, fills = data(args.events)
    k = smallest_k(fills.column("oid").to_numpy())
    plain = "register stream O (oid integer, x integer); register stream F (oid integer, qty integer)"
    declared = (
        "register stream O (oid integer, x integer) ordered by oid; "
        f"register stream F (oid integer, qty integer) ordered by oid within {k}"
    )
    base, base_s = duckdb_join(orders, fills)
    base_s = min(base_s, *(duckdb_join(orders, fills)[1] for _ in range(2)))
    out: dict[str, Any] = {"events": orders.num_rows + fills.num_rows, "k": k, "duckdb_seconds": round(base_s, 3)}
    # without constraints the default plan is a shared window join; "own join" separates the two
    # effects (the plan, the forgetting)
    punctuated = (
        "register stream O (oid integer, x integer) ordered by oid; "
        "register stream F (oid integer, qty integer) punctuated by oid"
    )
    references = (
        "register stream O (oid integer, x integer) unique by oid; "
        "register stream F (oid integer, qty integer) foreign key (oid) references O(oid) within 0"
    )
    runs = (
        ("without", plain, None, False),
        ("without, own join", plain, "off", False),
        ("with", declared, None, False),
        ("punctuated", punctuated, None, True),
        ("references", references, None, False),
    )
    for name, ddl, shared, punct in runs:
        best: dict[str, Any] | None = None
        for _ in range(3):
            r = run(orders, fills, ddl, shared, punct)
            if best is None or r["seconds"] < best["seconds"]:
                best = r
        assert best is not None
        assert best.pop("answer") == base, f"{name} constraints: answer differs from DuckDB's"
        best["vs_duckdb"] = round(base_s / best["seconds"], 3)
        out[name] = best
        print(f"{name:>17} constraints: {best}", flush=True)
    out["state_ratio"] = round(
        out["without, own join"]["peak_state_bytes"] / max(1, out["with"]["peak_state_bytes"]), 1
    )
    out["speedup_same_plan"] = round(out["without, own join"]["seconds"] / out["with"]["seconds"], 2)
    out["state_ratio_punctuated"] = round(
        out["without, own join"]["peak_state_bytes"] / max(1, out["punctuated"]["peak_state_bytes"]), 1
    )
    out["state_ratio_references"] = round(
        out["without, own join"]["peak_state_bytes"] / max(1, out["references"]["peak_state_bytes"]), 1
    )
    print(f"DuckDB {base_s:.3f} s; k = {k}; join state {out['state_ratio']}x smaller with constraints")
    write_results(args.out, "constraints", query=QUERY, batch=10_000, **out)


if __name__ == "__main__":
    main()
