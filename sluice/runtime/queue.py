"""Inter-operator queues that several readers share (seed §3.2).

A queue holds batches in timestamp order and a *watermark*: every element with ``ts ≤
watermark`` has been enqueued.  Each reader has its own cursor; a prefix that every reader has
consumed is discarded, so a shared queue holds only what its slowest reader still needs.

>>> from sluice.datatypes import INTEGER
>>> from sluice.runtime.batch import from_rows
>>> q = Queue("q", [INTEGER]); a, b = q.reader(), q.reader()
>>> q.append(from_rows([(1, (1,)), (2, (2,))], [INTEGER])); q.advance(2)
>>> a.read(1).num_rows, a.watermark(), b.available()
(1, 1, 2)
>>> _ = a.read(); _ = b.read(); q.nbytes
0
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from sluice.datatypes import DataType
from sluice.errors import InternalError
from sluice.runtime.batch import NEG_INF, concat, nbytes, ts_of


class Queue:
    def __init__(self, name: str, types: Sequence[DataType]) -> None:
        self.name = name
        self.types = list(types)
        # held batches from ``_head`` on (a prefix every reader consumed is dropped in bulk), with
        # each one's bytes (Table.nbytes costs a pass) and the global index of its first element,
        # so a reader finds its batch by bisection: with one-row batches (one tuple a turn) and a
        # backlog, a scan from the oldest held batch made every read O(backlog)
        self._batches: list[pa.Table] = []
        self._sizes: list[int] = []
        self._starts: list[int] = []
        self._head = 0
        self._base = 0  # global index of the first held element
        self._end = 0  # global index one past the last element
        self.watermark = NEG_INF
        # the producer will never append again (a static relation's rows, and σ/π of them, once
        # sent): a join may then stop keeping the other input's synopsis (STREAM §2.2)
        self.ended = False
        self._readers: list[Reader] = []
        self.nbytes = 0
        self.peak_nbytes = 0
        self.enqueued = 0
        # the furthest position an operator remembers as where a query starts (a shared join's or
        # window's port of a query registered while running): nothing before it is ever cut, so
        # ``drop_unread`` does not move an element across it
        self.pinned = 0

    def pin(self, position: int) -> None:
        """An operator remembers ``position`` (``pinned``)."""
        self.pinned = max(self.pinned, position)

    def snapshot(self) -> dict[str, Any]:
        """What it holds and where each reader is (readers in creation order)."""
        return {
            "batches": self._batches[self._head :],
            "sizes": self._sizes[self._head :],
            "base": self._base,
            "end": self._end,
            "watermark": self.watermark,
            "ended": self.ended,
            "peak_nbytes": self.peak_nbytes,
            "enqueued": self.enqueued,
            "cursors": [r.cursor for r in self._readers],
            "pinned": self.pinned,
        }

    def restore(self, state: dict[str, Any]) -> None:
        """Put a :meth:`snapshot` into a queue with the same readers (a plan built the same way)."""
        if len(state["cursors"]) != len(self._readers):
            raise InternalError(
                f"queue {self.name}: a snapshot with {len(state['cursors'])} reader(s) cannot restore "
                f"{len(self._readers)}"
            )
        self._batches, self._sizes, self._head = list(state["batches"]), list(state["sizes"]), 0
        self._base, self._end, self.watermark = state["base"], state["end"], state["watermark"]
        self._starts = []
        at = self._base
        for b in self._batches:
            self._starts.append(at)
            at += b.num_rows
        self.ended = state["ended"]
        self.nbytes = sum(self._sizes)
        self.peak_nbytes, self.enqueued = state["peak_nbytes"], state["enqueued"]
        self.pinned = state.get("pinned", 0)  # (absent in a snapshot taken before it was kept)
        for r, c in zip(self._readers, state["cursors"], strict=True):
            r.cursor = c

    def reader(self, at_end: bool = False) -> Reader:
        """A cursor from the oldest held element (``at_end``: only what is appended from now on)."""
        r = Reader(self, self._end if at_end else self._base)
        self._readers.append(r)
        return r

    def detach(self, reader: Reader) -> None:
        """Forget a reader (its query was removed): what only it still needed is discarded."""
        self._readers.remove(reader)
        self._collect()

    @property
    def readers(self) -> int:
        return len(self._readers)

    @property
    def length(self) -> int:
        """Elements held (not yet read by every reader)."""
        return self._end - self._base

    def append(self, batch: pa.Table) -> None:
        if batch.num_rows == 0:
            return
        self._put(batch)
        self.enqueued += batch.num_rows
        self.peak_nbytes = max(self.peak_nbytes, self.nbytes)
        if not self._readers:  # nobody reads: nothing to keep
            self._discard(self._end)

    def _put(self, batch: pa.Table) -> None:
        """Hold ``batch`` after the last element."""
        self._batches.append(batch)
        self._sizes.append(nbytes(batch))
        self._starts.append(self._end)
        self._end += batch.num_rows
        self.nbytes += self._sizes[-1]

    def advance(self, watermark: int) -> None:
        if watermark > self.watermark:
            self.watermark = watermark

    def _batch_at(self, start: int) -> int:
        """The index in ``_batches`` of the held batch holding element ``start`` (by bisection)."""
        return max(bisect_right(self._starts, start, self._head) - 1, self._head)

    def _slice(self, start: int, n: int) -> list[pa.Table]:
        out = []
        batches, starts = self._batches, self._starts
        i = self._batch_at(start)
        while i < len(batches):
            b, lo = batches[i], starts[i]
            hi = lo + b.num_rows
            if hi > start and lo < start + n:
                a = max(start, lo) - lo
                z = min(start + n, hi) - lo
                out.append(b.slice(a, z - a))
            if hi >= start + n:
                break
            i += 1
        return out

    def _table(self, start: int, n: int) -> pa.Table:
        """The ``n`` held elements from global index ``start``, as one table."""
        return concat(self._slice(start, n), self.types)

    def _discard(self, upto: int) -> None:
        batches, h = self._batches, self._head
        while h < len(batches) and self._base + batches[h].num_rows <= upto:
            self._base += batches[h].num_rows
            self.nbytes -= self._sizes[h]
            batches[h] = None  # released now, dropped from the list below
            h += 1
        if h < len(batches) and upto > self._base:
            k = upto - self._base
            b = batches[h]
            rest = b.slice(k)
            left = self._sizes[h] * rest.num_rows // b.num_rows  # a slice's share of the batch's bytes
            self.nbytes -= self._sizes[h] - left
            self._sizes[h] = left
            batches[h] = rest
            self._starts[h] = upto
            self._base = upto
        if h > 32 and 2 * h > len(batches):  # drop the consumed prefix in bulk (amortised O(1))
            del batches[:h], self._sizes[:h], self._starts[:h]
            h = 0
        elif h == len(batches):
            batches.clear()
            self._sizes.clear()
            self._starts.clear()
            h = 0
        self._head = h

    def _collect(self) -> None:
        low = min((r.cursor for r in self._readers), default=self._end)
        if low > self._base:
            self._discard(low)

    def unread_start(self) -> int:
        """Where the elements no reader has read, and none may be cut before, begin (the furthest
        cursor, or ``pinned``: at most the end).
        """
        furthest = max((r.cursor for r in self._readers), default=self._end)
        return min(max(furthest, self.pinned), self._end)

    def first_ts(self) -> int | None:
        """The timestamp of the first element held (None: none held)."""
        return int(ts_of(self._table(self._base, 1))[0]) if self.length else None

    def unread_count(self) -> int:
        """How many elements no reader has read yet."""
        return self._end - self.unread_start()

    def held(self) -> pa.Table:
        """Every element held (not yet read by every reader), in order."""
        return self._table(self._base, self.length)

    def unread(self) -> pa.Table:
        """The elements no reader has read yet, in order."""
        start = self.unread_start()
        return self._table(start, self._end - start)

    def drop_unread(self, keep: np.ndarray) -> pa.Table:
        """Keep only the unread elements (``unread()``) where ``keep`` is true — load shedding from
        the queue (STREAM §5.2.2): an element some reader has read stays, so every reader sees
        the same elements.  Returns those dropped.
        """
        start = self.unread_start()
        tail = self.unread()
        if len(keep) != tail.num_rows:
            raise InternalError(f"queue {self.name}: {len(keep)} flags for {tail.num_rows} unread elements")
        if keep.all():
            return tail.slice(0, 0)
        # cut the held batches at ``start`` (nothing before it moves: every cursor is at or before it)
        i = self._batch_at(start)
        if i < len(self._batches) and self._starts[i] < start:
            b = self._batches[i]
            head = b.slice(0, start - self._starts[i])
            self._sizes[i] = self._sizes[i] * head.num_rows // b.num_rows
            self._batches[i] = head
            i += 1
        del self._batches[i:], self._sizes[i:], self._starts[i:]
        self.nbytes = sum(self._sizes[self._head :])
        self._end = start
        kept = tail.filter(pa.array(keep))
        if kept.num_rows:
            self._put(kept)
        self.enqueued -= tail.num_rows - kept.num_rows  # (counted as shed where they were dropped)
        return tail.filter(pa.array(~keep))

    def next_ts(self, cursor: int) -> int | None:
        if cursor >= self._end:
            return None
        b = self._slice(cursor, 1)
        return int(ts_of(b[0])[0])


class Reader:
    """One reader's cursor into a :class:`Queue`."""

    def __init__(self, queue: Queue, cursor: int) -> None:
        self.queue = queue
        self.cursor = cursor

    def available(self) -> int:
        return self.queue._end - self.cursor

    def read(self, max_elements: int | None = None) -> pa.Table:
        q = self.queue
        n = self.available() if max_elements is None else min(max_elements, self.available())
        if self.cursor < q._base:
            raise InternalError(f"reader of {q.name} fell behind the discarded prefix")
        out = q._table(self.cursor, n)
        self.cursor += n
        q._collect()
        return out

    def peek_ts(self, n: int) -> Any:
        """Timestamps of the next ``n`` unread elements (not consumed)."""
        import numpy as np

        parts = self.queue._slice(self.cursor, n)
        return np.concatenate([ts_of(p) for p in parts]) if parts else np.empty(0, np.int64)

    def watermark(self) -> int:
        """What this reader may assume: no unread element has ``ts ≤`` this."""
        nxt = self.queue.next_ts(self.cursor)
        if nxt is None:
            return self.queue.watermark
        return min(self.queue.watermark, nxt - 1)


def count_upto(reader: Reader, bound: int, cap: int | None = None) -> int:
    """How many unread elements of ``reader`` have ``ts ≤ bound`` (or ``cap``, if at least that many).

    Batch by batch from the reader's cursor, stopping at the first element after ``bound``: with a
    backlog of one-row batches, slicing every unread batch first made each call O(backlog).
    """
    import numpy as np

    q = reader.queue
    total = 0
    batches, starts = q._batches, q._starts
    i = q._batch_at(reader.cursor)
    while i < len(batches):
        b = batches[i]
        skip = max(reader.cursor - starts[i], 0)
        ts = ts_of(b)[skip:] if skip else ts_of(b)
        k = int(np.searchsorted(ts, bound, side="right"))
        total += k
        if k < len(ts) or (cap is not None and total >= cap):
            break
        i += 1
    return total if cap is None else min(total, cap)
