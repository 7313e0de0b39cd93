"""Filters and projections that read CURRENT_TIME over a relation.

By definition such a relation is re-evaluated at every instant: ``f(R(τ), τ)``.  The operator
keeps R, and for every tick while R is non-empty emits the change from ``f(R(τ−1), τ−1)`` to
``f(R(τ), τ)`` (empty stretches are skipped).  Row by row, with the shared scalar definitions.

**Interval filters.**  When the filter is a conjunction whose CURRENT_TIME conjuncts all compare
an integer expression of the row with CURRENT_TIME (``e < CURRENT_TIME``, ``e >= CURRENT_TIME``,
``e = CURRENT_TIME`` …, as in NEXMark Q4/Q6's ``A.expires < CURRENT_TIME``), a row passes on one
interval of instants ``[lo, hi]``.  The answer is then linear in the input: an insertion (or
deletion) of a row at τ adds (removes) it on ``[max(τ, lo), hi]``, so each input element becomes
at most two output changes, scheduled on a heap — the same changes the tick-by-tick definition
emits, without visiting every tuple at every tick.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sluice.datatypes import TypeKind
from sluice.plan.analysis import conjuncts, uses_current_time
from sluice.plan.expr import BExpr, Call, CurrentTime
from sluice.runtime.batch import from_signed_rows, to_elements
from sluice.runtime.operators.base import OperatorSpec, Unary
from sluice.runtime.rowexpr import Row, eval_row


def _no_subquery(*_: Any) -> Any:
    raise AssertionError("planned without subqueries")


INF = float("inf")
# e OP CURRENT_TIME holds for τ in [lo(e), hi(e)]
_BOUNDS: dict[str, Callable[[int], tuple[float, float]]] = {
    "lt": lambda e: (e + 1, INF),
    "le": lambda e: (e, INF),
    "gt": lambda e: (-INF, e - 1),
    "ge": lambda e: (-INF, e),
    "eq": lambda e: (e, e),
}
_FLIP = {"lt": "gt", "le": "ge", "gt": "lt", "ge": "le", "eq": "eq"}


def _integral(e: BExpr) -> bool:
    return e.type.is_integer or e.type.kind is TypeKind.TIMESTAMP


def interval_filter(pred: BExpr) -> tuple[list[BExpr], list[tuple[str, BExpr]]] | None:
    """(time-independent conjuncts, [(op, e)] meaning ``e op CURRENT_TIME``), or None if the
    predicate is not an interval filter.
    """
    static: list[BExpr] = []
    bounds: list[tuple[str, BExpr]] = []
    for c in conjuncts(pred):
        if not uses_current_time(c):
            static.append(c)
            continue
        if not (isinstance(c, Call) and c.fn in _BOUNDS):
            return None
        a, b = c.args
        if isinstance(b, CurrentTime) and not uses_current_time(a) and _integral(a):
            bounds.append((c.fn, a))
        elif isinstance(a, CurrentTime) and not uses_current_time(b) and _integral(b):
            bounds.append((_FLIP[c.fn], b))
        else:
            return None
    return static, bounds


@dataclass(frozen=True, slots=True)
class TickingMapSpec(OperatorSpec):
    exprs: tuple[BExpr, ...]  # a filter's predicate (one), or a projection's columns
    is_filter: bool


@dataclass
class TickingMap(Unary):
    spec: TickingMapSpec
    STATE = ("state", "_held", "_last", "_tick", "_events", "_seq")

    def __post_init__(self) -> None:
        super().__post_init__()
        self.stateful = True
        self.state: Counter[Row] = Counter()
        self._held: list[tuple[int, int, Row]] = []
        self._last: Counter[Row] = Counter()  # f(R, τ) at the last tick emitted
        self._tick: int | None = None
        self._interval = interval_filter(self.spec.exprs[0]) if self.spec.is_filter else None
        self._events: list[tuple[int, int, int, Row]] = []  # (tick, seq, sign, row): the interval path
        self._seq = 0

    def _window(self, r: Row) -> tuple[float, float] | None:
        """The instants on which ``r`` passes (interval filters), or None if it never does."""
        assert self._interval is not None
        static, bounds = self._interval
        if not all(eval_row(c, r, (), _no_subquery, None) is True for c in static):
            return None
        lo, hi = -INF, INF
        for op, e in bounds:
            v = eval_row(e, r, (), _no_subquery, None)
            if v is None:
                return None
            a, b = _BOUNDS[op](v)
            lo, hi = max(lo, a), min(hi, b)
        return (lo, hi) if lo <= hi else None

    def _progress_intervals(self, wm: int, start: int) -> None:
        for t, sign, r in self._held:
            w = self._window(r)
            if w is None:
                continue
            lo, hi = w
            begin = max(t, start, lo)
            if begin > hi:
                continue
            self._seq += 1
            heapq.heappush(self._events, (int(begin), self._seq, sign, r))
            if hi != INF:
                self._seq += 1
                heapq.heappush(self._events, (int(hi) + 1, self._seq, -sign, r))
        self._held = []
        net: Counter[tuple[int, Row]] = Counter()
        while self._events and self._events[0][0] <= wm:
            tick, _, sign, r = heapq.heappop(self._events)
            net[(tick, r)] += sign
        out = [(tick, 1 if n > 0 else -1, r) for (tick, r), n in net.items() for _ in range(abs(n)) if n]
        out.sort(key=lambda e: e[0])
        self._tick = wm
        if out:
            self.emit(from_signed_rows(out, self.types))
        self.advance(wm)

    def process(self, b: Any) -> None:
        self._held += [(t, 1 if s == "+" else -1, r) for t, s, r in to_elements(b)]

    def _map(self, now: int) -> Counter[Row]:
        out: Counter[Row] = Counter()
        for r, n in self.state.items():
            if self.spec.is_filter:
                if eval_row(self.spec.exprs[0], r, (), _no_subquery, now) is True:
                    out[r] += n
            else:
                out[tuple(eval_row(c, r, (), _no_subquery, now) for c in self.spec.exprs)] += n
        return out

    def progress(self, wm: int) -> None:
        start = self.ctx.start
        if start is None or wm < start:
            self.advance(wm)
            return
        if self._interval is not None:
            self._progress_intervals(wm, start)
            return
        tick = start if self._tick is None else self._tick + 1
        held = sorted(self._held, key=lambda e: e[0])
        pos = 0
        out: list[tuple[int, int, Row]] = []
        while tick <= wm:
            while pos < len(held) and held[pos][0] <= tick:
                _, sign, row = held[pos]
                self.state[row] += sign
                if self.state[row] == 0:
                    del self.state[row]
                pos += 1
            cur = self._map(tick)
            for r, n in (self._last - cur).items():
                out += [(tick, -1, r)] * n
            for r, n in (cur - self._last).items():
                out += [(tick, 1, r)] * n
            self._last = cur
            if self.state:
                tick += 1
            else:  # empty until the next change
                tick = max(tick + 1, held[pos][0] if pos < len(held) else wm + 1)
        self._held = held[pos:]
        self._tick = wm
        if out:
            self.emit(from_signed_rows(out, self.types))
        self.advance(wm)

    def state_bytes(self) -> int:
        return 64 * (len(self.state) + len(self._held) + len(self._events))
