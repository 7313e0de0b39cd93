"""Column pruning: the rewrite rule ``prune-columns-below-windows-and-joins`` (issue #15, item 1's
projection pushdown).

A window over a stream keeps the elements it holds, and a join keeps the rows of both inputs
(STREAM §3.3's synopses); both keep every column although the query may read a few.  NEXMark's
Q3 reads four of Auction's ten columns and of Person's eight, and the columns it does not read
(``extra``, ``description``) are most of the bytes.  The rule puts a projection that copies only
the columns read above where a synopsis would be filled:

    π_a(… W(S) …)  =  π_a'(… W(π_c(S)) …)       γ_{k; f(x)}(… W(S) …)  =  γ(… W(π_c(S)) …)

for the columns ``c`` that the projection or grouping ``a`` at the top and the selections and
joins between read.  Each step holds by CQL's definition:

- A copying projection maps each element to one element and never fails on a row (no
  expression is evaluated), so ``W(π_c S)`` = ``π_c(W S)`` for any window whose contents do not
  depend on values: the time-based ones (``WindowDef.time_based``: which elements are in the
  window depends on timestamps alone) and ``[Rows N]`` (on positions alone).  Not through
  ``Partition By`` (its windows are chosen by values) nor a window kind the rule does not know.
- σ_p(π_c x) = π_c(σ_p' x) when c holds p's columns; π_{c₁∪c₂}(L × R) = π_{c₁}L × π_{c₂}R for
  multisets.  A selection's and the join's own columns stay.
- Within a projection on the way (a FROM subquery's), a column that is a copy and that nothing
  above reads is dropped; a computed one stays even if nothing reads it, because it can fail on a
  row (an overflow, a user's function) and that row must still be dropped.

Where it stops: Sample (which elements it keeps is a hash of the whole tuple), DISTINCT, the set
operations, Istream/Dstream/Rstream (all compare whole tuples), a grouping (its result columns
are all computed), ``Partition By`` windows, and any expression with a subquery (a correlated
one reads the row by position).  A projection is put in only below a window or at a join's
input — where rows are kept — and never right under a projection (that one already narrows).
A query reading no column of a window (``count(*)``) keeps one, the narrowest.

Sharing: the operators that serve every query over one stream's windows (``SharedWindow``,
STREAM §3.2; the shared window join, Hammad et al.) are keyed by the stream, so a window over
``π_c(S)`` would no longer be shared with a query reading other columns.  With sharing on, the
engine runs this rule with ``spare`` naming those windows (``planner.rules_for``): nothing below
them changes, nor is a projection put above them.  Design 012, "Column pruning".
"""

from __future__ import annotations

import dataclasses
import functools
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from sluice.catalog.schema import Schema
from sluice.plan import logical as L
from sluice.plan.analysis import columns_read, has_subquery, plan_has_subquery, reindex
from sluice.plan.expr import BExpr, ColRef
from sluice.windows import Rows, WindowDef

Mapping_ = dict[int, int]  # an input column's old position → its position in the narrowed input


def prune_plan(
    plan: L.LogicalNode,
    transform: Callable[[L.LogicalNode, Callable[[L.LogicalNode], L.LogicalNode | None]], L.LogicalNode],
    spare: Callable[[WindowDef], bool] = lambda w: False,
) -> L.LogicalNode | None:
    """The plan with :func:`prune_columns_below_windows_and_joins` applied at every node (by
    ``transform``, bottom-up), or None if nothing narrows.  A window that occurs more than once in
    the plan (NEXMark Q7 reads ``Bid [Range 1 Minute Slide 1 Minute]`` in the query and in its
    subquery) is one operator, shared: each occurrence keeps the columns any of them reads, so it
    stays one (measured: pruned apart, Q7's two windows held more bytes and ran 0.76× as fast).
    """
    counts = Counter(n for n in L.walk_plan(plan) if isinstance(n, L.Window))
    widen: dict[L.Window, frozenset[int]] = {}
    if any(c > 1 for c in counts.values()):
        seen: dict[L.Window, set[int]] = {}
        transform(plan, functools.partial(prune_columns_below_windows_and_joins, spare=spare, seen=seen))
        widen = {w: frozenset(seen[w]) for w, c in counts.items() if c > 1 and w in seen}
    out = transform(plan, functools.partial(prune_columns_below_windows_and_joins, spare=spare, widen=widen))
    if widen and _windows(out) > _windows(plan):
        # equal windows pruned apart after all (one under a FROM subquery's projection, or read
        # where the narrowing does not reach — design 012 "Known gaps"): leave every window of
        # those kinds whole rather than split one operator into two
        kinds = {type(w.spec) for w in widen}
        out = transform(
            plan, functools.partial(prune_columns_below_windows_and_joins, spare=lambda w: spare(w) or type(w) in kinds)
        )
    return None if out == plan else out


