"""Greedy (Chain §4.3): each operator on its own, static priority (1 − s)/t — the fraction of its
input it eliminates per unit time — blind to its position in the path.
"""

from __future__ import annotations

from sluice.scheduling.model import greedy_priority
from sluice.scheduling.strategies.base import Strategy
from sluice.scheduling.units import SchedulingView, U


class Greedy(Strategy):
    name = "greedy"

    def priority(self, unit: U, view: SchedulingView[U]) -> float:
        return greedy_priority(self.paths[unit.path], unit.first)
