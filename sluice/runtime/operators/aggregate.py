"""Group-by aggregation maintained under insertions and deletions; DISTINCT.

Two exact ways, chosen per query by its aggregates:

* **Counting aggregates** (COUNT, SUM/AVG without DISTINCT; MIN/MAX too where the input deletes
  in insertion order) run vectorised across every instant of a batch
  (:class:`~sluice.runtime.operators.counting.Counting`, its own module): a few array passes per
  batch, not a Python step per instant — the regime of millisecond timestamps.
* **COUNT/SUM/AVG of DISTINCT values** beside counting aggregates run vectorised too, as two
  counting passes: the (group, value) pairs present, then the groups over their changes
  (:class:`~sluice.runtime.operators.distinct_counting.DistinctCounting`).
* **Value-level aggregates** (the rest: MIN/MAX over joins or relations)
  group each run by (instant, group) with one Arrow group-by and fold the per-instant deltas into
  per-group accumulators (``sluice.plan.accumulators``) — per (instant, group), not per tuple.

At each instant a group changed, the old row is deleted and the new one inserted (an unchanged
row emits nothing).  Without GROUP BY there is always exactly one row, from the engine's first
instant (``COUNT(*) = 0`` over nothing).

Over an input that only inserts a stream's elements in its order, a group whose key a
k-constraint of the stream closed (STREAM §4.1: ``GroupGuard``) never changes again: its state
is forgotten (its row stays what it is).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from sluice.cql.ast import StreamConstraint
from sluice.datatypes import arrow_type
from sluice.plan.accumulators import Accumulator, IntegerSum, Summable, accumulator, counting
from sluice.plan.expr import AggCall, BExpr
from sluice.plan.function_defs import full
from sluice.plan.numeric import row_fits
from sluice.runtime.batch import TS, from_signed_rows, sign_of, ts_of
from sluice.runtime.bloom import BloomFilter, Filtered, hashes, row_hashes
from sluice.runtime.constraints import Constraints
from sluice.runtime.keys import first_rows, row_codes
from sluice.runtime.operators.base import Operator, OperatorSpec, Unary
from sluice.runtime.operators.counting import INT64_SAFE, Counting
from sluice.runtime.operators.distinct_counting import DistinctCounting, two_passes
from sluice.runtime.vexpr import compile_expr, evaluate_rows


@dataclass
class _Group:
    count: int = 0  # COUNT(*): elements in the group
    accs: list[Accumulator | None] = field(default_factory=list)  # per aggregate (None: COUNT(*))
    row: tuple[Any, ...] | None = None  # the row last emitted for this group


@dataclass(frozen=True, slots=True)
class GroupGuard:
    """Grouping key ``key`` is input column ``column``, whose insertions adhere to ``constraint``."""

    key: int
    column: int
    constraint: StreamConstraint
    stream: str = ""  # whose constraint (a PUNCTUATED BY reads that stream's punctuations)


@dataclass(frozen=True, slots=True)
class AggregateSpec(OperatorSpec):
    keys: tuple[BExpr, ...]
    aggs: tuple[AggCall, ...]
    # the input deletes values in the order it inserted them (the planner proves it), so MIN/MAX
    # run vectorised too
    fifo: bool
    # only a pure Istream reads it (through injective projections): it emits each change's
    # insertion and never the deletion, which that Istream would drop (``Planner._stream_op``)
    insertions: bool = False
    guards: tuple[GroupGuard, ...] = ()  # k-constraints its input's grouping keys adhere to


@dataclass(frozen=True, slots=True)
class DistinctSpec(OperatorSpec):
    """DISTINCT has no parameters of its own."""


@dataclass
class _WholeInstants(Unary):
    """A one-input operator that reads whole instants (``read_aligned``), so that at an instant
    each of its output rows changes once — a deletion and an insertion of different rows, never
    both of one: a subclass may declare its output pure.
    """

    def has_work(self) -> bool:
        return self.aligned_has_work()

    def _run(self, budget: int) -> int:
        (b,) = self.read_aligned(budget)
        if b.num_rows:
            self.process(b)
        self.progress(self.readers[0].watermark())
        return b.num_rows


def _group_bytes(g: _Group) -> int:
    """What a group holds, as ``Aggregate.state_bytes`` counts it."""
    return 64 + 16 * sum(a.entries for a in g.accs if a is not None)


@dataclass
class Aggregate(_WholeInstants):
    spec: AggregateSpec
    STATE = ("groups", "_started")
    PARTS = ("_counting", "promise")
    # the groups' bytes (None: to be summed again) — memory is measured at every admission and
    # step under a limit, and summed over every group each time, a GROUP BY of 20,000 groups ran
    # at 0.22 of its speed without a limit (``benchmarks/limit_overhead.py``)
    CACHES = ("_sized",)

    def __post_init__(self) -> None:
        super().__post_init__()
        keys, aggs = self.spec.keys, self.spec.aggs
        self.stateful = True
        self.nkeys = len(keys)
        self.key_fns = [compile_expr(k) for k in keys]
        self.arg_fns = [compile_expr(a.arg) if a.arg is not None else None for a in aggs]
        self._exprs = list(keys) + [a.arg for a in aggs if a.arg is not None]
        self._fns = self.key_fns + [f for f in self.arg_fns if f is not None]
        self.groups: dict[tuple[Any, ...], _Group] = {}
        self._sized: int | None = 0
        self._started = False
        self._counting = self._vectorised()
        guards = [(g.constraint, g.column) for g in self.spec.guards]
        logs = [self.ctx.punctuations.get(g.stream.lower()) for g in self.spec.guards]
        self.promise = Constraints(self.name, guards, logs) if guards else None
        # per aggregate with an argument: counted (and summed) per (instant, group) by Arrow, or fed
        # to its accumulator value by value
        protos = [accumulator(a) for a in aggs]
        self._summable = [a.arg is not None and isinstance(p, Summable) for a, p in zip(aggs, protos, strict=True)]
        self._summed = [isinstance(p, IntegerSum) for p in protos]
        # One run sees whole instants (read_aligned), so each instant's change of a group is one
        # deletion and one insertion of different rows: the output is pure.
        self.pure = True
        self.insert_only = self.spec.insertions

    def _vectorised(self) -> Counting | DistinctCounting | None:
        """The counting path its calls take (None: the accumulators, per (instant, group))."""
        aggs, fifo = self.spec.aggs, self.spec.fifo
        if all(counting(a, fifo) for a in aggs):
            return Counting(aggs, self.nkeys, self.spec.insertions)
        if two_passes(aggs, fifo):
            return DistinctCounting(aggs, self.nkeys, list(self.types[: self.nkeys]), self.spec.insertions)
        return None

    def _new(self) -> _Group:
        return _Group(0, [None if a.arg is None else accumulator(a) for a in self.spec.aggs])

    def _row(self, key: tuple[Any, ...], g: _Group) -> tuple[Any, ...]:
        return key + tuple(g.count if acc is None else acc.evaluate() for acc in g.accs)

    def _visible(self, g: _Group) -> bool:
        return self.nkeys == 0 or g.count > 0

    def _take_start(self) -> tuple[Any, ...] | None:
        """The row an aggregate without GROUP BY has at the engine's first instant (once)."""
        if self._started or self.ctx.start is None:
            return None
        self._started = True
        if self.nkeys:
            return None
        if self._counting is not None:
            return self._counting.initial_row()
        g = self.groups[()] = self._new()
        self._sized = None
        g.row = self._row((), g)
        return g.row

    def _emit_changes(self, changes: pa.Table | None, start_row: tuple[Any, ...] | None) -> None:
        """Emit a run's changes; the first instant's row merges with a change at that instant
        (no ``+row0, −row0`` pair: the output stays pure).
        """
        if start_row is not None:
            s = self.ctx.start
            assert s is not None
            if changes is not None and changes.num_rows and int(ts_of(changes)[0]) == s and sign_of(changes)[0] < 0:
                changes = changes.slice(1)  # the deletion of row0 at the first instant
            else:
                self.emit(from_signed_rows([(s, 1, start_row)], self.types))
        if changes is not None and changes.num_rows:
            self.emit(changes)

    def _evaluate(self, b: pa.Table) -> tuple[pa.Table, list[Any], list[Any]]:
        """(rows kept, key columns, argument columns — None for COUNT(*)): a row whose key or
        argument cannot be evaluated is left out of every aggregate (``sluice.plan.numeric``).
        """
        r = evaluate_rows(self._fns, self._exprs, b)
        self.reject_rows(r.rejected)
        n = r.batch.num_rows
        vals = iter(full(v, n, v.type) for v in r.values[self.nkeys :])
        keycols = [full(v, n, v.type) for v in r.values[: self.nkeys]]
        return r.batch, keycols, [None if f is None else next(vals) for f in self.arg_fns]

    def process(self, b: pa.Table) -> None:
        # (whole instants: every element up to the last stamp of ``b`` is in)
        closing = self.promise is not None and self.promise.track(b, int(ts_of(b)[-1]) if b.num_rows else None)
        self._process(b)
        if closing:
            self._forget_closed()

    def _forget_closed(self) -> None:
        """Forget the groups whose key the input's k-constraints closed: no element of theirs comes."""
        assert self.promise is not None
        keys = list(self._counting.gid) if self._counting is not None else list(self.groups)
        if not keys:
            return
        gone = np.zeros(len(keys), dtype=bool)
        for j, g in enumerate(self.spec.guards):
            gone |= self.promise.closed(j, pa.array([k[g.key] for k in keys], arrow_type(self.types[g.key])))
        dead = [k for k, d in zip(keys, gone.tolist(), strict=True) if d]
        if self._counting is not None:
            self._counting.forget(dead)
        for k in dead:
            self.groups.pop(k, None)
        self._sized = None

    def _process(self, b: pa.Table) -> None:
        start_row = self._take_start()
        b, keycols, argcols = self._evaluate(b)
        if self._counting is not None:
            delta = self._counting.apply(ts_of(b), sign_of(b), keycols, argcols, self.types)
            self._counting.reject_rows(self)
            self._emit_changes(delta, start_row)
            return
        out: list[tuple[int, int, tuple[Any, ...]]] = []
        cols: dict[str, Any] = {TS: b.column(0), "s": pc.cast(b.column(1), pa.int64())}
        for k, c in enumerate(keycols):
            cols[f"k{k}"] = c
        knames = [f"k{k}" for k in range(self.nkeys)]
        aggs_spec = [("s", "sum")]
        for i, v in enumerate(argcols):
            if not self._summable[i]:
                continue
            valid = pc.cast(pc.is_valid(v), pa.int64())
            cols[f"n{i}"] = pc.multiply(valid, cols["s"])
            aggs_spec.append((f"n{i}", "sum"))
            if self._summed[i]:
                x = pc.fill_null(pc.cast(v, pa.int64()), 0)
                # Arrow's grouped sum wraps around silently past 64 bits: while the magnitudes
                # of the batch's values add up to less than 2^62 nothing can; otherwise each value
                # is summed as high and low 32-bit halves (each sum fits) and recombined exactly
                if (pc.sum(pc.abs(pc.cast(x, pa.float64(), safe=False))).as_py() or 0) < INT64_SAFE:
                    cols[f"v{i}"] = pc.multiply(x, cols["s"])
                    aggs_spec.append((f"v{i}", "sum"))
                else:
                    cols[f"h{i}"] = pc.multiply(pc.shift_right(x, 32), cols["s"])
                    cols[f"l{i}"] = pc.multiply(pc.bit_wise_and(x, 0xFFFFFFFF), cols["s"])
                    aggs_spec += [(f"h{i}", "sum"), (f"l{i}", "sum")]
        t = pa.table(cols)
        g = t.group_by([TS] + knames, use_threads=False).aggregate(aggs_spec)
        changes: dict[tuple[int, tuple[Any, ...]], dict[str, Any]] = {}
        for row in g.to_pylist():
            key = tuple(row[k] for k in knames)
            changes[(row[TS], key)] = row
        # the other aggregates: net count of each (instant, group, value)
        value_changes: dict[tuple[int, tuple[Any, ...]], list[tuple[int, Any, int]]] = {}
        for i, v in enumerate(argcols):
            if v is None or self._summable[i]:
                continue
            vt = pa.table({TS: b.column(0), "s": cols["s"], **{k: cols[k] for k in knames}, "x": v})
            vg = vt.group_by([TS] + knames + ["x"], use_threads=False).aggregate([("s", "sum")])
            for row in vg.to_pylist():
                key = tuple(row[k] for k in knames)
                value_changes.setdefault((row[TS], key), []).append((i, row["x"], row["s_sum"]))
        for ts, key in sorted(set(changes) | set(value_changes), key=lambda x: x[0]):
            grp = self.groups.get(key)
            before = 0 if grp is None else _group_bytes(grp)
            if grp is None:
                grp = self.groups[key] = self._new()
            old = grp.row
            row = changes.get((ts, key))
            if row is not None:
                grp.count += row["s_sum"]
                for i, acc in enumerate(grp.accs):
                    if f"n{i}_sum" in row:
                        assert isinstance(acc, Summable)
                        total = row.get(f"v{i}_sum", 0)
                        if f"h{i}_sum" in row:
                            total = row[f"h{i}_sum"] * 2**32 + row[f"l{i}_sum"]
                        acc.add_totals(row[f"n{i}_sum"], total)
            for i, x, c in value_changes.get((ts, key), ()):
                if x is not None and c:
                    acc = grp.accs[i]
                    assert acc is not None
                    acc.add(x, c)
            new = self._row(key, grp) if self._visible(grp) else None
            if new is not None and not row_fits(new):  # a SUM beyond 64 bits: no row while it is
                self.reject_rows([f"group {key!r} at {ts}: SUM outside BIGINT's range; no row"])
                new = None
            grp.row = new
            if old != new:
                if old is not None and not self.spec.insertions:
                    out.append((ts, -1, old))
                if new is not None:
                    out.append((ts, 1, new))
            if not self._visible(grp) and key in self.groups and self.nkeys:
                del self.groups[key]
            if (sized := getattr(self, "_sized", None)) is not None:
                self._sized = sized - before + (_group_bytes(grp) if key in self.groups else 0)
        self._emit_changes(from_signed_rows(out, self.types) if out else None, start_row)

    def _start_due(self) -> bool:
        """Every element at the first instant has been read (none may still join row0 there)."""
        s = self.ctx.start
        return not self._started and s is not None and self.readers[0].watermark() >= s

    def progress(self, wm: int) -> None:
        if self._start_due():
            self._emit_changes(None, self._take_start())
        self.advance(wm)

    def has_work(self) -> bool:
        return self.aligned_has_work() or self._start_due()

    def state_bytes(self) -> int:
        tracked = self.promise.nbytes() if self.promise is not None else 0
        if self._counting is not None:
            return self._counting.state_bytes() + tracked
        if getattr(self, "_sized", None) is None:  # (absent in an aggregate pickled before it was kept)
            self._sized = sum(_group_bytes(g) for g in self.groups.values())
        assert self._sized is not None
        return tracked + self._sized

    def restore(self, state: dict[str, Any]) -> None:
        # the path of the state restored, decided at every restore (a Spark processor restores each
        # key's state into one engine in turn: a key saved before DISTINCT aggregates were counted
        # keeps its groups and the accumulators, the next key the counting passes — a review)
        saved = state.get("part:_counting")
        if saved is None:
            self._counting = None
        elif self._counting is None:
            self._counting = self._vectorised()
        super().restore(state)
        self._sized = None