def _windows(plan: L.LogicalNode) -> int:
    """How many different windows ``plan`` reads (each one operator)."""
    return len({n for n in L.walk_plan(plan) if isinstance(n, L.Window)})


def prune_columns_below_windows_and_joins(
    node: L.LogicalNode,
    spare: Callable[[WindowDef], bool] = lambda w: False,
    widen: Mapping[L.Window, frozenset[int]] | None = None,
    seen: dict[L.Window, set[int]] | None = None,
) -> L.LogicalNode | None:
    """At a projection or a grouping: its input with only the columns it reads kept where a window
    or a join keeps rows (see the module docstring), or None if nothing narrows.  Nothing below a
    window ``spare`` names changes (one the engine shares across queries by stream); a window in
    ``widen`` keeps those columns too; ``seen`` records the columns read from each window.
    """
    if isinstance(node, L.Project):
        exprs: tuple[BExpr, ...] = node.columns
    elif isinstance(node, L.Aggregate):
        exprs = node.exprs()
    else:
        return None
    if any(has_subquery(e) for e in exprs):
        return None
    got = _Narrowing(spare, widen or {}, seen).narrow(
        node.input, columns_read(*exprs), keeps=False, under_projection=False
    )
    if got is None:
        return None
    child, at = got
    if isinstance(node, L.Project):
        return L.Project(child, tuple(reindex(c, at) for c in node.columns), node.out_schema)
    aggs = tuple(a if a.arg is None else dataclasses.replace(a, arg=reindex(a.arg, at)) for a in node.aggs)
    return dataclasses.replace(node, input=child, keys=tuple(reindex(k, at) for k in node.keys), aggs=aggs)


