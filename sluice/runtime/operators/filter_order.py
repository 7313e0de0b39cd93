"""The order a selection evaluates its conjuncts in, re-chosen as their costs and selectivities
drift (issue #15 item 4: an A-Greedy-style monitor — Babu, Motwani, Munagala, Nishizawa and
Widom, "Adaptive Ordering of Pipelined Stream Filters", SIGMOD 2004, the adaptive part of
STREAM's StreaMon).

A conjunction is TRUE exactly when every conjunct is, so evaluating them one after another — each
on the rows the earlier ones kept — selects the same rows in any order (exact by construction);
what the order changes is the work.  For filters whose pass rates may be correlated, the greedy
order that picks next the conjunct with the least ``cost / (1 − pass rate among the rows still
kept)`` is A-Greedy's invariant.  The *profiler* evaluates every conjunct on a few rows of each
batch (``PROFILE`` rows, evenly spread), keeping the last ``WINDOW`` profiled rows' outcomes — a
matrix of which conjunct each row passes, from which the conditional pass rates are read — and a
running average of each conjunct's cost per row (the engine's clock).  The *re-optimiser* redoes
the greedy order after every profiled batch; the *executor* (``sluice.runtime.operators.stateless.
Select``) follows it.  Changing the order loses and repeats nothing: no state depends on it.

A row that a conjunct cannot evaluate (an integer overflow: design 011) is dropped and counted by
the conjunct that meets it; a row an earlier conjunct already dropped is not evaluated again, so
the count may differ with the order (the answer does not).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import numpy as np
import pyarrow as pa
from sluice.runtime.operators.base import Part
from sluice.runtime.vexpr import evaluate_rows, truth_mask

PROFILE = 32  # rows of a profiled batch evaluated against every conjunct
WINDOW = 512  # profiled rows remembered (the profile window)
SMOOTHING = 0.3  # weight of the newest measured cost
PERIOD = 8  # one batch in PERIOD is profiled; another is evaluated the way not chosen (measured)


class FilterOrder(Enum):
    """How a selection of several conjuncts orders them (``sluice.runtime.operators.stateless``)."""

    WRITTEN = "written"  # one predicate, every conjunct on every row (Arrow's AND)
    STATIC = "static"  # the greedy order of the first profiled batch, kept
    ADAPTIVE = "adaptive"  # the greedy order, redone after every profiled batch


@dataclass
class Monitor(Part):
    """The profile of a selection's conjuncts and the order it implies."""

    n: int
    adaptive: bool = True
    order: list[int] = field(default_factory=list)
    outcomes: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), bool))
    costs: np.ndarray = field(default_factory=lambda: np.zeros(0))
    profiled: int = 0  # batches profiled
    batches: int = 0  # batches seen
    # seconds per row of evaluating the conjuncts one after another, and all at once (NaN: not measured)
    per_row: np.ndarray = field(default_factory=lambda: np.full(2, np.nan))
    STATE = ("order", "outcomes", "costs", "profiled", "batches", "per_row")

    def __post_init__(self) -> None:
        self.order = list(range(self.n))
        self.outcomes = np.zeros((0, self.n), bool)
        self.costs = np.zeros(self.n)

    def next_batch(self) -> tuple[bool, bool]:
        """For the batch about to be evaluated: (profile it, evaluate the conjuncts one after
        another rather than at once).  Adaptive: the way measured cheaper per row, the other one
        batch in ``PERIOD`` (so both stay measured: cheap conjuncts cost less at once, in Arrow,
        than filtering the batch between them); static: one after another, in the first order.
        """
        k = self.batches
        self.batches += 1
        if not self.adaptive:
            return self.profiled == 0, True
        profile = k % PERIOD == 0
        ordered, whole = self.per_row
        if np.isnan(ordered) or np.isnan(whole):
            return profile, bool(np.isnan(ordered))
        best = bool(ordered <= whole)
        return profile, (not best) if k % PERIOD == PERIOD // 2 else best

    def timed(self, ordered: bool, seconds: float, rows: int) -> None:
        """A batch of ``rows`` took ``seconds`` evaluated one after another (or at once)."""
        if rows:
            i, x = (0 if ordered else 1), seconds / rows
            self.per_row[i] = x if np.isnan(self.per_row[i]) else SMOOTHING * x + (1 - SMOOTHING) * self.per_row[i]

    def observe(self, b: pa.Table, fns: list[Any], exprs: list[Any], clock: Any) -> None:
        """Profile a few rows of ``b`` against every conjunct, then re-choose the order."""
        if not b.num_rows:
            return
        step = max(1, b.num_rows // PROFILE)
        sample = b.take(pa.array(np.arange(0, b.num_rows, step)[:PROFILE]))
        rows = np.ones((sample.num_rows, self.n), bool)
        for k, (fn, expr) in enumerate(zip(fns, exprs, strict=True)):
            t0 = clock()
            r = evaluate_rows([fn], [expr], sample)
            cost = (clock() - t0) / sample.num_rows
            passed = np.zeros(sample.num_rows, bool)
            kept = np.arange(sample.num_rows) if r.kept is None else r.kept
            passed[kept] = np.asarray(truth_mask(r.values[0], r.batch.num_rows).to_numpy(zero_copy_only=False), bool)
            rows[:, k] = passed
            self.costs[k] = cost if not self.profiled else SMOOTHING * cost + (1 - SMOOTHING) * self.costs[k]
        self.outcomes = np.concatenate([self.outcomes, rows])[-WINDOW:]
        self.profiled += 1
        self.order = greedy(self.outcomes, self.costs)


def greedy(outcomes: np.ndarray, costs: np.ndarray) -> list[int]:
    """A-Greedy's order: next, the conjunct with the least cost per row it drops among the
    profiled rows the ones before it kept (``cost / (1 − pass rate)``); ties in written order.
    """
    left = list(range(outcomes.shape[1]))
    alive = np.ones(outcomes.shape[0], bool)
    order = []
    while left:
        n = int(alive.sum())
        passing = outcomes[alive].sum(axis=0) / n if n else np.ones(outcomes.shape[1])
        ranks = {k: float(costs[k]) / (1.0 - passing[k]) if passing[k] < 1.0 else float("inf") for k in left}
        k = min(left, key=lambda k: (ranks[k], k))
        order.append(k)
        left.remove(k)
        alive &= outcomes[:, k]
    return order
