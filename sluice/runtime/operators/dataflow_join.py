"""A join of three or more relations at the dataflow level, without intermediate synopses
(Getta & Vossough §2.3, §3.1).

A tree of binary joins keeps, at every join above the first, a synopsis of an intermediate result
(the window w_rs of r ⋈ s): every change of r or s is written into it, and it holds the join of the
windows, often far more rows than the windows themselves.  Getta & Vossough translate the tree
into one *dataflow expression per input* (§2.3 steps 1–4): a change of input s is recorded in s's
window, then joined with the window of every other input in turn — no intermediate window.  Join
is commutative and associative on multisets, so the order of those joins is free, and this
operator picks it per input and per run by the cost of eq. 3 (``sluice.plan.dataflow``), from
fan-outs it measures as it runs (``_fanout``, an average that follows drifting selectivities): an
input linked by no key to those joined so far is a cross product, and goes last where it can.
Whether keeping w_rs would pay (eq. 1–2) is the planner's decision
(``sluice.runtime.planner``: a kept intermediate is a binary join feeding this one).

Exactness.  A run reads a timestamp prefix of every input (``read_aligned``), so every row held is
older than every change read.  When one input changed, its signed elements are joined with the
others' synopses (bilinearity).  When several did, each change is read as a lifetime
(``sluice.runtime.lifetimes``; the rows held all run long as lifetimes without ends) and a
combination of one row per input holds while all its rows do: it enters at the latest start and
leaves at the earliest end, if that is later.  Each combination with at least one changed row is
formed once — by the dataflow expression of the *first* input (in input order) whose row changed,
with the inputs before it read as held and those after it as held or changed (the delta rule
Δ(R₁⋯Rₙ) = Σᵢ R₁ᵒˡᵈ⋯ΔRᵢ⋯Rₙⁿᵉʷ, on lifetimes).  The rest of the condition is evaluated on the
joined rows in the written plan's order (``stages``: a lower join's filter first, each later one
only on the rows the earlier ones kept), so no row is evaluated that the written plan rules out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
from sluice.datatypes import DataType
from sluice.plan.dataflow import Mode, Step, best_order
from sluice.plan.expr import BExpr
from sluice.runtime.batch import META, NEG_INF, POS_INF, concat, make, sign_of, sort_by_ts, ts_of
from sluice.runtime.keys import key_pairs
from sluice.runtime.lifetimes import Lifetimes, lifetimes, overlapping, pair_count
from sluice.runtime.operators.base import Operator, OperatorSpec
from sluice.runtime.operators.join import net_small, take_rows
from sluice.runtime.synopsis import FifoSynopsis, RelationSynopsis, W
from sluice.runtime.vexpr import compile_expr, evaluate_rows

SMOOTHING = 0.5  # weight of the newest measured fan-out in the running average
# pairs by key per row up to which the run's changes are paired by a hash join (then filtered by
# time); beyond, by the interval join (tests set it to 0 and to infinity)
PAIRS_PER_ROW = 1


@dataclass(frozen=True, slots=True)
class DataflowJoinSpec(OperatorSpec):
    input_types: tuple[tuple[DataType, ...], ...]
    # (input a, column a, input b, column b): equal columns of two inputs — hash-join keys
    keys: tuple[tuple[int, int, int, int], ...]
    # the rest of the condition over the joined row (all inputs' columns in input order), in the
    # order the written plan evaluates it: each stage only on the rows the earlier ones kept
    stages: tuple[BExpr, ...]
    fifo: tuple[bool, ...]  # per input: it deletes in the order it inserted


@dataclass(frozen=True, slots=True)
class _View:
    """Rows of one input as a dataflow operation reads them: attribute columns, each row's
    lifetime ``[start, end)`` and its multiplicity ``w`` (negative: a deletion of held copies).
    """

    cols: list[Any]
    start: np.ndarray
    end: np.ndarray
    w: np.ndarray

    def __len__(self) -> int:
        return len(self.w)


@dataclass
class DataflowJoin(Operator):
    spec: DataflowJoinSpec
    STATE = ("syn", "_fanout", "orders")
    CACHES = ("_linked",)

    def __post_init__(self) -> None:
        super().__post_init__()
        self.stateful = True
        self.n = len(self.spec.input_types)
        self.syn: list[RelationSynopsis] = [self._synopsis(i) for i in range(self.n)]
        self._stages = [compile_expr(s) for s in self.spec.stages]
        # measured fan-out of joining input j after the inputs in `done` (per input row)
        self._fanout: dict[tuple[frozenset[int], int], float] = {}
        self.orders: dict[int, tuple[int, ...]] = {}  # the order each input's expression used last
        self._linked: dict[tuple[frozenset[int], int], list[tuple[int, int, int]]] = {}  # (``_links``)

    def _synopsis(self, i: int) -> RelationSynopsis:
        types = self.spec.input_types[i]
        return FifoSynopsis(types) if self.spec.fifo[i] else RelationSynopsis(types)

    def declare(self, inputs: Sequence[Operator]) -> None:
        self.insert_only = all(i.insert_only for i in inputs)

    def has_work(self) -> bool:
        return self.aligned_has_work()

    def _run(self, budget: int) -> int:
        bound = self._arrival_bound()
        read = self.read_aligned(budget)
        deltas = [
            d if isinstance(s, FifoSynopsis) else net_small(d, t)
            for d, s, t in zip(read, self.syn, self.spec.input_types, strict=True)
        ]
        changed = [i for i, d in enumerate(deltas) if d.num_rows]
        runs: list[_View | None] = [None] * self.n
        keep: list[pa.Table] = list(deltas)  # per input: what its synopsis takes after the run
        if len(changed) == 1:  # one input changed: its signed elements, at their instants
            i = changed[0]
            runs[i] = _events(deltas[i])
        else:  # several: lifetimes; copies held before the run that it deletes leave first
            for i in changed:
                d = deltas[i]
                syn = self.syn[i]
                lt = lifetimes(d, syn.copies() if isinstance(syn, FifoSynopsis) else None)
                syn.add(take_rows(d, lt.gone))
                rows = lt.rows(d)
                runs[i] = _View(rows.columns[META:], lt.start, lt.end, np.ones(len(lt), np.int64))
                keep[i] = take_rows(d, lt.kept)
        held = [_held(s) for s in self.syn]
        parts = [p for i in changed if (p := self._term(i, runs, held)) is not None]
        for i in range(self.n):
            # an input whose partners have all ended (static relations, all read) pairs with nothing later
            if all(self._ended(m) for m in range(self.n) if m != i):
                if len(self.syn[i]):
                    self.syn[i] = self._synopsis(i)
            elif keep[i].num_rows:
                self.syn[i].add(keep[i])
        if parts:
            self.emit(sort_by_ts(concat(parts, self.types)))
        done = min(bound, self._input_watermark())
        if done > NEG_INF:
            self.advance(done)
        return sum(d.num_rows for d in read)

    # -- one dataflow expression -------------------------------------------------------------
    def _term(self, i: int, runs: list[_View | None], held: list[_View]) -> pa.Table | None:
        """The combinations whose first changed row is input ``i``'s: its changes joined with the
        rows held by the inputs before it and the rows held or changed by those after it.
        """
        first = runs[i]
        assert first is not None
        tables = [_union(held[j], r) if j > i and (r := runs[j]) is not None else held[j] for j in range(self.n)]
        tables[i] = first
        others = [j for j in range(self.n) if j != i]
        order, _ = best_order(others, lambda done, j: self._step(done, j, tables), i, Mode.BLOCK)
        self.orders[i] = order
        idx: dict[int, np.ndarray] = {i: np.arange(len(first))}
        lo, hi, w = first.start, first.end, first.w
        done = frozenset([i])
        for j in order:
            t = tables[j]
            # with the rows held all run (they overlap every lifetime), by key; with the run's own
            # changes, by key and time (an interval join: not every pair of the run's changes of
            # one key, most of which never met)
            a, b = self._match(idx, tables, done, j, held[j])
            r = runs[j] if j > i else None
            if r is not None and len(r):
                a2, b2 = self._meeting(idx, tables, done, j, lo, hi, r)
                a, b = np.concatenate([a, a2]), np.concatenate([b, b2 + len(held[j])])
            n_in = len(w)
            lo, hi = np.maximum(lo[a], t.start[b]), np.minimum(hi[a], t.end[b])
            w = w[a] * t.w[b]
            met = lo < hi  # the rows' lifetimes overlap
            a, b, lo, hi, w = a[met], b[met], lo[met], hi[met], w[met]
            idx = {s: x[a] for s, x in idx.items()} | {j: b}
            self._measure(done, j, n_in, len(w))
            done = done | {j}
            if not len(w):
                return None
        # the rest of the condition, on each combination once (before it becomes an insertion at its
        # start and a deletion at its end)
        cols = [c.take(pa.array(idx[s])) for s in range(self.n) for c in tables[s].cols]
        # (stamped at its start, or its end if it started before the run: what a rejection names)
        b = make(np.where(lo > NEG_INF, lo, hi), np.ones(len(w), np.int8), cols, self.types)
        keep = self._kept(b)
        if keep is not None:
            b, lo, hi, w = b.take(pa.array(keep)), lo[keep], hi[keep], w[keep]
        enter, leave = np.flatnonzero(lo > NEG_INF), np.flatnonzero(hi < POS_INF)
        rows = np.concatenate([enter, leave])
        w = np.concatenate([w[enter], -w[leave]])
        sign = pa.array(np.sign(w).astype(np.int8))
        b = b.take(pa.array(rows)).set_column(0, b.schema.field(0), pa.array(np.concatenate([lo[enter], hi[leave]])))
        b = b.set_column(1, b.schema.field(1), sign)
        reps = np.abs(w)
        return b if bool((reps == 1).all()) else b.take(pa.array(np.repeat(np.arange(len(w)), reps)))

    def _links(self, done: frozenset[int], j: int) -> list[tuple[int, int, int]]:
        """Keys joining input ``j`` to those in ``done``: (input there, its column, ``j``'s column)."""
        found = self._linked.get((done, j))
        if found is None:
            found = []
            for a, ca, b, cb in self.spec.keys:
                if b == j and a in done:
                    found.append((a, ca, cb))
                elif a == j and b in done:
                    found.append((b, cb, ca))
            self._linked[(done, j)] = found
        return found

    def _step(self, done: frozenset[int], j: int, tables: list[_View]) -> Step:
        """Joining input ``j`` after ``done``, as eq. 3 reads it: one unit of work per row read
        (Getta's τ), and the fan-out measured before — a cross product's is the size of ``j``,
        a keyed join never measured is taken to keep each row once (it is then measured).
        """
        if not self._links(done, j):
            return Step(1.0, float(len(tables[j])))
        return Step(1.0, self._fanout.get((done, j), 1.0))

    def _measure(self, done: frozenset[int], j: int, n_in: int, n_out: int) -> None:
        if n_in and self._links(done, j):
            f = n_out / n_in
            old = self._fanout.get((done, j))
            self._fanout[(done, j)] = f if old is None else SMOOTHING * f + (1 - SMOOTHING) * old

    def _keys(
        self, idx: dict[int, np.ndarray], tables: list[_View], done: frozenset[int], j: int, rows: _View
    ) -> tuple[list[Any], list[Any]]:
        """The key columns linking the combinations so far to ``rows`` of input ``j``: theirs, its."""
        links = self._links(done, j)
        mine = [tables[s].cols[cs].take(pa.array(idx[s])) for s, cs, _ in links]
        return mine, [rows.cols[cj] for _, _, cj in links]

    def _meeting(
        self,
        idx: dict[int, np.ndarray],
        tables: list[_View],
        done: frozenset[int],
        j: int,
        lo: np.ndarray,
        hi: np.ndarray,
        rows: _View,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Pairs (combination, row of the run's changes ``rows``) with equal keys whose lifetimes
        overlap (``sluice.runtime.lifetimes.overlapping``, an interval join).
        """
        mine, theirs = self._keys(idx, tables, done, j, rows)
        if not len(lo) or not len(rows):
            return np.empty(0, np.int64), np.empty(0, np.int64)
        if pair_count(mine, theirs, len(lo), len(rows)) <= PAIRS_PER_ROW * (len(lo) + len(rows)):
            # few pairs by key: form them all (a hash join), the caller drops those that never met
            return self._match(idx, tables, done, j, rows)
        return overlapping(mine, _spans(lo, hi), theirs, _spans(rows.start, rows.end))

    def _match(
        self, idx: dict[int, np.ndarray], tables: list[_View], done: frozenset[int], j: int, rows: _View
    ) -> tuple[np.ndarray, np.ndarray]:
        """Pairs (combination so far, row of ``rows``, rows of input ``j``) whose keys are equal;
        every pair where no key links them (a cross product).
        """
        mine, theirs = self._keys(idx, tables, done, j, rows)
        return key_pairs(mine, theirs, len(next(iter(idx.values()))), len(rows))

    def _kept(self, b: pa.Table) -> np.ndarray | None:
        """Which joined rows the rest of the condition keeps, stage by stage (None: all)."""
        keep: np.ndarray | None = None
        for compiled, expr in zip(self._stages, self.spec.stages, strict=True):
            rows = b if keep is None else b.take(pa.array(keep))
            if not rows.num_rows:
                break
            r = evaluate_rows([compiled], [expr], rows)
            self.reject_rows(r.rejected)
            at = r.true_rows()
            keep = at if keep is None else keep[at]
        return keep

    # -- capabilities ----------------------------------------------------------------------
    def _ended(self, i: int) -> bool:
        r = self.readers[i]
        return r.queue.ended and not r.available()

    def holds_elements(self) -> bool:
        # with all but one input ended (static relations) the last one's rows are not kept
        return sum(not self._ended(i) for i in range(self.n)) >= 2

    def synopses(self) -> list[Any]:
        return list(self.syn)

    def state_by_input(self) -> list[int]:
        return [s.nbytes for s in self.syn]


def _spans(start: np.ndarray, end: np.ndarray) -> Lifetimes:
    none = np.empty(0, np.int64)
    return Lifetimes(np.arange(len(start)), start, end, none, none)


def _held(syn: RelationSynopsis) -> _View:
    t = syn.table
    n = t.num_rows
    return _View(t.columns[:-1], np.full(n, NEG_INF, np.int64), np.full(n, POS_INF, np.int64), t.column(W).to_numpy())


def _events(d: pa.Table) -> _View:
    """One input's signed elements as lifetimes against rows held all run: an insertion holds
    from its instant on, a deletion ends a held copy at its instant.
    """
    ts, ins = ts_of(d).astype(np.int64), sign_of(d) > 0
    return _View(
        d.columns[META:],
        np.where(ins, ts, NEG_INF),
        np.where(ins, POS_INF, ts),
        np.ones(d.num_rows, np.int64),
    )


def _union(a: _View, b: _View) -> _View:
    if not len(a):
        return b
    if not len(b):
        return a
    cols = [pa.chunked_array(list(x.chunks) + list(y.chunks), type=x.type) for x, y in zip(a.cols, b.cols, strict=True)]
    return _View(cols, np.concatenate([a.start, b.start]), np.concatenate([a.end, b.end]), np.concatenate([a.w, b.w]))
