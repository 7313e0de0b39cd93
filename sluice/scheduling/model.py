"""The scheduling model: operator paths of (cost, selectivity), progress charts, lower envelopes,
capacities and segments.

Units (Chain §3): a "tuple" is a memory unit of input.  Operator i of a path costs ``cost[i]``
time per tuple *reaching it* and keeps ``sel[i]`` of what it processes; the last operator ejects
its output (its effective selectivity is 0).  The progress chart has points
``(T_0, S_0) = (0, 1)``, ``T_i = T_{i-1} + cost[i]·S_{i-1}``, ``S_i = S_{i-1}·sel[i]`` (``S_m = 0``).

>>> p = Path("p", (Op("o1", 1.0, 0.2), Op("o2", 5.0, 1.0)))   # the STREAM §4.2 example
>>> p.chart()
[(0.0, 1.0), (1.0, 0.2), (2.0, 0.0)]
>>> [round(x, 3) for x in chain_priorities(p)]
[0.8, 0.2]
>>> round(path_capacity(p), 3)
0.5
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Op:
    """An operator: ``cost`` time units per input tuple, ``sel`` output tuples per input tuple.

    ``partner`` names the operator on the other path of a two-stream join (Chain §5): this side is
    blocked while the partner's input is empty and tuples could still reach it.
    """

    name: str
    cost: float
    sel: float
    partner: str | None = None

    def __post_init__(self) -> None:
        if self.cost <= 0 or self.sel < 0:
            raise ValueError(f"operator {self.name}: cost must be > 0 and selectivity >= 0")


@dataclass(frozen=True, slots=True)
class Path:
    """An operator path from a source to the output (Chain §2; Jiang §2)."""

    name: str
    ops: tuple[Op, ...]

    def sizes(self) -> list[float]:
        """S_0..S_m: the size of one input tuple after each operator (S_m = 0: output leaves)."""
        out = [1.0]
        for op in self.ops:
            out.append(out[-1] * op.sel)
        out[-1] = 0.0
        return out

    def chart(self) -> list[tuple[float, float]]:
        """The progress chart's operator points (T_i, S_i)."""
        s = self.sizes()
        t = [0.0]
        for i, op in enumerate(self.ops):
            t.append(t[-1] + op.cost * s[i])
        return list(zip(t, s, strict=True))

    def unit_costs(self) -> list[float]:
        """Time for operator i to process what one input tuple has become: T_i − T_{i−1}."""
        c = self.chart()
        return [c[i + 1][0] - c[i][0] for i in range(len(self.ops))]

    def effective_sel(self, i: int) -> float:
        return 0.0 if i == len(self.ops) - 1 else self.ops[i].sel


def lower_envelope(chart: Sequence[tuple[float, float]]) -> list[int]:
    """Indices of the chart points on its lower envelope (Chain §3: steepest-descent operator points,
    the earliest one on ties).
    """
    idx = [0]
    i = 0
    m = len(chart) - 1
    while i < m:
        t0, s0 = chart[i]
        best, best_j = None, None
        for j in range(i + 1, m + 1):
            tj, sj = chart[j]
            d = (s0 - sj) / (tj - t0) if tj > t0 else float("inf")
            if best is None or d > best + 1e-15:
                best, best_j = d, j
        assert best_j is not None
        idx.append(best_j)
        i = best_j
    return idx


def chain_priorities(path: Path) -> list[float]:
    """Each operator's Chain priority: the slope of the lower-envelope segment it lies on (Chain §4.1)."""
    chart = path.chart()
    env = lower_envelope(chart)
    prio = [0.0] * len(path.ops)
    for a, b in zip(env, env[1:], strict=False):
        (ta, sa), (tb, sb) = chart[a], chart[b]
        slope = (sa - sb) / (tb - ta) if tb > ta else float("inf")
        for k in range(a, b):
            prio[k] = slope
    return prio


def envelope_path(path: Path) -> Path:
    """The lower-envelope simulation P' of a path: one operator per envelope segment (Chain §4.1)."""
    chart = path.chart()
    env = lower_envelope(chart)
    ops = []
    for a, b in zip(env, env[1:], strict=False):
        (ta, sa), (tb, sb) = chart[a], chart[b]
        # per tuple reaching it (size sa): cost (tb − ta)/sa; keeps sb/sa
        cost = (tb - ta) / sa if sa > 0 else (tb - ta)
        sel = sb / sa if sa > 0 else 0.0
        ops.append(Op(f"{path.ops[a].name}..{path.ops[b - 1].name}", max(cost, 1e-12), sel))
    return Path(path.name + "'", tuple(ops))


def greedy_priority(path: Path, i: int) -> float:
    """Greedy (Chain §4.3): (1 − s)/t — the fraction of its input an operator removes per unit time."""
    return (1.0 - path.effective_sel(i)) / path.ops[i].cost


def release_capacity(path: Path, i: int) -> float:
    """Operator memory release capacity C^M (Jiang eq. 2.1) with unit tuple sizes: (1 − σ)/t."""
    return greedy_priority(path, i)


def unit_capacity(path: Path, first: int, last: int) -> float:
    """Processing capacity of operators first..last (Jiang eq. 2.2 / 3.1): tuples per time unit."""
    total, frac = 0.0, 1.0
    for k in range(first, last + 1):
        total += frac * path.ops[k].cost
        frac *= path.ops[k].sel
    return 1.0 / total


def path_capacity(path: Path) -> float:
    return unit_capacity(path, 0, len(path.ops) - 1)


def segment_release_capacity(path: Path, first: int, last: int) -> float:
    """C^M of a segment (Jiang eq. 3.2): C^P · (1 − S_o·Πσ), output size 0 for the last segment."""
    out = 0.0
    if last < len(path.ops) - 1:
        out = 1.0
        for k in range(first, last + 1):
            out *= path.ops[k].sel
    return unit_capacity(path, first, last) * (1.0 - out)


def segments(path: Path, gamma: float = 1.0, at_most_two: bool = False) -> list[tuple[int, int]]:
    """Jiang §3.3: maximal runs of consecutive operators whose release capacities do not fall
    (``C^M_{j+1} / C^M_j ≥ γ``).  The simplified variant keeps only the first run and puts the rest
    of the path in a second segment.
    """
    m = len(path.ops)
    out: list[tuple[int, int]] = []
    start = 0
    for j in range(m - 1):
        cj, cn = release_capacity(path, j), release_capacity(path, j + 1)
        if not (cn >= gamma * cj):
            out.append((start, j))
            start = j + 1
            if at_most_two:
                break
    out.append((start, m - 1))
    return out


def prune_segments(candidates: Sequence[tuple[str, tuple[str, ...]]]) -> list[tuple[str, tuple[str, ...]]]:
    """Jiang §3.3 pruning over several paths: a segment (as its operator names) replaces the listed
    segments that are its subsets, and is dropped if a superset is listed already.
    """
    kept: list[tuple[str, tuple[str, ...]]] = []
    for name, ops in candidates:
        s = set(ops)
        if any(s <= set(k) for _, k in kept):
            continue
        kept = [(n, k) for n, k in kept if not set(k) <= s]
        kept.append((name, ops))
    return kept
