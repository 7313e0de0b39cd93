"""Every scheduling strategy, by name (``make("chain")``), each in its own module."""

from __future__ import annotations

from typing import Any

from sluice.scheduling.strategies.base import Strategy
from sluice.scheduling.strategies.chain import Chain, join_op
from sluice.scheduling.strategies.discipline import Exhaustive, Limited
from sluice.scheduling.strategies.fifo import Fifo
from sluice.scheduling.strategies.greedy import Greedy
from sluice.scheduling.strategies.path_capacity import PathCapacity
from sluice.scheduling.strategies.round_robin import RoundRobin
from sluice.scheduling.strategies.segment import Segment, SimplifiedSegment
from sluice.scheduling.strategies.starvation import DynamicPriority, OldestFirst
from sluice.scheduling.strategies.threshold import Threshold

STRATEGIES: dict[str, type[Strategy]] = {
    "round-robin": RoundRobin,
    "fifo": Fifo,
    "greedy": Greedy,
    "chain": Chain,
    "path-capacity": PathCapacity,
    "segment": Segment,
    "simplified-segment": SimplifiedSegment,
    "threshold": Threshold,
}


def make(name: str, **kwargs: Any) -> Strategy:
    """A strategy by name; ``name+oldest-first``, ``name+dynamic``, ``name+exhaustive`` and
    ``name+limited`` wrap it (starvation avoidance, service disciplines).
    """
    base, *wrappers = name.split("+")
    if base not in STRATEGIES:
        raise ValueError(f"unknown scheduler {base!r}; known: {', '.join(STRATEGIES)}")
    inner_kwargs = {k: v for k, v in kwargs.items() if k not in ("period", "limit")}
    s: Strategy = STRATEGIES[base](**inner_kwargs)
    for w in wrappers:
        if w == "oldest-first":
            s = OldestFirst(s, period=kwargs.get("period", 10))
        elif w == "dynamic":
            s = DynamicPriority(s)
        elif w == "exhaustive":
            s = Exhaustive(s)
        elif w == "limited":
            s = Limited(s, limit=kwargs.get("limit", 1.0))
        else:
            raise ValueError(f"unknown strategy modifier {w!r}; known: oldest-first, dynamic, exhaustive, limited")
    return s


__all__ = [
    "Chain",
    "DynamicPriority",
    "Exhaustive",
    "Fifo",
    "Greedy",
    "Limited",
    "OldestFirst",
    "PathCapacity",
    "RoundRobin",
    "STRATEGIES",
    "Segment",
    "SimplifiedSegment",
    "Strategy",
    "Threshold",
    "join_op",
    "make",
]
