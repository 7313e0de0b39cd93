"""Starvation avoidance for static-priority strategies (Jiang §4.2).

* ``OldestFirst``: every ``period``-th decision runs the unit holding the oldest tuple.
* ``DynamicPriority``: priority × f with ``f = τ·Q`` — τ the age of the unit's oldest tuple and Q
  its queued memory, each normalised by the largest among the ready units.
"""

from __future__ import annotations

from collections.abc import Sequence

from sluice.scheduling.model import Path
from sluice.scheduling.strategies.base import Strategy
from sluice.scheduling.units import Granularity, SchedulingView, SchedUnit, U


class _Wrapper(Strategy):
    def __init__(self, inner: Strategy) -> None:
        super().__init__(inner._budget)
        self.inner = inner
        self.name = f"{inner.name}+{self.name}"

    @property
    def granularity(self) -> Granularity:  # type: ignore[override]
        return self.inner.granularity

    def prepare(self, paths: Sequence[Path]) -> None:
        super().prepare(paths)
        self.inner.prepare(paths)

    def priority(self, unit: U, view: SchedulingView[U]) -> float:
        return self.inner.priority(unit, view)

    def segments_of(self, path: Path) -> list[tuple[int, int]]:
        return self.inner.segments_of(path)

    def quantum(self, unit: SchedUnit) -> float | None:
        return self.inner.quantum(unit)

    def charge(self, unit: U, used: float, view: SchedulingView[U]) -> None:
        self.inner.charge(unit, used, view)


class OldestFirst(_Wrapper):
    name = "oldest-first"

    def __init__(self, inner: Strategy, period: int = 10) -> None:
        super().__init__(inner)
        self.period = period
        self._n = 0

    def choose(self, ready: Sequence[U], view: SchedulingView[U]) -> U:
        self._n += 1
        if self._n % self.period == 0:
            return min(ready, key=lambda u: view.oldest(u))
        return self.inner.choose(ready, view)


class DynamicPriority(_Wrapper):
    name = "dynamic"

    def choose(self, ready: Sequence[U], view: SchedulingView[U]) -> U:
        ages = {u: max(0.0, view.now - view.oldest(u)) for u in ready}
        sizes = {u: view.unit_memory(u) for u in ready}
        # (a unit holding no tuple — time to move on in the engine — has no memory to weigh and
        # its age, the instant its turn completes, must not shrink every other unit's)
        amax = max((a for u, a in ages.items() if sizes[u] > 0), default=0.0) or 1.0
        smax = max(sizes.values()) or 1.0

        def key(u: U) -> tuple[float, float, float]:
            f = (ages[u] / amax) * (sizes[u] / smax)
            p = self.inner.ranked(u, view)
            return (round(p * f, 12), round(p, 12), -view.oldest(u))

        return max(ready, key=key)
