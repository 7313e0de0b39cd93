"""SQL's aggregates as accumulators: the one definition of COUNT, SUM, AVG, MIN and MAX (and their
DISTINCT forms) that the reference evaluator and the engine's aggregation both use (Spark's
processors run the engine's operators, so they use it too).

An accumulator holds a multiset of non-NULL argument values with counts, so a deletion retracts
exactly what an insertion added (CQL relations change both ways: seed §2), and two accumulators
over disjoint parts of a group merge into the accumulator of the whole.  ``evaluate`` is SQL's
aggregate of the multiset: NULLs never enter; SUM/AVG/MIN/MAX of nothing is NULL; integer sums are
exact; float sums are the exact sum rounded once, with IEEE infinities and no NaN
(``sluice.plan.numeric``); AVG of integers is correctly rounded.  COUNT(*) is a COUNT whose
argument is never NULL.

``insert``/``retract`` take an Arrow array (vectorised: one Arrow kernel for counts and integer
sums, one ``value_counts`` for the per-value kinds) or a Python sequence; ``add(value, count)``
is the per-value step.  The engine's counting path (``runtime/operators/counting.Counting``)
keeps COUNT and SUM/AVG state for many groups in arrays instead, and MIN/MAX too where the input
deletes values in the order it inserted them (a window over a stream); ``AggregateDef.counting``
says which calls it takes, and the differential tests hold it to these definitions.

>>> from sluice.datatypes import INTEGER, FLOAT
>>> from sluice.plan.expr import ColRef
>>> acc = accumulator(AggCall(AggKind.AVG, ColRef(0, INTEGER), False, FLOAT))
>>> acc.insert([1, 2, None, 4]); acc.retract([4]); acc.evaluate()
1.5
"""

from __future__ import annotations

import heapq
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from sluice.datatypes import TypeKind
from sluice.errors import InternalError
from sluice.plan.expr import AggCall, AggKind
from sluice.plan.numeric import float_sum
from sluice.plan.semantics import coerce


class Accumulator(ABC):
    """A multiset of an aggregate's non-NULL argument values, and the aggregate of it."""

    __slots__ = ()

    @abstractmethod
    def add(self, value: Any, count: int) -> None:
        """``count`` copies of a non-NULL ``value`` in (count > 0) or out (count < 0)."""

    @abstractmethod
    def evaluate(self) -> Any:
        """The aggregate of the multiset now (NULL as ``None``)."""

    @abstractmethod
    def merge(self, other: Accumulator) -> None:
        """Add everything ``other`` holds (an accumulator of the same call)."""

    @property
    @abstractmethod
    def empty(self) -> bool:
        """Whether it holds no value."""

    @property
    def entries(self) -> int:
        """How many values it stores (for memory accounting; counters and sums store none)."""
        return 0

    def insert(self, values: pa.Array | Iterable[Any]) -> None:
        """Add the non-NULL values (an Arrow array or a sequence)."""
        self._bulk(values, 1)

    def retract(self, values: pa.Array | Iterable[Any]) -> None:
        """Remove values that were inserted (an Arrow array or a sequence)."""
        self._bulk(values, -1)

    def _bulk(self, values: pa.Array | Iterable[Any], sign: int) -> None:
        if isinstance(values, pa.ChunkedArray | pa.Array):
            for item in pc.value_counts(values.drop_null()).to_pylist():
                self.add(item["values"], sign * item["counts"])
            return
        for v in values:
            if v is not None:
                self.add(v, sign)


class Summable(Accumulator):
    """An accumulator that needs only how many values and their sum: a column group-by's
    ``count``/``sum`` per group is its vectorised insert.
    """

    __slots__ = ()

    @abstractmethod
    def add_totals(self, n: int, total: int) -> None:
        """``n`` values summing to ``total`` in (``n`` < 0: out)."""


