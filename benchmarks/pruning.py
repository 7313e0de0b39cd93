"""Column pruning (issue #15 item 1; ``sluice.plan.pruning``): NEXMark queries with the rule and
without it, in one process on the same events.

Q5 and Q7 read one and three of Bid's seven columns through windows with a slide (each query's
own window: the rule prunes them also when the engine shares); Q1 has no window (nothing to
prune: a control for the run-to-run spread).  For each query the engine runs as `sluice bench`
runs it (typed Arrow batches of ``--batch`` events, a heartbeat after each, default engine
options), alternately with and without the rule, best of ``--runs``; the two answers must be
equal element by element before any figure is reported.  Memory is the engine's peak of queue
and synopsis bytes, sampled after every batch.

    .venv/bin/python benchmarks/pruning.py [--events N] [--batch B] [--runs R]

Writes `benchmarks/results/pruning.json`.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from sluice.experiments.bench import QUERY_DIR, generate, run_embedded
from sluice.experiments.results import write_results
from sluice.plan import rules
from sluice.reference.compare import diff_outputs


def _run(text: str, tables: dict[str, Any], batch: int, prune: bool) -> tuple[dict[str, Any], list[Any]]:
    saved = rules.RULES
    if not prune:
        rules.RULES = tuple(r for r in saved if r.name != rules.PRUNE_COLUMNS)
    try:
        return run_embedded(text, tables, batch)
    finally:
        rules.RULES = saved


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--batch", type=int, default=10_000)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--queries", default="q1,q5,q7")
    ap.add_argument("--out", default="benchmarks/results/pruning.json")
    args = ap.parse_args()
    tables = generate(args.events, 10_000)
    rows = []
    for name in args.queries.split(","):
        text = (QUERY_DIR / f"{name}.cql").read_text()
        best: dict[bool, dict[str, Any]] = {}
        answers: dict[bool, list[Any]] = {}
        for _ in range(args.runs):
            for prune in (False, True):
                stats, answers[prune] = _run(text, tables, args.batch, prune)
                if prune not in best or stats["events_per_s"] > best[prune]["events_per_s"]:
                    best[prune] = stats
        diffs = diff_outputs(answers[False], answers[True])
        if diffs:
            raise AssertionError(f"{name}: the answers with and without the rule differ: {diffs[:3]}")
        row = {
            "query": name,
            "events": args.events,
            "without_rule": best[False],
            "with_rule": best[True],
            "speedup": round(best[True]["events_per_s"] / best[False]["events_per_s"], 2),
            "memory_ratio": round(best[True]["peak_memory_bytes"] / max(best[False]["peak_memory_bytes"], 1), 3),
            "answers_equal": True,
        }
        rows.append(row)
        print(
            f"{name}: {best[False]['events_per_s']:,} → {best[True]['events_per_s']:,} ev/s "
            f"({row['speedup']}×); peak memory {best[False]['peak_memory_bytes']:,} → "
            f"{best[True]['peak_memory_bytes']:,} B",
            file=sys.stderr,
            flush=True,
        )
    write_results(args.out, "pruning", batch=args.batch, runs=args.runs, queries=rows)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
