"""Which function runs each named experiment of ``sluice experiment`` (the CLI's dispatch)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

ON_ENGINE = ["chain-on-engine", "jiang-on-engine"]  # the scheduling experiments run through the engine


def known() -> list[str]:
    from sluice.experiments import shared_joins
    from sluice.experiments.scheduling import EXPERIMENTS

    return EXPERIMENTS + ON_ENGINE + shared_joins.EXPERIMENTS + ["overload", "optimizer"]


def run_one(n: str, args: argparse.Namespace, say: Any) -> tuple[dict[str, Any], Any]:
    """Run experiment ``n`` with the CLI's options; returns its summary and what to print of it."""
    from sluice.experiments import shared_joins

    out = Path(args.out)
    if n == "optimizer":
        from sluice.experiments import optimizer

        summary = optimizer.run(args.out, quick=args.quick, seed=args.seed, say=say)
    elif n == "overload":
        from sluice.experiments import overload

        summary = overload.run(args.out, quick=args.quick, seed=args.seed)
    elif n in shared_joins.EXPERIMENTS:
        summary = shared_joins.run(n, args.out, quick=args.quick, clock=args.clock, seed=args.seed)
    elif n == "chain-on-engine":
        from sluice.experiments import on_engine

        summary = on_engine.run(out, args.slots or (300 if args.quick else 3000), args.seed)
    elif n == "jiang-on-engine":
        from sluice.experiments import jiang_engine

        summary = jiang_engine.run(out, args.slots or (400 if args.quick else 1200), args.seed)
    else:
        from sluice.experiments.scheduling import SEEDS, run

        summary = run(n, args.out, args.slots, args.seed, seeds=args.seeds or SEEDS)
        return summary, {c["claim"]: c["agrees"] for c in summary.get("agreement", [])} or summary
    return summary, {c["claim"]: c["agrees"] for c in summary["agreement"]}
