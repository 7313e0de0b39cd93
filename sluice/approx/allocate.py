"""Memory allocated across streams and queries to maximise weighted precision (STREAM §5.3).

The paper allocates a fixed resource to a plan's operators so that precision is maximal, "a
nonlinear optimization problem for which we use a packaged solver".  Here the resource is the
engine's memory limit and the knob is the rate at which each base stream is kept (dynamic
sampling, §5.2.2): the state a stream's elements hold downstream (windows, join buffers, queues)
grows in proportion to the rate, so with ``m_S`` bytes held at rate ``r_S`` the projected memory
at rate ``p_S`` is ``fixed + Σ m_S · p_S / r_S``.  A query's recall (1 − FN,
``sluice.approx.precision``) is the product of its streams' rates; the solver (scipy's SLSQP)
chooses rates maximising ``Σ weight_q · recall_q`` subject to the projected memory fitting the
target and every query's ``recall_q ≥ min_precision_q``.  Streams a query reads unsafely (§5.1.1)
or exactly-only stay at rate 1.

>>> r = allocate({"a": 800.0, "b": 800.0}, {"a": 1.0, "b": 1.0}, 0.0, 1000.0,
...              [Demand(3.0, ("a",)), Demand(1.0, ("b",))])
>>> r.rates["a"] > r.rates["b"], r.feasible
(True, True)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import minimize

FLOOR = 0.01  # the lowest rate the solver picks: below it a stream is in effect switched off


@dataclass(frozen=True, slots=True)
class Demand:
    """One query: its weight, the base streams it reads (a self-join twice), its least recall."""

    weight: float
    streams: tuple[str, ...]
    min_recall: float = 0.0


@dataclass(frozen=True, slots=True)
class Allocation:
    rates: dict[str, float]
    projected: float  # bytes, by the linear model
    feasible: bool  # whether the target and every query's least recall could be met together
    objective: float = 0.0  # Σ weight · recall at these rates
    fixed: tuple[str, ...] = field(default=())  # streams held at their rate (unsafe or exact-only readers)


def allocate(
    memory: Mapping[str, float],
    rates: Mapping[str, float],
    fixed: float,
    target: float,
    demands: Sequence[Demand],
    locked: frozenset[str] = frozenset(),
    floors: Mapping[str, float] | None = None,
) -> Allocation:
    """Rates per stream (``memory`` keys) maximising ``Σ weight·recall`` within ``target`` bytes.

    ``memory[s]``: bytes held now because of stream ``s`` at its current ``rates[s]``; ``fixed``:
    bytes that do not scale with any rate; ``locked``: streams kept at rate 1; ``floors``: the
    least rate of a stream (its fair share when others' state fills the limit: ``shares``).
    """
    names = [s for s in memory if s not in locked]
    held = [s for s in memory if s in locked]
    per_unit = np.array([memory[s] / max(rates.get(s, 1.0), FLOOR) for s in names], dtype=float)
    budget = target - fixed - sum(memory[s] / max(rates.get(s, 1.0), FLOOR) for s in held)
    index = {s: i for i, s in enumerate(names)}
    terms = [(d.weight, [index[s] for s in d.streams if s in index], d.min_recall) for d in demands]

    def recall(x: np.ndarray, idx: list[int]) -> float:
        return float(np.prod(x[idx])) if idx else 1.0

    def objective(x: np.ndarray) -> float:
        return -sum(w * recall(x, idx) for w, idx, _ in terms)

    def total(x: np.ndarray) -> float:
        return float(per_unit @ x)

    def result(x: np.ndarray, ok: bool) -> Allocation:
        out = {s: float(x[i]) for s, i in index.items()} | {s: 1.0 for s in held}
        proj = fixed + total(x) + (target - fixed - budget)
        return Allocation(out, proj, ok, -objective(x), tuple(sorted(held)))

    if not names:
        return result(np.zeros(0), budget >= 0)
    ones = np.ones(len(names))
    if total(ones) <= budget:
        return result(ones, True)
    low = np.array([min(1.0, max(FLOOR, (floors or {}).get(s, 0.0))) for s in names])
    if budget <= 0:  # what cannot be sampled (locked streams, fixed state) takes the whole target already
        return result(low, False)
    cons: list[dict[str, object]] = [{"type": "ineq", "fun": lambda x: (budget - total(x)) / max(budget, 1.0)}]
    for _, idx, least in terms:
        if least > 0 and idx:
            cons.append(
                {"type": "ineq", "fun": lambda x, idx=idx, least=least: float(np.sum(np.log(x[idx]))) - np.log(least)}
            )
    # start from the uniform scaling that fits
    start = np.clip(np.full(len(names), budget / max(total(ones), 1e-9)), low, 1.0)
    res = minimize(objective, start, method="SLSQP", bounds=list(zip(low, ones, strict=True)), constraints=cons)
    x = np.clip(np.asarray(res.x, dtype=float), low, 1.0)
    ok = (
        bool(res.success)
        and total(x) <= budget * 1.001
        and all(least <= 0 or not idx or recall(x, idx) >= least * 0.999 for _, idx, least in terms)
    )
    if total(x) > budget > 0:  # the solver's answer still over: scale down to fit (the floor permitting)
        x = np.clip(x * budget / total(x), low, 1.0)
    return result(x, ok)
