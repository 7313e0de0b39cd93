"""The scheduling papers' experiments on the virtual-time simulator.

Chain §6 (queue size over time for Chain, FIFO, Greedy, round-robin; a Pareto ON/OFF stream and
the DEC-PKT trace): ``chain-two-ops``, ``chain-four-ops``, ``chain-stored-join``,
``chain-window-join``, ``chain-multi-query``.  Jiang §5 (tuple latency, throughput, memory over time
for path capacity, simplified segment, Chain, threshold; 64-flow ON/OFF superpositions):
``jiang-compare``.  ``chain-lp-excess``: Chain's queue memory against the optimal-memory LP.

The Chain paper's text lost most digits; its progress charts are rebuilt here from its prose
(e.g. "a fast and highly selective operator between two slow ones") and each is listed in the
output JSON.  Arrival rates are set for a mean utilisation of 70% (Chain) and 90% (Jiang).
"""

from __future__ import annotations

import csv
import json
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path as FsPath
from typing import Any

from sluice.scheduling.bound import lp_bound
from sluice.scheduling.model import Op, Path
from sluice.scheduling.simulator import SimResult, simulate
from sluice.scheduling.strategies import join_op, make
from sluice.workloads.arrivals import onoff_superposition, poisson_pareto_flows, trace_counts

UTILISATION = 0.7
JIANG_UTILISATION = 0.9  # Jiang §5 reports the high-load phases, where the strategies part ways


def _path_time(p: Path) -> float:
    return p.chart()[-1][0]


class Progress:
    def __init__(self, total: int, label: str, stream: Any = sys.stderr) -> None:
        self.total, self.label, self.n, self.stream = total, label, 0, stream
        self.t0 = time.perf_counter()

    def step(self, what: str = "") -> None:
        self.n += 1
        width = 30
        done = int(width * self.n / self.total)
        secs = time.perf_counter() - self.t0
        self.stream.write(
            f"\r{self.label} [{'#' * done}{'.' * (width - done)}] {self.n}/{self.total} {secs:5.1f}s {what:<28}"
        )
        if self.n == self.total:
            self.stream.write("\n")
        self.stream.flush()


# -- the Chain paper's queries (§6), as operator paths --------------------------------------
def two_ops() -> list[Path]:
    return [Path("q", (Op("fast-selective", 1.0, 0.2), Op("slow", 5.0, 1.0)))]


def four_ops() -> list[Path]:
    return [Path("q", (Op("o1", 1.0, 0.9), Op("o2", 4.0, 0.9), Op("fast-selective", 0.5, 0.1), Op("o4", 8.0, 1.0)))]


def stored_join() -> list[Path]:
    return [Path("q", (Op("o1", 1.0, 0.5), Op("join-R", 2.0, 2.0), Op("fast-selective", 0.5, 0.1), Op("o4", 4.0, 1.0)))]


def window_join() -> list[Path]:
    j_r = join_op("join@R", 1.0, 1.0, 1.5, 1.5, 2.0, 2.0, partner="join@S")
    j_s = join_op("join@S", 1.0, 1.0, 1.5, 1.5, 2.0, 2.0, partner="join@R")
    tail = (Op("sigma2", 0.5, 0.05), Op("sigma3", 2.0, 1.0))
    return [
        Path("R", (Op("sigma1", 1.0, 0.9), j_r) + tuple(Op(f"{o.name}@R", o.cost, o.sel) for o in tail)),
        Path("S", (j_s,) + tuple(Op(f"{o.name}@S", o.cost, o.sel) for o in tail)),
    ]


def multi_query() -> list[Path]:
    a = window_join()
    b = [Path("q2", four_ops()[0].ops)]
    c = [Path("q3", tuple(Op(f"q3.{o.name}", o.cost, o.sel) for o in two_ops()[0].ops))]
    return a + b + c


CHAIN_EXPERIMENTS: dict[str, Callable[[], list[Path]]] = {
    "chain-two-ops": two_ops,
    "chain-four-ops": four_ops,
    "chain-stored-join": stored_join,
    "chain-window-join": window_join,
    "chain-multi-query": multi_query,
}
CHAIN_STRATEGIES = ["chain", "fifo", "greedy", "round-robin"]


def _arrivals(paths: Sequence[Path], slots: int, source: str, seed: int) -> dict[str, list[float]]:
    load_per_path = UTILISATION / len(paths)
    out = {}
    for k, p in enumerate(paths):
        rate = load_per_path / _path_time(p)
        if source == "synthetic":
            out[p.name] = poisson_pareto_flows(slots, rate, seed=seed + k)
        else:
            out[p.name] = trace_counts(slots, rate) if k == 0 else trace_counts(slots, rate, speedup=1.0 + 0.37 * k)
    return out


