"""Experiment sweeps on Spark: a grid of (strategy × workload × seed) simulator runs as Spark tasks.

Each task runs the virtual-time simulator (pure Python, no Spark inside) and returns one row of
metrics; the rows land as Parquet and a plot of peak memory per strategy and workload.

    sluice experiment sweep --on-spark --seeds 8 [--master local[2]]
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

WORKLOADS = ["chain-two-ops", "chain-four-ops", "chain-stored-join", "chain-window-join", "chain-multi-query"]
STRATEGY_NAMES = ["chain", "fifo", "greedy", "round-robin", "path-capacity", "simplified-segment"]


def run_cell(cell: tuple[str, str, int, int]) -> dict[str, Any]:
    """One simulator run: (workload, strategy, seed, slots) → metrics."""
    from sluice.experiments.scheduling import CHAIN_SETUPS, _arrivals
    from sluice.scheduling.simulator import simulate
    from sluice.scheduling.strategies import make

    workload, strategy, seed, slots = cell
    setup = CHAIN_SETUPS[workload]
    paths = setup.paths()
    arrivals = _arrivals(paths, slots, "synthetic", seed, setup.streams)
    r = simulate(paths, arrivals, make(strategy), slots)
    return {
        "workload": workload,
        "strategy": strategy,
        "seed": seed,
        "slots": slots,
        "peak_memory": r.peak,
        "mean_memory": sum(r.memory) / len(r.memory),
        "mean_latency": r.mean_latency(),
        "decisions": r.decisions,
    }


def sweep(out: str | Path, seeds: int = 4, slots: int = 2000, spark: Any = None, master: str = "local[2]") -> Any:
    """Run the grid on Spark (``spark`` or a session for ``master``); returns a pandas frame."""
    import pandas as pd

    from sluice.backends.spark.session import get_session

    spark = spark or get_session(master)
    grid = list(itertools.product(WORKLOADS, STRATEGY_NAMES, range(1, seeds + 1), [slots]))
    rows = spark.sparkContext.parallelize(grid, numSlices=min(len(grid), 64)).map(run_cell).collect()
    df = pd.DataFrame(rows).sort_values(["workload", "strategy", "seed"]).reset_index(drop=True)
    o = Path(out)
    o.mkdir(parents=True, exist_ok=True)
    spark.createDataFrame(df).write.mode("overwrite").parquet(str(o / "sweep.parquet"))
    summary = (
        df.groupby(["workload", "strategy"])["peak_memory"].mean().unstack("strategy").round(4).to_dict(orient="index")
    )
    (o / "sweep.json").write_text(json.dumps({"cells": len(grid), "mean_peak_memory": summary}, indent=2) + "\n")
    _plot(df, o / "sweep.png")
    return df


def _plot(df: Any, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    means = df.groupby(["workload", "strategy"])["peak_memory"].mean().unstack("strategy")
    ax = means.plot.bar(figsize=(10, 4.5), rot=15)
    ax.set_ylabel("mean peak queue memory (tuples)")
    ax.set_title("strategy × workload sweep (mean over seeds)")
    plt.tight_layout()
    plt.savefig(path, dpi=110)
    plt.close()
