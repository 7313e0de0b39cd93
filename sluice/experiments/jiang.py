"""Jiang & Chakravarthy §5 on the virtual-time simulator: 16 continuous queries, 116 operators over
5 self-similar streams, path capacity against simplified segment, Chain and threshold.

The workload as §5.1 describes it: select, project and symmetric-hash-join queries, "from the
simplest select queries to the complicated queries that have 4 join operators over 5 data
streams"; selectivities spread over (0, 1), a few joins above 1; leaf operators fast and
selective, the rest slower (§3.3's observation (b)).  A join is two semi-joins (§2.1), so a query
over k streams is k operator paths — from each stream's leaf through the joins it reaches to the
root — and the operators above a join appear on each of them (counted once in the 116).  Each
stream is a superposition of 64 ON/OFF flows (Pareto ON α 1.4, OFF α 1.2) with its own mean rate;
the load rises in phases (§5.2: "in each phase, we intentionally increased the average input
rates").  Reported per phase: mean tuple latency, queue memory, and output burstiness (the highest
output rate over windows of ``WINDOW`` slots against the mean: §5.2 reports Chain's near 5×).
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path as FsPath
from typing import Any

import numpy as np

from sluice.experiments.results import claim
from sluice.scheduling.model import Op, Path
from sluice.scheduling.simulator import SimResult, simulate
from sluice.scheduling.strategies import make
from sluice.workloads.arrivals import onoff_superposition

STREAMS = 5
QUERIES = 16
OPERATORS = 116
FLOWS = 64
STREAM_WEIGHTS = (1.0, 1.6, 0.7, 1.3, 0.9)  # "5 such self-similar input data streams with different mean input rates"
PHASES = (0.6, 0.75, 0.9, 0.97)  # mean utilisation of each phase, rising
TUPLE_WORK = 5.0  # time units all paths spend on one tuple of each stream (weighted by the stream's rate)
THRESHOLD_SHARE = 0.6  # threshold's M: this share of path capacity's peak, a memory it must stay well under
WINDOW = 50  # slots per output-rate window (Fig. 3 plots the output per second)
# streams per query: 6 single-stream queries, the rest joins, one over all 5 streams (4 joins)
SHAPE = (1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 4, 4, 5)


@dataclass(frozen=True)
class Workload:
    paths: list[Path]
    stream_of: list[int]  # the stream feeding each path
    operators: int  # distinct operators (a join and the operators above it counted once)
    joins: int


def queries(seed: int = 7) -> Workload:
    """The 16 queries as operator paths (deterministic in ``seed``)."""
    rng = np.random.default_rng(seed)
    plans: list[tuple[int, list[int], dict[int, int], list[bool]]] = []
    for q, k in enumerate(SHAPE):
        streams = [int(s) for s in rng.choice(STREAMS, size=k, replace=False)]
        leaves = {s: int(rng.integers(1, 4)) for s in streams}
        post = [bool(rng.random() < 0.5) for _ in range(k - 1)]  # a selection above each join?
        plans.append((q, streams, leaves, post))
    # leaves, joins, selections above joins, a projection at the root
    total = sum(sum(lv.values()) + len(ss) - 1 + sum(ps) + 1 for _, ss, lv, ps in plans)
    # trim or pad leaf operators until the plan set has exactly OPERATORS operators
    while total != OPERATORS:
        q, streams, leaves, _ = plans[int(rng.integers(len(plans)))]
        s = streams[int(rng.integers(len(streams)))]
        if total > OPERATORS and leaves[s] > 1:
            leaves[s] -= 1
            total -= 1
        elif total < OPERATORS and leaves[s] < 4:
            leaves[s] += 1
            total += 1
    paths, stream_of = [], []
    joins = 0
    for q, streams, leaves, post in plans:
        # the operators above the leaves, shared by the query's paths: (name, cost, sel) per join side
        upper: list[list[tuple[str, float, float]]] = []
        for j in range(len(streams) - 1):
            joins += 1
            sides: dict[str, tuple[str, float, float]] = {}
            for lr in ("l", "r"):
                sel = float(rng.uniform(1.0, 2.0)) if rng.random() < 0.1 else float(rng.uniform(0.2, 1.0))
                sides[lr] = (f"q{q}.join{j}", float(rng.uniform(1.0, 3.0)), sel)
            after = [(f"q{q}.select{j}", float(rng.uniform(0.5, 2.0)), float(rng.uniform(0.2, 1.0)))] if post[j] else []
            upper.append([sides["l"], sides["r"], *after])
        final = (f"q{q}.project", 0.5, 1.0)
        for i, s in enumerate(streams):
            ops = []
            for n in range(leaves[s]):
                sel = 1.0 if n == leaves[s] - 1 and n > 0 else float(rng.uniform(0.05, 0.9))  # a project last
                ops.append(Op(f"q{q}.s{s}.o{n}", float(rng.uniform(0.1, 0.5)), sel))
            first_join = max(0, i - 1)  # streams 0 and 1 meet at join 0, stream i at join i − 1
            for j in range(first_join, len(streams) - 1):
                side = upper[j][1] if (j == i - 1) else upper[j][0]  # the right input of join i − 1
                ops.append(Op(f"{side[0]}@s{s}", side[1], side[2]))
                ops.extend(Op(f"{name}@s{s}", c, sl) for name, c, sl in upper[j][2:])
            ops.append(Op(f"{final[0]}@s{s}", final[1], final[2]))
            paths.append(Path(f"q{q}.s{s}", tuple(ops)))
            stream_of.append(s)
    # time unit: a tuple of each stream, weighted by its rate, costs TUPLE_WORK time units in all
    scale = sum(
        wt * sum(p.chart()[-1][0] for p, s in zip(paths, stream_of, strict=True) if s == k)
        for k, wt in enumerate(STREAM_WEIGHTS)
    )
    scale /= TUPLE_WORK
    paths = [Path(p.name, tuple(Op(o.name, o.cost / scale, o.sel) for o in p.ops)) for p in paths]
    return Workload(paths, stream_of, total, joins)


def stream_work(w: Workload) -> list[float]:
    """Per stream: the time units all its paths spend on one of its tuples."""
    return [sum(p.chart()[-1][0] for p, s in zip(w.paths, w.stream_of, strict=True) if s == k) for k in range(STREAMS)]


def arrivals(w: Workload, slots: int, seed: int) -> tuple[dict[str, list[float]], list[float]]:
    """Per path, the whole-tuple arrivals of its stream; the load of each phase (a quarter of
    ``slots``) set by thinning every stream's flows.  Returns the arrivals and each slot's mean
    utilisation.
    """
    work = stream_work(w)
    # utilisation = Σ_s rate_s · work_s with rate_s = c · weight_s
    per_unit_c = sum(wt * wk for wt, wk in zip(STREAM_WEIGHTS, work, strict=True))
    phase_len = slots // len(PHASES)
    if phase_len < WINDOW:
        raise ValueError(f"jiang-compare needs at least {WINDOW * len(PHASES)} slots")
    load = [PHASES[min(t // phase_len, len(PHASES) - 1)] for t in range(slots)]
    rng = np.random.default_rng(seed)
    per_stream = []
    for k in range(STREAMS):
        raw = np.array(onoff_superposition(slots, FLOWS, None, seed=seed * 10 + k), dtype=np.int64)
        # thin the flows' whole tuples to the phase's rate: still whole tuples, still ON/OFF-shaped
        # each phase thinned by its own raw mean, so the phases' loads are the stated ones
        phase_mean = np.array([raw[(t // phase_len) * phase_len : (t // phase_len + 1) * phase_len].mean()
                               for t in range(slots)])  # fmt: skip
        keep = np.array(load) * STREAM_WEIGHTS[k] / per_unit_c / np.maximum(phase_mean, 1e-12)
        if keep.max() > 1:
            raise ValueError(f"stream {k}: {FLOWS} flows send too little for utilisation {max(load)}")
        per_stream.append(rng.binomial(raw, keep).astype(float))
    return {p.name: list(per_stream[s]) for p, s in zip(w.paths, w.stream_of, strict=True)}, load


def phase_metrics(r: SimResult, slots: int) -> list[dict[str, float]]:
    done = list(r.completions.values())
    return phase_figures([d for _, d, _ in done], [d - a for a, d, _ in done], r.memory, r.output, slots)


def phase_figures(
    delivered: Sequence[float], latency: Sequence[float], memory: Sequence[float], output: Sequence[float], slots: int
) -> list[dict[str, float]]:
    """Per load phase: mean latency of what left in it, mean and peak queue, and the output rate's
    burstiness over windows of ``WINDOW`` slots (``output``: what left in each slot).
    """
    phase_len = slots // len(PHASES)
    out = []
    for k in range(len(PHASES)):
        a, b = k * phase_len, (k + 1) * phase_len
        lats = [lt for lt, d in zip(latency, delivered, strict=True) if a <= d < b]
        rates = np.add.reduceat(np.array(output[a:b], dtype=float), np.arange(0, b - a, WINDOW)) / WINDOW
        mean_rate = float(rates.mean())
        out.append(
            {
                "utilisation": PHASES[k],
                "mean_latency": round(statistics.fmean(lats), 3) if lats else 0.0,
                "mean_memory": round(float(np.mean(memory[a:b])), 3),
                "peak_memory": round(float(np.max(memory[a:b])), 3),
                "output_peak_over_mean": round(float(rates.max()) / mean_rate, 3) if mean_rate else 0.0,
                "output_cv": round(float(rates.std()) / mean_rate, 3) if mean_rate else 0.0,
            }
        )
    return out


def _runs(w: Workload, arr: dict[str, list[float]], slots: int, step: Any = None) -> dict[str, SimResult]:
    """The four strategies, preemptive, as the claims are judged (threshold's M:
    ``THRESHOLD_SHARE`` of path capacity's peak); ``step(name)`` after each.
    """
    runs = {"path-capacity": simulate(w.paths, arr, make("path-capacity"), slots)}
    limit = THRESHOLD_SHARE * runs["path-capacity"].peak
    for name in ("path-capacity", "simplified-segment", "chain", "threshold"):
        if name not in runs:
            s = make(name, memory=limit) if name == "threshold" else make(name)
            runs[name] = simulate(w.paths, arr, s, slots)
        if step:
            step(name)
    return runs


def _verdicts(w: Workload, slots: int, seed: int) -> tuple[list[bool | None], float]:
    """The four claims' verdicts (``agreement``) on workload ``w`` and the arrivals of ``seed``
    (``_runs``), and the leaves' peak load (``leaf_load_peak``).
    """
    arr, _ = arrivals(w, slots, seed)
    runs = _runs(w, arr, slots)
    phases = {k: phase_metrics(r, slots) for k, r in runs.items()}
    lat = {k: r.mean_latency() for k, r in runs.items()}
    leaf = leaf_load_peak(w, arr, slots)
    return [c["agrees"] for c in agreement(phases, lat, leaf)], leaf


def robustness(slots: int, seed: int, draws: int, longer: int = 4) -> dict[str, Any]:
    """Each claim judged again on ``draws`` − 1 other draws — the workload's costs and
    selectivities (``queries``' seed) and the arrivals, each drawn again — and on the same draw
    run ``longer`` times as long.  Per claim: how many draws it holds in, and whether the long run.
    """
    held: list[list[bool | None]] = []
    leaves: list[float] = []
    failed: list[str] = []
    for k in range(1, draws):
        try:
            verdicts, leaf = _verdicts(queries(7 + k), slots, seed + k)
        except ValueError as e:  # (a draw whose flows cannot carry the phases' loads)
            failed.append(f"draw {k}: {e}")
            continue
        held.append(verdicts)
        leaves.append(leaf)
    long, _ = _verdicts(queries(), slots * longer, seed)
    out: dict[str, Any] = {
        "draws": len(held),
        "not_run": failed,
        "leaf_load_peak": leaves,
        "verdicts": held,  # (per draw, the four claims')
        "long_slots": slots * longer,
        "claims": [],
    }
    for i in range(len(long)):
        out["claims"].append({"holds_in": sum(1 for v in held if v[i]), "long_run": long[i]})
    return out


def run(out: FsPath, slots: int = 8000, seed: int = 1, progress: bool = True, seeds: int = 5) -> dict[str, Any]:
    """§5's experiment on the simulator; with ``seeds`` > 1, each claim also judged on other draws
    of the workload and arrivals, and on a run four times as long (``robustness``).
    """
    from sluice.experiments.scheduling import Progress

    w = queries()
    arr, load = arrivals(w, slots, seed)
    bar = Progress(4, "jiang-compare") if progress else None
    runs = _runs(w, arr, slots, bar.step if bar else None)
    limit = THRESHOLD_SHARE * runs["path-capacity"].peak  # (threshold's M, as ``_runs`` gave it)
    phases = {k: phase_metrics(r, slots) for k, r in runs.items()}
    leaf = leaf_load_peak(w, arr, slots)
    # the same, in whole tuples and without preemption (as an engine runs): which ranking is the mode's
    # and with each join waiting for its instant as an exact engine's does (``join_waits``)
    whole = {}
    for name in ("path-capacity", "simplified-segment", "chain"):
        r = simulate(w.paths, arr, make(name), slots, preemptive=False, whole=True)
        ordered = simulate(w.paths, arr, make(name), slots, preemptive=False, whole=True, waits=join_waits(w))
        out_lat, out_ordered = r.output_latency(), ordered.output_latency()
        whole[name] = {
            "tuple_latency_by_phase": [p["mean_latency"] for p in phase_metrics(r, slots)],
            "output_latency": None if out_lat is None else round(out_lat, 3),
            "output_latency_joins_waiting": None if out_ordered is None else round(out_ordered, 3),
        }
    summary: dict[str, Any] = {
        "experiment": "jiang-compare",
        "paper": "Jiang & Chakravarthy 2003 §5",
        "slots": slots,
        "seed": seed,
        "setup": {
            "queries": QUERIES,
            "operators": w.operators,
            "joins": w.joins,
            "paths": len(w.paths),
            "streams": STREAMS,
            "flows_per_stream": FLOWS,
            "stream_weights": STREAM_WEIGHTS,
            "phases_utilisation": PHASES,
            "threshold_memory_limit": round(limit, 3),
            "assumed": "Costs (before scaling to TUPLE_WORK) and selectivities drawn (seeded): "
            "leaves cost 0.1–0.5 and keep 0.05–0.9 (the last of "
            "several a projection, 1); join sides cost 1–3 and keep 0.2–1 (10% of them 1–2); selections above a join "
            "cost 0.5–2 and keep 0.2–1; a projection at the root (0.5, 1). Symmetric hash joins never wait for the "
            "other side (no Chain §5 blocking). Threshold's M: 0.6 × path capacity's peak.",
            "path_list": [
                {"name": p.name, "stream": s, "ops": [[o.name, round(o.cost, 3), round(o.sel, 3)] for o in p.ops]}
                for p, s in zip(w.paths, w.stream_of, strict=True)
            ],
        },
        "phases": phases,
        "mean_latency": {k: round(r.mean_latency(), 4) for k, r in runs.items()},
        "peak_memory": {k: round(r.peak, 4) for k, r in runs.items()},
    }
    lat = summary["mean_latency"]
    summary["latency_ratio_to_path_capacity"] = {k: round(v / lat["path-capacity"], 3) for k, v in lat.items()}
    summary["leaf_load_peak"] = leaf
    summary["output_latency"] = {k: round(r.output_latency() or 0.0, 3) for k, r in runs.items()}
    summary["whole_tuples"] = whole
    summary["agreement"] = agreement(phases, summary["mean_latency"], leaf, summary["output_latency"], whole)
    if seeds > 1:
        summary["robustness"] = rob = robustness(slots, seed, seeds)
        for c, r in zip(summary["agreement"], rob["claims"], strict=True):
            c["measured"] = c["measured"] | {"holds_in_other_draws": f"{r['holds_in']} of {rob['draws']}"}
            c["why"] += (
                f" Judged again on {rob['draws']} other draws (the workload's costs and selectivities and the "
                f"arrivals, each drawn again): {'agrees' if c['agrees'] else 'disagrees'} here, holds in "
                f"{r['holds_in']} of them; on this draw run {rob['long_slots']} slots, "
                + ("it holds." if r["long_run"] else "it does not hold.")
            )
        smooth = summary["agreement"][1]  # (Chain's output bursts only where its leaves alone fill the processor)
        smooth["why"] += (
            f" The leaves' peak load on those draws: {rob['leaf_load_peak']} (leaf_load_peak; a verdict per draw, "
            "in robustness)."
        )
    out.mkdir(parents=True, exist_ok=True)
    (out / "jiang-compare.json").write_text(json.dumps(summary, indent=2) + "\n")
    _csv(out, runs, load)
    _plot(out, runs)
    return summary


def join_waits(w: Workload) -> dict[str, list[str]]:
    """``simulate(waits=…)``: each copy of a join (one a path: ``q6.join0@s0``, ``q6.join0@s3``)
    waits for every operator below any copy of it, as in ``on_engine.waits_for``.
    """
    copies: dict[str, list[tuple[int, int]]] = {}
    for k, p in enumerate(w.paths):
        for i, o in enumerate(p.ops):
            if ".join" in o.name:
                copies.setdefault(o.name.split("@")[0], []).append((k, i))
    waits = {}
    for where in copies.values():
        below = sorted({w.paths[k].ops[j].name for k, i in where for j in range(i)})
        waits.update({w.paths[k].ops[i].name: below for k, i in where})
    return waits


def leaf_load_peak(w: Workload, arr: dict[str, list[float]], slots: int) -> float:
    """The highest load the leaf operators alone get over any ``WINDOW`` of the highest-load phase:
    their work for what arrived, per time unit.  Above 1, a burst keeps Chain on the leaves and
    nothing leaves the system (§5.2's "no throughput at all"); below, Chain's output never stops.
    """
    first = slots - slots // len(PHASES)
    work = np.zeros(slots - first)
    for p in w.paths:
        leaf = 0
        while leaf < len(p.ops) and "join" not in p.ops[leaf].name and "project@" not in p.ops[leaf].name:
            leaf += 1
        t_leaf = p.chart()[leaf][0]
        work += np.array(arr[p.name][first:]) * t_leaf
    per_window = np.add.reduceat(work, np.arange(0, len(work), WINDOW)) / WINDOW
    return round(float(per_window.max()), 3)


def agreement(
    phases: dict[str, list[dict[str, float]]],
    overall: dict[str, float],
    leaf: float,
    output: dict[str, float] | None = None,
    whole: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """§5.2's statements, at the highest-load phase (where the paper says the strategies part ways);
    ``output``: output tuples' mean latency per strategy, ``whole``: the whole-tuple runs (``run``).
    """
    hi = {k: v[-1] for k, v in phases.items()}
    lat = {k: v["mean_latency"] for k, v in hi.items()}
    mem = {k: v["mean_memory"] for k, v in hi.items()}
    burst = {k: v["output_peak_over_mean"] for k, v in hi.items()}
    cv = {k: v["output_cv"] for k, v in hi.items()}
    sec = "Jiang & Chakravarthy §5.2"
    return [
        claim(
            "Tuple latency: path capacity best, then simplified segment, Chain worst",
            f"{sec}, Fig. 2",
            lat["path-capacity"] <= lat["simplified-segment"] <= lat["chain"]
            and overall["path-capacity"] <= overall["simplified-segment"] <= overall["chain"],
            {"highest_load_phase": lat, "whole_run": overall, "output_tuples": output, "whole_tuples": whole},
            "Chain and simplified segment leave tuples part-way along their paths during bursts; path capacity "
            "finishes the paths that finish tuples fastest (Thm 1). Jiang's tuple latency: until an input tuple's "
            "last part leaves, dropped parts included (a fluid tuple's surviving fraction goes on to the top)."
            + (_whole_why(whole) if whole else ""),
        ),
        claim(
            "Output: path capacity and simplified segment much smoother than Chain",
            f"{sec}, Fig. 3",
            cv["path-capacity"] <= cv["chain"] and cv["simplified-segment"] <= cv["chain"],
            {"peak_over_mean": burst, "coefficient_of_variation": cv, "leaf_load_peak": leaf},
            f"Judged by the coefficient of variation of the output rate over windows of {WINDOW} slots in the "
            "highest-load phase (§5.2 also reports Chain's highest rate near 5× its average: peak_over_mean). "
            "Chain's output stops only while a "
            "burst keeps the leaf operators alone busy (then it releases the backlog together when the burst ends); "
            f"here the leaves' peak load over a window is {leaf} of the processor"
            + (
                ", so Chain's upper operators keep running and its output is no burstier than the others'."
                if leaf < 1
                else "."
            ),
        ),
        claim(
            "Memory: Chain least, simplified segment a little more, path capacity much more at high load",
            f"{sec}, Fig. 4",
            mem["chain"] <= mem["simplified-segment"] <= mem["path-capacity"],
            {"highest_load_phase_mean_memory": mem},
            "Leaves release memory fastest; path capacity runs whole paths and so leaves a burst at their start.",
        ),
        claim(
            "Threshold is a hybrid: its latency and memory lie between path capacity's and simplified segment's",
            f"{sec} (closing paragraph); §3.4",
            min(lat["path-capacity"], lat["simplified-segment"]) - 1e-9
            <= lat["threshold"]
            <= max(lat["path-capacity"], lat["simplified-segment"]) + 1e-9
            and min(mem["path-capacity"], mem["simplified-segment"]) - 1e-9
            <= mem["threshold"]
            <= max(mem["path-capacity"], mem["simplified-segment"]) + 1e-9,
            {"latency": lat, "memory": mem},
            "Threshold runs path capacity until memory nears its limit, then simplified segment until it falls.",
        ),
    ]


def _whole_why(whole: dict[str, Any]) -> str:
    """What the whole-tuple runs say of the latency ranking (an engine runs whole tuples)."""
    lat = {s: v["tuple_latency_by_phase"][1] for s, v in whole.items()}
    out = {s: v["output_latency"] for s, v in whole.items()}
    flips = lat["chain"] < lat["path-capacity"]
    keeps = out["path-capacity"] is not None and out["chain"] is not None and out["path-capacity"] < out["chain"]
    return (
        f" In whole tuples without preemption (whole_tuples, as an engine runs), phase 2: tuple latency {lat}"
        + (
            " — the other way round: a whole tuple a selective leaf drops is done there, and Chain runs the "
            "leaves first"
            if flips
            else ""
        )
        + f"; output tuples' latency over the run {out}"
        + (" — path capacity's still the lowest" if keeps else "")
        + "; with each join waiting for its instant, as an exact engine's does: "
        + str({s: v.get("output_latency_joins_waiting") for s, v in whole.items()})
        + "."
    )


def _csv(out: FsPath, runs: dict[str, SimResult], load: list[float]) -> None:
    import csv

    keys = list(runs)
    with (out / "jiang-compare.csv").open("w", newline="") as f:
        wr = csv.writer(f)
        wr.writerow(["time", "utilisation"] + [f"{k}/memory" for k in keys] + [f"{k}/output" for k in keys])
        for t in range(len(load)):
            wr.writerow(
                [t, load[t]] + [round(runs[k].memory[t], 6) for k in keys] + [round(runs[k].output[t], 6) for k in keys]
            )


def _plot(out: FsPath, runs: dict[str, SimResult]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(3, 1, figsize=(9, 9))
    for k, r in runs.items():
        slots = len(r.memory)
        lat_sum, lat_n = np.zeros(slots // WINDOW + 1), np.zeros(slots // WINDOW + 1)
        for arr, done, _ in r.completions.values():
            b = min(int(done) // WINDOW, len(lat_sum) - 1)
            lat_sum[b] += done - arr
            lat_n[b] += 1
        axes[0].plot(np.arange(len(lat_sum)) * WINDOW, np.divide(lat_sum, np.maximum(lat_n, 1)), label=k)
        out_w = np.add.reduceat(np.array(r.output), np.arange(0, slots, WINDOW)) / WINDOW
        axes[1].plot(np.arange(len(out_w)) * WINDOW, out_w, label=k, linewidth=0.9)
        axes[2].plot(r.memory, label=k, linewidth=0.8)
    for ax, title in zip(axes, ["mean tuple latency", "throughput (tuples/slot)", "total queue memory"], strict=True):
        ax.set_title(f"jiang-compare — {title} (load rises in {len(PHASES)} phases)")
        ax.legend(fontsize=8)
        ax.set_xlabel("time (slots)")
    fig.tight_layout()
    fig.savefig(out / "jiang-compare.png", dpi=110)
    plt.close(fig)
