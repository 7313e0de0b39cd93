"""Where a query may be approximated, and the precision it then has (STREAM §5.1.1, §5.3).

**Where (§5.1.1).**  Dropping elements of a base stream — sampling, load shedding — before they
reach a window makes every relation above it a *sub*-multiset of the exact one, as long as the
operators on the way are monotone (selection, projection, join, UNION ALL, INTERSECT ALL, the
left side of EXCEPT ALL, time windows, Istream/Rstream/Dstream).  The paper's bad cases, where a
smaller input can give *more* output, are refused: duplicate elimination (DISTINCT, and the set
forms of UNION / INTERSECT / EXCEPT), the right-hand side of a negation (EXCEPT, and any stream
read inside a subquery: NOT EXISTS / NOT IN).  Two more cases are refused here: ``[Rows N]``
windows (the last N rows of a sample are not among the last N rows of the stream: false
positives), and aggregates (their *values* change, which the paper's tuple-level FP/FN model does
not cover — its §5.3 lists value-based precision as future work).

**Precision (§5.3).**  A stream's precision is ``(FP, FN)``: FP the expected fraction of output
tuples that are wrong, FN the expected fraction of correct tuples that are missing (the paper
phrases FN per correct output tuple; as a rate of missed tuples it is the same quantity over a
stream).  A base stream kept at rate k has ``(0, 1 − k)``; a join's output tuple needs both of its
inputs' tuples: ``1 − (1 − a)(1 − b)`` for FP and FN alike; selection, projection and windows pass
their input's precision; UNION ALL is bounded by its worse input.  Istream and Dstream pass the
relation's precision too, which is their own except when identical tuples leave and enter a window
at one instant (the exact Istream nets them out, a sample may not: rare false positives).  Unsafe
plans with approximated input have no estimate (``None``): the engine says so rather than invent one.

>>> from sluice.catalog import Catalog
>>> from sluice.plan import bind_query
>>> cat = Catalog(); _ = cat.register_stream("S", [("A", "integer")])
>>> plan = bind_query(cat, "select * from S [Range 10], S [Range 5] as T where S.A = T.A").plan
>>> unsafe_streams(plan)
{}
>>> estimate(plan, {"s": 0.5})
Precision(fp=0.0, fn=0.75)
>>> unsafe_streams(bind_query(cat, "select distinct A from S [Range 10]").plan)
{'s': 'below DISTINCT (STREAM §5.1.1: a smaller input can give more output)'}
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache

from sluice import windows as W
from sluice.approx.synopses import describe, recall_of
from sluice.catalog import Kind
from sluice.errors import SluiceError
from sluice.plan import logical as L
from sluice.plan.expr import Subquery, walk_expr
from sluice.runtime.bloom import Bloom


@dataclass(frozen=True, slots=True)
class Precision:
    """(FP, FN) of a stream or relation (STREAM §5.3): both 0 when exact."""

    fp: float
    fn: float

    @property
    def exact(self) -> bool:
        return self.fp == 0.0 and self.fn == 0.0

    def join(self, other: Precision) -> Precision:
        return Precision(1 - (1 - self.fp) * (1 - other.fp), 1 - (1 - self.fn) * (1 - other.fn))

    def worse(self, other: Precision) -> Precision:
        return Precision(max(self.fp, other.fp), max(self.fn, other.fn))

    def describe(self) -> str:
        return "exact" if self.exact else f"FP {self.fp:.3f}, FN {self.fn:.3f}"


EXACT = Precision(0.0, 0.0)

_DISTINCT = "below DISTINCT (STREAM §5.1.1: a smaller input can give more output)"
_NEGATION = "on the right of EXCEPT (STREAM §5.1.1: a smaller input can give more output)"
_SUBQUERY = "inside a subquery (NOT EXISTS / NOT IN: STREAM §5.1.1, a smaller input can give more output)"
_AGGREGATE = "below an aggregate (its values change: outside STREAM §5.3's tuple precision model)"
_DSTREAM = "under Dstream (a shrunk window deletes early: its deletions would be false positives)"
# (the exact window evicts an equal row at the instant a new one enters — a count window at every
# arrival — so Istream shows nothing; the shrunk one let the old copy go before: a false positive)
_ISTREAM = "under Istream (a shrunk window lets a row go early: an equal row entering later would be a false positive)"
_ROWS = "under a [Rows N] window (a sample's last N rows are not the stream's last N)"


def _children(node: L.LogicalNode, why: str | None, aggregates: bool = True) -> list[tuple[L.LogicalNode, str | None]]:
    """The inputs of ``node`` with the reason (if any) approximating below them is unsafe
    (``aggregates``: an aggregate is a reason; a window the query lets shrink may be under one).
    """
    if isinstance(node, L.Distinct):
        return [(node.input, why or _DISTINCT)]
    if isinstance(node, L.Aggregate):
        return [(node.input, why or _AGGREGATE if aggregates else why)]
    if isinstance(node, L.Window) and isinstance(node.spec, W.Rows | W.PartitionedRows):
        return [(node.input, why or _ROWS)]
    if isinstance(node, L.SetOp):
        if not node.all:  # set semantics: duplicate elimination
            return [
                (node.left, why or _DISTINCT),
                (node.right, why or (_NEGATION if node.op is L.SetOpKind.EXCEPT else _DISTINCT)),
            ]
        if node.op is L.SetOpKind.EXCEPT:
            return [(node.left, why), (node.right, why or _NEGATION)]
    return [(c, why) for c in node.inputs()]


def unsafe_streams(plan: L.LogicalNode) -> dict[str, str]:
    """Base streams (lower-cased names) the plan reads where dropping elements is unsafe, with why.

    A stream read both safely and unsafely is unsafe (one sampling serves both reads).
    """
    out: dict[str, str] = {}

    def visit(node: L.LogicalNode, why: str | None) -> None:
        if isinstance(node, L.Scan):
            if node.source_kind is Kind.STREAM and why is not None:
                out.setdefault(node.name.lower(), why)
            return
        for e in node.exprs():
            for x in walk_expr(e):
                if isinstance(x, Subquery):
                    visit(x.plan, why or _SUBQUERY)
        for child, w in _children(node, why):
            visit(child, w)

    visit(plan, None)
    return out


def bloom_sites(plan: L.LogicalNode) -> frozenset[str]:
    """:func:`_bloom_sites`, cached by plan (a plan a value in it keeps from hashing: not cached)."""
    try:
        return _cached_sites(plan)
    except TypeError:
        return _bloom_sites(plan)


def _bloom_sites(plan: L.LogicalNode) -> frozenset[str]:
    """The DISTINCTs and EXCEPTs of a plan (named as ``synopses.describe`` names them) whose filter
    may lose values without the query showing a wrong row: each reached from the top through
    operators that keep a subset a subset (selection, projection, joins, time windows, UNION,
    INTERSECT, EXCEPT's left side, DISTINCT, Istream/Rstream/Dstream) — not under an aggregate, a
    ``[Rows N]``, EXCEPT's right side or a subquery (a value lost under NOT IN lets rows through) —
    and the only one of its name in the plan (two would share one report and one recall).
    """
    seen: dict[str, int] = {}
    safe: set[str] = set()

    def visit(node: L.LogicalNode, ok: bool) -> None:
        site = None
        if isinstance(node, L.Distinct):
            site = describe("DISTINCT", base_streams(node))
        elif isinstance(node, L.SetOp) and node.op is L.SetOpKind.EXCEPT and not node.all:
            site = describe("EXCEPT's right side", base_streams(node.right))
        if site is not None:
            seen[site] = seen.get(site, 0) + 1
            if ok:
                safe.add(site)
        for e in node.exprs():
            for x in walk_expr(e):
                if isinstance(x, Subquery):
                    visit(x.plan, False)
        barrier = isinstance(node, L.Aggregate) or (
            isinstance(node, L.Window) and isinstance(node.spec, W.Rows | W.PartitionedRows)
        )
        for i, c in enumerate(node.inputs()):
            negated = isinstance(node, L.SetOp) and node.op is L.SetOpKind.EXCEPT and i == 1
            visit(c, ok and not barrier and not negated)

    visit(plan, True)
    return frozenset(s for s in safe if seen[s] == 1)


_cached_sites = lru_cache(maxsize=256)(_bloom_sites)


def shrink_refusals(plan: L.LogicalNode) -> list[str]:
    """Why each window the query lets shrink (``At Least``) must not: under duplicate
    elimination or on the right of a negation (STREAM §5.1.1's bad cases, detected statically as
    the paper says they can be).  Empty: every such window may shrink.  A window under an
    aggregate may: the user stated the tolerance, and the precision is then reported unknown.
    """
    out: list[str] = []

    def visit(node: L.LogicalNode, why: str | None) -> None:
        if isinstance(node, L.Window) and isinstance(node.spec, W.Range | W.Rows) and node.spec.shrinkable and why:
            out.append(f"[{node.spec.describe()}] is {why}")
        if isinstance(node, L.StreamOp) and node.op is L.StreamOpKind.DSTREAM:
            why = why or _DSTREAM
        if isinstance(node, L.StreamOp) and node.op is L.StreamOpKind.ISTREAM:
            why = why or _ISTREAM
        for e in node.exprs():
            for x in walk_expr(e):
                if isinstance(x, Subquery):
                    visit(x.plan, why or _SUBQUERY)
        for child, w in _children(node, why, aggregates=False):
            visit(child, w)

    visit(plan, None)
    return out


def check_shrinkable(plan: L.LogicalNode) -> None:
    """Refuse, at registration, a query that lets a window shrink where that is unsafe."""
    refused = shrink_refusals(plan)
    if refused:
        raise SluiceError(
            "a window stated with At Least may not shrink here: "
            + "; ".join(refused)
            + " — state it without At Least (the engine then keeps it exact)"
        )


def window_key(node: L.Window) -> tuple[object, tuple[str, ...]]:
    """What names a window across a query's plans (bound and rewritten): its definition and the
    base streams under it — how the engine reports each shrinkable window's kept fraction.
    """
    return window_key_of(node.spec, base_streams(node.input))


def window_key_of(spec: object, streams: Iterable[str]) -> tuple[object, tuple[str, ...]]:
    return spec, tuple(sorted({s.lower() for s in streams}))


def base_streams(plan: L.LogicalNode) -> list[str]:
    """Every read of a base stream (lower-cased; a self-join lists its stream twice)."""
    return [n.name.lower() for n in L.walk_plan(plan) if isinstance(n, L.Scan) and n.source_kind is Kind.STREAM]


_Est = Callable[[L.LogicalNode], "Precision | None"]
Joint = Callable[[list[str], list[float]], "float | None"]  # (stream reads, their windows) → fraction kept


def horizons(plan: L.LogicalNode) -> dict[str, float]:
    """Per base stream, how long (ticks) its elements stay in the plan's windows: the largest
    window over it (``inf`` for Unbounded, ``[Rows N]`` or none) — how far back the state held
    now was admitted.
    """
    out: dict[str, float] = {}

    def visit(node: L.LogicalNode, span: float) -> None:
        if isinstance(node, L.Scan):
            if node.source_kind is Kind.STREAM:
                out[node.name.lower()] = max(out.get(node.name.lower(), 0.0), span)
            return
        if isinstance(node, L.Window):
            life = node.spec.lifetime
            span = float(life[0] + life[1]) if life is not None else float("inf")
        for e in node.exprs():
            for x in walk_expr(e):
                if isinstance(x, Subquery):
                    visit(x.plan, float("inf"))
        for c in node.inputs():
            visit(c, span)

    visit(plan, float("inf"))
    return out


def _scan(node: L.LogicalNode, kept: Mapping[str, float], est: _Est) -> Precision | None:
    assert isinstance(node, L.Scan)
    if node.source_kind is not Kind.STREAM:
        return EXACT
    return Precision(0.0, 1.0 - kept.get(node.name.lower(), 1.0))


def _pair(node: L.LogicalNode, kept: Mapping[str, float], est: _Est) -> Precision | None:
    a, b = (est(c) for c in node.inputs())
    if a is None or b is None:
        return None
    if isinstance(node, L.SetOp) and node.op is L.SetOpKind.UNION:
        return a.worse(b)
    if isinstance(node, L.SetOp) and node.op is L.SetOpKind.EXCEPT:
        return a if b.exact else None
    return a.join(b)  # a join, or INTERSECT ALL: a tuple needs both inputs' tuples


def _unary(node: L.LogicalNode, kept: Mapping[str, float], est: _Est) -> Precision | None:
    return est(node.inputs()[0])


def _barrier(node: L.LogicalNode, kept: Mapping[str, float], est: _Est) -> Precision | None:
    """Aggregates, DISTINCT, [Rows N]: exact if their input is, else outside the model."""
    p = est(node.inputs()[0])
    return p if p is not None and p.exact else None


def _sample(node: L.LogicalNode, kept: Mapping[str, float], est: _Est) -> Precision | None:
    """A ``Sample(a To b)`` set below ``b`` at registration (``sluice.approx.static``) keeps
    chosen/asked of what the written query's would: a deterministic sample's lower rate keeps a
    subset of the higher's.
    """
    assert isinstance(node, L.Sample)
    p = est(node.input)
    if p is None or node.most is None or node.fraction >= node.most:
        return p
    return p.join(Precision(0.0, 1.0 - node.fraction / node.most))


def _correlated(node: L.Join, p: Precision, joint: Joint) -> Precision:
    """A join's precision with its recall corrected for drops that depend on time: its inputs'
    recalls multiplied assume each element kept independently of when it came; the combinations
    kept bucket by bucket (``joint``, each read with the window over it in this join) over the
    product of each side's own — which telescopes, a join over joins, to the whole tree's
    combinations kept.  Unchanged where ``joint`` cannot say, over a UNION or other set operation
    (its elements are alternatives, not a combination: the ratio meant nothing), and over a
    derived stream (Istream/Dstream/Rstream: a Dstream of a 5 s window stamps its elements 5 s
    after they came, reported 0.073 where the truth was 0.108 and the product 0.102).
    """
    sides = node.inputs()
    if any(isinstance(n, L.SetOp | L.StreamOp) for c in sides for n in L.walk_plan(c)):
        return p  # (and over a derived stream: its elements' times are not its inputs' — a review)
    reads = [base_streams(c) for c in sides]
    spans = [[h.get(s, math.inf) for s in r] for h, r in zip(map(horizons, sides), reads, strict=True)]
    both = joint(reads[0] + reads[1], spans[0] + spans[1])
    a, b = joint(reads[0], spans[0]), joint(reads[1], spans[1])
    if both is None or a is None or b is None or a * b <= 0:
        return p
    return Precision(p.fp, min(max(1.0 - (1.0 - p.fn) * both / (a * b), 0.0), 1.0))


_ESTIMATE: dict[type[L.LogicalNode], Callable[..., Precision | None]] = {
    L.Scan: _scan,
    L.Join: _pair,
    L.SetOp: _pair,
    L.Filter: _unary,
    L.Project: _unary,
    L.Sample: _sample,
    L.StreamOp: _unary,
    L.Window: _unary,
    L.Aggregate: _barrier,
    L.Distinct: _barrier,
}


def estimate(
    plan: L.LogicalNode,
    kept: Mapping[str, float],
    windows: Mapping[object, float] | None = None,
    distinct: Mapping[str, Bloom] | None = None,
    joint: Joint | None = None,
) -> Precision | None:
    """The plan's expected (FP, FN) when base stream ``s`` keeps the fraction ``kept[s]`` of its
    elements (missing: 1) and a shrunk window (``windows[window_key(w)]``) holds that fraction of
    what it would (a window's relation loses that part of its tuples: ``(0, 1 − k)``, then as a
    join's input); ``None`` where the approximation is outside the model (unsafe plans).  A
    DISTINCT, or an EXCEPT's right side, compressed into a Bloom filter (``distinct``, by
    ``synopses.describe``; its recall: the fraction of its values or left tuples it showed) loses
    the rest: ``(0, 1 − r)`` over exact inputs.  ``joint`` (stream reads → the fraction kept of
    their combinations, time bucket by time bucket: ``timeline.joint``) corrects a join's recall
    for drops that depend on time (:func:`_correlated`).
    """
    unsafe = unsafe_streams(plan)
    if any(kept.get(s, 1.0) < 1.0 for s in unsafe):
        return None
    shrunk = windows or {}

    def est(node: L.LogicalNode) -> Precision | None:
        if isinstance(node, L.Window) and shrunk and (k := shrunk.get(window_key(node), 1.0)) < 1.0:
            p = est(node.input)
            if p is None or (isinstance(node.spec, W.Rows) and not p.exact):
                return None  # (a [Rows N] over an approximate input: outside the model, shrunk or not)
            return p.join(Precision(0.0, 1.0 - k))
        if isinstance(node, L.Window) and isinstance(node.spec, W.Rows | W.PartitionedRows):
            return _barrier(node, kept, est)
        if isinstance(node, L.Distinct) and distinct and (r := recall_of(distinct, "DISTINCT", base_streams(node))) < 1:
            p = _barrier(node, kept, est)
            return p.join(Precision(0.0, 1.0 - r)) if p is not None else None
        if isinstance(node, L.SetOp) and not node.all:
            a, b = (est(c) for c in node.inputs())
            if a is None or b is None or not a.exact or not b.exact:
                return None
            r = (
                recall_of(distinct or {}, "EXCEPT's right side", base_streams(node.right))
                if node.op is L.SetOpKind.EXCEPT
                else 1.0
            )
            return Precision(0.0, 1.0 - r) if r < 1.0 else EXACT
        fn = _ESTIMATE.get(type(node))
        if fn is None:
            return None
        p = fn(node, kept, est)
        if isinstance(node, L.Join) and joint is not None and p is not None and not p.exact:
            return _correlated(node, p, joint)
        return p

    return est(plan)
