"""Stream → relation windows (seed §2), emitting the relation's changes as signed elements.

Time-based windows map each element to an insertion time ``a`` and a deletion time ``d``:
``[Range T]`` gives ``a = ts, d = ts + T + 1``; ``[Now]`` is ``T = 0``; with ``Slide U`` the
window is as of ``⌊τ/U⌋·U``, so ``a = ⌈ts/U⌉·U`` and ``d = ⌊(ts+T)/U⌋·U + U`` (an element with
``a ≥ d`` is never visible; ``sluice.windows.visible``).  Both times grow with ``ts``, so
pending insertions and deletions are two FIFOs, released merged in time order up to
``max(watermark, last input ts)`` — every deletion due by then is already known.

A window with a tolerated range (``[Range T At Least t]``, STREAM §5.2) may be resized while it
runs (:meth:`TimeWindow.resize`; synopsis compression, §5.2.1): shrinking it to ``r`` deletes at
the next instant what ``[Range r]`` no longer holds — leave times become ``min(d, d_r)``, never
before the next instant, so the two FIFOs stay ordered — and elements arriving later leave after
``r``; growing it applies to elements arriving from then on.  What it holds against what
``[Range T]`` would is counted (:meth:`TimeWindow.kept`).

``[Rows N]`` deletes element i when element i+N arrives, at that element's timestamp.
``[Partition By k Rows N]`` does that per key (per element: the arrival order is the semantics).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
from sluice import windows as W
from sluice.errors import InternalError
from sluice.runtime.batch import NEG_INF, concat, from_signed_rows, merge_in_time, to_elements, ts_of
from sluice.runtime.operators.base import Operator, OperatorSpec, Unary
from sluice.runtime.synopsis import WindowSynopsis

CUT_BUCKETS = 64  # what a shrunk window cut is counted in this many buckets of its range


@dataclass(frozen=True, slots=True)
class WindowSpec(OperatorSpec):
    """A window of any kind; ``WINDOW_OPERATORS`` says which operator runs it."""

    window: W.WindowDef


@dataclass
class TimeWindow(Unary):
    spec: WindowSpec
    STATE = ("_ins", "window", "_last_ts", "_range", "_released", "_cut", "_area", "_settles", "_refills")

    def __post_init__(self) -> None:
        super().__post_init__()
        w = self.spec.window
        self.insert_only = w.insert_only
        self.stateful = w.stateful
        self._span = w.lifetime  # (T, U); None: elements never leave
        if self._span is None and not w.insert_only:
            raise InternalError(f"TimeWindow cannot run {w!r}")
        self._ins = WindowSynopsis(self.types)  # admitted, visible from their insert time (Slide)
        self.window = WindowSynopsis(self.types)  # the window's contents, each with its leave time
        self._last_ts = NEG_INF
        self._range = self._span[0] if self._span is not None else 0  # the range in force (ticks)
        self._released = NEG_INF  # every change up to this instant is emitted
        # elements [Range T] would hold that a resize cut, counted by when [Range T] would have let
        # them go, in CUT_BUCKETS buckets of the range (an entry per element would cost as much
        # as the shrink freed): bucket → elements
        self._cut: dict[int, int] = {}
        self._bucket = max(1, (self._span[0] if self._span else 1) // CUT_BUCKETS)
        self._area = [0, 0]  # element-instants held and missing (against [Range T]) since it started
        self._settles = NEG_INF  # the instant by which the last shrink has taken effect
        self._refills = NEG_INF  # … and the last growth

    # -- resizing (STREAM §5.2.1) ----------------------------------------------------------
    unit = "ticks"

    @property
    def shrinkable(self) -> bool:
        w = self.spec.window
        return isinstance(w, W.Range) and w.shrinkable

    @property
    def full(self) -> int:
        """The size the query asked for (``[Range T]``'s T)."""
        return self.spec.window.range  # type: ignore[attr-defined]

    @property
    def range_now(self) -> int:
        return self._range

    @property
    def occupied(self) -> int:
        """The size its contents span now, on its axis (what a cut by a factor applies to)."""
        return self._range

    def resize(self, r: int) -> int:
        """Make the window ``[Range r]`` from now on, ``r`` clamped to the tolerated range
        (``At Least``); returns the range now in force.
        """
        w = self.spec.window
        if not (isinstance(w, W.Range) and w.least is not None):
            raise InternalError(f"{self}: [{w.describe()}] is exact and cannot be resized")
        r = min(max(int(r), w.least), w.range)
        if r < self._range and len(self.window):
            self._shrink(r)
            self._settles = self._released + 1  # what it cut leaves at the next instant
        elif r > self._range:
            self._refills = self._released + r  # it refills over its new range
        self._range = r
        return r

    @property
    def settled(self) -> bool:
        """Whether the last shrink has taken effect (what it cut has left): shrinking again before
        then would cut for memory that is already on its way out.
        """
        return self._released >= self._settles

    @property
    def refilled(self) -> bool:
        """Whether the window has refilled since it last grew (growing again before then overshoots)."""
        return self._released >= self._refills

    def _shrink(self, r: int) -> None:
        assert self._span is not None
        step = self._span[1]
        win, leave = self.window.query(), self.window.leave_times()
        ts = ts_of(win)
        new = np.maximum(np.minimum(leave, W.visible(ts, r, step)[1]), self._released + 1)
        keep = np.ones(len(new), dtype=bool)
        pending = len(self._ins)
        if pending:  # not yet visible (Slide): those the smaller window never shows go altogether
            ins, at = self._ins.query(), self._ins.leave_times()
            shown = new[-pending:] > at
            keep[-pending:] = shown
            if not shown.all():
                gone = ~shown
                self._note_cut(at[gone], W.visible(ts[-pending:][gone], *self._span)[1])
                self._ins.replace(at[shown], ins.filter(pa.array(shown)))
        self.window.replace(new[keep], win.filter(pa.array(keep)) if not keep.all() else win)

    def _note_cut(self, start: np.ndarray, until: np.ndarray) -> None:
        """Elements missing from now until ``until`` (those with ``start < until``)."""
        until = until[start < until]
        if len(until):
            buckets, counts = np.unique(until // self._bucket, return_counts=True)
            for b, c in zip(buckets.tolist(), counts.tolist(), strict=True):
                self._cut[b] = self._cut.get(b, 0) + c

    def kept(self) -> tuple[int, int, float]:
        """(elements held now, elements ``[Range T]`` would hold that it does not, the fraction
        held of what it would, integrated over the instants since it started).
        """
        held = len(self.window) - len(self._ins)
        missing = sum(self._cut.values())
        a_held, a_missing = self._area
        return held, missing, a_held / (a_held + a_missing) if a_held + a_missing else 1.0

    def _enforce_budget(self) -> None:
        """A budget set by ``change_mem`` shrinks a window that may shrink until its contents fit."""
        w = self.spec.window
        if not (isinstance(w, W.Range) and w.least is not None and self.settled and self._range > w.least):
            return
        budget, size = self.window.budget, self.window.nbytes
        if budget is not None and size > budget:
            oldest = self.window.oldest_ts()
            held = max(1, min(self._range, self._released - oldest))  # the time the contents span
            self.resize(int(held * budget / size))

    def declare(self, inputs: Sequence[Operator]) -> None:
        self.insert_only = self.spec.window.insert_only and inputs[0].insert_only

    def process(self, b: pa.Table) -> None:
        ts = ts_of(b)
        self._last_ts = max(self._last_ts, int(ts[-1]))
        if self._span is None:
            self.emit(b)
            return
        a, d = W.visible(ts, self._range, self._span[1])
        visible = a < d
        if not visible.all():
            if self._range < self._span[0]:  # shrunk below its slide: what [Range T] would show is missing
                a_full, d_full = W.visible(ts[~visible], *self._span)
                self._note_cut(a_full, d_full)
            b, a, d = b.filter(pa.array(visible)), a[visible], d[visible]
        if b.num_rows:
            self._ins.insert(a, b)
            neg = b.set_column(1, "__sign", pa.array(np.full(b.num_rows, -1, dtype=np.int8)))
            self.window.insert(d, neg)
        self._release(max(self._last_ts, self.readers[0].watermark()))
        if self.window.budget is not None:
            self._enforce_budget()

    def progress(self, wm: int) -> None:
        if self._span is not None:
            self._release(max(self._last_ts, wm))
        self.advance(wm)

    def quiet_in_time(self) -> bool:
        return self._span is None  # elements never leave: it emits only what it reads

    def _release(self, bound: int) -> None:
        gone, ins = self.window.expire(bound), self._ins.expire(bound)
        if self.shrinkable:
            self._account(bound, gone)
        self._released = max(self._released, bound)
        if gone[1].num_rows or ins[1].num_rows:
            self.emit(merge_in_time(gone, ins))  # deletions first within an instant

    def _account(self, bound: int, gone: tuple[np.ndarray, pa.Table]) -> None:
        """Elements leaving before ``[Range T]`` would let them are missing until it would; the
        instants since the last release add to what was held and missing.
        """
        assert self._span is not None
        if gone[1].num_rows:
            self._note_cut(gone[0], W.visible(ts_of(gone[1]), *self._span)[1])
        if bound > self._released != NEG_INF:
            # no longer missing once [Range T] lets them go too (a bucket, at its middle)
            gone_by = (bound - self._bucket // 2) // self._bucket
            for b in [b for b in self._cut if b < gone_by]:
                del self._cut[b]
            dt = bound - self._released
            self._area[0] += (len(self.window) - len(self._ins)) * dt
            self._area[1] += sum(self._cut.values()) * dt

    def explain_line(self) -> str:
        line = super().explain_line()
        w = self.spec.window
        if isinstance(w, W.Range) and w.least is not None and self._range < w.range:
            held, missing, frac = self.kept()
            line += f" shrunk to Range {self._range} ticks ({held} held, {missing} cut; {frac:.1%} kept over time)"
        return line

    def state_bytes(self) -> int:
        return super().state_bytes() + 64 * len(self._cut)  # (the count of what a shrink cut)

    def synopses(self) -> list[Any]:
        return [self.window, self._ins]


@dataclass
class RowsWindow(Unary):
    spec: WindowSpec
    STATE = ("window", "n", "_seen", "_area")

    def __post_init__(self) -> None:
        super().__post_init__()
        w = self.spec.window
        if not isinstance(w, W.Rows):
            raise InternalError(f"RowsWindow cannot run {w!r}")
        self.n = w.rows  # the rows in force (fewer than N once shrunk: ``resize``)
        self.stateful = True
        self.window = WindowSynopsis(self.types)  # the last n elements
        self._seen = 0  # elements read
        self._area = [0, 0]  # over the elements read: rows held, and rows [Rows N] would hold

    # -- resizing (STREAM §5.2.1; ``[Rows N At Least m]``) ------------------------------------
    unit = "rows"

    @property
    def shrinkable(self) -> bool:
        w = self.spec.window
        return isinstance(w, W.Rows) and w.shrinkable

    @property
    def full(self) -> int:
        return self.spec.window.rows  # type: ignore[attr-defined]

    @property
    def range_now(self) -> int:
        return self.n

    @property
    def occupied(self) -> int:
        """The rows held now, at most ``n`` (a window not yet full is cut from what it holds)."""
        return min(self.n, len(self.window))

    def resize(self, r: int) -> int:
        """Keep the last ``r`` rows from the next element on (``r`` clamped to ``At Least`` and
        ``N``): what it drops leaves, as deletions stamped with that element's instant, before it
        enters.  Returns the rows now in force.
        """
        w = self.spec.window
        if not (isinstance(w, W.Rows) and w.least is not None):
            raise InternalError(f"{self}: [{w.describe()}] is exact and cannot be resized")
        self.n = min(max(int(r), w.least), w.rows)
        return self.n

    @property
    def settled(self) -> bool:
        """Whether the last shrink has taken effect (what it cut has left: at the next element)."""
        return len(self.window) <= self.n

    @property
    def refilled(self) -> bool:
        """Whether the window has refilled since it last grew."""
        return len(self.window) >= min(self.n, self._seen)

    def kept(self) -> tuple[int, int, float]:
        """(rows held now, rows ``[Rows N]`` would hold that it does not, the fraction held of
        what it would over the elements read since it started).
        """
        held = len(self.window)
        missing = max(0, min(self.full, self._seen) - held)
        a_held, a_full = self._area
        return held, missing, a_held / a_full if a_full else 1.0

    def _account(self, m: int, k: int) -> None:
        """``m`` elements read onto ``k`` held: after each, min(n, k + i) held, min(N, seen + i)
        would be.
        """
        i = np.arange(1, m + 1)
        self._area[0] += int(np.minimum(self.n, k + i).sum())
        self._area[1] += int(np.minimum(self.full, self._seen + i).sum())
        self._seen += m

    def explain_line(self) -> str:
        line = super().explain_line()
        if self.shrinkable and self.n < self.full:
            held, missing, frac = self.kept()
            line += f" shrunk to Rows {self.n} ({held} held, {missing} cut; {frac:.1%} kept over the elements read)"
        return line

    def process(self, b: pa.Table) -> None:
        n, k = self.n, len(self.window)
        cut = None
        if k > n:  # shrunk since the last element: the oldest leave at this one's instant, first
            gone = self.window.delete(k - n)
            ts0 = np.full(gone.num_rows, int(ts_of(b)[0]))
            cut = gone.set_column(0, "__ts", pa.array(ts0)).set_column(
                1, "__sign", pa.array(np.full(gone.num_rows, -1, dtype=np.int8))
            )
            k = n
        if self.shrinkable:
            self._account(b.num_rows, k)
        combined = concat([self.window.query(), b], self.types) if k else b
        total = combined.num_rows
        new_pos = np.arange(k, total)
        new_ts = ts_of(b)
        gone = new_pos - n
        has_del = gone >= 0
        # interleave: for each new element, the deletion it causes, then its insertion
        idx = np.empty(len(new_pos) + int(has_del.sum()), dtype=np.int64)
        ts = np.empty_like(idx)
        sign = np.empty(len(idx), dtype=np.int8)
        slots = np.arange(len(new_pos)) + np.cumsum(has_del)
        idx[slots] = new_pos
        ts[slots] = new_ts
        sign[slots] = 1
        del_slots = slots[has_del] - 1
        idx[del_slots] = gone[has_del]
        ts[del_slots] = new_ts[has_del]
        sign[del_slots] = -1
        out = combined.take(pa.array(idx))
        out = out.set_column(0, "__ts", pa.array(ts)).set_column(1, "__sign", pa.array(sign))
        self.emit(out if cut is None else concat([cut, out], self.types))
        self.window.insert(ts_of(b), b)
        if len(self.window) > n:
            self.window.delete(len(self.window) - n)
        if self.window.budget is not None:
            self._enforce_budget()

    def quiet_in_time(self) -> bool:
        return True  # an element leaves when a later one enters, never on time alone

    def _enforce_budget(self) -> None:
        """A budget set by ``change_mem`` keeps a window that may shrink to as many rows as fit."""
        budget, size = self.window.budget, self.window.nbytes
        if self.shrinkable and self.settled and budget is not None and size > budget:
            self.resize(int(len(self.window) * budget / size))

    def synopses(self) -> list[Any]:
        return [self.window]


@dataclass
class PartitionWindow(Unary):
    spec: WindowSpec
    STATE = ("_parts",)

    def __post_init__(self) -> None:
        super().__post_init__()
        w = self.spec.window
        if not isinstance(w, W.PartitionedRows):
            raise InternalError(f"PartitionWindow cannot run {w!r}")
        self.n, self.keys = w.rows, w.keys
        self.stateful = True
        self._parts: dict[tuple[Any, ...], deque[tuple[Any, ...]]] = {}

    def process(self, b: pa.Table) -> None:
        out: list[tuple[int, int, tuple[Any, ...]]] = []
        for t, _, row in to_elements(b):
            key = tuple(row[i] for i in self.keys)
            q = self._parts.setdefault(key, deque())
            q.append(row)
            if len(q) > self.n:
                out.append((t, -1, q.popleft()))
            out.append((t, 1, row))
        self.emit(from_signed_rows(out, self.types))

    def state_bytes(self) -> int:
        return sum(len(q) for q in self._parts.values()) * 8 * max(1, len(self.types))


#: The operator that runs each window kind (``sluice.windows``); every kind must have one.
WINDOW_OPERATORS: dict[type[W.WindowDef], type[TimeWindow | RowsWindow | PartitionWindow]] = {
    W.Unbounded: TimeWindow,
    W.Now: TimeWindow,
    W.Range: TimeWindow,
    W.Rows: RowsWindow,
    W.PartitionedRows: PartitionWindow,
}
