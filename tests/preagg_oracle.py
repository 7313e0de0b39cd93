"""Pre-aggregation by hand (``sluice.backends.spark.preagg``, design 015), to test the rewrite apart from Spark.

``partials(pre, rows)`` groups a stream's rows ``(ts, *values)`` as Spark's aggregation does — by
(group, slide instant ``a``, class) — into rows ``(a, *keys, *partials)`` of the processor's upper
and lower streams, each partial sum whole (Python integers; the embedded engine sums exactly).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from sluice.backends.spark.preagg import PreAggregate
from sluice.plan.expr import AggKind
from sluice.windows import visible


def elements(results: list[Any]) -> Counter[tuple[Any, ...]]:
    """An answer as a multiset of ``(ts, sign, row)``."""
    return Counter((e.ts, e.sign, e.row) for e in results)


def unnamed(messages: list[str]) -> Counter[str]:
    """Notes without the query's and operator's names (a rewritten plan numbers them otherwise)."""
    return Counter(m.split(": ", 2)[-1] for m in messages)


def partials(pre: PreAggregate, rows: list[tuple[Any, ...]], keep: Any = None) -> tuple[list[Any], list[Any]]:
    """(upper rows, lower rows); ``keep(row)`` the query's WHERE over ``row[1:]``.  A partial sum
    beyond 64 bits becomes pieces of at most 2^62, as Spark sends it.
    """
    groups: dict[tuple[Any, ...], list[tuple[Any, ...]]] = {}
    for r in rows:
        if keep is not None and not keep(r[1:]):
            continue
        a, d = visible(r[0], pre.range, pre.slide)
        lower = d < a + (pre.range // pre.slide) * pre.slide + pre.slide
        if lower and pre.lower_range is None:
            continue
        groups.setdefault((a, lower, *(r[1 + k] for k in pre.keys)), []).append(r[1:])
    upper_rows: list[Any] = []
    lower_rows: list[Any] = []
    for (a, lower, *keys), members in sorted(groups.items(), key=lambda g: (g[0][0], g[0][1], repr(g[0][2:]))):
        out = [a, *keys]
        for p in pre.partials:
            vals = [m[p.column] for m in members] if p.column is not None else [1] * len(members)
            vals = [v for v in vals if v is not None]
            if p.fn is AggKind.COUNT:
                out.append(len(vals))
            elif p.fn is AggKind.SUM:
                out.append(sum(vals) if vals else None)
            elif p.fn is AggKind.MIN:
                out.append(min(vals) if vals else None)
            else:
                out.append(max(vals) if vals else None)
        (lower_rows if lower else upper_rows).extend(_pieces(pre, out, 1 + len(pre.keys)))
    return upper_rows, lower_rows


def _pieces(pre: PreAggregate, row: list[Any], at: int) -> list[tuple[Any, ...]]:
    limb = 2**62
    counts = {}
    for i, p in enumerate(pre.partials):
        v = row[at + i]
        if p.fn is AggKind.SUM and v is not None:
            counts[i] = max(1, -(-abs(v) // limb))
    n = max(counts.values(), default=1)
    out = []
    for k in range(n):
        piece = list(row[:at])
        for i, p in enumerate(pre.partials):
            v = row[at + i]
            if p.fn is AggKind.SUM:
                m = counts.get(i, 1)
                sign = -1 if v is not None and v < 0 else 1
                piece.append(None if v is None or k >= m else (sign * limb if k < m - 1 else v - sign * limb * (m - 1)))
            elif k == 0:
                piece.append(v)
            else:
                piece.append(0 if p.fn is AggKind.COUNT else None)
        out.append(tuple(piece))
    return out
