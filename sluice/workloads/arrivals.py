"""Bursty arrival processes, as arrival counts per time slot (seeded, deterministic).

* ``poisson_pareto_flows`` — Chain §6's synthetic set: flows start as a Poisson process and each
  sends one tuple per time unit for a Pareto-distributed duration (Willinger–Paxson ON/OFF).
* ``onoff_superposition`` — Jiang §5.1: N flows, each alternating Pareto ON (α 1.4) and OFF (α 1.2)
  periods, exponential inter-arrivals while ON; the sum is self-similar.
* ``poisson`` — Poisson arrivals at a mean rate (the smooth baseline the bursty ones are set against).
* ``trace_counts`` — a real packet trace (``../shared/data/traces``), scaled to a mean rate.

>>> c = poisson_pareto_flows(20000, mean_rate=0.2, seed=1)
>>> len(c), bool(max(c) >= 1.0)
(20000, True)
"""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np

TRACES = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "traces"


def _scale(counts: np.ndarray, mean_rate: float) -> np.ndarray:
    m = counts.mean()
    return counts * (mean_rate / m) if m > 0 else counts


def poisson(slots: int, mean_rate: float, seed: int = 0) -> list[float]:
    """Arrivals per slot of a Poisson process with ``mean_rate`` arrivals per slot.

    >>> c = poisson(10000, 2.0, seed=3)
    >>> 1.9 < sum(c) / len(c) < 2.1
    True
    """
    return [float(x) for x in np.random.default_rng(seed).poisson(mean_rate, slots)]


def poisson_pareto_flows(
    slots: int, mean_rate: float, alpha: float = 1.5, k: float = 1.0, peak: float = 1.0, seed: int = 0
) -> list[float]:
    """Flows start as a Poisson process and each sends ``peak`` tuples per slot for a Pareto(α, k)
    number of slots (Chain §6; Willinger et al.).  The flow start rate is set so the long-run mean
    is ``mean_rate``: bursts reach several times the mean, then long quiet stretches follow.
    """
    rng = np.random.default_rng(seed)
    mean_dur = k * alpha / (alpha - 1)
    gap = peak * mean_dur / mean_rate
    counts = np.zeros(slots)
    t = rng.exponential(gap)
    while t < slots:
        dur = k * (1 + rng.pareto(alpha))
        a = int(t)
        whole = int(dur)
        counts[a : min(slots, a + whole)] += peak
        if a + whole < slots:
            counts[a + whole] += peak * (dur - whole)
        t += rng.exponential(gap)
    return list(counts)


def onoff_superposition(
    slots: int,
    flows: int = 64,
    mean_rate: float | None = 1.0,
    alpha_on: float = 1.4,
    alpha_off: float = 1.2,
    k_on: float = 5.0,
    k_off: float = 50.0,
    seed: int = 0,
) -> list[float]:
    """Sum of ``flows`` ON/OFF sources (Pareto ON α 1.4, OFF α 1.2; Poisson arrivals while ON),
    scaled to ``mean_rate`` (``None``: whole arrivals, one per slot on average from each flow while ON).
    Heavy-tailed periods make the sum self-similar (bursty at every scale).
    """
    rng = np.random.default_rng(seed)
    counts = np.zeros(slots)
    for _ in range(flows):
        t = -rng.uniform(0, 50)  # start mid-cycle
        on = bool(rng.integers(0, 2))
        while t < slots:
            dur = (k_on if on else k_off) * (1 + rng.pareto(alpha_on if on else alpha_off))
            if on:
                a, b = max(0.0, t), min(float(slots), t + dur)
                if b > a:
                    n = rng.poisson(b - a)
                    stamps = rng.uniform(a, b, n).astype(int)
                    np.add.at(counts, stamps[stamps < slots], 1)
            t += dur
            on = not on
    return list(counts if mean_rate is None else _scale(counts, mean_rate))


def trace_interarrivals(name: str = "dec-pkt-1-udp") -> np.ndarray:
    path = TRACES / f"{name}.interarrivals.csv.gz"
    with gzip.open(path, "rt") as f:
        next(f)
        return np.loadtxt(f, dtype=np.float64)


def trace_counts(
    slots: int, mean_rate: float, name: str = "dec-pkt-1-udp", speedup: float = 1.0, skip: int = 0
) -> list[float]:
    """Arrivals of a real trace binned into slots holding ``mean_rate`` packets on average, from
    slot ``skip`` of the binned trace on (another stretch of the same trace).
    """
    gaps = trace_interarrivals(name) / speedup
    stamps = np.cumsum(gaps)
    slot_len = mean_rate * float(gaps.mean())
    idx = (stamps / slot_len).astype(np.int64) - skip
    idx = idx[(idx >= 0) & (idx < slots)]
    counts = np.bincount(idx, minlength=slots).astype(float)
    return list(counts)
