"""Comparing query outputs as CQL means them: per instant, as multisets, after netting.

Two outputs are equal when, at every instant, the insertions minus deletions of each tuple
agree (a deletion and re-insertion of one tuple at one instant cancel).  Floats are equal
within a relative tolerance, because backends may add in a different order.

>>> from sluice.reference.evaluator import Element as E
>>> diff_outputs([E(1, "+", (1.0,))], [E(1, "+", (1.0000000000001,))])
[]
>>> diff_outputs([E(1, "+", (1,))], [E(2, "+", (1,))])
['instant 1: expected +(1,) ×1, got ×0', 'instant 2: expected +(1,) ×0, got ×1']
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable
from typing import Any

from sluice.plan.element import Element, Row
from sluice.reference.evaluator import sort_key


def _round_row(row: Row, digits: int) -> Row:
    """Floats to ``digits`` significant digits, so near-equal values share a key."""
    out: list[Any] = []
    for v in row:
        if isinstance(v, float) and math.isfinite(v) and v != 0.0:
            out.append(float(f"{v:.{digits}g}"))
        else:
            out.append(v)
    return tuple(out)


def net(elements: Iterable[Element], digits: int = 12) -> dict[int, Counter[Row]]:
    """Per instant, each tuple's insertions minus deletions (zero counts dropped)."""
    by_ts: dict[int, Counter[Row]] = defaultdict(Counter)
    for e in elements:
        by_ts[e.ts][_round_row(tuple(e.row), digits)] += 1 if e.sign == "+" else -1
    return {t: Counter({r: n for r, n in c.items() if n}) for t, c in by_ts.items() if any(c.values())}


def diff_outputs(expected: Iterable[Element], actual: Iterable[Element], digits: int = 12) -> list[str]:
    """Human-readable differences; empty when the outputs are equal."""
    a, b = net(expected, digits), net(actual, digits)
    out: list[str] = []
    for t in sorted(set(a) | set(b)):
        ea, eb = a.get(t, Counter()), b.get(t, Counter())
        for row in sorted(set(ea) | set(eb), key=sort_key):
            if ea[row] != eb[row]:
                sign = "+" if (ea[row] or eb[row]) > 0 else "-"
                out.append(f"instant {t}: expected {sign}{row} ×{abs(ea[row])}, got ×{abs(eb[row])}")
    return out
