"""Threshold (Jiang §3.4): path capacity while memory allows, simplified segment when it does not.

With queue memory limit M and the mean queue memory M̄ seen so far (eq. 3.3):
``T_max = min((1+α)/2·M, β·M)`` with ``α = M̄/M``, ``T_min = min(M̄, β·T_max)``, β = 0.9.
At ``memory ≥ T_max`` it enters saving mode; at ``memory ≤ T_min`` it returns to normal mode.
Memory is sampled every monitoring interval, which shortens as memory nears the limit.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from enum import StrEnum

from sluice.scheduling.model import Path
from sluice.scheduling.strategies.base import Strategy
from sluice.scheduling.strategies.path_capacity import PathCapacity
from sluice.scheduling.strategies.segment import SimplifiedSegment
from sluice.scheduling.units import Granularity, SchedulingView, U

DEFAULT_MEMORY = float(64 * 2**20)


class Mode(StrEnum):
    NORMAL = "normal"  # path capacity: latency first
    SAVING = "saving"  # simplified segment: memory first


class Threshold(Strategy):
    name = "threshold"

    def __init__(
        self, memory: float = DEFAULT_MEMORY, beta: float = 0.9, max_interval: int = 10, budget: int = 65536
    ) -> None:
        """``memory`` is M: queue bytes in the engine (default 64 MiB), tuples in the simulator."""
        super().__init__(budget)
        if not 0.5 < beta < 1:
            raise ValueError("beta must be in (0.5, 1)")
        self.limit, self.beta, self.max_interval = memory, beta, max_interval
        self.normal, self.saving = PathCapacity(budget=budget), SimplifiedSegment(budget=budget)
        self.mode = Mode.NORMAL
        self._samples = 0
        self._mean = 0.0
        self._next_check = 0.0
        self.switches: list[tuple[float, Mode]] = []

    @property
    def granularity(self) -> Granularity:  # type: ignore[override]
        return Granularity.PATH if self.mode is Mode.NORMAL else Granularity.SEGMENT

    def prepare(self, paths: Sequence[Path]) -> None:
        super().prepare(paths)
        self.normal.prepare(paths)
        self.saving.prepare(paths)

    def segments_of(self, path: Path) -> list[tuple[int, int]]:
        return self.saving.segments_of(path)

    def thresholds(self) -> tuple[float, float]:
        alpha = self._mean / self.limit
        t_max = min((1 + alpha) / 2 * self.limit, self.beta * self.limit)
        return t_max, min(self._mean, self.beta * t_max)

    def _monitor(self, view: SchedulingView[U]) -> None:
        if view.now < self._next_check:
            return
        mc = view.memory()
        self._samples += 1
        self._mean += (mc - self._mean) / self._samples
        t_max, t_min = self.thresholds()
        if self.mode is Mode.NORMAL and mc >= t_max:
            self.mode = Mode.SAVING
            self.switches.append((view.now, Mode.SAVING))
        elif self.mode is Mode.SAVING and mc <= t_min:
            self.mode = Mode.NORMAL
            self.switches.append((view.now, Mode.NORMAL))
        room = max(0.0, 1.0 - mc / self.limit)
        self._next_check = view.now + max(1, math.ceil(self.max_interval * room))

    def choose(self, ready: Sequence[U], view: SchedulingView[U]) -> U:
        self._monitor(view)
        return (self.normal if self.mode is Mode.NORMAL else self.saving).choose(ready, view)

    def priority(self, unit: U, view: SchedulingView[U]) -> float:
        return (self.normal if self.mode is Mode.NORMAL else self.saving).priority(unit, view)
