"""Path capacity (Jiang §3.1): the unit is a whole operator path; priority = its processing capacity
(eq. 2.2); ties to the oldest tuple; inside a path, bottom-up.  Least total tuple latency of all
path-based schedules (Jiang Thm 1).
"""

from __future__ import annotations

from collections.abc import Sequence

from sluice.scheduling.model import Path, path_capacity
from sluice.scheduling.strategies.base import Strategy
from sluice.scheduling.units import Granularity, SchedulingView, U


class PathCapacity(Strategy):
    name = "path-capacity"
    granularity = Granularity.PATH

    def prepare(self, paths: Sequence[Path]) -> None:
        super().prepare(paths)
        self._cap = [path_capacity(p) for p in self.paths]

    def priority(self, unit: U, view: SchedulingView[U]) -> float:
        return self._cap[unit.path]
