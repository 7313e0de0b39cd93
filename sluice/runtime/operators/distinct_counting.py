"""COUNT, SUM and AVG of DISTINCT values for many groups at once, vectorised across every instant
of a batch: two passes of :class:`~sluice.runtime.operators.counting.Counting`.

A group's DISTINCT aggregate depends only on which of its values are present, each once.  So:

1. **Pairs.**  A ``Counting`` over the grouping keys and the argument, with no aggregate, keeps
   the count of each (group, value) pair and emits a pair where its count leaves 0 (an insertion)
   and where it returns there (a deletion) — the instants at which the group's *set* of values
   changes (``Distinct`` does the same for whole rows).  NULL values never enter (SQL drops them).
2. **Groups.**  Those changes join the batch's own rows in a second ``Counting`` in which the
   DISTINCT aggregate is the plain one over the pairs' rows: COUNT(DISTINCT x) is COUNT(x) over
   the set, SUM/AVG likewise.  Each kind of row carries NULL for the other kind's arguments;
   COUNT(*) counts a marker only the batch's rows carry.

A group is visible while its count of rows is > 0, and it holds a pair only while it holds a row
of that value: counting both kinds of row, the second pass sees a group exactly when the first
would.  The rows keep their time order (a stable sort by instant), so MIN/MAX over an input that
deletes in insertion order keep the monotonic queues ``Counting`` keeps for them, ignoring the
pairs' rows (their argument is NULL there).

Where every aggregate is a DISTINCT one of one argument, the rewrite
``distinct-aggregates-over-distinct-rows`` (``sluice.plan.rules``) already makes them plain
aggregates over DISTINCT rows; this takes the rest — DISTINCT aggregates beside others, or of
several arguments.  Before it, they were folded into per-group accumulators per (instant, group) in
Python: ``select K, max(V), count(distinct V) from S group by K`` over 1,000,000 events with
millisecond timestamps ran at 49,633 events a second, 153,078 now (``benchmarks/limit_overhead.py``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from sluice.datatypes import BIGINT, DataType, arrow_type
from sluice.plan.accumulators import counting
from sluice.plan.expr import AggCall, AggKind, ColRef
from sluice.runtime.operators.base import Part
from sluice.runtime.operators.counting import Counting, combined

SETS = (AggKind.COUNT, AggKind.SUM, AggKind.AVG)  # (MIN/MAX of DISTINCT values are MIN/MAX)


def two_passes(aggs: tuple[AggCall, ...], fifo: bool) -> bool:
    """Whether :class:`DistinctCounting` takes these calls: at least one COUNT/SUM/AVG of DISTINCT
    values, and every other call one the counting path takes.
    """
    sets = [a.distinct and a.fn in SETS for a in aggs]
    return any(sets) and all(s or counting(a, fifo) for a, s in zip(aggs, sets, strict=True))


class DistinctCounting(Part):
    """``Counting``'s interface (``apply``, ``initial_row``, ``forget``, ``gid``) for a GROUP BY
    with DISTINCT aggregates: a pair pass per distinct argument, and a group pass over both.
    """

    PARTS = ("groups", "pairs")

    def __init__(self, aggs: tuple[AggCall, ...], nkeys: int, key_types: list[DataType], insertions: bool) -> None:
        self.nkeys = nkeys
        self.set_of: list[int | None] = []  # per call: the pair pass of its argument (None: a plain call)
        args: dict[str, int] = {}
        self.first: list[int] = []  # per pair pass: the first call of its argument
        self.arg_types: list[DataType] = []
        calls: list[AggCall] = []
        for i, a in enumerate(aggs):
            if a.distinct and a.fn in SETS and a.arg is not None:
                j = args.setdefault(repr(a.arg), len(args))
                if j == len(self.first):
                    self.first.append(i)
                    self.arg_types.append(a.arg.type)
                self.set_of.append(j)
                # (an argument of its own: the counting path shares state between calls of one argument)
                calls.append(AggCall(a.fn, ColRef(-1 - j, a.arg.type), False, a.type))
            else:
                self.set_of.append(None)
                calls.append(AggCall(a.fn, ColRef(-1 - len(aggs), BIGINT), False, a.type) if a.arg is None else a)
        self.pairs = [Counting((), nkeys + 1) for _ in self.first]
        self.key_types = key_types
        self.groups = Counting(tuple(calls), nkeys, insertions)

    @property
    def gid(self) -> dict[tuple[Any, ...], int]:
        return self.groups.gid

    @property
    def rejects(self) -> list[str]:
        return self.groups.rejects

    def reject_rows(self, op: Any) -> None:
        self.groups.reject_rows(op)

    def state_bytes(self) -> int:
        return self.groups.state_bytes() + sum(p.state_bytes() for p in self.pairs)

    def initial_row(self) -> tuple[Any, ...]:
        return self.groups.initial_row()

    def forget(self, keys: list[tuple[Any, ...]]) -> None:
        """Drop these groups and every pair of theirs (``Aggregate._forget_closed``)."""
        self.groups.forget(keys)
        dead = set(keys)
        for p in self.pairs:
            p.forget([k for k in p.gid if k[: self.nkeys] in dead])

    def apply(
        self, ts: np.ndarray, sign: np.ndarray, keycols: list[Any], args: list[Any], types: list[Any]
    ) -> pa.Table | None:
        """The signed output rows for every (instant, group) the batch changes, in time order."""
        if len(ts) == 0:
            return None
        n, keycols, args = len(ts), combined(keycols), combined(args)
        # 1. each argument's pairs: where a group's set of values changed
        changes: list[pa.Table | None] = []
        for j, first in enumerate(self.first):
            x = args[first]
            rows = np.flatnonzero(pc.is_valid(x).to_numpy(zero_copy_only=False))
            if len(rows) == n:
                cols, t, s = [*keycols, x], ts, sign
            else:
                take = pa.array(rows)
                cols, t, s = [c.take(take) for c in [*keycols, x]], ts[rows], sign[rows]
            changes.append(self.pairs[j].apply(t, s, cols, [], [*self.key_types, self.arg_types[j]]))
        found = [c for c in changes if c is not None]
        if not found:  # no group's set changed: the batch's rows alone
            return self.groups.apply(ts, sign, keycols, [self._plain(a, i, n, n) for i, a in enumerate(args)], types)
        # 2. the batch's rows and the pairs' changes, in time order, into the group pass
        total = n + sum(c.num_rows for c in found)
        all_ts = np.concatenate([ts] + [c.column(0).to_numpy() for c in found])
        all_sign = np.concatenate([sign] + [c.column(1).to_numpy() for c in found])
        all_keys = [
            pa.concat_arrays([keycols[k]] + [c.column(2 + k).combine_chunks() for c in found])
            for k in range(self.nkeys)
        ]
        at = n + np.cumsum([0] + [0 if c is None else c.num_rows for c in changes])  # where each pass's start
        all_args: list[Any] = []
        for i, d in enumerate(self.set_of):
            if d is None:
                all_args.append(self._plain(args[i], i, n, total))
            else:
                c, ty = changes[d], arrow_type(self.arg_types[d])
                col = pa.nulls(0, ty) if c is None else c.column(2 + self.nkeys).combine_chunks()
                all_args.append(_placed(col, int(at[d]), total, ty))
        order = np.argsort(all_ts, kind="stable")
        take = pa.array(order)
        return self.groups.apply(
            all_ts[order], all_sign[order], [k.take(take) for k in all_keys], [a.take(take) for a in all_args], types
        )

    def _plain(self, arg: Any, i: int, n: int, total: int) -> Any:
        """Call ``i``'s argument over the batch's ``n`` rows, the first of ``total``:
        a plain call's own (COUNT(*): a marker), a DISTINCT call's NULL (its values come as pairs).
        """
        j = self.set_of[i]
        if j is not None:
            return pa.nulls(total, arrow_type(self.arg_types[j]))
        own = pa.array(np.ones(n, np.int64)) if arg is None else arg
        return own if total == n else _placed(own, 0, total, own.type)


def _placed(values: pa.Array, offset: int, total: int, ty: pa.DataType) -> pa.Array:
    """``values`` at rows [offset, offset + len) of ``total`` rows, NULL elsewhere."""
    tail = total - offset - len(values)
    return pa.concat_arrays([pa.nulls(offset, ty), values.cast(ty), pa.nulls(tail, ty)])
