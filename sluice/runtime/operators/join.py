"""Symmetric join of two relations given as signed deltas (seed §3: one synopsis per input).

A join is bilinear.  Each run processes only elements with ``ts ≤ min(watermarks)``, so every
element already in a synopsis is older than every new one.  A run's changes are read as lifetimes
(``sluice.runtime.lifetimes``): with ``L'``, ``R'`` the rows held all run long (the synopses less
the copies the run deletes) and ``ΔL``, ``ΔR`` the lifetimes that start or end in it, the output
is ``ΔL ⋈ R'`` (at ΔL's starts and ends) + ``L' ⋈ ΔR`` + the pairs of ``ΔL × ΔR`` that overlap
(entering at the later start, leaving at the earlier end; an interval join).  Pairing the run's
signed elements instead — each insertion and deletion with each of the other side's — also pairs
lifetimes that never met, whose outputs cancel: with short windows and batches spanning many
instants that was nearly all the work (issue #11; a 3-way window join 31× faster, design 010).
A run whose changes pair by key no more often than there are changes is still paired as signed
elements (at the later stamp, the product of the signs): cheaper than reading lifetimes.
Equality conjuncts become hash-join keys (Arrow's hash join); the rest of the condition filters
the joined rows.  Without keys the pairs are a cross product (nested loop).

**k-constraints (STREAM §4.1).** When an input only inserts, in a stream's order, and that
stream declares ``ORDERED BY``, ``CLUSTERED BY`` or ``UNIQUE BY`` a join key (``KeyGuard``, found by the
planner), the join tracks the promise over what it reads (``sluice.runtime.constraints``): a row
of the *other* synopsis whose key that input will never have again pairs with nothing later and
is forgotten.  The source rejects elements that break the promise, so no pair is ever missed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
from sluice.cql.ast import StreamConstraint
from sluice.datatypes import DataType
from sluice.plan.expr import BExpr
from sluice.runtime.batch import META, NEG_INF, POS_INF, concat, make, net, sort_by_ts, ts_of
from sluice.runtime.constraints import Constraints
from sluice.runtime.keys import key_pairs
from sluice.runtime.lifetimes import Lifetimes, lifetimes, overlapping, pair_count
from sluice.runtime.operators.base import Operator, OperatorSpec
from sluice.runtime.queue import count_upto
from sluice.runtime.synopsis import FifoSynopsis, RelationSynopsis, W
from sluice.runtime.vexpr import compile_expr, evaluate_rows, truth_mask

FEW = 16  # lifetimes on one side below which a run's overlaps are found by hash, not by sorting
# pairs of changes per change up to which a run's changes are paired as signed elements (fewer
# steps than lifetimes); beyond, most such pairs would cancel (tests set it to 0 and to infinity)
SIGNED_PAIRS_PER_CHANGE = 1


@dataclass(frozen=True, slots=True)
class KeyGuard:
    """Input ``side`` (0 left, 1 right) only inserts, in the order of a stream that adheres to
    ``constraint`` on join key ``key`` (an index of ``JoinSpec.keys``).
    """

    side: int
    key: int
    constraint: StreamConstraint
    stream: str = ""  # whose constraint (a PUNCTUATED BY reads that stream's punctuations)


@dataclass(frozen=True, slots=True)
class JoinSpec(OperatorSpec):
    left_types: tuple[DataType, ...]
    right_types: tuple[DataType, ...]
    keys: tuple[tuple[int, int], ...]  # (left column, right column) pairs that must be equal
    residual: BExpr | None  # the rest of the condition, over the joined row
    guards: tuple[KeyGuard, ...] = ()  # k-constraints an input's keys adhere to (STREAM §4.1)
    fifo: tuple[bool, bool] = (False, False)  # per input: it deletes in the order it inserted


@dataclass
class Join(Operator):
    spec: JoinSpec
    STATE = ("left", "right")
    PARTS = ("left_promise", "right_promise")

    def __post_init__(self) -> None:
        super().__post_init__()
        self.stateful = True
        self.residual = compile_expr(self.spec.residual) if self.spec.residual is not None else None
        self.left, self.right = self._synopsis(0), self._synopsis(1)
        # what each input's k-constraints promise about its keys, tracked over what it read
        (self.left_promise, ls), (self.right_promise, rs) = (self._promise(side) for side in (0, 1))
        self._slots = (ls, rs)  # per side, per guard: which of its promise's constraints it reads

    def _guards(self, side: int) -> list[KeyGuard]:
        return [g for g in self.spec.guards if g.side == side]

    def _promise(self, side: int) -> tuple[Constraints | None, list[int]]:
        """What input ``side``'s constraints promise, each (constraint, column) tracked once
        (one column may be in several keys), and where each of its guards finds it.
        """
        tracked: list[tuple[StreamConstraint, int]] = []
        slots = []
        for g in self._guards(side):
            item = (g.constraint, self.spec.keys[g.key][side])
            if item not in tracked:
                tracked.append(item)
            slots.append(tracked.index(item))
        name = f"{self.name} {'left' if side == 0 else 'right'}"
        streams = {(g.constraint, self.spec.keys[g.key][side]): g.stream for g in self._guards(side)}
        logs = [self.ctx.punctuations.get(streams[item].lower()) for item in tracked]
        return (Constraints(name, tracked, logs) if tracked else None), slots

    def declare(self, inputs: Sequence[Operator]) -> None:
        self.insert_only = all(i.insert_only for i in inputs)

    def has_work(self) -> bool:
        return self.aligned_has_work()

    def _run(self, budget: int) -> int:
        bound = self._arrival_bound()
        read = self.read_aligned(budget)
        # (not an input kept in insertion order: it deletes its oldest copy, not a new one)
        dl, dr = (
            d if fifo else net_small(d, t) for d, t, fifo in zip(read, self._input_types, self._fifo, strict=True)
        )
        parts, add_l, add_r = [], dl, dr
        if dl.num_rows and dr.num_rows and self._few_pairs(dl, dr):
            # Both inputs changed, in few pairs of changes with equal keys: each pair contributes
            # the product of its signs at the later stamp (bilinearity) — cheaper than lifetimes.
            parts.append(self._signed_pairs(dl, dr))
        elif dl.num_rows and dr.num_rows:
            # Both inputs changed: read as lifetimes, a pair of changes contributes only where the
            # two lifetimes meet (``sluice.runtime.lifetimes``) — not every insertion with every
            # deletion of the run, whose outputs cancel.  Copies held before the run that it
            # deletes leave the synopses first: they then hold what is there all run long.
            ll, lr = lifetimes(dl, self._held(0)), lifetimes(dr, self._held(1))
            parts.append(self._overlaps(ll, dl, lr, dr))
            self.left.add(take_rows(dl, ll.gone))
            self.right.add(take_rows(dr, lr.gone))
            add_l, add_r = take_rows(dl, ll.kept), take_rows(dr, lr.kept)
            dl, dr = _without(dl, ll.cancelled), _without(dr, lr.cancelled)  # (for the held rows)
        # (a synopsis is read as it is, not consolidated: a held row and its deletion pair alike
        # and cancel — the synopsis consolidates itself when half of it is such rows)
        if dl.num_rows:
            parts.append(self._pairs(dl, self.right.table, delta_left=True))
        if dr.num_rows:
            parts.append(self._pairs(self.left.table, dr, delta_left=False))
        # An input that has ended (a static relation's rows, all read) never pairs with what the
        # other input sends later except as ΔL ⋈ R: the other side's synopsis is not needed
        # (STREAM §2.2: a stream joined with a static relation needs no window of it).
        # (read whole instants: every input's elements up to the last stamp read are in)
        through = max((int(ts_of(r)[-1]) for r in read if r.num_rows), default=None)
        closing = [
            o is not None and o.track(d, through) for o, d in ((self.left_promise, dl), (self.right_promise, dr))
        ]
        if self._ended(1):
            if len(self.left):
                self.left = self._synopsis(0)
        else:
            self.left.add(self._needed(add_l, 0))
            if closing[1]:
                self.left.drop(self._unneeded(self.left.table, 0, 0))
        if self._ended(0):
            if len(self.right):
                self.right = self._synopsis(1)
        else:
            self.right.add(self._needed(add_r, 1))
            if closing[0]:
                self.right.drop(self._unneeded(self.right.table, 1, 0))
        out = [p for p in parts if p is not None and p.num_rows]
        if out:
            self.emit(sort_by_ts(concat(out, self.types)))
        done = min(bound, self._input_watermark())
        if done > NEG_INF:
            self.advance(done)
        return sum(d.num_rows for d in read)

    def moves_time_quietly(self) -> bool:
        """Nothing it may read yet (strict timestamp order, Chain §5): a turn only moves time on
        (it emits only pairs of what it reads; an input that has ended lets it drop the other
        side's synopsis, as any turn would).
        """
        bound = self._arrival_bound()
        return not any(count_upto(r, bound, 1) for r in self.readers)

    def _synopsis(self, side: int) -> RelationSynopsis:
        """Input ``side``'s synopsis: its rows in insertion order where it deletes oldest first
        (and no k-constraint of the other input lets it forget rows out of that order).
        """
        types = self.spec.left_types if side == 0 else self.spec.right_types
        return FifoSynopsis(types) if self.spec.fifo[side] and not self.spec.guards else RelationSynopsis(types)

    def _held(self, side: int) -> int | None:
        """How many copies input ``side``'s synopsis holds, if it keeps them in insertion order
        (``_synopsis``: its deletions end them oldest first, and ``sluice.runtime.lifetimes``
        pairs them by position); None otherwise.
        """
        syn = self.left if side == 0 else self.right
        return syn.copies() if isinstance(syn, FifoSynopsis) else None

    def _unneeded(self, rows: pa.Table, side: int, off: int) -> np.ndarray:
        """Which of ``rows`` (of input ``side``; attributes from column ``off``) have a key the
        other input's k-constraints closed: no later change of it pairs with them.
        """
        promise = self.right_promise if side == 0 else self.left_promise
        mask = np.zeros(rows.num_rows, dtype=bool)
        if promise is None or not rows.num_rows:
            return mask
        for g, slot in zip(self._guards(1 - side), self._slots[1 - side], strict=True):
            mask |= promise.closed(slot, rows.column(off + self.spec.keys[g.key][side]))
        return mask

    def _needed(self, delta: pa.Table, side: int) -> pa.Table:
        """Input ``side``'s signed elements that still need keeping."""
        mask = self._unneeded(delta, side, META)
        return delta.filter(pa.array(~mask)) if mask.any() else delta

    def holds_elements(self) -> bool:
        # once an input ended (a static relation's rows) the other input's elements are not kept,
        # and the ended side holds a relation's rows, not stream elements
        return not (self._ended(0) or self._ended(1))

    def _ended(self, side: int) -> bool:
        r = self.readers[side]
        return r.queue.ended and not r.available()

    # -- pairing -------------------------------------------------------------------------
    def _match(self, left: pa.Table, right: pa.Table, loff: int, roff: int) -> tuple[np.ndarray, np.ndarray]:
        """Index pairs (i, j) of rows whose key columns are equal (all pairs without keys)."""
        keys = self.spec.keys
        lk, rk = [left.column(loff + a) for a, _ in keys], [right.column(roff + b) for _, b in keys]
        return key_pairs(lk, rk, left.num_rows, right.num_rows)

    def _build(
        self,
        left: pa.Table,
        right: pa.Table,
        i: np.ndarray,
        j: np.ndarray,
        loff: int,
        roff: int,
        ts: np.ndarray,
        w: np.ndarray,
    ) -> pa.Table | None:
        if len(i) == 0:
            return None
        cols = [left.column(loff + c).take(pa.array(i)) for c in range(len(self.spec.left_types))]
        cols += [right.column(roff + c).take(pa.array(j)) for c in range(len(self.spec.right_types))]
        b = make(ts, np.sign(w).astype(np.int8), cols, self.types)
        if self.residual is not None and self.spec.residual is not None:
            r = evaluate_rows([self.residual], [self.spec.residual], b)
            self.reject_rows(r.rejected)
            if r.kept is not None:
                w = w[r.kept]
            mask = truth_mask(r.values[0], r.batch.num_rows)
            b = r.batch.filter(mask)
            w = w[np.asarray(mask.to_numpy(zero_copy_only=False), dtype=bool)]
        reps = np.abs(w)
        if np.all(reps == 1):
            return b
        return b.take(pa.array(np.repeat(np.arange(len(w)), reps)))

    def _pairs(self, left: pa.Table, right: pa.Table, delta_left: bool) -> pa.Table | None:
        """One input's changes with the rows the other held all run (weighted), at the changes' instants."""
        if delta_left:  # left: signed elements; right: weighted synopsis
            i, j = self._match(left, right, META, 0)
            ts = ts_of(left)[i]
            w = left.column(1).to_numpy()[i].astype(np.int64) * right.column(W).to_numpy()[j]
            return self._build(left, right, i, j, META, 0, ts, w)
        i, j = self._match(left, right, 0, META)
        ts = ts_of(right)[j]
        w = left.column(W).to_numpy()[i] * right.column(1).to_numpy()[j].astype(np.int64)
        return self._build(left, right, i, j, 0, META, ts, w)

    @property
    def _input_types(self) -> tuple[tuple[DataType, ...], tuple[DataType, ...]]:
        return self.spec.left_types, self.spec.right_types

    @property
    def _fifo(self) -> tuple[bool, bool]:
        """Per input: whether its synopsis keeps its rows in insertion order (``FifoSynopsis``)."""
        return isinstance(self.left, FifoSynopsis), isinstance(self.right, FifoSynopsis)

    def _few_pairs(self, dl: pa.Table, dr: pa.Table) -> bool:
        """Whether the run's changes pair (by key) no more often than there are changes."""
        keys = self.spec.keys
        lk, rk = [dl.column(META + a) for a, _ in keys], [dr.column(META + b) for _, b in keys]
        return pair_count(lk, rk, dl.num_rows, dr.num_rows) <= SIGNED_PAIRS_PER_CHANGE * (dl.num_rows + dr.num_rows)

    def _signed_pairs(self, dl: pa.Table, dr: pa.Table) -> pa.Table | None:
        i, j = self._match(dl, dr, META, META)
        ts = np.maximum(ts_of(dl)[i], ts_of(dr)[j])
        w = dl.column(1).to_numpy()[i].astype(np.int64) * dr.column(1).to_numpy()[j].astype(np.int64)
        return self._build(dl, dr, i, j, META, META, ts, w)

    def _overlaps(self, ll: Lifetimes, dl: pa.Table, lr: Lifetimes, dr: pa.Table) -> pa.Table | None:
        """Pairs of the run's lifetimes, one per side: a pair holds while both do, so it enters
        at the later start and leaves at the earlier end — if that comes later (no output for
        lifetimes that never met: the insertion–deletion pairs that would cancel).
        """
        left, right = ll.rows(dl), lr.rows(dr)
        keys = self.spec.keys
        if min(len(ll), len(lr)) <= FEW:  # one side has a handful: match by key, keep what met
            i, j = self._match(left, right, META, META)
            met = np.maximum(ll.start[i], lr.start[j]) < np.minimum(ll.end[i], lr.end[j])
            i, j = i[met], j[met]
        else:  # sort both sides by (key, start): the interval join
            lk, rk = [left.column(META + a) for a, _ in keys], [right.column(META + b) for _, b in keys]
            i, j = overlapping(lk, ll, rk, lr)
        lo = np.maximum(ll.start[i], lr.start[j])
        hi = np.minimum(ll.end[i], lr.end[j])
        enter, leave = lo > NEG_INF, hi < POS_INF
        ii, jj = np.concatenate([i[enter], i[leave]]), np.concatenate([j[enter], j[leave]])
        ts = np.concatenate([lo[enter], hi[leave]])
        w = np.concatenate([np.ones(int(enter.sum()), np.int64), -np.ones(int(leave.sum()), np.int64)])
        return self._build(left, right, ii, jj, META, META, ts, w)

    def synopses(self) -> list[Any]:
        return [self.left, self.right]

    def most_bytes_per_element(self) -> float:
        # an element pairs at most with every copy the other input holds or has waiting
        held = [(s.copies(), len(s), s.nbytes) for s in (self.left, self.right)]
        return most_per_element(self, held, 1)

    def state_bytes(self) -> int:
        return sum(self.state_by_input())

    def state_by_input(self) -> list[int]:
        promises = (self.left_promise, self.right_promise)
        return [s.nbytes + (p.nbytes() if p is not None else 0) for s, p in zip(self.synopses(), promises, strict=True)]


def most_per_element(op: Operator, held: Sequence[tuple[int, int, int]], ports: int) -> float:
    """At most the bytes an element read next adds to a join ``op`` whose inputs hold ``held``
    (per input: copies, rows, bytes): its pairs with all the other input holds or has waiting
    (a pair about the bytes of a row of each, on each of ``ports`` outputs) and itself held.
    """
    partners, rows = [], []
    for (copies, n, b), r in zip(held, op.readers, strict=True):
        waiting, q = r.available(), r.queue
        partners.append(copies + waiting)
        rows.append(b / n if n else q.nbytes / q.length if q.length else 0.0)
    pair = sum(rows) * ports
    return max(partners[1] * pair + rows[0], partners[0] * pair + rows[1])


def net_small(delta: pa.Table, types: Sequence[DataType]) -> pa.Table:
    """A handful of changes, with a tuple's insertion and deletion at one instant cancelled: a
    one-row relation (a grouping without keys) that is re-emitted unchanged would otherwise
    re-pair every row of the other input.
    """
    if not 2 <= delta.num_rows <= FEW:
        return delta
    sign = delta.column(1).to_numpy()
    if bool((sign > 0).all()) or bool((sign < 0).all()):
        return delta
    return sort_by_ts(net(delta, types))


def _without(delta: pa.Table, rows: np.ndarray) -> pa.Table:
    if not len(rows):
        return delta
    keep = np.ones(delta.num_rows, bool)
    keep[rows] = False
    return delta.filter(pa.array(keep))


def take_rows(delta: pa.Table, rows: np.ndarray) -> pa.Table:
    return delta if len(rows) == delta.num_rows else delta.take(pa.array(rows))