class Count(Summable):
    """COUNT(x) (and COUNT(*), whose argument is never NULL)."""

    __slots__ = ("n",)

    def __init__(self) -> None:
        self.n = 0

    def add(self, value: Any, count: int) -> None:
        self.n += count

    def add_totals(self, n: int, total: int) -> None:
        self.n += n

    def _bulk(self, values: pa.Array | Iterable[Any], sign: int) -> None:
        if isinstance(values, pa.ChunkedArray | pa.Array):
            self.n += sign * (len(values) - values.null_count)
        else:
            super()._bulk(values, sign)

    def evaluate(self) -> Any:
        return self.n

    def merge(self, other: Accumulator) -> None:
        assert isinstance(other, Count)
        self.n += other.n

    @property
    def empty(self) -> bool:
        return self.n == 0


class Values(Accumulator):
    """Every value with its count: what DISTINCT aggregates, MIN/MAX and float sums need."""

    __slots__ = ("counts",)

    def __init__(self) -> None:
        self.counts: Counter[Any] = Counter()

    def add(self, value: Any, count: int) -> None:
        c = self.counts[value] + count
        if c:
            self.counts[value] = c
        else:
            del self.counts[value]

    def merge(self, other: Accumulator) -> None:
        assert isinstance(other, Values)
        for v, c in other.counts.items():
            self.add(v, c)

    @property
    def empty(self) -> bool:
        return not self.counts

    @property
    def entries(self) -> int:
        return len(self.counts)


class CountDistinct(Values):
    __slots__ = ()

    def evaluate(self) -> Any:
        return len(self.counts)


class IntegerSum(Summable):
    """SUM/AVG of integers: the exact sum and how many values (O(1) per change)."""

    __slots__ = ("avg", "n", "total")

    def __init__(self, avg: bool) -> None:
        self.avg, self.n, self.total = avg, 0, 0

    def add(self, value: Any, count: int) -> None:
        self.n += count
        self.total += value * count

    def add_totals(self, n: int, total: int) -> None:
        self.n += n
        self.total += total

    def _bulk(self, values: pa.Array | Iterable[Any], sign: int) -> None:
        if isinstance(values, pa.ChunkedArray | pa.Array):
            s = pc.sum(values.cast(pa.int64()) if values.type != pa.int64() else values).as_py()
            self.n += sign * (len(values) - values.null_count)
            self.total += sign * (s or 0)
        else:
            super()._bulk(values, sign)

    def evaluate(self) -> Any:
        if self.n == 0:
            return None
        return float(Fraction(self.total, self.n)) if self.avg else self.total

    def merge(self, other: Accumulator) -> None:
        assert isinstance(other, IntegerSum)
        self.n += other.n
        self.total += other.total

    @property
    def empty(self) -> bool:
        return self.n == 0


class ValueSum(Values):
    """SUM/AVG over value counts: of floats (exact, rounded once) and of DISTINCT values."""

    __slots__ = ("avg", "distinct", "floating")

    def __init__(self, avg: bool, distinct: bool, floating: bool) -> None:
        super().__init__()
        self.avg, self.distinct, self.floating = avg, distinct, floating

    def evaluate(self) -> Any:
        if not self.counts:
            return None
        items = [(v, 1 if self.distinct else c) for v, c in self.counts.items()]
        n = sum(c for _, c in items)
        # a float argument sums as floats even when its values are whole (1 and 1.0 are one key)
        if self.floating or any(isinstance(v, float) for v, _ in items):
            return float_sum(((float(v), c) for v, c in items), n if self.avg else 1)
        s = sum(v * c for v, c in items)
        return float(Fraction(s, n)) if self.avg else s


class _Rev:
    """Reverses the order of a value: a max-heap out of ``heapq``'s min-heap (strings too)."""

    __slots__ = ("v",)

    def __init__(self, v: Any) -> None:
        self.v = v

    def __lt__(self, other: _Rev) -> bool:
        return bool(other.v < self.v)


