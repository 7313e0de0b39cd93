"""Analyses of bound expressions and logical plans, each written once.

The embedded planner, the rewrite rules (``sluice.plan.rules``), the Spark compiler and the
reference evaluator all ask the same questions of a plan — the conjuncts of a predicate, the
equality keys of a join, whether an expression reads CURRENT_TIME, which source column an output
column copies, whether a relation only ever grows — and answer them here, so one definition
holds everywhere (issue #18, item 1).

>>> from sluice.datatypes import BOOLEAN, INTEGER
>>> from sluice.plan.expr import Const, render
>>> a, b = ColRef(0, INTEGER, "a"), ColRef(2, INTEGER, "b")
>>> p = Call("and", (Call("eq", (a, b), BOOLEAN), Call("gt", (a, Const(1, INTEGER)), BOOLEAN)), BOOLEAN)
>>> [render(c) for c in conjuncts(p)]
['(a = b)', '(a > 1)']
>>> equi_key(conjuncts(p)[0], left_width=1)
(0, 1)
>>> render(shift(conjuncts(p)[1], 3))
'(a > 1)'
>>> shift(a, 3).index
3
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sluice.catalog import Kind
from sluice.plan import logical as L
from sluice.plan.expr import BExpr, Call, ColRef, CurrentTime, OuterRef, Subquery, walk_expr

__all__ = [
    "column_equalities",
    "conjoin",
    "conjuncts",
    "equi_key",
    "has_outer_ref",
    "has_subquery",
    "insert_only",
    "map_children",
    "map_columns",
    "plan_has_subquery",
    "plan_uses_current_time",
    "shift",
    "substitute",
    "trace",
    "uses_current_time",
]

# -- predicates ------------------------------------------------------------------------------


def conjuncts(e: BExpr) -> list[BExpr]:
    """The operands of a (nested) AND, left to right; ``[e]`` if ``e`` is not an AND."""
    if isinstance(e, Call) and e.fn == "and":
        return [c for a in e.args for c in conjuncts(a)]
    return [e]


def conjoin(cs: Sequence[BExpr]) -> BExpr | None:
    """The AND of ``cs`` (left-deep), or None for no conjuncts."""
    out: BExpr | None = None
    for c in cs:
        out = c if out is None else Call("and", (out, c), c.type)
    return out


def column_equalities(pred: BExpr) -> list[tuple[int, int]]:
    """Column pairs ``(a, b)`` of the ``a = b`` conjuncts of ``pred`` (both plain columns)."""
    out = []
    for c in conjuncts(pred):
        if isinstance(c, Call) and c.fn == "eq":
            a, b = c.args
            if isinstance(a, ColRef) and isinstance(b, ColRef):
                out.append((a.index, b.index))
    return out


def equi_key(c: BExpr, left_width: int, width: int | None = None) -> tuple[int, int] | None:
    """``(left column, right column)`` — the right one counted from the right input's first
    column — if ``c`` is ``left = right`` across a join whose left input has ``left_width``
    columns (and, if given, whose output has ``width``); else None.
    """
    if not (isinstance(c, Call) and c.fn == "eq"):
        return None
    x, y = c.args
    if not (isinstance(x, ColRef) and isinstance(y, ColRef)):
        return None
    a, b = x.index, y.index
    hi = width if width is not None else max(a, b) + 1
    if a < left_width <= b < hi:
        return a, b - left_width
    if b < left_width <= a < hi:
        return b, a - left_width
    return None


# -- what an expression reads ------------------------------------------------------------------


def columns_read(*exprs: BExpr) -> set[int]:
    """The input columns the expressions read (not a subquery's own: those are its input's)."""
    return {x.index for e in exprs for x in walk_expr(e) if isinstance(x, ColRef)}


def copied_columns(node: L.LogicalNode) -> list[int] | None:
    """The input columns a projection that only copies takes, in its order; None for any other
    node (one that computes can fail on a row, so it is not just a choice of columns).
    """
    if not isinstance(node, L.Project) or not all(isinstance(c, ColRef) for c in node.columns):
        return None
    return [c.index for c in node.columns if isinstance(c, ColRef)]


def uses_current_time(e: BExpr) -> bool:
    return any(isinstance(x, CurrentTime) for x in walk_expr(e))


def has_subquery(e: BExpr) -> bool:
    return any(isinstance(x, Subquery) for x in walk_expr(e))


def reads_row_alone(e: BExpr) -> bool:
    """An expression whose value for a row depends on that row alone: no subquery, no
    CURRENT_TIME (the instant), no outer row (the rewrite rules; the planner's static inputs).
    """
    return not has_subquery(e) and not uses_current_time(e) and not any(isinstance(x, OuterRef) for x in walk_expr(e))


def plan_uses_current_time(plan: L.LogicalNode) -> bool:
    """Some expression of the plan, subqueries included, reads CURRENT_TIME."""
    return any(uses_current_time(e) for n in L.walk_plan(plan) for e in n.exprs())


def plan_has_subquery(plan: L.LogicalNode) -> bool:
    return any(has_subquery(e) for n in L.walk_plan(plan) for e in n.exprs())


def has_outer_ref(plan: L.LogicalNode) -> bool:
    """Some expression of the plan reads an enclosing query's row (a correlated subquery)."""
    return any(isinstance(x, OuterRef) for n in L.walk_plan(plan) for e in n.exprs() for x in walk_expr(e))


# -- rewriting expressions -------------------------------------------------------------------------


def map_children(
    e: BExpr, fn: Callable[[BExpr], BExpr], plan_fn: Callable[[L.LogicalNode], L.LogicalNode] | None = None
) -> BExpr:
    """``e`` rebuilt with ``fn`` applied to each expression directly inside it (and ``plan_fn``,
    if given, to a subquery's plan).  Generic over the expression classes: every field that holds
    expressions is mapped, so a new expression class needs no change here.
    """
    changes: dict[str, Any] = {}
    for f in dataclasses.fields(e):  # type: ignore[arg-type]
        v = getattr(e, f.name)
        if isinstance(v, BExpr):
            changes[f.name] = fn(v)
        elif isinstance(v, L.LogicalNode) and plan_fn is not None:
            changes[f.name] = plan_fn(v)
        elif isinstance(v, tuple) and v and all(isinstance(x, BExpr) for x in v):
            changes[f.name] = tuple(fn(x) for x in v)
        elif isinstance(v, tuple) and v and all(isinstance(x, tuple) for x in v):
            changes[f.name] = tuple(tuple(fn(y) for y in x) for x in v)
    return dataclasses.replace(e, **changes) if changes else e  # type: ignore[type-var]


def map_columns(e: BExpr, fn: Callable[[ColRef], BExpr]) -> BExpr:
    """``e`` with every column reference ``c`` replaced by ``fn(c)``.  A subquery's own plan is
    not entered: its column references are its own input's, and its references to this row are
    ``OuterRef``s.
    """
    if isinstance(e, ColRef):
        return fn(e)
    return map_children(e, lambda c: map_columns(c, fn))


def shift(e: BExpr, by: int) -> BExpr:
    """``e`` reading column ``i + by`` wherever it read column ``i``."""
    return map_columns(e, lambda c: dataclasses.replace(c, index=c.index + by))


def reindex(e: BExpr, at: Sequence[int] | Mapping[int, int]) -> BExpr:
    """``e`` reading column ``at[i]`` wherever it read column ``i`` (names kept)."""
    return map_columns(e, lambda c: dataclasses.replace(c, index=at[c.index]))


def substitute(e: BExpr, cols: Sequence[BExpr] | Mapping[int, BExpr]) -> BExpr:
    """``e`` with each column reference replaced by the expression at its position in ``cols``."""
    return map_columns(e, lambda c: cols[c.index])


# -- what a plan is ----------------------------------------------------------------------------


def insert_only(node: L.LogicalNode) -> bool:
    """The relation only ever grows (a stream under ``[Range Unbounded]``, through σ, π and ⋈),
    so Istream of it is the identity on its new elements and Dstream empty.
    """
    if isinstance(node, L.Window):
        return node.spec.insert_only
    if isinstance(node, L.Filter | L.Project | L.Join):
        return all(insert_only(c) for c in node.inputs())
    return False


def stream_order(node: L.LogicalNode, col: int) -> tuple[str, int, bool] | None:
    """``(stream, column, whole)`` when ``node`` only ever inserts, and its insertions are
    elements of one stream in that stream's order — a subsequence: selections, projections and
    samples that read each row alone, around one window holding every element (``[Range
    Unbounded]``) — with output column ``col`` a copy of the stream's ``column``; else None.
    ``whole``: with a value of the column, every element having it is kept (no sample, each
    selection reads that column alone, each projection only copies columns).  A constraint of the
    stream (STREAM §4.1) then holds of what ``node`` inserts: ``ORDERED BY`` and ``UNIQUE BY`` of
    any subsequence, ``CLUSTERED BY`` of a whole one (dropping some elements of a value can put
    more than k others between two that are left).
    """
    windows, whole = 0, True
    while True:
        if isinstance(node, L.Scan):
            return (node.name.lower(), col, whole) if node.source_kind is Kind.STREAM and windows == 1 else None
        if isinstance(node, L.Window):
            if not node.spec.insert_only or windows:
                return None
            windows += 1
            node = node.input
        elif isinstance(node, L.Sample):
            whole = False
            node = node.input
        elif isinstance(node, L.Filter):
            if not reads_row_alone(node.predicate):
                return None
            whole = whole and columns_read(node.predicate) <= {col}
            node = node.input
        elif isinstance(node, L.Project):
            c = node.columns[col]
            if not isinstance(c, ColRef) or not all(reads_row_alone(e) for e in node.columns):
                return None
            # a computed column can fail on one row and not another (an overflow, a user's
            # function), dropping that row alone: only copies keep every element of a value
            whole = whole and copied_columns(node) is not None
            node, col = node.input, c.index
        else:
            return None


def trace(node: L.LogicalNode, col: int) -> tuple[str, int] | None:
    """Column lineage: ``(source, column)`` that output column ``col`` of ``node`` copies
    unchanged, or None if it is computed.
    """
    while True:
        if isinstance(node, L.Scan):
            return node.name.lower(), col
        if isinstance(node, L.Filter | L.Window | L.Sample | L.Distinct | L.StreamOp):
            node = node.inputs()[0]
        elif isinstance(node, L.Project):
            c = node.columns[col]
            if not isinstance(c, ColRef):
                return None
            node, col = node.input, c.index
        elif isinstance(node, L.Join):
            nl = len(node.left.schema)
            node, col = (node.left, col) if col < nl else (node.right, col - nl)
        elif isinstance(node, L.Aggregate):
            k = node.keys[col] if col < len(node.keys) else None
            if not isinstance(k, ColRef):
                return None
            node, col = node.input, k.index
        else:
            return None
