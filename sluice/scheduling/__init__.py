"""Scheduling strategies: which unit of work runs next, and for how long."""

from sluice.scheduling.strategy import RoundRobin, Strategy, make_strategy

__all__ = ["RoundRobin", "Strategy", "make_strategy"]