class Extreme(Values):
    """MIN/MAX: value counts and a heap of the values with lazy deletion — a value whose count
    fell to 0 leaves when it reaches the top, so retracting the extreme never rescans.
    """

    __slots__ = ("heap", "is_max", "numeric", "type")

    def __init__(self, agg: AggCall) -> None:
        super().__init__()
        self.is_max = agg.fn is AggKind.MAX
        self.type = agg.type
        self.numeric = agg.arg is not None and agg.arg.type.kind in _NUMBERS
        self.heap: list[Any] = []

    def _entry(self, v: Any) -> Any:
        return (-v if self.numeric else _Rev(v)) if self.is_max else v

    def add(self, value: Any, count: int) -> None:
        before = self.counts.get(value, 0)
        super().add(value, count)
        if before <= 0 < before + count:  # a value (re)enters: it needs an entry in the heap
            if len(self.heap) > 2 * len(self.counts) + 16:  # mostly stale: rebuild from the live values
                self.heap = [self._entry(v) for v in self.counts]
                heapq.heapify(self.heap)
            else:
                heapq.heappush(self.heap, self._entry(value))

    def evaluate(self) -> Any:
        heap = self.heap
        while heap:
            top = heap[0]
            v = (-top if self.numeric else top.v) if self.is_max else top
            if self.counts.get(v, 0) > 0:
                return coerce(v, self.type)
            heapq.heappop(heap)
        return None


_NUMBERS = (TypeKind.INTEGER, TypeKind.BIGINT, TypeKind.FLOAT, TypeKind.TIMESTAMP)


@dataclass(frozen=True)
class AggregateDef:
    """One aggregate function: how to accumulate it, and whether the engine's vectorised counting
    path (``Counting``) takes a call of it — ``counting(call, fifo)``, ``fifo`` when the input
    deletes values in the order it inserted them (COUNT, SUM/AVG without DISTINCT; MIN/MAX on a FIFO).
    """

    kind: AggKind
    make: Callable[[AggCall], Accumulator]
    counting: Callable[[AggCall, bool], bool]


def _float_arg(a: AggCall) -> bool:
    return a.arg is not None and a.arg.type.kind is TypeKind.FLOAT


def _sum(avg: bool) -> Callable[[AggCall], Accumulator]:
    def make(a: AggCall) -> Accumulator:
        if a.distinct or _float_arg(a):
            return ValueSum(avg, a.distinct, _float_arg(a))
        return IntegerSum(avg)

    return make


AGGREGATES: dict[AggKind, AggregateDef] = {
    AggKind.COUNT: AggregateDef(
        AggKind.COUNT, lambda a: CountDistinct() if a.distinct else Count(), lambda a, fifo: not a.distinct
    ),
    AggKind.SUM: AggregateDef(AggKind.SUM, _sum(False), lambda a, fifo: not a.distinct),
    AggKind.AVG: AggregateDef(AggKind.AVG, _sum(True), lambda a, fifo: not a.distinct),
    # MIN(DISTINCT x) is MIN(x): the same FIFO path
    AggKind.MIN: AggregateDef(AggKind.MIN, Extreme, lambda a, fifo: fifo),
    AggKind.MAX: AggregateDef(AggKind.MAX, Extreme, lambda a, fifo: fifo),
}


def definition(a: AggCall) -> AggregateDef:
    d = AGGREGATES.get(a.fn)
    if d is None:
        raise InternalError(f"no aggregate definition for {a.fn!r}")
    return d


def accumulator(a: AggCall) -> Accumulator:
    """A new, empty accumulator for an aggregate call."""
    return definition(a).make(a)


def counting(a: AggCall, fifo: bool = False) -> bool:
    """Whether the engine's vectorised counting path takes this call (``fifo``: over an input that
    deletes in insertion order).
    """
    return definition(a).counting(a, fifo)
