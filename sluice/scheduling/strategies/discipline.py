"""Service disciplines (Jiang §3.2): how long a chosen unit keeps the processor.

* ``Exhaustive``: until its queues are empty, including what arrives meanwhile.
* ``Limited``: at most ``limit`` time units per turn, then the strategy chooses again.
Without a wrapper a strategy re-chooses every time unit (Chain's model).
"""

from __future__ import annotations

from collections.abc import Sequence

from sluice.scheduling.strategies.base import Strategy
from sluice.scheduling.strategies.starvation import _Wrapper
from sluice.scheduling.units import SchedulingView, SchedUnit, U, held


class Exhaustive(_Wrapper):
    name = "exhaustive"

    def __init__(self, inner: Strategy) -> None:
        super().__init__(inner)
        self._held: SchedUnit | None = None

    def choose(self, ready: Sequence[U], view: SchedulingView[U]) -> U:
        same = held(ready, self._held)
        if same is not None:
            return same
        pick = self.inner.choose(ready, view)
        self._held = pick
        return pick


class Limited(_Wrapper):
    name = "limited"

    def __init__(self, inner: Strategy, limit: float = 1.0) -> None:
        super().__init__(inner)
        self.limit = limit

    def choose(self, ready: Sequence[U], view: SchedulingView[U]) -> U:
        return self.inner.choose(ready, view)

    def quantum(self, unit: SchedUnit) -> float | None:
        q = self.inner.quantum(unit)
        return self.limit if q is None else min(q, self.limit)
