"""Round-robin (Chain §4.3): cycle over the operators; each ready one runs for a fixed time quantum
or until its input queue empties.  The baseline that never starves anyone.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sluice.scheduling.strategies.base import Strategy


class RoundRobin(Strategy):
    name = "round-robin"

    def __init__(self, quantum: float = 1.0, budget: int = 65536) -> None:
        super().__init__(budget)
        self._quantum = quantum
        self._order: dict[Any, int] = {}
        self._current: Any = None
        self._left = 0.0

    def _rank(self, u: Any) -> int:
        key = getattr(u, "name", u)
        if key not in self._order:
            self._order[key] = len(self._order)
        return self._order[key]

    def choose(self, ready: Sequence[Any], view: Any) -> Any:
        if self._current in ready and self._left > 1e-12:
            return self._current
        for u in ready:
            self._rank(u)
        last = self._rank(self._current) if self._current is not None else -1
        after = [u for u in ready if self._rank(u) > last]
        pick = min(after or ready, key=self._rank)
        self._current, self._left = pick, self._quantum
        return pick

    def quantum(self, unit: Any) -> float | None:
        return self._left

    def charge(self, unit: Any, used: float, view: Any) -> None:
        self._left -= used
