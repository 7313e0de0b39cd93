"""Every scheduling strategy, by name (``make("chain")``), each in its own module.

A name may carry modifiers and parameters: ``NAME[+MODIFIER…][:KEY=VALUE,…]``, e.g.
``threshold:memory=5MB``, ``round-robin:quantum=2``, ``chain+limited:limit=0.5``.

>>> make("threshold:memory=5MB").limit
5000000.0
"""

from __future__ import annotations

import inspect
import re
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


SIZE_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "KIB": 2**10, "MIB": 2**20, "GIB": 2**30}


def _value(key: str, text: str) -> float:
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([A-Za-z]*)\s*", text)
    if not m or m.group(2).upper() not in SIZE_UNITS:
        raise ValueError(f"scheduler parameter {key}={text!r}: expected a number, optionally with KB/MB/GB/KiB/MiB/GiB")
    v = float(m.group(1)) * SIZE_UNITS[m.group(2).upper()]
    return int(v) if v.is_integer() and key not in ("memory", "limit", "quantum", "beta", "gamma") else v


def parse(spec: str) -> tuple[str, dict[str, float]]:
    """``"threshold:memory=5MB"`` → ``("threshold", {"memory": 5000000.0})``."""
    name, _, params = spec.partition(":")
    options: dict[str, float] = {}
    for item in filter(None, (p.strip() for p in params.split(","))):
        key, eq, val = item.partition("=")
        if not eq:
            raise ValueError(f"scheduler parameter {item!r}: expected KEY=VALUE (e.g. threshold:memory=5MB)")
        options[key.strip().replace("-", "_")] = _value(key.strip(), val)
    return name.strip(), options


def make(name: str, **kwargs: Any) -> Strategy:
    """A strategy by name; ``name+oldest-first``, ``name+dynamic``, ``name+exhaustive`` and
    ``name+limited`` wrap it (starvation avoidance, service disciplines); ``:key=value`` sets
    its parameters (see the module docstring).
    """
    name, params = parse(name)
    base, *wrappers = name.split("+")
    if base not in STRATEGIES:
        raise ValueError(f"unknown scheduler {base!r}; known: {', '.join(STRATEGIES)}")
    accepted = set(inspect.signature(STRATEGIES[base]).parameters) | {"period", "limit"}
    for key in params:
        if key not in accepted:
            raise ValueError(f"scheduler {base!r} has no parameter {key!r}; it takes {', '.join(sorted(accepted))}")
    kwargs = {**kwargs, **params}
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
