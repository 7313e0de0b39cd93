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
from sluice.runtime.vexpr import evaluate_rows

PROFILE = 32  # rows of a profiled batch evaluated against every conjunct
WINDOW = 512  # profiled rows remembered (the profile window)
SMOOTHING = 0.3  # weight of the newest measurement in the running averages
DECAY = 0.9  # weight of the older observations in each conjunct's cost fit
PERIOD = 8  # one batch in PERIOD is profiled; one, at random, is evaluated the way not chosen
SMALL = 64  # batches with fewer rows are evaluated at once, unprofiled: ordering cannot pay there
STATIC_PROFILES = 4  # batches the static order is profiled on before it is kept


class FilterOrder(Enum):
    """How a selection of several conjuncts orders them (``sluice.runtime.operators.stateless``)."""

    WRITTEN = "written"  # one predicate, every conjunct on every row (Arrow's AND)
    STATIC = "static"  # the greedy order of the first profiled batches, kept
    ADAPTIVE = "adaptive"  # the greedy order, redone after every profiled batch


@dataclass
class Monitor(Part):
    """The profile of a selection's conjuncts and the order it implies."""

    n: int
    adaptive: bool = True
    order: list[int] = field(default_factory=list)
    outcomes: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), bool))
    # per conjunct, decayed sums (weight, Σ rows, Σ seconds, Σ rows², Σ rows·seconds) of its
    # evaluations: the slope of seconds over rows is its cost per row, without the fixed cost of a
    # call (which every order pays once per conjunct and batch alike)
    fits: np.ndarray = field(default_factory=lambda: np.zeros((0, 5)))
    profiled: int = 0  # batches profiled
    batches: int = 0  # batches seen (of at least SMALL rows)
    # seconds per row of evaluating the conjuncts one after another, and all at once (NaN: not measured)
    per_row: np.ndarray = field(default_factory=lambda: np.full(2, np.nan))
    STATE = ("order", "outcomes", "fits", "profiled", "batches", "per_row")

    def __post_init__(self) -> None:
        self.order = list(range(self.n))
        self.outcomes = np.zeros((0, self.n), bool)
        self.fits = np.zeros((self.n, 5))

    def next_batch(self) -> tuple[bool, bool]:
        """For the batch about to be evaluated: (profile it, evaluate the conjuncts one after
        another rather than at once).  Adaptive: the way measured cheaper per row, the other one
        batch in ``PERIOD`` at pseudo-random places (so both stay measured on batches alike:
        cheap conjuncts cost less at once, in Arrow, than filtering the batch between them);
        static: one after another, in the order of its first profiles.
        """
        k = self.batches
        self.batches += 1
        if not self.adaptive:
            return self.profiled < STATIC_PROFILES, True
        profile = k % PERIOD == 0
        ordered, whole = self.per_row
        if np.isnan(ordered) or np.isnan(whole):
            return profile, bool(np.isnan(ordered))
        best = bool(ordered <= whole)
        explore = ((k * 2654435761) >> 11) % PERIOD == 0  # (a fixed pseudo-random schedule)
        return profile, (not best) if explore else best

    def timed(self, ordered: bool, seconds: float, rows: int) -> None:
        """A batch of ``rows`` took ``seconds`` evaluated one after another (or at once)."""
        if rows:
            i, x = (0 if ordered else 1), seconds / rows
            self.per_row[i] = x if np.isnan(self.per_row[i]) else SMOOTHING * x + (1 - SMOOTHING) * self.per_row[i]

    def record(self, k: int, rows: int, seconds: float) -> None:
        """Conjunct ``k`` took ``seconds`` on ``rows`` rows."""
        self.fits[k] = self.fits[k] * DECAY + np.array([1.0, rows, seconds, rows * rows, rows * seconds])

    def costs(self) -> np.ndarray:
        """Each conjunct's cost per row: the least-squares slope of its seconds over its rows
        where it was seen on batches of different sizes (a profile's few rows, a whole batch),
        its mean seconds per row otherwise.
        """
        w, m, t, mm, mt = self.fits.T
        spread = w * mm - m * m
        with np.errstate(divide="ignore", invalid="ignore"):
            slope = np.where(spread > 1e-9 * np.maximum(w * mm, 1.0), (w * mt - m * t) / spread, np.nan)
            mean = np.where(m > 0, t / m, 0.0)
        return np.where(np.isfinite(slope) & (slope > 0), slope, mean)

    def observe(self, b: pa.Table, fns: list[Any], exprs: list[Any], clock: Any) -> None:
        """Profile a few rows of ``b`` against every conjunct, then re-choose the order."""
        at = np.unique(np.linspace(0, b.num_rows - 1, min(PROFILE, b.num_rows)).astype(np.int64))
        sample = b.take(pa.array(at))
        rows = np.ones((sample.num_rows, self.n), bool)
        for k, (fn, expr) in enumerate(zip(fns, exprs, strict=True)):
            t0 = clock()
            r = evaluate_rows([fn], [expr], sample)
            self.record(k, sample.num_rows, clock() - t0)
            passed = np.zeros(sample.num_rows, bool)
            passed[r.true_rows()] = True
            rows[:, k] = passed
        self.outcomes = np.concatenate([self.outcomes, rows])[-WINDOW:]
        self.profiled += 1
        self.order = greedy(self.outcomes, self.costs())


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
