"""Filters and projections whose expressions hold subqueries (IN, EXISTS, ALL/ANY, scalar).

Inputs: the outer relation (deltas) and, per subquery, the deltas of its *uncorrelated part* X.
A subquery plan is ``chain(X)`` where ``chain`` is a stack of Filter/Project/Aggregate/Distinct
nodes that may read the outer row (the planner splits it so), evaluated per outer row with the
shared SQL definitions (``sluice.plan.scalar``, ``sluice.plan.aggregates``).  For an outer row r the subquery's rows are
``chain({x ∈ X(τ)}, r)``; equality conjuncts ``X.i = outer.j`` of the lowest Filter index X by key.

Inputs are read in timestamp order across inputs (aligned reads) and applied an instant at a
time: the outer rows that changed, and those whose key k saw a change to X (all rows when there is
no key), are mapped before and after the instant's changes, and what changed is emitted, old value
out, new value in.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from sluice.plan import logical as L
from sluice.plan.aggregates import aggregate_rows
from sluice.plan.expr import BExpr, Subquery
from sluice.plan.numeric import RowError
from sluice.runtime.batch import NEG_INF, from_signed_rows, to_elements
from sluice.runtime.operators.base import Operator, OperatorSpec
from sluice.runtime.rowexpr import Row, Summary, eval_row, fold_subquery, fold_summary
from sluice.runtime.synopsis import HashSynopsis


@dataclass(frozen=True, slots=True)
class SubquerySpec:
    """How to answer one Subquery node: X's operator input index, the chain above X (bottom-up),
    and equality keys (X column, outer column) taken from the lowest Filter.
    """

    node: Subquery
    chain: tuple[L.LogicalNode, ...]  # Filter / Project / Aggregate / Distinct nodes, lowest first
    keys: tuple[tuple[int, int], ...]
    # no keys and no outer reference anywhere: one answer per instant for every outer row
    uncorrelated: bool = False


@dataclass(frozen=True, slots=True)
class SubqueryMapSpec(OperatorSpec):
    exprs: tuple[BExpr, ...]  # a filter's predicate (one), or a projection's columns
    is_filter: bool
    subqueries: tuple[SubquerySpec, ...]  # input k + 1 is subquery k's uncorrelated part


@dataclass
class SubqueryMap(Operator):
    spec: SubqueryMapSpec
    STATE = ("_version", "_cache", "outer", "outer_by_key", "inner")
    CACHES = ("_by_id",)  # id(node) → index, filled as nodes are met: not state (ids differ per build)

    def __post_init__(self) -> None:
        super().__post_init__()
        self.stateful = True
        subs = self.spec.subqueries
        # keyed by the node itself (structural), not id(): ids do not survive a snapshot
        self.by_node: dict[Subquery, int] = {}
        for i, sub in enumerate(subs):
            self.by_node.setdefault(sub.node, i)
        self._by_id: dict[int, int] = {}  # id(node) -> index: hashing a node hashes its whole plan
        # an uncorrelated subquery (no keys, no outer reference in its chain) has one answer per
        # instant for every outer row: its rows (and their Summary) are kept until X changes
        self._uncorrelated = [s.uncorrelated for s in subs]
        self._version = [0] * len(subs)
        self._cache: dict[int, tuple[int, list[tuple[Row, int]], Summary | None]] = {}
        self.outer: Counter[Row] = Counter()
        self.outer_by_key: list[dict[tuple[Any, ...], Counter[Row]]] = [{} for _ in subs]
        self._keyed = [i for i, s in enumerate(subs) if s.keys]
        self.inner = [HashSynopsis() for _ in subs]

    def has_work(self) -> bool:
        return self.aligned_has_work()

    # -- evaluation ----------------------------------------------------------------------
    def _okey(self, i: int, row: Row) -> tuple[Any, ...]:
        return tuple(row[j] for _, j in self.spec.subqueries[i].keys)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_by_id": {}}  # ids do not survive a snapshot

    def _index(self, e: Subquery) -> int:
        i = self._by_id.get(id(e))
        if i is None:
            i = self._by_id[id(e)] = self.by_node[e]
        return i

    def _answer(self, e: Subquery, row: Row, env: tuple[Row, ...]) -> Any:
        i = self._index(e)
        if self._uncorrelated[i]:
            cached = self._cache.get(i)
            if cached is None or cached[0] != self._version[i]:
                rows = self._rows(e, row, env)
                cached = self._cache[i] = (
                    self._version[i],
                    rows,
                    Summary.of(rows) if e.kind in ("IN", "QUANT") else None,
                )
            x_val = eval_row(e.operand, row, env, self._answer) if e.operand is not None else None
            if cached[2] is not None and x_val is not None and not (isinstance(x_val, float) and x_val != x_val):
                return fold_summary(e, x_val, cached[2])
            return fold_subquery(e, x_val, cached[1])
        x_val = eval_row(e.operand, row, env, self._answer) if e.operand is not None else None
        return fold_subquery(e, x_val, self._rows(e, row, env))

    def _rows(self, e: Subquery, row: Row, env: tuple[Row, ...]) -> list[tuple[Row, int]]:
        """The subquery's rows for outer row ``row``: X's rows (its key's bucket) through the chain."""
        i = self._index(e)
        spec = self.spec.subqueries[i]
        key = self._okey(i, row)
        bucket = self.inner[i].query(key) if None not in key else None
        outer_env = env + (row,)
        rows: list[tuple[Row, int]] = list((bucket or {}).items())
        for node in spec.chain:
            ev = lambda e, r: eval_row(e, r, outer_env, self._answer)  # noqa: E731
            if isinstance(node, L.Filter):
                tests = ((r, n, _evaluated((node.predicate,), r, outer_env, self._answer)) for r, n in rows)
                rows = [(r, n) for r, n, v in tests if v is not None and v[0] is True]
            elif isinstance(node, L.Project):
                mapped = ((_evaluated(node.columns, r, outer_env, self._answer), n) for r, n in rows)
                rows = [(r, n) for r, n in mapped if r is not None]
            elif isinstance(node, L.Distinct):
                rows = [(r, 1) for r in dict.fromkeys(r for r, n in rows if n > 0)]
            else:
                assert isinstance(node, L.Aggregate)
                expanded = [r for r, n in rows for _ in range(n)]
                rows = [(r, 1) for r in aggregate_rows(expanded, node, ev)]
        return rows

    def _map(self, row: Row, report: bool = False) -> Row | None:
        """The outer row's output row (None: filtered out, or it cannot be evaluated — dropped,
        as every operator drops such a row, and counted when ``report``: once per evaluation
        that is new, not for the "before" side of a change, already counted).
        """
        try:
            if self.spec.is_filter:
                return row if eval_row(self.spec.exprs[0], row, (), self._answer) is True else None
            return tuple(eval_row(c, row, (), self._answer) for c in self.spec.exprs)
        except RowError as ex:
            if report:
                self.reject_rows([str(ex)])
            return None

    # -- running -------------------------------------------------------------------------
    def _run(self, budget: int) -> int:
        parts = self.read_aligned(budget)
        events: list[tuple[int, int, int, Row]] = []  # (ts, input, sign, row)
        for k, b in enumerate(parts):
            events += [(t, k, 1 if s == "+" else -1, r) for t, s, r in to_elements(b)]
        events.sort(key=lambda e: e[0])  # stable: within an instant, input order
        out: list[tuple[int, int, Row]] = []
        i = 0
        while i < len(events):
            j = i
            while j < len(events) and events[j][0] == events[i][0]:
                j += 1
            self._instant(events[i][0], events[i:j], out)
            i = j
        if out:
            self.emit(from_signed_rows(out, self.types))
        done = min(self._arrival_bound(), self._input_watermark())
        if done > NEG_INF:
            self.advance(done)
        return sum(p.num_rows for p in parts)

    def _instant(self, ts: int, events: list[tuple[int, int, int, Row]], out: list[tuple[int, int, Row]]) -> None:
        """All changes of one instant at once: the output relation differs from the previous
        instant's only on the outer rows that changed or whose subquery input changed, each mapped
        once before and once after (a slide that changes every group of X re-maps each outer row
        once, not once per change).
        """
        affected: dict[Row, None] = {}
        every = False
        for _, k, _, row in events:
            if k == 0:
                affected[row] = None
                continue
            spec = self.spec.subqueries[k - 1]
            if not spec.keys:
                every = True
                continue
            key = tuple(row[xi] for xi, _ in spec.keys)
            if None not in key:  # a NULL key equals no outer row
                affected.update(dict.fromkeys(self.outer_by_key[k - 1].get(key) or ()))
        if every:
            affected.update(dict.fromkeys(self.outer))
        before = {r: (self._map(r), n) for r in affected if (n := self.outer.get(r, 0)) > 0}
        for _, k, sign, row in events:
            if k == 0:
                self._outer_count(sign, row)
            else:
                spec = self.spec.subqueries[k - 1]
                key = tuple(row[xi] for xi, _ in spec.keys)
                if None not in key:
                    self.inner[k - 1].insert(key, row, sign)
                    self._version[k - 1] += 1
        for r in affected:
            n_new = self.outer.get(r, 0)
            new = self._map(r, report=True) if n_new > 0 else None
            old, n_old = before.get(r, (None, 0))
            if old == new:
                if new is not None and n_new != n_old:
                    out.extend([(ts, 1 if n_new > n_old else -1, new)] * abs(n_new - n_old))
                continue
            if old is not None:
                out.extend([(ts, -1, old)] * n_old)
            if new is not None:
                out.extend([(ts, 1, new)] * n_new)

    def _outer_count(self, sign: int, row: Row) -> None:
        self.outer[row] += sign
        if self.outer[row] == 0:
            del self.outer[row]
        for i in self._keyed:  # a keyless subquery reads every outer row: self.outer
            c = self.outer_by_key[i].setdefault(self._okey(i, row), Counter())
            c[row] += sign
            if c[row] == 0:
                del c[row]

    def synopses(self) -> list[Any]:
        return list(self.inner)

    def state_bytes(self) -> int:
        return 64 * len(self.outer) + super().state_bytes()


def _evaluated(exprs: tuple[BExpr, ...], row: Row, env: tuple[Row, ...], answer: Any) -> Row | None:
    """``exprs`` of an inner row, or None if it cannot be evaluated: that row is left out of the
    subquery's answer, as the definition (and the operator it would otherwise be) drops it — not
    the outer row the subquery is evaluated for.  (Not counted: the chain re-evaluates inner rows
    for every outer row.)
    """
    try:
        return tuple(eval_row(e, row, env, answer) for e in exprs)
    except RowError:
        return None
