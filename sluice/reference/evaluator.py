"""The reference evaluator: any CQL query's answer computed *by definition* (seed §2.2).

At every instant τ it rebuilds each window relation from the stream prefix up to τ,
evaluates the relational part with plain SQL semantics, and turns relations into streams by
differences: ``Istream(R)(τ) = R(τ) − R(τ−1)``, ``Dstream(R)(τ) = R(τ−1) − R(τ)`` (multiset
differences, ``R(start−1) = ∅``), ``Rstream(R)(τ) = R(τ)`` at every tick.

Definitions (DESIGN.md; issue "CQL front end and the reference evaluator"):

* ``[Range T]`` holds the elements with timestamp in ``[τ−T, τ]``; ``[Now]`` is ``[Range 0]``;
  ``[Range T Slide U]`` is ``[Range T]`` evaluated at ``⌊τ/U⌋·U``.
* ``[Rows N]`` holds the N latest elements with timestamp ≤ τ, ties broken by arrival order;
  ``[Partition By k Rows N]`` applies ``[Rows N]`` per distinct k.
* A derived stream (from Istream/Dstream/Rstream) lists each instant's elements in a
  canonical (sorted) order, which fixes ``Rows`` ties on derived streams.
* Input floats are as the engine admits them (``sluice.plan.numeric``): NaN is NULL and
  ``-0.0`` is ``0.0``, one zero.

It is slow and obviously right: the oracle for tests, never the engine.  Relations only
change at *change instants* (inputs, window expiries, slide boundaries), so it evaluates
only those unless the query uses ``Rstream`` or ``CURRENT_TIME``; ``instants="all"``
evaluates every tick (a test checks both agree).

>>> from sluice.catalog import Catalog
>>> from sluice.plan.binder import bind_query
>>> cat = Catalog(); _ = cat.register_stream("S", [("A", "integer")])
>>> q = bind_query(cat, "select * from S [Rows 1]")
>>> evaluate(q, {"S": [(1, (10,)), (2, (20,))]})
[Element(ts=1, sign='+', row=(10,)), Element(ts=2, sign='-', row=(10,)), Element(ts=2, sign='+', row=(20,))]
"""

from __future__ import annotations

import bisect
import itertools
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sluice.catalog.schema import Kind
from sluice.errors import EvaluationError
from sluice.plan import logical as L
from sluice.plan.aggregates import aggregate_rows
from sluice.plan.analysis import conjuncts, equi_key, plan_uses_current_time
from sluice.plan.binder import BoundQuery
from sluice.plan.element import Element, Row
from sluice.plan.expr import (
    BExpr,
    Call,
    CaseWhen,
    ColRef,
    Const,
    CurrentTime,
    OuterRef,
    Subquery,
    UdfCall,
    walk_expr,
)
from sluice.plan.function_defs import function
from sluice.plan.numeric import RowError, canonical
from sluice.plan.scalar import not_, quantified, udf_value
from sluice.plan.semantics import coerce, sample_keep, sort_key

StreamData = Sequence[tuple[int, Row]]
RelationData = Sequence[tuple[int, str, Row]]

#: Refuse to evaluate more instants than this (the oracle is for small inputs).
MAX_INSTANTS = 2_000_000


def evaluate(
    query: BoundQuery | L.LogicalNode,
    streams: Mapping[str, StreamData] | None = None,
    relations: Mapping[str, RelationData] | None = None,
    *,
    start: int | None = None,
    until: int | None = None,
    seed: int = 0,
    instants: str = "changes",
) -> list[Element]:
    """Compute the output elements of ``query`` over the given inputs, by definition.

    ``streams`` maps a stream name to ``(ts, row)`` pairs in arrival order; ``relations``
    maps a relation name to ``(ts, '+'|'-', row)`` updates.  Output covers instants
    ``start..until`` (default: the first and last input timestamps).
    """
    plan = query.plan if isinstance(query, BoundQuery) else query
    ev = Evaluator(plan, streams or {}, relations or {}, start=start, until=until, seed=seed, instants=instants)
    return ev.output()


@dataclass
class _Ctx:
    ts: int
    env: tuple[Row, ...] = ()


