"""A tree of joins as the planner's dataflow join reads it (design 024): its inputs in the written
order, the conjuncts of the selections in it as stages, equality conjuncts between two inputs as
keys, and the subtree holding its first inputs (a kept intermediate result).
"""

from __future__ import annotations

from sluice.plan import logical as L
from sluice.plan.analysis import conjuncts, reads_row_alone, shift
from sluice.plan.expr import BExpr, Call, ColRef


def join_tree(
    n: L.LogicalNode, top: list[BExpr], whole: L.LogicalNode | None = None
) -> tuple[list[L.LogicalNode], list[list[BExpr]]]:
    """The inputs of a tree of joins in the written order, and the conjuncts of the selections in
    it over the whole row, in the order the tree evaluates them (lower joins' first; ``top``, the
    selection over the tree, last).  A selection whose conjuncts read more than the row (a
    subquery, CURRENT_TIME) stays part of its input; so does the subtree ``whole`` (a kept
    intermediate result).
    """
    leaves: list[L.LogicalNode] = []
    stages: list[list[BExpr]] = []

    def walk(node: L.LogicalNode, off: int) -> None:
        if node is whole:
            leaves.append(node)
            return
        if isinstance(node, L.Join):
            walk(node.left, off)
            walk(node.right, off + len(node.left.schema))
            return
        if isinstance(node, L.Filter) and isinstance(node.input, L.Join):
            cs = conjuncts(node.predicate)
            if all(reads_row_alone(c) for c in cs):
                walk(node.input, off)
                stages.append([shift(c, off) for c in cs])
                return
        leaves.append(node)

    walk(n, 0)
    stages.append(list(top))
    return leaves, stages


def labels(leaves: list[L.LogicalNode]) -> list[str]:
    """A name per input of a join for EXPLAIN: the stream or relation it reads (through
    selections, projections, windows and samples), numbered where one is read twice; else its place.
    """
    names = []
    for i, node in enumerate(leaves):
        while isinstance(node, L.Filter | L.Project | L.Window | L.Sample):
            node = node.input
        names.append(node.name if isinstance(node, L.Scan) else f"input {i + 1}")
    return [f"{x}#{i + 1}" if names.count(x) > 1 else x for i, x in enumerate(names)]


def join_inputs(n: L.LogicalNode) -> list[L.LogicalNode]:
    """The inputs of the tree of joins ``n`` (through the selections in it), in the written order."""
    return join_tree(n, [])[0]


def left_spine(n: L.LogicalNode, k: int) -> L.LogicalNode | None:
    """The subtree on the left spine of a join tree that holds its first ``k`` inputs (with the
    selection over it), which ``join_tree`` then reads as one input; None if no subtree does.
    """
    node = n
    while (count := len(join_tree(node, [])[0])) != k:
        inner = node.input if isinstance(node, L.Filter) else node
        if count < k or not isinstance(inner, L.Join):
            return None
        node = inner.left
    return node


def leaf_key(c: BExpr, owner: list[tuple[int, int]]) -> tuple[int, int, int, int] | None:
    """``(input a, its column, input b, its column)`` if ``c`` is ``x = y`` of two inputs' columns."""
    if not (isinstance(c, Call) and c.fn == "eq"):
        return None
    x, y = c.args
    if not (isinstance(x, ColRef) and isinstance(y, ColRef)):
        return None
    (a, ca), (b, cb) = owner[x.index], owner[y.index]
    if a == b:
        return None
    return (a, ca, b, cb) if a < b else (b, cb, a, ca)