@dataclass
class Distinct(_WholeInstants, Filtered):
    """Duplicate elimination over a relation: a tuple is in the output while its count is > 0.

    The counts are :class:`Counting`'s with every column a grouping key and no aggregate: one
    run's changes, across all its instants, are a few array passes, and a tuple is inserted at
    the instant its count leaves 0 and deleted at the one it returns there (``Counting`` emits
    a row exactly where its visibility changes).  Grouping and DISTINCT agree on equality (NULLs
    equal, one float zero).  It reads whole instants, so no tuple is both deleted and inserted
    at one instant: the output is pure.

    Over an input that only inserts, a memory limit may compress its synopsis into a Bloom filter
    (STREAM §5.2.1; :meth:`compress`, chosen by ``sluice.approx.manager``): a value is then
    emitted when the filter has not seen it, so a new value the filter takes for a seen one is
    lost (a false negative; never a false positive) — at the filter's FP rate, which it reports.
    One way: a filter does not give its values back.
    """

    spec: DistinctSpec
    STATE = ("bloom", "exact_values")
    LATER = {"bloom": None, "exact_values": 0}  # (a snapshot from before Bloom filters: exact)
    PARTS = ("_counting",)

    def __post_init__(self) -> None:
        super().__post_init__()
        self.stateful = True
        self.pure = True
        self._counting = Counting((), len(self.types))
        self.bloom: BloomFilter | None = None
        self.exact_values = 0  # the values the exact synopsis had emitted when the filter took over

    def declare(self, inputs: Sequence[Operator]) -> None:
        self.insert_only = inputs[0].insert_only

    WHAT = "DISTINCT"  # (how reports name it: ``sluice.approx.synopses``)

    @property
    def bloomable(self) -> bool:
        """Its synopsis may be a Bloom filter: the input only inserts (a filter cannot delete)."""
        return self.insert_only

    def process(self, b: pa.Table) -> None:
        cols = [b.column(i) for i in range(2, b.num_columns)]
        if self.bloom is not None:
            self._filtered(b, cols)
            return
        out = self._counting.apply(ts_of(b), sign_of(b), cols, [], self.types)
        if out is not None and out.num_rows:
            self.emit(out)

    def _filtered(self, b: pa.Table, cols: list[Any]) -> None:
        """The first row of each value the filter has not seen (the input only inserts)."""
        assert self.bloom is not None
        n = b.num_rows
        inv, first, dicts = row_codes(cols, n)
        if first is None:  # one column: its codes (some may be unused) are the values
            seen = first_rows(inv, len(dicts[0]))
            first = seen[seen < n]
        first = np.sort(first)  # the values in the order they arrived
        new = self.bloom.add_new(hashes([c.take(pa.array(first)) for c in cols]))
        if new.any():
            self.emit(b.take(pa.array(first[new])))

    def compress(self, nbytes: int) -> str:
        """Replace the exact synopsis by a Bloom filter of ``nbytes`` holding its values; what it did."""
        assert self.compressible
        c = self._counting
        keys = [k for k in c.keys if k is not None]
        before = self.state_bytes()
        f = self.new_filter(nbytes, len(keys))
        f.add_known(row_hashes(keys, self.types))
        self.exact_values = len(keys)
        self._counting = Counting((), len(self.types))
        return f"{before} B of {len(keys)} values → {f.describe()}"

    def state_bytes(self) -> int:
        return self._counting.state_bytes() + (self.bloom.nbytes if self.bloom is not None else 0)
