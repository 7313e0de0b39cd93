"""Synopses (seed §3): the state an operator keeps, behind one interface.

Every synopsis supports ``insert``, ``delete``, ``query``, ``change_mem`` (the memory it may use,
set by the resource manager) and ``statistics()``.  The three kinds:

* :class:`RelationSynopsis` — a multiset of tuples as an Arrow table with a signed count ``__w``,
  consolidated lazily (group by all attributes, sum, drop zeros).  Joins read it unconsolidated:
  a join is bilinear in the weights, so it is exact either way.
* :class:`HashSynopsis` — tuples bucketed by a key (``query(key)``), for keyed lookups.
* :class:`WindowSynopsis` — a sliding window's contents in arrival order, each element with the
  time it leaves (time windows) — ``expire(upto)`` returns what left — or the last N (rows windows).

``change_mem`` records the budget and ``statistics()`` says when a synopsis is over it; a window
whose query tolerates a smaller one (``[Range T At Least t]``) shrinks to fit it (seed §5.2.1,
``sluice.runtime.operators.windows.TimeWindow``).  Every other synopsis stays exact.

>>> from sluice.datatypes import INTEGER
>>> from sluice.runtime.batch import from_rows
>>> r = RelationSynopsis([INTEGER]); r.insert(from_rows([(1, (5,)), (2, (5,))], [INTEGER]))
>>> r.delete(from_rows([(3, (5,))], [INTEGER])); r.query().to_pylist()
[{'c0': 5, '__w': 1}]
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sluice.datatypes import DataType
from sluice.errors import InternalError
from sluice.runtime.batch import META, arrow_type, concat, merge_newest_chunks, nbytes
from sluice.runtime.keys import rows_equal

W = "__w"


@dataclass(frozen=True, slots=True)
class SynopsisStats:
    kind: str
    tuples: int
    nbytes: int
    budget: int | None

    @property
    def over_budget(self) -> bool:
        return self.budget is not None and self.nbytes > self.budget


class _Budgeted:
    budget: int | None = None

    def change_mem(self, nbytes: int | None) -> None:
        """Set the memory this synopsis may use (None: unlimited)."""
        self.budget = nbytes

    @property
    def nbytes(self) -> int:
        raise NotImplementedError

    def __len__(self) -> int:
        raise NotImplementedError

    def statistics(self) -> SynopsisStats:
        return SynopsisStats(type(self).__name__, len(self), self.nbytes, self.budget)


def empty_weighted(types: Sequence[DataType]) -> pa.Table:
    fields = [pa.field(f"c{i}", arrow_type(t)) for i, t in enumerate(types)] + [pa.field(W, pa.int64())]
    return pa.schema(fields).empty_table()


def weighted(b: pa.Table, sign: int = 1) -> pa.Table:
    """Signed elements → weighted rows (timestamps dropped); ``sign`` −1 negates."""
    cols = b.columns[META:]
    w = b.column(1).to_numpy().astype(np.int64) * sign
    return pa.Table.from_arrays([*cols, pa.array(w)], names=[f"c{i}" for i in range(len(cols))] + [W])


def consolidate(t: pa.Table) -> pa.Table:
    if t.num_rows == 0:
        return t
    keys = t.column_names[:-1]
    if not keys:
        total = int(np.sum(t.column(W).to_numpy()))
        return t.slice(0, 0) if total == 0 else pa.table({W: [total]})
    g = t.group_by(keys, use_threads=False).aggregate([(W, "sum")])
    g = g.rename_columns(keys + [W])
    w = g.column(W).to_numpy()
    return g.filter(pa.array(w != 0)) if (w == 0).any() else g


class RelationSynopsis(_Budgeted):
    def __init__(self, types: Sequence[DataType]) -> None:
        self.types = list(types)
        self.table = empty_weighted(types)
        self._fresh = 0

    def add(self, b: pa.Table) -> None:
        """Apply signed elements (insertions and deletions)."""
        self._append(weighted(b))

    def insert(self, b: pa.Table) -> None:
        self._append(weighted(b).set_column(len(self.types), W, pa.array(np.ones(b.num_rows, np.int64))))

    def delete(self, b: pa.Table) -> None:
        self._append(weighted(b).set_column(len(self.types), W, pa.array(-np.ones(b.num_rows, np.int64))))

    def _append(self, t: pa.Table) -> None:
        if t.num_rows == 0:
            return
        self.table = pa.concat_tables([self.table, t])
        self._fresh += t.num_rows
        if self._fresh * 2 > self.table.num_rows or self._fresh > 1_000_000:
            self.table = consolidate(self.table)
            self._fresh = 0

    def drop(self, mask: np.ndarray) -> None:
        """Forget the rows ``mask`` marks (rows no later change can pair with: a join's
        k-constraints, STREAM §4.1).
        """
        if mask.any():
            self.table = self.table.filter(pa.array(~mask))
            self._fresh = min(self._fresh, self.table.num_rows)

    def copies(self) -> int:
        """How many tuples the multiset holds (the sum of the counts)."""
        return int(pc.sum(self.table.column(W)).as_py() or 0)

    def query(self) -> pa.Table:
        """The multiset, consolidated: attributes plus the count ``__w``."""
        if self._fresh:
            self.table = consolidate(self.table)
            self._fresh = 0
        return self.table

    @property
    def nbytes(self) -> int:
        return nbytes(self.table)

    def __len__(self) -> int:
        return int(self.table.num_rows)


class FifoSynopsis(RelationSynopsis):
    """A relation that deletes the copies it holds oldest first (a window over a stream, through
    selections and projections: the planner's ``_fifo``), as its rows in insertion order, each of
    count 1 (``query()`` is not consolidated: one row per copy).  A deletion drops the oldest row,
    checked equal to it (a relation that broke the promise is an internal error, not a wrong
    answer) — no grouping, ever.  A join's input keeps it.
    """

    def __init__(self, types: Sequence[DataType]) -> None:
        super().__init__(types)
        self._dead = 0  # rows sliced off the front whose buffers the table may still hold

    def _append(self, t: pa.Table) -> None:
        if t.num_rows == 0:
            return
        w = t.column(W).to_numpy()
        gone = int((w < 0).sum())
        if gone < t.num_rows:  # insertions (count 1 each) go to the end, in order
            ins = t.filter(pa.array(w > 0)) if gone else t
            self.table = merge_newest_chunks(pa.concat_tables([self.table, ins]))
        if not gone:
            return
        dels = t.filter(pa.array(w < 0)) if gone < t.num_rows else t
        if gone > self.table.num_rows or not rows_equal(self.table.slice(0, gone).columns[:-1], dels.columns[:-1]):
            raise InternalError("a relation said to delete oldest first deleted another tuple")
        self.table = self.table.slice(gone)
        self._dead += gone
        if self._dead > max(self.table.num_rows, 1024):  # copy the rows held: the old buffers go
            self.table = self.table.take(pa.array(np.arange(self.table.num_rows)))
            self._dead = 0

    def drop(self, mask: np.ndarray) -> None:
        raise InternalError("a FIFO synopsis forgets only its oldest rows")

    def copies(self) -> int:
        return int(self.table.num_rows)

    def query(self) -> pa.Table:
        return self.table


class HashSynopsis(_Budgeted):
    """Tuples (with multiplicities) bucketed by key."""

    def __init__(self) -> None:
        self.buckets: dict[tuple[Any, ...], Counter[tuple[Any, ...]]] = {}
        self._n = 0

    def insert(self, key: tuple[Any, ...], row: tuple[Any, ...], n: int = 1) -> None:
        c = self.buckets.setdefault(key, Counter())
        c[row] += n
        self._n += n
        if c[row] == 0:
            del c[row]
            if not c:
                del self.buckets[key]

    def delete(self, key: tuple[Any, ...], row: tuple[Any, ...], n: int = 1) -> None:
        self.insert(key, row, -n)

    def query(self, key: tuple[Any, ...]) -> Counter[tuple[Any, ...]]:
        return self.buckets.get(key) or Counter()

    @property
    def nbytes(self) -> int:
        return 64 * sum(len(c) for c in self.buckets.values())

    def __len__(self) -> int:
        return self._n


class WindowSynopsis(_Budgeted):
    """A sliding window's contents in arrival order; each element carries the time it leaves."""

    def __init__(self, types: Sequence[DataType]) -> None:
        self.types = list(types)
        self._parts: list[tuple[np.ndarray, pa.Table]] = []

    def insert(self, leave: np.ndarray, b: pa.Table) -> None:
        if b.num_rows:
            self._parts.append((leave, b))

    def delete(self, n: int) -> pa.Table:
        """Remove and return the ``n`` oldest elements."""
        taken = 0
        out = []
        while self._parts and taken < n:
            leave, b = self._parts[0]
            k = min(n - taken, b.num_rows)
            out.append(b.slice(0, k))
            if k == b.num_rows:
                self._parts.pop(0)
            else:
                self._parts[0] = (leave[k:], b.slice(k))
            taken += k
        return concat(out, self.types)

    def expire(self, upto: int) -> tuple[np.ndarray, pa.Table]:
        """Remove the elements whose leave time is ≤ ``upto``; return (leave times, elements)."""
        times, out = [], []
        while self._parts:
            leave, b = self._parts[0]
            k = int(np.searchsorted(leave, upto, side="right"))
            if k == 0:
                break
            times.append(leave[:k])
            out.append(b.slice(0, k))
            if k == len(leave):
                self._parts.pop(0)
            else:
                self._parts[0] = (leave[k:], b.slice(k))
                break
        if not out:
            return np.empty(0, np.int64), concat([], self.types)
        return np.concatenate(times), concat(out, self.types)

    def query(self) -> pa.Table:
        return concat([b for _, b in self._parts], self.types)

    def oldest_ts(self) -> int:
        """The timestamp of the oldest element (the window must hold one): no concatenation."""
        return int(self._parts[0][1].column(0)[0].as_py())

    def leave_times(self) -> np.ndarray:
        """Every element's leave time, in arrival order (aligned with :meth:`query`)."""
        return np.concatenate([t for t, _ in self._parts]) if self._parts else np.empty(0, np.int64)

    def replace(self, leave: np.ndarray, b: pa.Table) -> None:
        """Make the contents ``b`` with leave times ``leave`` (non-decreasing; a window resized)."""
        self._parts = [(leave, b)] if b.num_rows else []

    @property
    def nbytes(self) -> int:
        return sum(nbytes(b) for _, b in self._parts)

    def __len__(self) -> int:
        return sum(b.num_rows for _, b in self._parts)