@dataclass(frozen=True, slots=True)
class _Narrowing:
    spare: Callable[[WindowDef], bool]
    widen: Mapping[L.Window, frozenset[int]]
    seen: dict[L.Window, set[int]] | None

    def narrow(
        self, node: L.LogicalNode, needed: set[int], *, keeps: bool, under_projection: bool
    ) -> tuple[L.LogicalNode, Mapping_] | None:
        """``node`` with at least the columns ``needed`` (in their order) and where each went, or None
        if it stays as it is.  ``keeps``: a window or join above keeps ``node``'s rows.
        """
        if isinstance(node, L.Filter):
            if has_subquery(node.predicate):
                return None
            got = self.narrow(
                node.input, needed | columns_read(node.predicate), keeps=keeps, under_projection=under_projection
            )
            if got is None:
                return None
            child, at = got
            return L.Filter(child, reindex(node.predicate, at)), at
        if isinstance(node, L.Join):
            return self._join(node, needed)
        if isinstance(node, L.Window) and self.spare(node.spec):
            return None  # (nor a projection above it: a shared window join reads the window itself)
        if isinstance(node, L.Window) and _copies_commute(node):
            needed = needed | self.widen.get(node, frozenset())
            if self.seen is not None:
                self.seen.setdefault(node, set()).update(needed)
            got = self.narrow(node.input, needed, keeps=True, under_projection=False)
            return None if got is None else (L.Window(got[0], node.spec), got[1])
        if isinstance(node, L.Project):
            return self._projection(node, needed, keeps=keeps)
        if not keeps or under_projection or needed >= set(range(len(node.schema))):
            return None
        cols = sorted(needed) or [_narrowest(node.schema)]
        kept = tuple(node.schema.columns[i] for i in cols)
        copy = tuple(ColRef(i, c.type, c.name) for i, c in zip(cols, kept, strict=True))
        return L.Project(node, copy, Schema(kept)), {i: k for k, i in enumerate(cols)}

    def _join(self, node: L.Join, needed: set[int]) -> tuple[L.LogicalNode, Mapping_] | None:
        lw = len(node.left.schema)
        left = self.narrow(node.left, {i for i in needed if i < lw}, keeps=True, under_projection=False)
        right = self.narrow(node.right, {i - lw for i in needed if i >= lw}, keeps=True, under_projection=False)
        if left is None and right is None:
            return None
        lnode, lat = left if left is not None else (node.left, {i: i for i in range(lw)})
        rnode, rat = right if right is not None else (node.right, {i: i for i in range(len(node.right.schema))})
        at = {i: lat[i] for i in needed if i < lw} | {i: len(lnode.schema) + rat[i - lw] for i in needed if i >= lw}
        return L.Join(lnode, rnode), at

    def _projection(self, node: L.Project, needed: set[int], *, keeps: bool) -> tuple[L.LogicalNode, Mapping_] | None:
        if any(has_subquery(c) for c in node.columns):
            return None
        kept = [i for i, c in enumerate(node.columns) if i in needed or not isinstance(c, ColRef)]
        if not kept:  # (nothing read: one copy stays, so rows are still rows)
            kept = [_narrowest(node.schema)]
        got = self.narrow(
            node.input, columns_read(*(node.columns[i] for i in kept)), keeps=keeps, under_projection=True
        )
        if got is None and len(kept) == len(node.columns):
            return None
        child, below = got if got is not None else (node.input, {i: i for i in range(len(node.input.schema))})
        cols = tuple(reindex(node.columns[i], below) for i in kept)
        schema = Schema(tuple(node.out_schema.columns[i] for i in kept))
        return L.Project(child, cols, schema), {i: k for k, i in enumerate(kept)}


def _copies_commute(w: L.Window) -> bool:
    """A copying projection commutes with the window: its contents depend on timestamps or
    positions alone, never on values.
    """
    return not w.spec.partition and (w.spec.time_based or type(w.spec) is Rows)


def _narrowest(schema: Schema) -> int:
    """The column to keep when none is read: the first that is not a string, if there is one."""
    return min((c.type.is_string or c.type.is_null, i) for i, c in enumerate(schema.columns))[1]


def source_columns_read(
    plan: L.LogicalNode, rewrite: Callable[[L.LogicalNode], L.LogicalNode | None]
) -> dict[str, frozenset[int]]:
    """Per source the query reads (lower-case name), the columns its answer depends on: where
    ``rewrite`` (``prune_plan`` with the rule layer's ``transform``) put a copying projection right
    above each of the source's scans, the columns it copies — any values in the others give the
    same answer (the rule's proof) — and otherwise every column.  Plans with subqueries: every
    column (a correlated one reads the row by position).
    """
    scans = [n for n in L.walk_plan(plan) if isinstance(n, L.Scan)]
    every = {s.name.lower(): frozenset(range(len(s.source_schema))) for s in scans}
    if plan_has_subquery(plan):
        return every
    pruned = rewrite(plan) or plan
    read: dict[str, set[int]] = {}
    found: Counter[str] = Counter()
    for node in L.walk_plan(pruned):
        for child in node.inputs():
            if not isinstance(child, L.Scan):
                continue
            name = child.name.lower()
            found[name] += 1
            if isinstance(node, L.Project) and all(isinstance(c, ColRef) for c in node.columns):
                read.setdefault(name, set()).update(c.index for c in node.columns if isinstance(c, ColRef))
            else:
                read[name] = set(every[name])
    out = dict(every)
    for name in every:
        # (a scan at the top, or one this walk did not reach as a child: every column)
        if found[name] == sum(1 for s in scans if s.name.lower() == name) and name in read:
            out[name] = frozenset(read[name])
    return out
