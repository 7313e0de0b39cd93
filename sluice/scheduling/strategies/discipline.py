"""Service disciplines (Jiang §3.2): how long a chosen unit keeps the processor.

* ``Exhaustive``: until its queues are empty, including what arrives meanwhile.
* ``Limited``: at most ``limit`` time units per turn, then the strategy chooses again.
Without a wrapper a strategy re-chooses every time unit (Chain's model).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sluice.scheduling.strategies.base import Strategy
from sluice.scheduling.strategies.starvation import _Wrapper


class Exhaustive(_Wrapper):
    name = "exhaustive"

    def __init__(self, inner: Strategy) -> None:
        super().__init__(inner)
        self._held: Any = None

    def choose(self, ready: Sequence[Any], view: Any) -> Any:
        if self._held in ready:
            return self._held
        self._held = self.inner.choose(ready, view)
        return self._held


class Limited(_Wrapper):
    name = "limited"

    def __init__(self, inner: Strategy, limit: float = 1.0) -> None:
        super().__init__(inner)
        self.limit = limit

    def choose(self, ready: Sequence[Any], view: Any) -> Any:
        return self.inner.choose(ready, view)

    def quantum(self, unit: Any) -> float | None:
        q = self.inner.quantum(unit)
        return self.limit if q is None else min(q, self.limit)
