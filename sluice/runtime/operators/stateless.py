"""Stateless operators: selection, projection, sampling (vectorised; sample hashes per element)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
from sluice.plan.analysis import conjuncts
from sluice.plan.expr import BExpr, ColRef
from sluice.plan.semantics import sample_keep
from sluice.runtime.batch import to_elements, with_attrs
from sluice.runtime.operators.base import Operator, OperatorSpec, Unary
from sluice.runtime.operators.filter_order import SMALL, FilterOrder, Monitor
from sluice.runtime.vexpr import VFn, compile_expr, evaluate_rows, truth_mask

# how a selection of several conjuncts orders them (an experiment compares the three)
FILTER_ORDER = FilterOrder.ADAPTIVE


@dataclass(frozen=True, slots=True)
class SelectSpec(OperatorSpec):
    predicate: BExpr


@dataclass(frozen=True, slots=True)
class ProjectSpec(OperatorSpec):
    columns: tuple[BExpr, ...]


@dataclass(frozen=True, slots=True)
class SampleSpec(OperatorSpec):
    fraction: float
    salt: int


@dataclass
class Select(Unary):
    """σ: keeps elements whose predicate is TRUE.  CURRENT_TIME reads the element's own timestamp,
    its meaning on a stream (a window's Where); over a relation the planner uses ``TickingMap``.
    """

    spec: SelectSpec
    PASSES_END = True
    PARTS = ("monitor",)

    def __post_init__(self) -> None:
        super().__post_init__()
        self._pred = compile_expr(self.spec.predicate)
        # several conjuncts: evaluated one after another, in the order their monitor picks
        # (``sluice.runtime.operators.filter_order``) — or all at once, as written
        self._conj = conjuncts(self.spec.predicate)
        several = len(self._conj) > 1 and FILTER_ORDER is not FilterOrder.WRITTEN
        self._fns = [compile_expr(c) for c in self._conj] if several else []
        self.monitor = Monitor(len(self._conj), adaptive=FILTER_ORDER is FilterOrder.ADAPTIVE) if several else None

    def declare(self, inputs: Sequence[Operator]) -> None:
        self.insert_only, self.pure = inputs[0].insert_only, inputs[0].pure

    def process(self, b: pa.Table) -> None:
        m = self.monitor
        if m is None or b.num_rows < SMALL:
            self.emit(self._where(b, self._pred, self.spec.predicate))
            return
        clock = self.ctx.clock
        profile, ordered = m.next_batch()
        if profile:
            m.observe(b, self._fns, self._conj, clock)
        n, t0 = b.num_rows, clock()
        if ordered:
            for k in m.order:
                t, rows = clock(), b.num_rows
                b = self._where(b, self._fns[k], self._conj[k])
                m.record(k, rows, clock() - t)
                if not b.num_rows:
                    break
        else:
            b = self._where(b, self._pred, self.spec.predicate)
        m.timed(ordered, clock() - t0, n)
        self.emit(b)

    def _where(self, b: pa.Table, fn: VFn, expr: BExpr) -> pa.Table:
        """The rows of ``b`` where ``expr`` is TRUE (rows it cannot evaluate dropped and counted)."""
        r = evaluate_rows([fn], [expr], b)
        self.reject_rows(r.rejected)
        return r.batch.filter(truth_mask(r.values[0], r.batch.num_rows))


@dataclass
class Project(Unary):
    spec: ProjectSpec
    PASSES_END = True

    def __post_init__(self) -> None:
        super().__post_init__()
        self._fns = [compile_expr(c) for c in self.spec.columns]

    def declare(self, inputs: Sequence[Operator]) -> None:
        self.insert_only = inputs[0].insert_only
        # keeping every input column makes the projection injective: distinct rows stay distinct
        kept = {c.index for c in self.spec.columns if isinstance(c, ColRef)}
        self.pure = inputs[0].pure and kept >= set(range(len(inputs[0].schema.types)))

    def process(self, b: pa.Table) -> None:
        r = evaluate_rows(self._fns, self.spec.columns, b)
        self.reject_rows(r.rejected)
        self.emit(with_attrs(r.batch, r.values, self.types))


@dataclass
class Sample(Unary):
    """Sample(p) with the shared deterministic hash (``sluice.plan.semantics.sample_keep``)."""

    spec: SampleSpec
    STATE = ("_seen", "_seen_ts")

    def __post_init__(self) -> None:
        super().__post_init__()
        self._seen: Counter[tuple[int, tuple[object, ...]]] = Counter()
        self._seen_ts: int | None = None

    def declare(self, inputs: Sequence[Operator]) -> None:
        self.insert_only = inputs[0].insert_only

    def process(self, b: pa.Table) -> None:
        fraction = self.spec.fraction
        if fraction >= 1.0:
            self.emit(b)
            return
        keep = np.zeros(b.num_rows, dtype=bool)
        for i, (t, _, row) in enumerate(to_elements(b)):
            if t != self._seen_ts:  # copy numbers restart every instant
                self._seen.clear()
                self._seen_ts = t
            k = self._seen[(t, row)]
            self._seen[(t, row)] += 1
            keep[i] = sample_keep(self.ctx.seed, self.spec.salt, t, row, k, fraction)
        self.emit(b.filter(pa.array(keep)))
