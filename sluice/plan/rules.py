"""The rewrite layer: an ordered tuple of named rules over the logical plan (issue #18, item 1).

Each rule rewrites one node into an equivalent one — the same answer at every instant, by CQL's
definition — or declines (None).  ``rewrite`` applies the rules in order, each bottom-up to a
fixed point, checks after every rule that the plan's kind and schema are unchanged (naming the
rule that broke them), and records which rules changed the plan; the embedded engine's EXPLAIN
lists them.  The reference evaluator never sees rewritten plans: it evaluates the bound plan by
definition, so every differential test also checks the rules.

The rules (seed §4 of Arasu et al. on plan generation; the classic selection push-down).  Each
moves only conjuncts a selection can evaluate anywhere its columns are (no subquery, no
CURRENT_TIME, no outer reference); a conjunct is TRUE of an output row exactly when it is TRUE
of the input row it came from, so selecting earlier removes exactly the rows that could not pass.
Row errors (``sluice.plan.numeric``) never change an answer — a row that cannot be evaluated is
dropped either way — only which rows are reported as such.  Selections are never merged: σ_p over
σ_q stays two selections, so p is never evaluated on a row q rejects (a merged ``q AND p`` would
report p's errors on rows the query's own WHERE rules out); bottom-up, each moves on its own.

Grouping, DISTINCT, Istream/Dstream and the set operations treat values that compare equal as one
(0.0 and -0.0); a built-in predicate cannot tell them apart, a user's function can, so conjuncts
calling one never move below those four.

``push-selection-below-projection``
    σ_p(π_cols(x)) = π_cols(σ_{p'}(x)) for the conjuncts of p reading only columns that π passes
    through unchanged (p' reads them at their input positions).
``push-selection-below-grouping``
    σ_p(γ_{keys; aggs}(x)) = γ(σ_{p'}(x)) for conjuncts reading only grouping columns that are
    plain input columns: a group passes whole or not at all (never without GROUP BY: the one
    row of an empty input is not a group of it).
``push-selection-below-distinct-and-streams``
    σ_p(δ(R)) = δ(σ_p(R)), and σ_p(Istream/Dstream/Rstream(R)) = the same of σ_p(R): an element
    is in R(τ) − R(τ−1) with p TRUE exactly when it is in σ_p R(τ) − σ_p R(τ−1).
``push-selection-into-set-operands``
    σ_p(A op B) = σ_p(A) op σ_p(B) for Union, Except and Intersect (with or without All; the
    multiplicity of a tuple satisfying p is computed from the same counts), when both operands
    have the result's column types (otherwise p would read values before their coercion).

``push-selection-into-join-inputs``
    σ_p(L ⋈ R) = σ_{p_L}(L) ⋈ σ_{p_R}(R) with the rest of p above, where p_L (p_R) are the
    conjuncts reading only L's (R's) columns.  A conjunct must be TRUE for p to be; selecting
    before the join removes exactly the rows that cannot satisfy it.  Conjuncts with subqueries,
    CURRENT_TIME or outer references stay where they are (they need their own operators).
``push-selection-below-window``
    σ_p(S [W]) = (σ_p S) [W] for a window whose contents depend on timestamps alone
    (``WindowDef.time_based``: Unbounded, Now, Range with or without Slide): an element is in
    the window of σ_p S exactly when it is in S's window and satisfies p.  Not for Rows or
    Partition By, whose contents depend on which other elements arrived.  The window then holds
    only the elements that pass (smaller synopses, seed §3.3).

``order-joins-to-avoid-cross-products``
    (L₁ ⋈ … ⋈ Lₙ) with conjuncts p = π(L_{o₁} ⋈ … ⋈ L_{oₙ}) with p re-read, for n ≥ 3 inputs and
    the order o that keeps the written one but takes next, each time, the first input a conjunct
    links to those already joined (join is associative and commutative on multisets; π restores
    the column order).  Issue #15 item 2's "join order chosen by cost", first step: the cost it
    knows without statistics is that a cross product can be quadratic.

``merge-column-projections``
    π_a(π_b(x)) = π_{a∘b}(x) when π_b only copies columns (it cannot fail on a row).
``distinct-aggregates-over-distinct-rows``
    γ_{k; f(DISTINCT x)}(R) = γ_{k; f(x)}(δ(π_{k,x}(R))) for COUNT, SUM and AVG of one argument:
    the distinct values of x in a group are the group's distinct (key, x) rows.
``subquery-comparison-to-join``
    σ_{x θ (Q) ∧ p}(R) = π_R(σ_{x θ m ∧ p}(R × Q)) for a comparison θ and an uncorrelated scalar
    subquery Q that has at most one row at every instant (a grouping without keys, under
    selections and projections that copy columns): with one row m the conditions are the same;
    with none, x θ NULL is never TRUE and R × Q is empty.  And a quantified comparison with an
    uncorrelated subquery Q of one column c, through the one row of a grouping of Q:
    x θ ANY (Q) is TRUE exactly when x θ the least (θ ∈ {>, ≥}) or greatest (θ ∈ {<, ≤})
    non-NULL c is; x θ ALL (Q) when Q is empty, or holds no NULL and x θ its greatest (least)
    c (the row as: Q empty, Q without NULL, the extreme).  The subquery operator re-evaluated the
    comparison for every row of R at each instant Q or R changed; a join pairs R's changes with
    Q's one row (on a key when θ is =).

``unwrap-stream-round-trips``
    Istream(χ(S [Range Unbounded])) = Rstream(χ(S [Now])) = χ(S) for a chain χ of selections and
    projections reading each row alone (STREAM §2.2's equivalences between streams and
    relations): the query becomes a stateless stream, with neither a window synopsis nor a
    stream operator.
    At the query's result only (within an instant the order differs: see the rule).
``unwrap-stream-round-trips-under-time-windows``
    W(χ(Istream(χ'(S [Range Unbounded])))) = W(χ(χ'(S))) (and so with Rstream over [Now]) for a
    window W whose contents depend on timestamps alone (Unbounded, Now, Range): it does not read
    the order within an instant.

``prune-columns-below-windows-and-joins`` (``sluice.plan.pruning``)
    π_a(… W(S) …) = π_a'(… W(π_c(S)) …) and so for a grouping: where a window or a join keeps
    rows, only the columns read above are kept (a copying projection commutes with windows whose
    contents do not depend on values, with selections that read the kept columns, and with ×).

>>> from sluice.catalog import Catalog
>>> from sluice.plan import bind_query
>>> from sluice.plan.ddl import execute
>>> cat = Catalog()
>>> _ = execute(cat, "register stream S (A integer, B integer); register relation R (A integer)")
>>> r = rewrite(bind_query(cat, "select S.B from S [Range 5], R where S.A = R.A and S.B > 1").plan)
>>> r.applied
('push-selection-into-join-inputs', 'push-selection-below-window')
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from dataclasses import dataclass

from sluice.catalog.schema import Column, Schema
from sluice.datatypes import BIGINT, BOOLEAN
from sluice.errors import InternalError
from sluice.plan import logical as L
from sluice.plan.analysis import (
    columns_read,
    conjoin,
    conjuncts,
    copied_columns,
    has_outer_ref,
    has_subquery,
    map_children,
    plan_has_subquery,
    plan_uses_current_time,
    reads_row_alone,
    reindex,
    shift,
    stream_order,
    substitute,
)
from sluice.plan.expr import AggCall, AggKind, BExpr, Call, ColRef, Const, Subquery, UdfCall, walk_expr
from sluice.plan.pruning import prune_plan
from sluice.windows import Now, Unbounded, WindowDef

PRUNE_COLUMNS = "prune-columns-below-windows-and-joins"  # (sluice.plan.pruning)

Rewrite = Callable[[L.LogicalNode], L.LogicalNode | None]


@dataclass(frozen=True)
class Rule:
    name: str
    apply: Rewrite
    root_only: bool = False  # applied to the query's own result, not to what feeds another operator


@dataclass(frozen=True)
class Rewritten:
    plan: L.LogicalNode
    applied: tuple[str, ...]


def transform(node: L.LogicalNode, fn: Rewrite) -> L.LogicalNode:
    """Bottom-up: every input — and every subquery's plan in the node's expressions — rewritten
    first, then ``fn`` at the node (its result kept, if any).

    Generic over the node classes: every field holding a logical node is an input.  (Subquery
    plans are rewritten here, with the query, so the physical planner sees one consistent plan.)
    """
    changes: dict[str, object] = {}
    for f in dataclasses.fields(node):
        v = getattr(node, f.name)
        if isinstance(v, L.LogicalNode):
            nv: object = transform(v, fn)
        elif isinstance(v, BExpr):
            nv = _in_subqueries(v, fn)
        elif isinstance(v, tuple) and v and all(isinstance(x, BExpr) for x in v):
            nv = tuple(_in_subqueries(x, fn) for x in v)
            nv = v if nv == v else nv
        else:
            continue
        if nv is not v:
            changes[f.name] = nv
    if changes:
        node = dataclasses.replace(node, **changes)
    out = fn(node)
    return node if out is None else out


def _in_subqueries(e: BExpr, fn: Rewrite) -> BExpr:
    """``e`` with the plan of every subquery in it transformed by ``fn``."""
    if not has_subquery(e):
        return e
    return map_children(e, lambda c: _in_subqueries(c, fn), lambda p: transform(p, fn))


def rules_sparing(spare: Callable[[WindowDef], bool]) -> tuple[Rule, ...]:
    """``RULES`` with column pruning leaving alone what is below a window ``spare`` names: the
    windows an engine shares across queries by stream (STREAM §3.2's shared synopses; Hammad et
    al.'s shared window joins), which hold every column any of their queries reads.
    """
    prune = functools.partial(prune_plan, transform=transform, spare=spare)
    return tuple(Rule(PRUNE_COLUMNS, prune, root_only=True) if r.name == PRUNE_COLUMNS else r for r in RULES)


def rewrite(plan: L.LogicalNode, rules: tuple[Rule, ...] | None = None) -> Rewritten:
    """``plan`` rewritten by ``rules`` (default: ``RULES``), in order, each to a fixed point."""
    applied: list[str] = []
    for _ in range(100):  # the sequence again until no rule applies: one rule's result may let an earlier one
        before = plan
        plan = _pass(plan, RULES if rules is None else rules, applied)
        if plan == before:
            return Rewritten(plan, tuple(applied))
    raise InternalError("the rewrite rules did not reach a fixed point")


def _pass(plan: L.LogicalNode, rules: tuple[Rule, ...], applied: list[str]) -> L.LogicalNode:
    """Each rule in order, each to a fixed point."""
    for rule in rules:
        for _ in range(1000):
            new = (rule.apply(plan) or plan) if rule.root_only else transform(plan, rule.apply)
            if new == plan:
                break
            if new.kind is not plan.kind or new.schema != plan.schema:
                raise InternalError(
                    f"rewrite rule {rule.name!r} changed the plan's result: "
                    f"{plan.kind.value} {plan.schema} became {new.kind.value} {new.schema}"
                )
            plan = new
            if rule.name not in applied:
                applied.append(rule.name)
        else:
            raise InternalError(f"rewrite rule {rule.name!r} did not reach a fixed point")
    return plan


# -- the rules -------------------------------------------------------------------------------------


def _movable(c: BExpr) -> bool:
    """A conjunct a selection can evaluate anywhere its columns are: no subquery, no
    CURRENT_TIME, no outer row, and at least one column.
    """
    return reads_row_alone(c) and any(isinstance(x, ColRef) for x in walk_expr(c))


def _split(predicate: BExpr, moves: Callable[[BExpr], bool]) -> tuple[list[BExpr], list[BExpr]]:
    """The predicate's conjuncts as (those that move, those that stay)."""
    cs = conjuncts(predicate)
    return [c for c in cs if moves(c)], [c for c in cs if not moves(c)]


def _select(node: L.LogicalNode, cs: list[BExpr]) -> L.LogicalNode:
    p = conjoin(cs)
    return node if p is None else L.Filter(node, p)


def push_selection_into_join_inputs(node: L.LogicalNode) -> L.LogicalNode | None:
    if not (isinstance(node, L.Filter) and isinstance(node.input, L.Join)):
        return None
    j = node.input
    lw = len(j.left.schema)
    left: list[BExpr] = []
    right: list[BExpr] = []
    here: list[BExpr] = []
    for c in conjuncts(node.predicate):
        cols = [x.index for x in walk_expr(c) if isinstance(x, ColRef)]
        if _movable(c) and max(cols) < lw:
            left.append(c)
        elif _movable(c) and min(cols) >= lw:
            right.append(shift(c, -lw))
        else:
            here.append(c)
    if not left and not right:
        return None
    joined = L.Join(_select(j.left, left), _select(j.right, right))
    return _select(joined, here)


def order_joins_to_avoid_cross_products(node: L.LogicalNode) -> L.LogicalNode | None:
    """A join of three or more inputs, reordered so that each input joins one already joined
    through a conjunct, where the written order would join two with none between them (a cross
    product: ``from A, B, C where A.k = C.k and B.k = C.k`` first pairs every A with every B).
    Join is associative and commutative on multisets; the predicate is re-read at the new column
    positions and a projection restores the written column order.  Among connected inputs the
    written order is kept, so a plan with no avoidable cross product is left as it is; the
    selection rules then push each conjunct down to the join that first has its columns.
    Only where every input is a stream through the same window: the engine's cost of a join of a
    derived relation grows with how often its rows change, not only with how many there are (it
    pairs a whole run's changes), so joining a short window with a long one first can cost more
    than the cross product of two short ones; with one window for all, the first join's result
    only gets smaller by the conjunct — measured in design 012.
    """
    if not isinstance(node, L.Join) and not (isinstance(node, L.Filter) and isinstance(node.input, L.Join)):
        return None
    flat = _flatten_joins(node)
    if flat is None or len(flat[0]) < 3:
        return None
    leaves, cs = flat
    windows = {_window_of(leaf) for leaf in leaves}
    if len(windows) != 1 or None in windows:
        return None
    widths = [len(leaf.schema) for leaf in leaves]
    starts = [sum(widths[:i]) for i in range(len(leaves))]
    owner = [i for i, w in enumerate(widths) for _ in range(w)]  # column → its input
    uses = [{owner[x.index] for x in walk_expr(c) if isinstance(x, ColRef)} for c in cs]
    order, rest = [0], list(range(1, len(leaves)))
    while rest:
        joined = set(order)
        linked = (i for i in rest if any(i in u and u - {i} and u <= joined | {i} for u in uses))
        nxt = next(linked, rest[0])
        order.append(nxt)
        rest.remove(nxt)
    if order == sorted(order):
        return None
    cols = node.schema.columns
    pos: dict[int, int] = {}  # written position → new one
    for i in order:
        for k in range(widths[i]):
            pos[starts[i] + k] = len(pos)
    tree = leaves[order[0]]
    for i in order[1:]:
        tree = L.Join(tree, leaves[i])
    body = _select(tree, [reindex(c, pos) for c in cs])
    back = tuple(ColRef(pos[i], c.type, c.name) for i, c in enumerate(cols))
    return L.Project(body, back, node.schema)


def merge_column_projections(node: L.LogicalNode) -> L.LogicalNode | None:
    """π_a(π_b(x)) = π_{a∘b}(x) when π_b only copies columns (each of its expressions a column
    reference): a composed expression reads the same values, and π_b cannot fail on a row, so no
    row it would have dropped passes.  (The projection ``order-joins-to-avoid-cross-products``
    puts over a reordered join then costs no operator under a projection of the query's own.)
    """
    if not (isinstance(node, L.Project) and isinstance(node.input, L.Project)):
        return None
    at = copied_columns(node.input)
    if at is None or not all(reads_row_alone(c) for c in node.columns):
        return None
    return L.Project(node.input.input, tuple(reindex(c, at) for c in node.columns), node.out_schema)


_COMPARISONS = frozenset({"eq", "ne", "lt", "le", "gt", "ge"})


def subquery_comparison_to_join(node: L.LogicalNode) -> L.LogicalNode | None:
    """A WHERE conjunct comparing a row's value with an uncorrelated subquery (scalar, of at most
    one row; or quantified, ALL/ANY with <, ≤, >, ≥) as a join with one row computed from it
    (NEXMark Q7's ``price = (select max(price) …)``, Q5's ``num >= all (select count(*) …)``).
    Only a conjunct that *is* the comparison: one that is not TRUE drops the row either way, but
    under OR, NOT, IS NULL or a function an UNKNOWN may count, and the rule declines.  The other
    conjuncts stay as they were (they read the same columns, at the same positions).
    """
    if not (isinstance(node, L.Filter) and node.input.kind is L.Kind.RELATION):
        return None
    cs = conjuncts(node.predicate)
    width = len(node.input.schema)
    found = next(((k, j) for k, c in enumerate(cs) if (j := _as_join(c, width)) is not None), None)
    if found is None or any(has_subquery(c) for k, c in enumerate(cs) if k != found[0]):
        return None
    k, (one_row, cs[k]) = found
    joined = L.Filter(L.Join(node.input, one_row), conjoin(cs) or cs[k])
    back = tuple(ColRef(i, col.type, col.name) for i, col in enumerate(node.input.schema.columns))
    return L.Project(joined, back, node.input.schema)


def _as_join(c: BExpr, width: int) -> tuple[L.LogicalNode, BExpr] | None:
    """The one-row relation conjunct ``c`` compares with and ``c`` over the joined row (its
    columns from ``width`` on), if ``c`` compares a row's value with an uncorrelated subquery.
    """
    if isinstance(c, Call) and c.fn in _COMPARISONS and len(c.args) == 2:
        q = next((a for a in c.args if isinstance(a, Subquery)), None)
        other = c.args[1] if q is c.args[0] else c.args[0]
        if q is None or q.kind != "SCALAR" or not reads_row_alone(other) or not _independent(q.plan):
            return None
        n = q.plan
        while isinstance(n, L.Filter) or (isinstance(n, L.Project) and all(isinstance(x, ColRef) for x in n.columns)):
            n = n.input
        if not (isinstance(n, L.Aggregate) and not n.keys and len(q.plan.schema) == 1):
            return None  # (it may have several rows)
        m = ColRef(width, q.type, "subquery")
        return q.plan, Call(c.fn, tuple(m if a is q else a for a in c.args), c.type)
    if not (isinstance(c, Subquery) and c.kind == "QUANT" and c.op in ("lt", "le", "gt", "ge") and not c.negated):
        return None
    x = c.operand
    if x is None or not reads_row_alone(x) or not _independent(c.plan) or len(c.plan.schema) != 1:
        return None
    t = c.plan.schema.types[0]
    if t != x.type:
        return None
    col = ColRef(0, t, c.plan.schema.columns[0].name)
    every = c.quantifier == "ALL"
    extreme = AggKind.MAX if (c.op in ("gt", "ge")) == every else AggKind.MIN
    aggs: tuple[AggCall, ...] = (AggCall(extreme, col, False, t),)
    if every:
        aggs = (AggCall(AggKind.COUNT, None, False, BIGINT), AggCall(AggKind.COUNT, col, False, BIGINT), *aggs)
    one_row = L.Aggregate(c.plan, (), aggs, Schema(tuple(Column(a.render((col.name,)), a.type) for a in aggs)))
    m = ColRef(width + len(aggs) - 1, t, "subquery")
    compare = Call(c.op, (x, m), BOOLEAN)
    if not every:
        return one_row, compare
    # the row as (empty, no NULL, extreme): it changes only when one of those does, not with
    # every change of the counts (each change of it re-pairs every row of the other input)
    rows, values = ColRef(0, BIGINT, "count"), ColRef(1, BIGINT, "count")
    flags = (
        Call("eq", (rows, Const(0, BIGINT)), BOOLEAN),
        Call("eq", (values, rows), BOOLEAN),
        ColRef(2, t, "extreme"),
    )
    names = Schema((Column("empty", BOOLEAN), Column("no_null", BOOLEAN), Column("extreme", t)))
    empty, no_null = ColRef(width, BOOLEAN, "empty"), ColRef(width + 1, BOOLEAN, "no_null")
    holds = Call("or", (empty, Call("and", (no_null, compare), BOOLEAN)), BOOLEAN)
    return L.Project(one_row, flags, names), holds


def _independent(plan: L.LogicalNode) -> bool:
    """Reads nothing from outside itself: no outer row, no CURRENT_TIME, no nested subquery."""
    return not (plan_has_subquery(plan) or plan_uses_current_time(plan) or has_outer_ref(plan))


def _window_of(n: L.LogicalNode) -> object | None:
    """The window (its definition) ``n`` reads a stream through, under selections and
    projections; None if it is not a window.
    """
    while isinstance(n, L.Filter | L.Project):
        n = n.input
    return n.spec if isinstance(n, L.Window) else None


def _flatten_joins(n: L.LogicalNode) -> tuple[list[L.LogicalNode], list[BExpr]] | None:
    """The inputs of a tree of joins (with the selection above it, if any) in the written order,
    and that selection's conjuncts; None if one cannot move (a subquery, CURRENT_TIME, an outer
    row, no column) or a selection sits on a join inside the tree — its conjuncts are not merged
    with others (a selection's conjuncts are evaluated together, and one of them would then read
    rows an inner WHERE rules out: the rules never merge selections).
    """
    cs: list[BExpr] = []
    if isinstance(n, L.Filter) and isinstance(n.input, L.Join):
        cs = conjuncts(n.predicate)
        if not all(_movable(c) for c in cs):
            return None
        n = n.input
    leaves = _join_inputs(n)
    return None if leaves is None else (leaves, cs)


def _join_inputs(n: L.LogicalNode) -> list[L.LogicalNode] | None:
    if isinstance(n, L.Filter) and isinstance(n.input, L.Join):
        return None
    if not isinstance(n, L.Join):
        return [n]  # (a selection over something else is part of that input)
    left, right = _join_inputs(n.left), _join_inputs(n.right)
    return None if left is None or right is None else left + right


def push_selection_below_window(node: L.LogicalNode) -> L.LogicalNode | None:
    if not (isinstance(node, L.Filter) and isinstance(node.input, L.Window) and node.input.spec.time_based):
        return None
    w = node.input
    down, stay = _split(node.predicate, _movable)
    if not down:
        return None
    return _select(L.Window(_select(w.input, down), w.spec), stay)


def _blind_to_equal_values(c: BExpr) -> bool:
    """Movable below an operator that keeps one of several equal values (grouping, DISTINCT,
    Istream/Dstream, set operations): no user function, which might tell 0.0 from -0.0.
    """
    return _movable(c) and not any(isinstance(x, UdfCall) for x in walk_expr(c))


def _moved(
    cs: list[BExpr], mapping: dict[int, BExpr], past_equal_values: bool = False
) -> tuple[list[BExpr], list[BExpr]]:
    """``cs`` split into (those whose every column ``mapping`` gives, rewritten over it; the rest)."""
    ok = _blind_to_equal_values if past_equal_values else _movable
    down: list[BExpr] = []
    stay: list[BExpr] = []
    for c in cs:
        cols = columns_read(c)
        if ok(c) and cols <= set(mapping):
            down.append(substitute(c, {i: mapping[i] for i in cols}))
        else:
            stay.append(c)
    return down, stay


def push_selection_below_projection(node: L.LogicalNode) -> L.LogicalNode | None:
    if not (isinstance(node, L.Filter) and isinstance(node.input, L.Project)):
        return None
    p = node.input
    cols: dict[int, BExpr] = {i: c for i, c in enumerate(p.columns) if isinstance(c, ColRef)}
    down, stay = _moved(conjuncts(node.predicate), cols)
    if not down:
        return None
    return _select(L.Project(_select(p.input, down), p.columns, p.out_schema), stay)


def push_selection_below_grouping(node: L.LogicalNode) -> L.LogicalNode | None:
    if not (isinstance(node, L.Filter) and isinstance(node.input, L.Aggregate) and node.input.keys):
        return None
    a = node.input
    keys: dict[int, BExpr] = {i: k for i, k in enumerate(a.keys) if isinstance(k, ColRef)}
    down, stay = _moved(conjuncts(node.predicate), keys, past_equal_values=True)
    if not down:
        return None
    return _select(L.Aggregate(_select(a.input, down), a.keys, a.aggs, a.out_schema), stay)


_OVER_DISTINCT = frozenset({AggKind.COUNT, AggKind.SUM, AggKind.AVG})


def distinct_aggregates_over_distinct_rows(node: L.LogicalNode) -> L.LogicalNode | None:
    """γ_{k; f₁(DISTINCT x), …}(R) = γ_{k'; f₁(x'), …}(δ(π_{k, x}(R))) for COUNT, SUM and AVG,
    all of one argument x: an aggregate over the distinct values of x in a group is the same
    aggregate over the distinct (key, x) rows of that group, which δ keeps one each (grouping,
    DISTINCT and the DISTINCT aggregates compare values alike: NULLs equal, one float zero, no
    NaN).  A row whose key or x cannot be evaluated is dropped by π as γ drops it; without keys
    the result is still one row.  δ and the aggregates over it run vectorised (``Counting``);
    the DISTINCT aggregates' value sets were a Python step per (instant, group).

    Declines inside a correlated subquery and where a key column is a stream's column in the
    stream's order (``stream_order``): a k-constraint of the stream may let the grouping forget
    the groups it closed (``GroupGuard``), which a δ below it cannot.
    """
    if not isinstance(node, L.Aggregate) or not node.aggs:
        return None
    x = node.aggs[0].arg
    if x is None or not all(a.arg == x and a.distinct and a.fn in _OVER_DISTINCT for a in node.aggs):
        return None
    exprs = (*node.keys, x)
    if not all(reads_row_alone(e) for e in exprs) or has_outer_ref(node):
        return None  # (a correlated subquery's chain is evaluated row by row: nothing to gain)
    if any(stream_order(node.input, k.index) is not None for k in node.keys if isinstance(k, ColRef)):
        return None  # a k-constraint of the stream may close groups (STREAM §4.1): γ forgets them, δ would not
    names = [e.name if isinstance(e, ColRef) and e.name else f"#{i}" for i, e in enumerate(exprs)]
    schema = Schema(tuple(Column(n, e.type) for n, e in zip(names, exprs, strict=True)))
    rows = L.Distinct(L.Project(node.input, exprs, schema))
    keys = tuple(ColRef(i, k.type, names[i]) for i, k in enumerate(node.keys))
    arg = ColRef(len(node.keys), x.type, names[-1])
    aggs = tuple(dataclasses.replace(a, arg=arg, distinct=False) for a in node.aggs)
    return L.Aggregate(rows, keys, aggs, node.out_schema)


def push_selection_below_distinct_and_streams(node: L.LogicalNode) -> L.LogicalNode | None:
    if not (isinstance(node, L.Filter) and isinstance(node.input, L.Distinct | L.StreamOp)):
        return None
    down, stay = _split(node.predicate, _blind_to_equal_values)
    if not down:
        return None
    return _select(dataclasses.replace(node.input, input=_select(node.input.input, down)), stay)


def push_selection_into_set_operands(node: L.LogicalNode) -> L.LogicalNode | None:
    if not (isinstance(node, L.Filter) and isinstance(node.input, L.SetOp)):
        return None
    s = node.input
    types = s.out_schema.types
    if s.left.schema.types != types or s.right.schema.types != types:
        return None  # an operand's column of another type: the predicate reads the coerced value
    down, stay = _split(node.predicate, _blind_to_equal_values)
    if not down:
        return None
    moved = dataclasses.replace(s, left=_select(s.left, down), right=_select(s.right, down))
    return _select(moved, stay)


def unwrap_stream_round_trips(node: L.LogicalNode) -> L.LogicalNode | None:
    """Istream(χ(S [Range Unbounded])) = χ(S), for χ a chain of selections and projections
    whose expressions read each row alone.  An unbounded window over a stream only grows, by the
    elements stamped τ: R(τ) = R(τ−1) ⊎ new(τ), and χ maps a multiset row by row,
    χ(A ⊎ B) = χ(A) ⊎ χ(B), so Istream emits χ(new(τ)) at τ — χ of the stream's elements, each
    at its own timestamp (the engine's Istream over an insert-only input was already this
    pass-through).  Not Istream over [Now] — a tuple arriving at two consecutive instants is not
    new the second time — nor CURRENT_TIME, whose value at τ differs for old rows.
    Rstream(χ(S [Now])) = χ(S) as well: S [Now] at τ holds the elements stamped τ, and Rstream
    emits χ of them at τ, from the first instant on — and no element stamped before the first
    instant (the engine's, or a late query's) is admitted (design 004, "The first instant"; it
    was, before session 18, and this shape was not unwrapped then).  The plan then holds no
    window synopsis and no stream operator: the query is a stateless stream.  The same multiset
    at every instant, not the same order within one: applied to a query's own result only
    (``root_only``), never to a stream an order-sensitive window reads.
    """
    if not isinstance(node, L.StreamOp):
        return None
    found = _per_row_chain(node.input)
    if found is None or not isinstance(found[1], L.Window):
        return None
    spec = found[1].spec
    if not (
        (node.op is L.StreamOpKind.ISTREAM and isinstance(spec, Unbounded))
        or (node.op is L.StreamOpKind.RSTREAM and isinstance(spec, Now))
    ):
        return None
    return _over(found[0], found[1].input)


def unwrap_stream_round_trips_under_time_windows(node: L.LogicalNode) -> L.LogicalNode | None:
    """``W(χ₁(Istream(χ₂(S [Range Unbounded]))))`` = ``W(χ₁(χ₂(S)))`` for a window ``W`` whose
    contents depend on timestamps alone and per-row chains χ: the same stream as a multiset at
    every instant (``unwrap_stream_round_trips``), and such a window reads nothing else — not
    the order within an instant, which differs ([Rows N] and Partition By read it: never there).
    A subquery's default Istream (``(select … from S where …) as X [Range 10]``) then costs
    neither an unbounded window nor an Istream operator, and the window reads the stream itself.
    """
    if not (isinstance(node, L.Window) and node.spec.time_based):
        return None
    found = _per_row_chain(node.input)
    out = unwrap_stream_round_trips(found[1]) if found is not None else None
    if found is None or out is None:
        return None
    return L.Window(_over(found[0], out), node.spec)


def _per_row_chain(n: L.LogicalNode) -> tuple[list[L.Filter | L.Project], L.LogicalNode] | None:
    """The selections and projections from ``n`` down (top first) and the node below them, or
    None if one of them reads more than its row (a subquery, CURRENT_TIME, an outer row).
    """
    chain: list[L.Filter | L.Project] = []
    while isinstance(n, L.Filter | L.Project):
        exprs = [n.predicate] if isinstance(n, L.Filter) else list(n.columns)
        if not all(reads_row_alone(e) for e in exprs):
            return None
        chain.append(n)
        n = n.input
    return chain, n


def _over(chain: list[L.Filter | L.Project], base: L.LogicalNode) -> L.LogicalNode:
    """``chain`` (top first) rebuilt over ``base``."""
    for c in reversed(chain):
        base = dataclasses.replace(c, input=base)
    return base


RULES: tuple[Rule, ...] = (
    Rule("subquery-comparison-to-join", subquery_comparison_to_join),
    Rule("order-joins-to-avoid-cross-products", order_joins_to_avoid_cross_products),
    Rule("merge-column-projections", merge_column_projections),
    Rule("distinct-aggregates-over-distinct-rows", distinct_aggregates_over_distinct_rows),
    Rule("push-selection-below-projection", push_selection_below_projection),
    Rule("push-selection-below-grouping", push_selection_below_grouping),
    Rule("push-selection-below-distinct-and-streams", push_selection_below_distinct_and_streams),
    Rule("push-selection-into-set-operands", push_selection_into_set_operands),
    Rule("push-selection-into-join-inputs", push_selection_into_join_inputs),
    Rule("push-selection-below-window", push_selection_below_window),
    # (root only: within an instant χ(S) has S's arrival order, Istream its own — the same
    # multiset, but a [Rows N] or Partition window above would keep different elements)
    Rule("unwrap-stream-round-trips", unwrap_stream_round_trips, root_only=True),
    # (below a window that reads timestamps alone, the order within an instant is not read)
    Rule("unwrap-stream-round-trips-under-time-windows", unwrap_stream_round_trips_under_time_windows),
    # (last: the selections are where they go, so their columns are read where they stand)
    Rule(PRUNE_COLUMNS, lambda plan: prune_plan(plan, transform), root_only=True),  # (at every node: see prune_plan)
)
