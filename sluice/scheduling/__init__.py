"""Scheduling: which unit of work runs next, and for how long (Chain; Jiang).

``strategies`` holds every strategy behind one protocol; ``units`` what they schedule and read
(``SchedUnit``, ``SchedulingView``, ``Granularity``, the one unit construction); ``model`` the
progress charts and capacities they use; ``simulator`` the virtual-time model that shares the
strategy code; ``bound`` the optimal-memory LP and the lower-envelope bound.
"""

from sluice.scheduling.strategies import STRATEGIES, Strategy, make

__all__ = ["STRATEGIES", "Strategy", "make"]
