"""Static approximation by sampling rate reduction (STREAM §5.1.2): a query's ``Sample(a To b)``
— the user's stated tolerance, §5.2's "ranges of sampling rates" — gets its rate chosen once, at
registration: ``b`` when the windows it feeds fit in what the memory limit leaves free, else as
low as needed to fit, never below ``a``.  "The query is modified once, before it begins
execution" (§5.1): the rate then stays for the query's life, so its answer is exactly the
written query's at that rate (a deterministic sample: the same elements on every backend and in
the reference evaluator), and the precision it loses against the rate asked for is reported.

Why only where the user gave a range, not a Sample inserted into any query: the dynamic path
(``manager``: sampling at the streams' input queues, raised again when memory falls) already
covers every query that tolerates approximation, and a rate fixed at registration cannot follow
the load down — §5.2's reason to prefer dynamic approximation "in times of plenty".  A range is
the user saying which rates they accept for this query; choosing among them at registration is
§5.1's guarantee ("the user is guaranteed certain query behavior").

Where the need comes from: each ranged sample's window — the elements its stream brings in the
window's span, at the stream's measured arrival rate and bytes an element, twice (the window and
what the query keeps above it: ``manager``'s convention), scaled by the rate.  A stream with no
history yet, or a window without a finite span (Unbounded, ``[Rows N]`` counts elements, not
time), gives no estimate: that sample keeps its highest rate, and the dynamic path applies as to
any query.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass

from sluice.catalog import Kind
from sluice.plan import logical as L
from sluice.plan.rules import transform


@dataclass(frozen=True, slots=True)
class StaticSample:
    """One ``Sample(a To b)`` of a query and the rate chosen for it at registration."""

    stream: str
    least: float  # the lowest fraction tolerated (a / 100)
    most: float  # the fraction asked for (b / 100)
    chosen: float
    need: float | None  # bytes its window would hold at ``most`` (None: no estimate)
    free: float = 0.0  # bytes the limit left free when it was chosen
    span: float = 0.0  # ticks of its window (it has filled once they passed)

    def describe(self) -> str:
        return f"Sample({self.least * 100:g} To {self.most * 100:g}) over {self.stream} at {self.chosen * 100:.3g}%"


def ranged_samples(plan: L.LogicalNode) -> list[tuple[L.Sample, float]]:
    """Each ``Sample(a To b)`` over a base stream with the span (ticks) of the window reading it
    (``inf``: none with a finite span).
    """
    out: list[tuple[L.Sample, float]] = []
    seen: set[int] = set()

    def visit(node: L.LogicalNode) -> None:
        if isinstance(node, L.Window) and _ranged(node.input):
            life = node.spec.lifetime
            out.append((node.input, float(life[0] + life[1]) if life is not None else math.inf))  # type: ignore[arg-type]
            seen.add(id(node.input))
        elif isinstance(node, L.Sample) and _ranged(node) and id(node) not in seen:
            out.append((node, math.inf))
            seen.add(id(node))
        for c in node.inputs():
            visit(c)

    visit(plan)
    return out


def _ranged(node: L.LogicalNode) -> bool:
    return (
        isinstance(node, L.Sample)
        and node.least is not None
        and isinstance(node.input, L.Scan)
        and node.input.source_kind is Kind.STREAM
    )


def choose(
    plan: L.LogicalNode, need_of: Callable[[str, float], float | None], free: float, least_share: float = 0.0
) -> tuple[L.LogicalNode, tuple[StaticSample, ...]]:
    """The plan with each ranged sample at its chosen rate, and the choices.  ``need_of(stream,
    span)``: bytes a window of ``span`` ticks over ``stream`` would hold unsampled (None: no
    estimate); ``free``: bytes the limit leaves.  One factor for all the query's ranged samples
    with an estimate — the share of their need that fits — each kept within its range and at
    least ``least_share`` of the rate asked for in all (the query's ``min_precision``: the recall
    it keeps against the written query, a product over its samples; 1: not lowered at all).
    """
    found = ranged_samples(plan)
    if not found:
        return plan, ()
    needs = {}
    for s, span in found:
        assert s.most is not None  # (a ranged sample has both ends)
        n = need_of(s.input.name.lower(), span) if math.isfinite(span) else None  # type: ignore[attr-defined]
        needs[id(s)] = None if n is None else n * s.most
    total = sum(n for n in needs.values() if n is not None)
    factor = 1.0 if total <= max(free, 0.0) else max(free, 0.0) / total
    k = sum(1 for n in needs.values() if n is not None)
    factor = max(factor, least_share ** (1 / k)) if k else 1.0  # (recall: the product of the factors)
    rates: dict[int, float] = {}
    choices = []
    for s, span in found:
        assert s.least is not None and s.most is not None
        need = needs[id(s)]
        rate = s.most if need is None else round(min(s.most, max(s.least, s.most * factor)), 9)
        rates[id(s)] = rate
        choices.append(StaticSample(s.input.name, s.least, s.most, rate, need, free, span))  # type: ignore[attr-defined]

    def at_rate(node: L.LogicalNode) -> L.LogicalNode | None:
        # (a ranged sample reads a Scan, which ``transform`` never rebuilds: the node is the one found)
        if not isinstance(node, L.Sample) or (rate := rates.get(id(node))) is None:
            return None
        return dataclasses.replace(node, fraction=rate)

    return transform(plan, at_rate), tuple(choices)


def chosen_in(plan: L.LogicalNode) -> tuple[StaticSample, ...]:
    """The ranged samples of a plan set below their highest rate (what a query's plan says it was
    given at registration: read again when it is activated after a ``deactivate``).
    """
    return tuple(
        StaticSample(s.input.name, s.least, s.most, s.fraction, None)  # type: ignore[attr-defined]
        for s, _ in ranged_samples(plan)
        if s.least is not None and s.most is not None and s.fraction < s.most
    )
