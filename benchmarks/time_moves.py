"""Time moved at once through operators that only move it (design 026) against leaving those turns
to the strategy (``SchedulerLoop.move_time_at_once = False``, the loop before), same data, same run.

Two parts:
  overhead  1,000,000 events (millisecond timestamps, mostly distinct) alternating between two
            streams in batches of 100 with a heartbeat after each; three queries — a filter, a 1 s
            sliding count by key, a ``[Rows 10]`` join with selections — ``sharing=False``, under
            round-robin and Chain; the two loops interleaved, three runs each; wall seconds and
            decisions.  The answers of the two loops are checked equal first (on the first 100,000).
  jiang     the Jiang §5 plan on the engine (``sluice.experiments.jiang_engine``, 332 operators) on
            the virtual CPU clock over the first ``--slots`` slots (phases 1–2 of the 1,200-slot
            run), path capacity and Chain, online estimates: the engine's time-mean queue, tuple
            latency, busy and fixed work per slot and decisions, beside the model given the engine's
            measured operators (whole tuples, non-preemptive).  Four runs of ~4 minutes.

    .venv/bin/python benchmarks/time_moves.py [--events N] [--slots 600] [--skip-jiang]

Writes `benchmarks/results/time_moves.json`.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import numpy as np
import pyarrow as pa
from sluice.backends.embedded import EmbeddedEngine
from sluice.backends.embedded.loop import SchedulerLoop
from sluice.experiments.results import write_results

QUERIES = (
    "Istream(select A, B from S [Range Unbounded] where B > 50)",
    "Istream(select A, count(*) from S [Range 1 Second] group by A)",
    "select S.A, T.B from S [Rows 10], T [Rows 10] where S.A = T.A and S.B > 90 and T.B > 90",
)
BATCH = 100


def batches(events: int) -> list[pa.Table]:
    rng = np.random.default_rng(1)
    ts = np.sort(rng.integers(0, events * 3 // 2, events))
    a, b = rng.integers(0, 10, events), rng.integers(0, 100, events)
    return [
        pa.table({"ts": pa.array(ts[i : i + BATCH]), "A": pa.array(a[i : i + BATCH]), "B": pa.array(b[i : i + BATCH])})
        for i in range(0, events, BATCH)
    ]


def overhead_run(data: list[pa.Table], at_once: bool, scheduler: str, keep: bool = False) -> dict[str, Any]:
    SchedulerLoop.move_time_at_once = at_once
    try:
        eng = EmbeddedEngine(scheduler=scheduler, sharing=False)
        eng.execute("register stream S (A integer, B integer); register stream T (A integer, B integer)")
        names = [eng.register_query(q, retain=None if keep else 0).name for q in QUERIES]
        t = time.perf_counter()
        for i, b in enumerate(data):
            eng.push("S" if i % 2 else "T", b)
            eng.heartbeat(int(b.column(0)[-1].as_py()))
            eng.run()
        eng.close()
        seconds = time.perf_counter() - t
    finally:
        SchedulerLoop.move_time_at_once = True
    out: dict[str, Any] = {"seconds": round(seconds, 3), "decisions": eng.loop.steps}
    if keep:
        out["answers"] = [sorted(map(str, eng.results(n))) for n in names]
    return out


def overhead(events: int) -> dict[str, Any]:
    data = batches(events)
    head = data[: max(1, 100_000 // BATCH)]
    out: dict[str, Any] = {}
    for scheduler in ("round-robin", "chain"):
        a, b = (overhead_run(head, x, scheduler, keep=True)["answers"] for x in (False, True))
        if a != b or not all(a):
            raise SystemExit(f"{scheduler}: the two loops' answers differ (or are empty)")
        runs: dict[str, list[dict[str, Any]]] = {"before": [], "at_once": []}
        for _ in range(3):
            for key, at_once in (("before", False), ("at_once", True)):
                runs[key].append(overhead_run(data, at_once, scheduler))
        out[scheduler] = runs | {
            "best_seconds": {k: min(r["seconds"] for r in v) for k, v in runs.items()},
            "events_per_s": {k: round(events / min(r["seconds"] for r in v)) for k, v in runs.items()},
        }
        print(scheduler, out[scheduler]["best_seconds"], flush=True)
    return out


def jiang(slots: int) -> dict[str, Any]:
    from sluice.experiments import jiang as jw
    from sluice.experiments import jiang_engine as je
    from sluice.experiments.on_engine import BUDGET, calibrate, play
    from sluice.scheduling.simulator import simulate
    from sluice.scheduling.strategies import make

    per_round = calibrate()
    w = jw.queries()
    arr, _ = jw.arrivals(w, 1200, 1)
    per_stream: dict[str, list[int]] = {}
    for p, sid in zip(w.paths, w.stream_of, strict=True):
        per_stream.setdefault(f"S{sid}", [int(x) for x in arr[p.name]])
    per_stream, _ = je.realised_loads(w, per_stream, 1200, 1)
    per_stream = {k: v[:slots] for k, v in per_stream.items()}
    work_round = per_round / 0.876  # the work scale the 2026-11-27 calibration gave (jiang-on-engine.json)
    out: dict[str, Any] = {}
    for strategy in ("path-capacity", "chain"):
        for key, at_once in (("before", False), ("at_once", True)):
            SchedulerLoop.move_time_at_once = at_once
            try:
                e = play(je.builder(w, je.SLOT), per_stream, strategy, work_round, 1, None, BUDGET, je.WIDTH,
                         je.SLOT, je._leaves_pass, je.WARM)  # fmt: skip
            finally:
                SchedulerLoop.move_time_at_once = True
            by_name = {k.lower(): v for k, v in per_stream.items()}
            model_arr = {p.name: by_name[st.lower()] for p, st in zip(e["paths"], e["streams"], strict=True)}
            sim = simulate(e["paths"], model_arr, make(strategy), slots, preemptive=False, whole=True)
            row = {
                "engine_mean_queue": round(statistics.fmean(e["memory"]), 3),
                "model_mean_queue": round(statistics.fmean(sim.memory), 3),
                "engine_mean_latency": round(statistics.fmean(e["latency"]), 3),
                "busy_per_slot": round(e["busy"] / slots, 3),
                "fixed_work_per_slot": round(e["fixed_work_per_slot"], 3),
                "decisions": e["turns"],
            }
            out.setdefault(strategy, {})[key] = row
            print(strategy, key, row, flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--slots", type=int, default=600)
    ap.add_argument("--skip-jiang", action="store_true")
    ap.add_argument("--out", default="benchmarks/results/time_moves.json")
    args = ap.parse_args()
    results: dict[str, Any] = {"overhead": overhead(args.events)}
    if not args.skip_jiang:
        results["jiang"] = jiang(args.slots)
    write_results(args.out, "time_moves", events=args.events, slots=args.slots, **results)


if __name__ == "__main__":
    main()
