"""One small protocol for every scheduling strategy (STYLE §6): pick the next unit and its budget.

A *unit* is anything with ``has_work()`` and ``run(budget)`` — an operator today; the scheduling
issue adds paths and segments (Jiang §3) behind the same protocol.

>>> rr = RoundRobin(budget=100)
>>> class U:
...     def __init__(self, n): self.n = n
...     def has_work(self): return True
>>> units = [U(1), U(2), U(3)]
>>> [rr.choose(units).n for _ in range(4)]
[1, 2, 3, 1]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol


class Unit(Protocol):
    def has_work(self) -> bool: ...

    def run(self, budget: int) -> int: ...


class Strategy(Protocol):
    name: str

    def choose(self, ready: Sequence[Any]) -> Any:
        """The unit to run next among ``ready`` (all have work)."""
        ...

    def budget(self, unit: Any) -> int:
        """How many input tuples ``unit`` may process in this turn."""
        ...


class RoundRobin:
    """Each ready unit in turn, a fixed tuple budget per turn (Chain §6, the baseline)."""

    name = "round-robin"

    def __init__(self, budget: int = 65536) -> None:
        self._budget = budget
        self._last: Any = None
        self._order: dict[int, int] = {}

    def choose(self, ready: Sequence[Any]) -> Any:
        if not ready:
            return None
        for u in ready:
            self._order.setdefault(id(u), len(self._order))
        if self._last is None:
            pick = ready[0]
        else:
            last = self._order.get(id(self._last), -1)
            after = [u for u in ready if self._order[id(u)] > last]
            pick = (
                min(after, key=lambda u: self._order[id(u)]) if after else min(ready, key=lambda u: self._order[id(u)])
            )
        self._last = pick
        return pick

    def budget(self, unit: Any) -> int:
        return self._budget


STRATEGIES = {"round-robin": RoundRobin}


def make_strategy(name: str, **kwargs: Any) -> Strategy:
    try:
        return STRATEGIES[name](**kwargs)
    except KeyError:
        raise ValueError(f"unknown scheduler {name!r}; known: {', '.join(sorted(STRATEGIES))}") from None
