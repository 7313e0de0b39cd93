"""Round-robin (Chain §4.3): cycle over the operators; each ready one runs for a fixed time quantum
or until its input queue empties.  The baseline that never starves anyone.
"""

from __future__ import annotations

from collections.abc import Sequence

from sluice.scheduling.strategies.base import Strategy
from sluice.scheduling.units import SchedulingView, SchedUnit, U, held


class RoundRobin(Strategy):
    name = "round-robin"

    def __init__(self, quantum: float = 1.0, budget: int = 65536) -> None:
        super().__init__(budget)
        self._quantum = quantum
        self._order: dict[str, int] = {}  # by unit name: the turns survive the engine rebuilding its units
        self._current: SchedUnit | None = None
        self._left = 0.0

    def _rank(self, u: SchedUnit) -> int:
        if u.name not in self._order:
            self._order[u.name] = len(self._order)
        return self._order[u.name]

    def choose(self, ready: Sequence[U], view: SchedulingView[U]) -> U:
        current = held(ready, self._current)
        if current is not None and self._left > 1e-12:
            return current
        for u in ready:
            self._rank(u)
        last = self._rank(self._current) if self._current is not None else -1
        after = [u for u in ready if self._rank(u) > last]
        pick = min(after or ready, key=self._rank)
        self._current, self._left = pick, self._quantum
        return pick

    def quantum(self, unit: SchedUnit) -> float | None:
        return self._left

    def charge(self, unit: U, used: float, view: SchedulingView[U]) -> None:
        self._left -= used
