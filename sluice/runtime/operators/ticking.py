"""Filters and projections that read CURRENT_TIME over a relation.

By definition such a relation is re-evaluated at every instant: ``f(R(τ), τ)``.  The operator
keeps R, and for every tick while R is non-empty emits the change from ``f(R(τ−1), τ−1)`` to
``f(R(τ), τ)`` (empty stretches are skipped).  Row by row, with the shared scalar definitions.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from sluice.plan.expr import BExpr
from sluice.runtime.batch import from_signed_rows, to_elements
from sluice.runtime.operators.base import Unary
from sluice.runtime.rowexpr import Row, eval_row


def _no_subquery(*_: Any) -> Any:
    raise AssertionError("planned without subqueries")


class TickingMap(Unary):
    def setup(self, exprs: tuple[BExpr, ...], is_filter: bool) -> TickingMap:
        self.stateful = True
        self.exprs = exprs
        self.is_filter = is_filter
        self.state: Counter[Row] = Counter()
        self._held: list[tuple[int, int, Row]] = []
        self._last: Counter[Row] = Counter()  # f(R, τ) at the last tick emitted
        self._tick: int | None = None
        return self

    def process(self, b: Any) -> None:
        self._held += [(t, 1 if s == "+" else -1, r) for t, s, r in to_elements(b)]

    def _map(self, now: int) -> Counter[Row]:
        out: Counter[Row] = Counter()
        for r, n in self.state.items():
            if self.is_filter:
                if eval_row(self.exprs[0], r, (), _no_subquery, now) is True:
                    out[r] += n
            else:
                out[tuple(eval_row(c, r, (), _no_subquery, now) for c in self.exprs)] += n
        return out

    def progress(self, wm: int) -> None:
        start = self.ctx.start
        if start is None or wm < start:
            self.advance(wm)
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
        return 64 * (len(self.state) + len(self._held))
