"""Set operations over relations given as signed deltas.

``UNION ALL`` merges the two delta streams in timestamp order.  The others keep each tuple's
count on both sides and emit the change of ``f(left, right)`` at each instant:
UNION max(·,1) of the sum, EXCEPT ALL ``max(0, l − r)``, INTERSECT ALL ``min(l, r)``,
EXCEPT ``[l > 0 ∧ r = 0]``, INTERSECT ``[l > 0 ∧ r > 0]``.  Inputs are processed up to the lower
watermark so both sides are seen in timestamp order.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from sluice.plan.logical import SetOpKind
from sluice.runtime.batch import NEG_INF, concat, from_signed_rows, signed_counts, sort_by_ts
from sluice.runtime.operators.base import Operator, OperatorSpec

_F: dict[tuple[SetOpKind, bool], Callable[[int, int], int]] = {  # (left count, right count) -> output count
    (SetOpKind.UNION, False): lambda a, b: 1 if a + b > 0 else 0,
    (SetOpKind.EXCEPT, True): lambda a, b: max(0, a - b),
    (SetOpKind.EXCEPT, False): lambda a, b: 1 if a > 0 and b <= 0 else 0,
    (SetOpKind.INTERSECT, True): lambda a, b: min(a, b),
    (SetOpKind.INTERSECT, False): lambda a, b: 1 if a > 0 and b > 0 else 0,
}


@dataclass(frozen=True, slots=True)
class SetOpSpec(OperatorSpec):
    op: SetOpKind
    all: bool  # UNION ALL, EXCEPT ALL, INTERSECT ALL


@dataclass
class SetOp(Operator):
    spec: SetOpSpec
    STATE = ("counts",)

    def __post_init__(self) -> None:
        super().__post_init__()
        self.stateful = not (self.spec.op is SetOpKind.UNION and self.spec.all)
        self.counts: tuple[Counter[tuple[Any, ...]], Counter[tuple[Any, ...]]] = (Counter(), Counter())

    def declare(self, inputs: Sequence[Operator]) -> None:
        self.insert_only = all(i.insert_only for i in inputs) and self.spec.op is not SetOpKind.EXCEPT

    def has_work(self) -> bool:
        return self.aligned_has_work()

    def _run(self, budget: int) -> int:
        bound = self._arrival_bound()
        parts = self.read_aligned(budget)
        n = sum(p.num_rows for p in parts)
        if self.spec.op is SetOpKind.UNION and self.spec.all:
            out = sort_by_ts(concat(parts, self.types))
            if out.num_rows:
                self.emit(out)
        elif n:
            self._counted(parts)
        done = min(bound, self._input_watermark())
        if done > NEG_INF:
            self.advance(done)
        return n

    def _counted(self, parts: list[pa.Table]) -> None:
        f = _F[(self.spec.op, self.spec.all)]
        changes: dict[tuple[int, tuple[Any, ...]], list[int]] = {}
        for side, b in enumerate(parts):
            for ts, row, delta in signed_counts(b):
                changes.setdefault((ts, row), [0, 0])[side] += delta
        out = []
        left, right = self.counts
        for (ts, row), (dl, dr) in sorted(changes.items(), key=lambda kv: kv[0][0]):
            before = f(left[row], right[row])
            left[row] += dl
            right[row] += dr
            after = f(left[row], right[row])
            for c in (left, right):
                if c[row] == 0:
                    del c[row]
            d = after - before
            out += [(ts, 1 if d > 0 else -1, row)] * abs(d)
        if out:
            self.emit(from_signed_rows(out, self.types))

    def state_bytes(self) -> int:
        return 48 * (len(self.counts[0]) + len(self.counts[1]))
