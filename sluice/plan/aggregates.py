"""GROUP BY and aggregates by definition (SQL), shared by the reference evaluator and the engine's
per-row subquery evaluation: NULLs are ignored by every aggregate but
COUNT(*); SUM/AVG/MIN/MAX of no values is NULL; without GROUP BY there is exactly one
output row, even over an empty input (``COUNT(*) = 0``).

Floating-point sums use ``math.fsum`` (the correctly rounded sum), which does not depend on
the order rows are added in; backends are compared against it with a relative tolerance.

>>> from sluice.plan.expr import AggCall, ColRef
>>> from sluice.datatypes import INTEGER, BIGINT, FLOAT
>>> aggregate_values(AggCall("AVG", ColRef(0, INTEGER), False, FLOAT), [1, 2, None])
1.5
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction
from typing import Any

from sluice.plan import logical as L
from sluice.plan.expr import AggCall, BExpr
from sluice.plan.semantics import coerce


def aggregate_values(agg: AggCall, values: list[Any]) -> Any:
    """One aggregate over the argument values of a group (``None`` entries are NULLs)."""
    vals = [v for v in values if v is not None]
    if agg.distinct:
        vals = list(dict.fromkeys(vals))
    if agg.fn == "COUNT":
        return len(vals)
    if not vals:
        return None
    if agg.fn == "MIN":
        return coerce(min(vals), agg.type)
    if agg.fn == "MAX":
        return coerce(max(vals), agg.type)
    if any(isinstance(v, float) for v in vals):
        total: Any = math.fsum(vals)
        return total if agg.fn == "SUM" else total / len(vals)
    if agg.fn == "SUM":
        return sum(vals)
    return float(Fraction(sum(vals), len(vals)))  # AVG of integers, correctly rounded


def aggregate_rows(
    rows: list[tuple[Any, ...]],
    node: L.Aggregate,
    ev: Callable[[BExpr, tuple[Any, ...]], Any],
) -> list[tuple[Any, ...]]:
    groups: dict[tuple[Any, ...], list[tuple[Any, ...]]] = {}
    for r in rows:
        groups.setdefault(tuple(ev(k, r) for k in node.keys), []).append(r)
    if not node.keys and not groups:
        groups[()] = []
    out = []
    for key, members in groups.items():
        vals = []
        for a in node.aggs:
            if a.arg is None:  # COUNT(*)
                vals.append(len(members))
            else:
                arg = a.arg
                vals.append(aggregate_values(a, [ev(arg, r) for r in members]))
        out.append(key + tuple(vals))
    return out
