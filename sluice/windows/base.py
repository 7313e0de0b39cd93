"""What every window kind shares: ``WindowDef`` (a bound window: its meaning and the properties the
planners read), ``Unbounded`` (CQL's default window), and the two small interfaces a kind's syntax
uses — ``WindowParser`` to parse itself, ``WindowBinding`` to bind itself.

At run time this module imports only ``sluice.errors``; the CQL names below are for the type checker.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeVar

if TYPE_CHECKING:
    import numpy as np

    from sluice.cql.ast import ColumnName, Duration
    from sluice.cql.errors import CQLError, Span
    from sluice.cql.tokens import T, Token

Row = tuple[Any, ...]
N = TypeVar("N", int, "np.ndarray")
_Item = TypeVar("_Item")


def visible(ts: N, span: int, step: int) -> tuple[N, N]:
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


class WindowParser(Protocol):
    """What a window kind's ``parse`` may ask of the CQL parser (``sluice.cql.parser.Parser``)."""

    source: str

    def accept_kw(self, *words: str) -> Token | None: ...

    def expect_kw(self, word: str) -> Token: ...

    def expect(self, ttype: T, what: str | None = None) -> Token: ...

    def duration(self) -> Duration:
        """``4 seconds``, or a bare ``4`` (the stream's own time unit)."""

    def column_name(self) -> ColumnName: ...

    def comma_list(self, item: Callable[[], _Item]) -> list[_Item]: ...


class WindowBinding(Protocol):
    """What a window kind's ``bind`` may ask of the binder (``sluice.plan.binder``), for the
    stream the window is over.
    """

    def ticks(self, d: Duration) -> int:
        """``d`` in ticks (a unitless ``d`` counts units of the stream's own time)."""

    def column(self, c: ColumnName, clause: str) -> int:
        """The position of ``c`` among the stream's columns; ``clause`` (``"Partition By"``) names
        where it was written, for the error if it is not one of them.
        """

    def error(self, msg: str, span: Span, hint: str | None = None) -> CQLError:
        """An error pointing at ``span`` of the query text (the caller raises it)."""