@dataclass
class Evaluator:
    plan: L.LogicalNode
    streams: Mapping[str, StreamData]
    relations: Mapping[str, RelationData]
    start: int | None = None
    until: int | None = None
    seed: int = 0
    instants: str = "changes"
    _stream_cache: dict[int, list[tuple[int, Row]]] = field(default_factory=dict)
    _rel_cache: dict[tuple[int, int], list[Row]] = field(default_factory=dict)
    _correlated: dict[int, bool] = field(default_factory=dict)
    _relation_states: dict[str, tuple[list[int], list[Counter[Row]]]] = field(default_factory=dict)
    _memo: dict[tuple[BExpr, ...], dict[Any, Row]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        stamps = [t for rows in self.streams.values() for t, _ in rows]
        stamps += [t for ups in self.relations.values() for t, _, _ in ups]
        lo = min(stamps) if stamps else 0
        hi = max(stamps) if stamps else lo
        self.start = lo if self.start is None else self.start
        self.until = max(hi, self.start) if self.until is None else self.until
        self._input_stamps = sorted(set(stamps))
        self._check_inputs()
        self._ticks = self._instants()

    # -- inputs --------------------------------------------------------------------------
    def _check_inputs(self) -> None:
        """Rows must fit their schema; relation updates must be signed.  (A missing input is empty.)"""
        for n in L.walk_plan(self.plan):
            if not isinstance(n, L.Scan):
                continue
            width = len(n.schema)
            if n.kind is Kind.STREAM:
                for i, (t, row) in enumerate(self._input(self.streams, n.name)):
                    if len(row) != width:
                        raise EvaluationError(
                            f"stream {n.name}, element {i + 1} (ts {t}): {len(row)} values for {width} attributes"
                        )
            else:
                for i, (t, sign, row) in enumerate(self._input(self.relations, n.name)):
                    if sign not in ("+", "-"):
                        raise EvaluationError(
                            f"relation {n.name}, update {i + 1} (ts {t}): sign {sign!r} is not + or -"
                        )
                    if len(row) != width:
                        raise EvaluationError(
                            f"relation {n.name}, update {i + 1} (ts {t}): {len(row)} values for {width} attributes"
                        )

    def _input(self, data: Mapping[str, Any], name: str) -> Any:
        if name in data:
            return data[name]
        for k, v in data.items():
            if k.lower() == name.lower():
                return v
        return []

    # -- instants ------------------------------------------------------------------------
    def _instants(self) -> list[int]:
        assert self.start is not None and self.until is not None
        span = self.until - self.start + 1
        every_tick = self.instants == "all" or _needs_every_tick(self.plan)
        if every_tick:
            if span > MAX_INSTANTS:
                raise EvaluationError(
                    f"the reference evaluator would evaluate {span:,} instants "
                    f"({self.start}..{self.until}); it is meant for small inputs"
                )
            return list(range(self.start, self.until + 1))
        changes = set(self._input_stamps) | {self.start}
        windows = [n.spec for n in L.walk_plan(self.plan) if isinstance(n, L.Window)]
        rounds = 1 + sum(1 for n in L.walk_plan(self.plan) if isinstance(n, L.StreamOp | L.Window))
        for _ in range(rounds):
            new: set[int] = set()
            for c in changes:
                for w in windows:
                    new.update(w.changes_after(c))
            grown = {t for t in new if t <= self.until} - changes
            if not grown:
                break
            changes |= grown
        return sorted(t for t in changes if self.start <= t <= self.until)

    # -- output --------------------------------------------------------------------------
    def output(self) -> list[Element]:
        out: list[Element] = []
        if self.plan.kind is Kind.STREAM:
            for t, row in self.stream(self.plan):
                if self.start is not None and self.until is not None and self.start <= t <= self.until:
                    out.append(Element(t, "+", _coerce_row(row, self.plan)))
            return out
        prev: Counter[Row] = Counter()
        for t in self._ticks:
            cur = Counter(_coerce_row(r, self.plan) for r in self.relation(self.plan, _Ctx(t)))
            gone, came = prev - cur, cur - prev
            out.extend(Element(t, "-", r) for r in sorted(gone.elements(), key=sort_key))
            out.extend(Element(t, "+", r) for r in sorted(came.elements(), key=sort_key))
            prev = cur
        return out

    # -- streams -------------------------------------------------------------------------
    def stream(self, node: L.LogicalNode) -> list[tuple[int, Row]]:
        key = id(node)
        if key not in self._stream_cache:
            fn = _STREAMS.get(type(node))
            if fn is None:
                raise EvaluationError(f"{type(node).__name__} does not yield a stream")
            self._stream_cache[key] = fn(self, node)
        return self._stream_cache[key]

    def _scan_stream(self, node: L.Scan) -> list[tuple[int, Row]]:
        rows = [(int(t), _canonical_row(r)) for t, r in self._input(self.streams, node.name)]
        return sorted(rows, key=lambda e: e[0])  # stable: ties keep arrival order

    def _sample(self, node: L.Sample) -> list[tuple[int, Row]]:
        out, seen = [], Counter[tuple[int, Row]]()
        for t, row in self.stream(node.input):
            k = seen[(t, row)]
            seen[(t, row)] += 1
            if sample_keep(self.seed, node.salt, t, row, k, node.fraction):
                out.append((t, row))
        return out

    def _filter_stream(self, node: L.Filter) -> list[tuple[int, Row]]:
        return [(t, r) for t, r in self.stream(node.input) if _try(self.eval, node.predicate, r, _Ctx(t)) is True]

    def _project_stream(self, node: L.Project) -> list[tuple[int, Row]]:
        out = [(t, _try(self._values, node.columns, r, _Ctx(t))) for t, r in self.stream(node.input)]
        return [(t, r) for t, r in out if r is not None]

    def _stream_op(self, node: L.StreamOp) -> list[tuple[int, Row]]:
        out: list[tuple[int, Row]] = []
        prev: Counter[Row] = Counter()
        for t in self._ticks:
            rows = self.relation(node.input, _Ctx(t))
            if node.op is L.StreamOpKind.RSTREAM:
                out.extend((t, r) for r in sorted(rows, key=sort_key))
                continue
            cur = Counter(rows)
            diff = cur - prev if node.op is L.StreamOpKind.ISTREAM else prev - cur
            out.extend((t, r) for r in sorted(diff.elements(), key=sort_key))
            prev = cur
        return out

    # -- relations -----------------------------------------------------------------------
    def relation(self, node: L.LogicalNode, ctx: _Ctx) -> list[Row]:
        correlated = self._is_correlated(node)
        key = (id(node), ctx.ts)
        if not correlated and key in self._rel_cache:
            return self._rel_cache[key]
        fn = _RELATIONS.get(type(node))
        if fn is None:
            raise EvaluationError(f"{type(node).__name__} does not yield a relation")
        rows = fn(self, node, ctx)
        if not correlated:
            if len(self._rel_cache) > 50_000:
                self._rel_cache.clear()
            self._rel_cache[key] = rows
        return rows

    def _is_correlated(self, node: L.LogicalNode) -> bool:
        key = id(node)
        if key not in self._correlated:
            self._correlated[key] = any(
                isinstance(x, OuterRef) for n in L.walk_plan(node) for e in n.exprs() for x in walk_expr(e)
            )
        return self._correlated[key]

    def _scan_relation(self, node: L.Scan, ctx: _Ctx) -> list[Row]:
        if node.kind is Kind.STREAM:
            raise EvaluationError(f"stream {node.name} used as a relation without a window")
        if node.name not in self._relation_states:
            stamps: list[int] = []
            states: list[Counter[Row]] = []
            cur: Counter[Row] = Counter()
            ups = sorted(self._input(self.relations, node.name), key=lambda u: u[0])
            for t, grp in itertools.groupby(ups, key=lambda u: u[0]):
                for _, sign, row in grp:
                    row = _canonical_row(row)
                    if sign == "+":
                        cur[row] += 1
                    elif cur[row] > 0:
                        cur[row] -= 1
                    else:
                        raise EvaluationError(f"relation {node.name}: deletion of {row!r} at {t}, which is not in it")
                stamps.append(int(t))
                states.append(+cur)
            self._relation_states[node.name] = (stamps, states)
        stamps, states = self._relation_states[node.name]
        i = bisect.bisect_right(stamps, ctx.ts)
        return list(states[i - 1].elements()) if i else []

    def _window(self, node: L.Window, ctx: _Ctx) -> list[Row]:
        s = self.stream(node.input)
        tau = node.spec.as_of(ctx.ts)
        return node.spec.contents(s[: bisect.bisect_right(s, tau, key=lambda e: e[0])], tau)

    def _filter(self, node: L.Filter, ctx: _Ctx) -> list[Row]:
        if isinstance(node.input, L.Join):
            return self._filtered_join(node, ctx)
        pred = self._row_function((node.predicate,), ctx)
        return [r for r in self.relation(node.input, ctx) if (_try(pred, r) or (None,))[0] is True]

    def _project(self, node: L.Project, ctx: _Ctx) -> list[Row]:
        fn = self._row_function(node.columns, ctx)
        return [x for x in (_try(fn, r) for r in self.relation(node.input, ctx)) if x is not None]

    def _row_function(self, exprs: tuple[BExpr, ...], ctx: _Ctx) -> Callable[[Row], Row]:
        """``row -> values of exprs``; memoised across instants when the expressions only read
        the row (no CURRENT_TIME, subquery or outer reference), since a relation is re-read at
        every instant.  The key includes the value types, as 1, 1.0 and True hash alike.
        """
        if not all(_pure(e) for e in exprs):
            return lambda r: tuple(self.eval(e, r, ctx) for e in exprs)
        memo = self._memo.setdefault(exprs, {})
        pure_ctx = _Ctx(0)

        def fn(r: Row) -> Row:
            key = (r, tuple(map(type, r)))
            hit = memo.get(key)
            if hit is None:
                hit = memo[key] = tuple(self.eval(e, r, pure_ctx) for e in exprs)
            return hit

        return fn

    def _join(self, node: L.Join, ctx: _Ctx) -> list[Row]:
        left = self.relation(node.left, ctx)
        right = self.relation(node.right, ctx)
        return [a + b for a in left for b in right]

    def _filtered_join(self, node: L.Filter, ctx: _Ctx) -> list[Row]:
        """σ_p(A × B × ...) by definition, applying each conjunct of p as soon as the columns
        it reads are present and using equality conjuncts as hash lookups.  Each conjunct
        must be TRUE for p to be TRUE, so applying them early is exact.
        """
        leaves: list[L.LogicalNode] = []
        _flatten_join(node.input, leaves)
        pending = [(c, _max_col(c)) for c in conjuncts(node.predicate)]
        acc: list[Row] = [()]
        width = 0
        for leaf in leaves:
            rows = self.relation(leaf, ctx)
            new_width = width + len(leaf.schema)
            usable = [(c, m) for c, m in pending if m is not None and m < new_width]
            pending = [p for p in pending if p not in usable]
            key = next((k for k in (equi_key(c, width, new_width) for c, _ in usable) if k), None)
            if key is not None:
                li, ri = key
                index: dict[Any, list[Row]] = {}
                for r in rows:
                    if r[ri] is not None:
                        index.setdefault(r[ri], []).append(r)
                acc = [a + b for a in acc if a[li] is not None for b in index.get(a[li], ())]
            else:
                acc = [a + b for a in acc for b in rows]
            for c, _ in usable:
                acc = [r for r in acc if _try(self.eval, c, r, ctx) is True]
            width = new_width
        for c, _ in pending:  # subqueries and column-free conjuncts
            acc = [r for r in acc if _try(self.eval, c, r, ctx) is True]
        return acc

    def _aggregate(self, node: L.Aggregate, ctx: _Ctx) -> list[Row]:
        rows = self.relation(node.input, ctx)
        return aggregate_rows(rows, node, lambda e, r: self.eval(e, r, ctx))

    def _distinct(self, node: L.Distinct, ctx: _Ctx) -> list[Row]:
        return list(dict.fromkeys(self.relation(node.input, ctx)))

    def _set_op(self, node: L.SetOp, ctx: _Ctx) -> list[Row]:
        types = node.schema.types
        fix = lambda rows: [tuple(coerce(v, t) for v, t in zip(r, types, strict=True)) for r in rows]  # noqa: E731
        a = Counter(fix(self.relation(node.left, ctx)))
        b = Counter(fix(self.relation(node.right, ctx)))
        if node.op is L.SetOpKind.UNION:
            res = a + b if node.all else Counter(dict.fromkeys(a + b, 1))
        elif node.op is L.SetOpKind.EXCEPT:
            res = a - b if node.all else Counter({r: 1 for r in a if r not in b})
        else:
            res = a & b if node.all else Counter({r: 1 for r in a if r in b})
        return list(res.elements())

    def _relation_of_stream_node(self, node: L.LogicalNode, ctx: _Ctx) -> list[Row]:
        raise EvaluationError(f"{type(node).__name__} yields a stream; a window must turn it into a relation")

    # -- scalar expressions --------------------------------------------------------------
    def _values(self, exprs: tuple[BExpr, ...], row: Row, ctx: _Ctx) -> Row:
        return tuple(self.eval(e, row, ctx) for e in exprs)

    def eval(self, e: BExpr, row: Row, ctx: _Ctx) -> Any:
        if isinstance(e, ColRef):
            return row[e.index]
        if isinstance(e, Const):
            return e.value
        if isinstance(e, Call):
            return function(e.fn).row(*(self.eval(a, row, ctx) for a in e.args))
        if isinstance(e, OuterRef):
            return ctx.env[-e.depth][e.index]
        if isinstance(e, CaseWhen):
            for cond, res in e.whens:
                if self.eval(cond, row, ctx) is True:
                    return self.eval(res, row, ctx)
            return self.eval(e.else_, row, ctx)
        if isinstance(e, UdfCall):
            return udf_value(e, [self.eval(a, row, ctx) for a in e.args])
        if isinstance(e, CurrentTime):
            return ctx.ts
        if isinstance(e, Subquery):
            return self._subquery(e, row, ctx)
        raise EvaluationError(f"cannot evaluate {type(e).__name__}")

    def _subquery(self, e: Subquery, row: Row, ctx: _Ctx) -> Any:
        rows = self.relation(e.plan, _Ctx(ctx.ts, ctx.env + (row,)))
        if e.kind == "EXISTS":
            return (not rows) if e.negated else bool(rows)
        if e.kind == "SCALAR":
            if len(rows) > 1:
                raise EvaluationError(f"a scalar subquery returned {len(rows)} rows at instant {ctx.ts}")
            return rows[0][0] if rows else None
        assert e.operand is not None
        x = self.eval(e.operand, row, ctx)
        cmp = function(e.op if e.kind == "QUANT" else "eq").row
        out = quantified((cmp(x, r[0]) for r in rows), e.kind == "QUANT" and e.quantifier == "ALL")
        return not_(out) if e.negated else out


def _try(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)``, or ``None`` when the row cannot be evaluated: it is dropped (``sluice.plan.numeric``)."""
    try:
        return fn(*args)
    except RowError:
        return None


def _canonical_row(row: Sequence[Any]) -> Row:
    """An input row as the engine admits it (``sluice.plan.numeric``): a float NaN is NULL and
    ``-0.0`` is ``0.0`` — equal floats have one representative, so no operator picks one.
    """
    return tuple(canonical(v) for v in row)


def _coerce_row(row: Row, node: L.LogicalNode) -> Row:
    return tuple(coerce(v, t) for v, t in zip(row, node.schema.types, strict=True))


def _pure(e: BExpr) -> bool:
    """Whether ``e``'s value depends on the row alone."""
    return not any(isinstance(x, CurrentTime | Subquery | OuterRef) for x in walk_expr(e))


def _needs_every_tick(plan: L.LogicalNode) -> bool:
    return plan_uses_current_time(plan) or any(
        isinstance(n, L.StreamOp) and n.op is L.StreamOpKind.RSTREAM for n in L.walk_plan(plan)
    )


def _flatten_join(node: L.LogicalNode, out: list[L.LogicalNode]) -> None:
    if isinstance(node, L.Join):
        _flatten_join(node.left, out)
        _flatten_join(node.right, out)
    else:
        out.append(node)


def _max_col(e: BExpr) -> int | None:
    """Highest column read by ``e``; None if it holds a subquery (apply it last)."""
    m = -1
    for x in walk_expr(e):
        if isinstance(x, Subquery):
            return None
        if isinstance(x, ColRef):
            m = max(m, x.index)
    return m if m >= 0 else None


_STREAMS: dict[type, Callable[[Evaluator, Any], list[tuple[int, Row]]]] = {
    L.Scan: Evaluator._scan_stream,
    L.Sample: Evaluator._sample,
    L.Filter: Evaluator._filter_stream,
    L.Project: Evaluator._project_stream,
    L.StreamOp: Evaluator._stream_op,
}

_RELATIONS: dict[type, Callable[[Evaluator, Any, _Ctx], list[Row]]] = {
    L.Scan: Evaluator._scan_relation,
    L.Window: Evaluator._window,
    L.Filter: Evaluator._filter,
    L.Project: Evaluator._project,
    L.Join: Evaluator._join,
    L.Aggregate: Evaluator._aggregate,
    L.Distinct: Evaluator._distinct,
    L.SetOp: Evaluator._set_op,
    L.StreamOp: Evaluator._relation_of_stream_node,
    L.Sample: Evaluator._relation_of_stream_node,
}
