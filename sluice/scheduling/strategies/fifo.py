"""FIFO (Chain §4.3; Jiang §2.2): the oldest tuple is processed to completion before the next."""

from __future__ import annotations

from collections.abc import Sequence

from sluice.scheduling.strategies.base import Strategy
from sluice.scheduling.units import SchedulingView, U


class Fifo(Strategy):
    name = "fifo"

    def choose(self, ready: Sequence[U], view: SchedulingView[U]) -> U:
        # the unit holding the oldest tuple; on ties the one further along, to finish that tuple
        return min(ready, key=lambda u: (view.oldest(u), -u.first))
