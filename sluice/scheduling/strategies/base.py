"""What every strategy shares: the protocol's defaults, static priorities, earliest-arrival ties."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sluice.scheduling.model import Path
from sluice.scheduling.units import Granularity, SchedulingView, SchedUnit, U


class Strategy:
    """Pick the next unit (operator, path or segment) and how long it may run.

    ``prepare(paths)`` computes static priorities from (cost, selectivity) statistics;
    ``choose(ready, view)`` picks among units that have work; ``quantum(unit)`` caps its run
    (None: until it empties or the time unit ends); ``charge`` reports what it used.  Units are
    ``SchedUnit``s at the strategy's ``granularity`` (``segments_of`` cuts a path for
    ``Granularity.SEGMENT``); ``view`` is the simulator or the engine (``SchedulingView``).
    A subclass may give ``granularity`` as a string ("operator", "path", "segment").
    """

    name = "strategy"
    granularity: Granularity = Granularity.OPERATOR

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        given = cls.__dict__.get("granularity")
        if isinstance(given, str):
            try:
                cls.granularity = Granularity.parse(given)
            except ValueError as e:
                raise ValueError(f"strategy {cls.__name__}: {e}") from None

    def __init__(self, budget: int = 65536) -> None:
        self._budget = budget
        self.paths: list[Path] = []

    def prepare(self, paths: Sequence[Path]) -> None:
        self.paths = list(paths)

    def priority(self, unit: U, view: SchedulingView[U]) -> float:
        return 0.0

    def ranked(self, unit: U, view: SchedulingView[U]) -> float:
        """``priority``; of an engine unit whose operators lie on several paths (``copies``: a join
        is on each input's path), the highest of its places — it is part of each path's chain and
        any of them may schedule it (Chain §5).  A simulator unit is one place.  (A copy is a
        simulator ``Unit``: ``priority`` may read only its ``path``, ``first`` and ``last``.)
        """
        p = self.priority(unit, view)
        for c in getattr(unit, "copies", ()):
            p = max(p, self.priority(c, view))
        return p

    def choose(self, ready: Sequence[U], view: SchedulingView[U]) -> U:
        # Highest priority; ties to the earliest arrival (Chain §4.1), then to the unit further
        # along its path, so a tuple keeps moving until it clears its segment (Chain Prop. 3).
        # (The arrival is asked only of the units tied on priority: in the engine it reads every
        # input queue of the unit's operators, and under load every unit is ready.)
        prio = [round(self.ranked(u, view), 12) for u in ready]
        top = max(prio, default=0.0)
        tied = [u for u, p in zip(ready, prio, strict=True) if p == top] or list(ready)  # (a NaN priority)
        if len(tied) == 1:
            return tied[0]
        return max(tied, key=lambda u: (-view.oldest(u), u.first))

    def quantum(self, unit: SchedUnit) -> float | None:
        return None

    def charge(self, unit: U, used: float, view: SchedulingView[U]) -> None:
        return None

    def segments_of(self, path: Path) -> list[tuple[int, int]]:
        raise NotImplementedError(f"{self.name} does not schedule segments")

    def budget(self, unit: SchedUnit) -> int:
        """Engine: how many input tuples a unit may process per turn."""
        return self._budget
