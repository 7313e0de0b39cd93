"""Set operations over relations given as signed deltas.

``UNION ALL`` merges the two delta streams in timestamp order.  The others keep each tuple's
count on both sides and emit the change of ``f(left, right)`` at each instant:
UNION max(·,1) of the sum, EXCEPT ALL ``max(0, l − r)``, INTERSECT ALL ``min(l, r)``,
EXCEPT ``[l > 0 ∧ r = 0]``, INTERSECT ``[l > 0 ∧ r > 0]``.  Inputs are processed up to the lower
watermark so both sides are seen in timestamp order.

EXCEPT (set semantics) over a right side that only inserts may keep that side as a Bloom filter
under a memory limit (STREAM §5.2.1: "Bloom filters for … set difference"; :meth:`SetOp.compress`):
a left tuple is then judged when it enters (its count leaves 0) — hidden if the filter reports it
on the right — and hidden for good when it arrives on the right.  A filter's false "present" hides
a tuple the exact answer shows (a false negative); it never shows one the exact answer hides, since
a right tuple is never forgotten.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
from sluice.plan.logical import SetOpKind
from sluice.runtime.batch import NEG_INF, concat, from_signed_rows, signed_counts, sort_by_ts
from sluice.runtime.bloom import BloomFilter, Filtered, row_hashes
from sluice.runtime.operators.base import Operator, OperatorSpec

_MET, _ENTERS, _LEAVES = 0, 1, 2  # what a tuple does at an instant, EXCEPT's filtered path

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
class SetOp(Operator, Filtered):
    spec: SetOpSpec
    STATE = ("counts", "bloom", "hidden", "exact_values")
    LATER = {"bloom": None, "hidden": None, "exact_values": 0}  # (a snapshot from before Bloom filters)

    def __post_init__(self) -> None:
        super().__post_init__()
        self.stateful = not (self.spec.op is SetOpKind.UNION and self.spec.all)
        self.counts: tuple[Counter[tuple[Any, ...]], Counter[tuple[Any, ...]]] = (Counter(), Counter())
        self.bloom: BloomFilter | None = None  # EXCEPT's right side, compressed
        self.hidden: set[tuple[Any, ...]] | None = None  # … then: left tuples judged on the right
        self.exact_values = 0  # left tuples shown when the filter took over
        self._right_inserts = False

    def declare(self, inputs: Sequence[Operator]) -> None:
        self.insert_only = all(i.insert_only for i in inputs) and self.spec.op is not SetOpKind.EXCEPT
        self._right_inserts = inputs[1].insert_only

    WHAT = "EXCEPT's right side"  # (how reports name it: ``sluice.approx.synopses``)
    FILTER_INPUT = 1

    @property
    def bloomable(self) -> bool:
        """EXCEPT whose right side only inserts: that side may be a Bloom filter."""
        return self.spec.op is SetOpKind.EXCEPT and not self.spec.all and self._right_inserts

    def compress(self, nbytes: int) -> str:
        """Keep the right side as a Bloom filter of ``nbytes``; what it did."""
        assert self.compressible
        left, right = self.counts
        before = self.state_bytes()
        rows = list(right)
        f = self.new_filter(nbytes, len(rows))
        f.add_known(row_hashes(rows, self.types))
        self.hidden = {row for row in left if right[row] > 0}
        self.exact_values = len(left) - len(self.hidden)
        self.counts = (left, Counter())
        return f"{before} B → the right side's {len(rows)} tuples as {f.describe()}"

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
        if self.bloom is not None:
            self._filtered(parts)
            return
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

    def _filtered(self, parts: list[pa.Table]) -> None:
        """EXCEPT with the right side a filter: per instant, the right side's tuples go into the
        filter first (an instant's answer is its end's), then each left tuple that enters is judged
        once (all of a read's together: ``BloomFilter.add_then_judge``); one arriving on the right
        is hidden for good.
        """
        assert self.bloom is not None and self.hidden is not None
        hidden, (left, _) = self.hidden, self.counts
        changes: dict[int, tuple[list[tuple[tuple[Any, ...], int]], list[tuple[Any, ...]]]] = {}
        for side, b in enumerate(parts):
            for ts, row, delta in signed_counts(b):
                if side == 0:
                    changes.setdefault(ts, ([], []))[0].append((row, delta))
                elif delta > 0:  # (the right side only inserts)
                    changes.setdefault(ts, ([], []))[1].append(row)
        # the left counts move once, in order: what each instant does to the answer, as events (a
        # right tuple meeting a present left one first, then left tuples entering and leaving),
        # and the entering ones judged together, each at its instant
        events: list[tuple[int, int, tuple[Any, ...]]] = []
        added: list[tuple[Any, ...]] = []
        at: list[int] = []
        asked: list[tuple[Any, ...]] = []
        when: list[int] = []
        for ts in sorted(changes):
            lefts, rights = changes[ts]
            added += rights
            at += [ts] * len(rights)
            events += [(ts, _MET, row) for row in rights if left[row] > 0]
            for row, delta in lefts:
                was = left[row]
                left[row] += delta
                if was == 0 and left[row] > 0:
                    events.append((ts, _ENTERS, row))
                    asked.append(row)
                    when.append(ts)
                elif was > 0 and left[row] == 0:
                    events.append((ts, _LEAVES, row))
                if left[row] == 0:
                    del left[row]
        h = [row_hashes(rows, self.types) for rows in (added, asked)]
        verdicts = iter(self.bloom.add_then_judge(h[0], np.array(at), h[1], np.array(when)).tolist())
        out: list[tuple[int, int, tuple[Any, ...]]] = []
        for ts, kind, row in events:
            if kind == _ENTERS:  # judged once: hidden if the filter reports it on the right
                if next(verdicts):
                    hidden.add(row)
                else:
                    out.append((ts, 1, row))
            elif kind == _MET:  # on the right now: hidden for good
                if row not in hidden:
                    hidden.add(row)
                    out.append((ts, -1, row))
            elif row in hidden:  # leaves
                hidden.discard(row)
            else:
                out.append((ts, -1, row))
        if out:
            self.emit(from_signed_rows(out, self.types))

    def state_by_input(self) -> list[int]:
        left, right = (48 * len(c) for c in self.counts)
        if self.bloom is not None and self.hidden is not None:
            left, right = left + 48 * len(self.hidden), right + self.bloom.nbytes
        return [left, right]

    def state_bytes(self) -> int:
        return sum(self.state_by_input())
