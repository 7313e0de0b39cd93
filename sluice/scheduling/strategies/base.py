"""What every strategy shares: the protocol's defaults, static priorities, earliest-arrival ties."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sluice.scheduling.model import Path


class Strategy:
    """Pick the next unit (operator, path or segment) and how long it may run.

    ``prepare(paths)`` computes static priorities from (cost, selectivity) statistics;
    ``choose(ready, view)`` picks among units that have work; ``quantum(unit)`` caps its run
    (None: until it empties or the time unit ends); ``charge`` reports what it used.  ``view`` is
    the simulator or the engine: ``oldest(unit)``, ``unit_memory(unit)``, ``memory()``, ``now``.
    """

    name = "strategy"
    granularity = "operator"

    def __init__(self, budget: int = 65536) -> None:
        self._budget = budget
        self.paths: list[Path] = []

    def prepare(self, paths: Sequence[Path]) -> None:
        self.paths = list(paths)

    def priority(self, unit: Any, view: Any) -> float:
        return 0.0

    def choose(self, ready: Sequence[Any], view: Any) -> Any:
        # Highest priority; ties to the earliest arrival (Chain §4.1), then to the unit further
        # along its path, so a tuple keeps moving until it clears its segment (Chain Prop. 3).
        return max(ready, key=lambda u: (round(self.priority(u, view), 12), -view.oldest(u), u.first))

    def quantum(self, unit: Any) -> float | None:
        return None

    def charge(self, unit: Any, used: float, view: Any) -> None:
        return None

    def segments_of(self, path: Path) -> list[tuple[int, int]]:
        raise NotImplementedError(f"{self.name} does not schedule segments")

    def budget(self, unit: Any) -> int:
        """Engine: how many input tuples a unit may process per turn."""
        return self._budget
