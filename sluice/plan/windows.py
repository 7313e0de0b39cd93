"""Window kinds (stream → relation, seed §2.2 / CQL §5.1): one class each, sizes in ticks.

A window kind carries everything the layers above the runtime ask of it: its EXPLAIN text, its
meaning by definition (``contents``, which the reference evaluator runs), the instants at which
its contents can change with no new input (``changes_after``), and the properties the planner and
the Spark compiler read — so a consumer asks ``spec.insert_only`` or ``spec.time_based``, never
compares kind names.  The runtime's operator for each kind is registered in
``sluice.runtime.operators.windows.WINDOW_OPERATORS`` (a test checks every kind has one).

Adding a window kind: a subclass here, its operator there, and its syntax in the parser/binder.

>>> Range(10, slide=5).describe()
'Range 10 ticks Slide 5 ticks'
>>> Range(2).contents([(1, ("a",)), (3, ("b",)), (4, ("c",))], 4)
[('b',), ('c',)]
>>> Rows(2).order_sensitive, Range(2).order_sensitive
(True, False)
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from sluice.errors import InternalError

if TYPE_CHECKING:
    import numpy as np

Row = tuple[Any, ...]
T = TypeVar("T", int, "np.ndarray")


def visible(ts: T, span: int, step: int) -> tuple[T, T]:
    """``(a, d)``: an element with timestamp ``ts`` of a window of ``span`` ticks moving in steps
    of ``step`` is in the window from instant ``a`` until just before ``d`` — the window at τ is
    as of ``⌊τ/U⌋·U`` and holds timestamps in ``[τ − T, τ]``, so ``a = ⌈ts/U⌉·U`` and
    ``d = ⌊(ts+T)/U⌋·U + U`` (never visible if ``a ≥ d``).  Scalars or NumPy arrays.

    >>> visible(3, 4, 2), visible(5, 0, 1)
    ((4, 8), (5, 6))
    """
    return -(-ts // step) * step, ((ts + span) // step) * step + step


class WindowDef(ABC):
    """A bound window.  Subclasses are frozen dataclasses (plans compare them structurally)."""

    __slots__ = ()

    #: contents depend on timestamps alone (not on arrival order within an instant, nor on other
    #: elements): such a window commutes with any split of the stream and with selections
    time_based: ClassVar[bool] = False
    #: the relation only ever grows (no element leaves the window)
    insert_only: ClassVar[bool] = False

    @property
    def order_sensitive(self) -> bool:
        """Contents depend on the order of elements within an instant (so an input stream must
        deliver each instant in its canonical order).
        """
        return not self.time_based

    @property
    def stateful(self) -> bool:
        return not self.insert_only

    @property
    def partition(self) -> tuple[int, ...]:
        """Columns whose values split the window into independent windows (Partition By)."""
        return ()

    def keeps_split(self, key: tuple[int, ...]) -> bool:
        """Running the window separately on each part of a stream split by ``key`` gives the
        union of the parts' windows.
        """
        return self.time_based or (bool(self.partition) and set(key) <= set(self.partition))

    def as_of(self, tau: int) -> int:
        """The instant whose window the relation shows at ``tau`` (a Slide holds it still)."""
        return tau

    @property
    def lifetime(self) -> tuple[int, int] | None:
        """``(T, U)`` for a window whose elements each stay a fixed time: ``T`` ticks after their
        timestamp, the window moving in steps of ``U`` ticks; None if elements never leave by time
        alone (Unbounded, Rows, Partition By).
        """
        return None

    def changes_after(self, ts: int) -> tuple[int, ...]:
        """Instants at which an element with timestamp ``ts`` may enter or leave the window
        (with no further input).
        """
        span = self.lifetime
        return () if span is None else tuple(int(x) for x in visible(ts, *span))

    @abstractmethod
    def contents(self, upto: Sequence[tuple[int, Row]], tau: int) -> list[Row]:
        """The window at ``tau`` by definition: ``upto`` is the stream's elements with timestamp
        ``≤ tau`` in arrival order (``tau`` already ``as_of``).
        """

    @abstractmethod
    def describe(self, names: tuple[str, ...] = ()) -> str:
        """EXPLAIN text."""


@dataclass(frozen=True, slots=True)
class Unbounded(WindowDef):
    """``[Range Unbounded]`` / ``[Rows Unbounded]``: every element so far (CQL's default)."""

    time_based: ClassVar[bool] = True
    insert_only: ClassVar[bool] = True

    def contents(self, upto: Sequence[tuple[int, Row]], tau: int) -> list[Row]:
        return [r for _, r in upto]

    def describe(self, names: tuple[str, ...] = ()) -> str:
        return "Range Unbounded"


@dataclass(frozen=True, slots=True)
class Now(WindowDef):
    """``[Now]``: the elements with timestamp ``tau``."""

    time_based: ClassVar[bool] = True

    @property
    def lifetime(self) -> tuple[int, int] | None:
        return (0, 1)

    def contents(self, upto: Sequence[tuple[int, Row]], tau: int) -> list[Row]:
        return [r for t, r in upto if t == tau]

    def describe(self, names: tuple[str, ...] = ()) -> str:
        return "Now"


@dataclass(frozen=True, slots=True)
class Range(WindowDef):
    """``[Range T]``: elements with timestamp in ``[tau − T, tau]``; with ``Slide U`` the window
    as of ``⌊tau/U⌋·U``.
    """

    range: int
    slide: int | None = None
    time_based: ClassVar[bool] = True

    def __post_init__(self) -> None:
        if self.range < 0 or (self.slide is not None and self.slide <= 0):
            raise InternalError(f"malformed window {self!r}")

    def as_of(self, tau: int) -> int:
        return (tau // self.slide) * self.slide if self.slide else tau

    @property
    def lifetime(self) -> tuple[int, int] | None:
        return (self.range, self.slide or 1)

    def contents(self, upto: Sequence[tuple[int, Row]], tau: int) -> list[Row]:
        return [r for t, r in upto if t >= tau - self.range]

    def describe(self, names: tuple[str, ...] = ()) -> str:
        s = f"Range {self.range} ticks"
        return s + (f" Slide {self.slide} ticks" if self.slide else "")


@dataclass(frozen=True, slots=True)
class Rows(WindowDef):
    """``[Rows N]``: the last ``N`` elements (by timestamp, then arrival order)."""

    rows: int

    def __post_init__(self) -> None:
        if self.rows <= 0:
            raise InternalError(f"malformed window {self!r}")

    def contents(self, upto: Sequence[tuple[int, Row]], tau: int) -> list[Row]:
        return [r for _, r in upto[-self.rows :]] if upto else []

    def describe(self, names: tuple[str, ...] = ()) -> str:
        return f"Rows {self.rows}"


@dataclass(frozen=True, slots=True)
class PartitionedRows(WindowDef):
    """``[Partition By k Rows N]``: the last ``N`` elements of each distinct value of ``k``."""

    keys: tuple[int, ...]
    rows: int

    def __post_init__(self) -> None:
        if self.rows <= 0 or not self.keys:
            raise InternalError(f"malformed window {self!r}")

    @property
    def partition(self) -> tuple[int, ...]:
        return self.keys

    def contents(self, upto: Sequence[tuple[int, Row]], tau: int) -> list[Row]:
        parts: dict[Row, list[Row]] = {}
        for _, r in upto:
            parts.setdefault(tuple(r[i] for i in self.keys), []).append(r)
        return [r for rows in parts.values() for r in rows[-self.rows :]]

    def describe(self, names: tuple[str, ...] = ()) -> str:
        keys = ", ".join(names[i] if i < len(names) else f"#{i}" for i in self.keys)
        return f"Partition By {keys} Rows {self.rows}"


def window_kinds() -> list[type[WindowDef]]:
    """Every concrete window kind (for registration checks)."""
    return [Unbounded, Now, Range, Rows, PartitionedRows]
