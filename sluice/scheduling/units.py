"""What a strategy schedules and what it may read: units, their granularity, and the view.

A unit is a run ``first..last`` of the operators of path number ``path`` (Chain §3; Jiang §3):
one operator, a segment, or the whole path.  The simulator and the engine build their units with
the one function ``units_for``; the engine keeps a shared operator's unit once.  Strategies are
typed against ``SchedUnit`` and ``SchedulingView``, generic in the unit type, so the engine gets
back the ``EngineUnit`` it offered and the simulator its ``Unit`` (docs/design/016).

>>> from sluice.scheduling.model import Op, Path
>>> p = Path("p", (Op("a", 1.0, 0.5), Op("b", 1.0, 1.0)))
>>> [(u.first, u.last, u.name) for u in units_for([p], Granularity.parse("operator"), lambda p: [])]
[(0, 0, 'a'), (1, 1, 'b')]
>>> units_for([p], Granularity.PATH, lambda p: [])[0].name
'a/b'
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Protocol, TypeVar, assert_never

from sluice.scheduling.model import Path


class Granularity(Enum):
    """What a strategy schedules as one unit: an operator, a whole path, or a segment of a path."""

    OPERATOR = "operator"
    PATH = "path"
    SEGMENT = "segment"

    @classmethod
    def parse(cls, text: str) -> Granularity:
        """``"path"`` → ``Granularity.PATH``; anything else is an error naming the known values."""
        try:
            return cls(text)
        except ValueError:
            known = ", ".join(g.value for g in cls)
            raise ValueError(f"unknown scheduling granularity {text!r}; known: {known}") from None


class SchedUnit(Hashable, Protocol):
    """What strategies read of a unit.  ``name`` joins its operators' names: unique among the units
    of one preparation and the same when units are rebuilt (round-robin keeps its turns by it).
    """

    @property
    def path(self) -> int: ...

    @property
    def first(self) -> int: ...

    @property
    def last(self) -> int: ...

    @property
    def name(self) -> str: ...


U = TypeVar("U", bound=SchedUnit)
U_contra = TypeVar("U_contra", bound=SchedUnit, contravariant=True)


class SchedulingView(Protocol[U_contra]):
    """What strategies read of the system running them — the simulator or the engine.

    ``now``: the current time; ``oldest(u)``: arrival time of the oldest tuple in the unit's queues
    (inf if none; in the engine a unit with no tuple but time to move on is as old as the instant
    its turn completes); ``unit_memory(u)``: memory its queues hold; ``memory()``: all queue memory.
    """

    @property
    def now(self) -> float: ...

    def oldest(self, u: U_contra) -> float: ...

    def unit_memory(self, u: U_contra) -> float: ...

    def memory(self) -> float: ...


@dataclass(frozen=True, slots=True)
class Unit:
    """Operators ``first..last`` of path number ``path`` (the simulator's unit)."""

    path: int
    first: int
    last: int
    name: str = ""


def units_for(
    paths: Sequence[Path], granularity: Granularity, segments_of: Callable[[Path], Sequence[tuple[int, int]]]
) -> list[Unit]:
    """Every path's units at ``granularity``, path by path; ``segments_of`` (a strategy's) cuts a
    path into segments and is called only for ``Granularity.SEGMENT``.
    """
    out: list[Unit] = []
    for pi, p in enumerate(paths):
        match granularity:
            case Granularity.OPERATOR:
                ranges: Sequence[tuple[int, int]] = [(i, i) for i in range(len(p.ops))]
            case Granularity.PATH:
                ranges = [(0, len(p.ops) - 1)]
            case Granularity.SEGMENT:
                ranges = segments_of(p)
            case _:
                assert_never(granularity)
        out.extend(Unit(pi, a, b, "/".join(op.name for op in p.ops[a : b + 1])) for a, b in ranges)
    return out


def held(ready: Sequence[U], unit: SchedUnit | None) -> U | None:
    """The unit of ``ready`` equal to ``unit`` (one a strategy chose earlier and still holds), if any."""
    return next((u for u in ready if u == unit), None)