def run_chain_experiment(
    name: str, out: FsPath, slots: int = 2000, seed: int = 1, progress: bool = True
) -> dict[str, Any]:
    paths = CHAIN_EXPERIMENTS[name]()
    runs: dict[str, SimResult] = {}
    bar = Progress(2 * len(CHAIN_STRATEGIES), name) if progress else None
    for source in ("synthetic", "dec-pkt"):
        arrivals = _arrivals(paths, slots, source, seed)
        for s in CHAIN_STRATEGIES:
            runs[f"{source}/{s}"] = simulate(paths, arrivals, make(s), slots)
            if bar:
                bar.step(f"{source}/{s}")
    return _write(name, out, paths, runs, slots)


def _write(name: str, out: FsPath, paths: Sequence[Path], runs: dict[str, SimResult], slots: int) -> dict[str, Any]:
    out.mkdir(parents=True, exist_ok=True)
    keys = list(runs)
    with (out / f"{name}.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["time"] + [f"{k}/memory" for k in keys] + [f"{k}/output" for k in keys])
        for t in range(slots):
            w.writerow([t] + [round(runs[k].memory[t], 6) for k in keys] + [round(runs[k].output[t], 6) for k in keys])
    summary: dict[str, Any] = {
        "experiment": name,
        "slots": slots,
        "paths": [{"name": p.name, "ops": [[o.name, o.cost, o.sel] for o in p.ops]} for p in paths],
        "peak_memory": {k: round(r.peak, 4) for k, r in runs.items()},
        "mean_latency": {k: round(r.mean_latency(), 4) for k, r in runs.items()},
    }
    for source in sorted({k.split("/")[0] for k in keys}):
        base = runs.get(f"{source}/chain")
        if base is not None and base.peak > 0:
            summary.setdefault("peak_ratio_to_chain", {})[source] = {
                k.split("/")[1]: round(r.peak / base.peak, 3) for k, r in runs.items() if k.startswith(source + "/")
            }
    (out / f"{name}.json").write_text(json.dumps(summary, indent=2) + "\n")
    _plot(name, out, runs)
    return summary


def _plot(name: str, out: FsPath, runs: dict[str, SimResult], metric: str = "memory") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sources = sorted({k.split("/")[0] for k in runs})
    fig, axes = plt.subplots(len(sources), 1, figsize=(9, 3.2 * len(sources)), squeeze=False)
    for ax, source in zip(axes[:, 0], sources, strict=True):
        for k, r in runs.items():
            if k.startswith(source + "/"):
                ax.plot(getattr(r, metric), label=k.split("/")[1], linewidth=0.9)
        ax.set_title(f"{name} — {source}")
        ax.set_xlabel("time (slots)")
        ax.set_ylabel("total queue size (tuples)")
        ax.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    fig.savefig(out / f"{name}.png", dpi=110)
    plt.close(fig)


# -- Jiang §5 -------------------------------------------------------------------------------
def jiang_paths(seed: int = 7, queries: int = 16, streams: int = 5) -> tuple[list[Path], list[int]]:
    """``queries`` select/project/join-like paths of 3–9 operators over ``streams`` streams: leaf
    operators fast and selective, the rest slower (the shape Jiang §3.3 describes).
    """
    import numpy as np

    rng = np.random.default_rng(seed)
    paths, stream_of = [], []
    for q in range(queries):
        n = int(rng.integers(3, 10))
        ops = [Op(f"q{q}.o0", float(rng.uniform(0.2, 0.5)), float(rng.uniform(0.1, 0.5)))]
        for i in range(1, n):
            sel = float(rng.uniform(1.0, 1.6)) if rng.random() < 0.1 else float(rng.uniform(0.3, 1.0))
            ops.append(Op(f"q{q}.o{i}", float(rng.uniform(0.5, 3.0)), sel))
        paths.append(Path(f"q{q}", tuple(ops)))
        stream_of.append(int(rng.integers(0, streams)))
    return paths, stream_of


def run_jiang(out: FsPath, slots: int = 3000, seed: int = 1, flows: int = 64, progress: bool = True) -> dict[str, Any]:
    paths, stream_of = jiang_paths()
    streams = max(stream_of) + 1
    share = [stream_of.count(s) for s in range(streams)]
    # stream s feeds share[s] paths; the utilisation is split evenly over the paths
    arrivals = {}
    for k, p in enumerate(paths):
        base = onoff_superposition(slots, flows, 1.0, seed=seed + stream_of[k])
        rate = JIANG_UTILISATION / len(paths) / _path_time(p)
        arrivals[p.name] = [x * rate for x in base]
    pc = simulate(paths, arrivals, make("path-capacity"), slots)
    limit = 0.6 * pc.peak
    strategies = {
        "path-capacity": make("path-capacity"),
        "simplified-segment": make("simplified-segment"),
        "chain": make("chain"),
        "threshold": make("threshold", memory=limit),
    }
    bar = Progress(len(strategies), "jiang-compare") if progress else None
    runs = {}
    for name, s in strategies.items():
        runs[f"onoff/{name}"] = simulate(paths, arrivals, s, slots)
        if bar:
            bar.step(name)
    summary = _write("jiang-compare", out, paths, runs, slots)
    summary["threshold_memory_limit"] = round(limit, 3)
    summary["streams"] = {"count": streams, "paths_per_stream": share, "flows_per_stream": flows}
    lat = summary["mean_latency"]
    summary["latency_ratio_to_path_capacity"] = {
        k.split("/")[1]: round(v / lat["onoff/path-capacity"], 3) for k, v in lat.items()
    }
    (out / "jiang-compare.json").write_text(json.dumps(summary, indent=2) + "\n")
    _plot_jiang(out, runs)
    return summary


def _plot_jiang(out: FsPath, runs: dict[str, SimResult], window: int = 50) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, axes = plt.subplots(3, 1, figsize=(9, 9))
    for k, r in runs.items():
        label = k.split("/")[1]
        slots = len(r.memory)
        lat_sum, lat_n = np.zeros(slots // window + 1), np.zeros(slots // window + 1)
        for arr, done, _ in r.completions.values():
            b = min(int(done) // window, len(lat_sum) - 1)
            lat_sum[b] += done - arr
            lat_n[b] += 1
        axes[0].plot(np.arange(len(lat_sum)) * window, np.divide(lat_sum, np.maximum(lat_n, 1)), label=label)
        out_w = np.add.reduceat(np.array(r.output), np.arange(0, slots, window)) / window
        axes[1].plot(np.arange(len(out_w)) * window, out_w, label=label)
        axes[2].plot(r.memory, label=label, linewidth=0.8)
    for ax, title in zip(axes, ["mean tuple latency", "throughput (tuples/slot)", "total queue memory"], strict=True):
        ax.set_title(f"jiang-compare — {title}")
        ax.legend(fontsize=8)
        ax.set_xlabel("time (slots)")
    fig.tight_layout()
    fig.savefig(out / "jiang-compare.png", dpi=110)
    plt.close(fig)


def run_lp_excess(
    out: FsPath, slots: int = 120, seed: int = 1, every: int = 4, progress: bool = True
) -> dict[str, Any]:
    """Chain on the real charts vs the LP bound (Chain Thm 2: within n = paths, all s ≤ 1)."""
    results = {}
    for name in ("chain-two-ops", "chain-four-ops"):
        paths = CHAIN_EXPERIMENTS[name]()
        arrivals = _arrivals(paths, slots, "synthetic", seed)
        chain = simulate(paths, arrivals, make("chain"), slots).memory
        ts = list(range(0, slots, every))
        bar = Progress(len(ts), f"lp-excess {name}") if progress else None
        excess = []
        for t in ts:
            b = lp_bound(paths, arrivals, t)
            excess.append((t, chain[t] - b, b, chain[t]))
            if bar:
                bar.step(f"T={t}")
        worst = max(excess, key=lambda e: e[1])
        results[name] = {
            "max_excess": round(worst[1], 4),
            "at": worst[0],
            "lp": round(worst[2], 4),
            "chain": round(worst[3], 4),
            "n_paths": len(paths),
            "checked_instants": len(ts),
        }
    out.mkdir(parents=True, exist_ok=True)
    (out / "chain-lp-excess.json").write_text(json.dumps(results, indent=2) + "\n")
    return results


def run(
    name: str, out: str | FsPath = "out/experiments", slots: int | None = None, seed: int = 1, progress: bool = True
) -> dict[str, Any]:
    o = FsPath(out)
    if name in CHAIN_EXPERIMENTS:
        return run_chain_experiment(name, o, slots or 2000, seed, progress)
    if name == "jiang-compare":
        return run_jiang(o, slots or 3000, seed, progress=progress)
    if name == "chain-lp-excess":
        return run_lp_excess(o, slots or 120, seed, progress=progress)
    raise ValueError(f"unknown experiment {name!r}; known: {', '.join(EXPERIMENTS)}")


EXPERIMENTS = [*CHAIN_EXPERIMENTS, "jiang-compare", "chain-lp-excess"]
