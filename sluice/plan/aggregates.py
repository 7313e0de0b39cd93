"""GROUP BY and aggregates by definition (SQL), shared by the reference evaluator and the engine's
per-row subquery evaluation: each aggregate is its accumulator (``sluice.plan.accumulators``) fed
the group's values at once; without GROUP BY there is exactly one output row, even over an empty
input (``COUNT(*) = 0``).

>>> from sluice.plan.expr import AggCall, AggKind, ColRef
>>> from sluice.datatypes import INTEGER, BIGINT, FLOAT
>>> aggregate_values(AggCall(AggKind.AVG, ColRef(0, INTEGER), False, FLOAT), [1, 2, None])
1.5
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sluice.plan import logical as L
from sluice.plan.accumulators import accumulator
from sluice.plan.expr import AggCall, BExpr
from sluice.plan.numeric import RowError, row_fits


def aggregate_values(agg: AggCall, values: list[Any]) -> Any:
    """One aggregate over the argument values of a group (``None`` entries are NULLs)."""
    acc = accumulator(agg)
    acc.insert(values)
    return acc.evaluate()


def aggregate_rows(
    rows: list[tuple[Any, ...]],
    node: L.Aggregate,
    ev: Callable[[BExpr, tuple[Any, ...]], Any],
) -> list[tuple[Any, ...]]:
    """The groups' rows.  A row whose key or argument cannot be evaluated (``RowError``) is
    left out of every aggregate; a group whose result does not fit its type has no row
    (``sluice.plan.numeric``).
    """
    groups: dict[tuple[Any, ...], list[tuple[Any, ...]]] = {}
    args = [a.arg for a in node.aggs if a.arg is not None]
    for r in rows:
        try:
            key = tuple(ev(k, r) for k in node.keys)
            vals = tuple(ev(a, r) for a in args)
        except RowError:
            continue
        groups.setdefault(key, []).append(vals)
    if not node.keys and not groups:
        groups[()] = []
    out = []
    for key, members in groups.items():
        res = []
        j = 0
        for a in node.aggs:
            if a.arg is None:  # COUNT(*)
                res.append(len(members))
            else:
                res.append(aggregate_values(a, [m[j] for m in members]))
                j += 1
        row = key + tuple(res)
        if row_fits(row):
            out.append(row)
    return out
