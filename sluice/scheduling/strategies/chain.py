"""Chain (Chain §4.1): priority = slope of the lower-envelope segment the operator lies on; ties go
to the earliest arrival.  Optimal over lower envelopes (Thm 1) and within one tuple per query of
any clairvoyant strategy on the real charts when selectivities are ≤ 1 (Thm 2).  Joins over two
streams use (t, s) from rates and semijoin selectivities (Chain §5, ``join_op``), and a blocked
join is skipped until its other input has tuples.
"""

from __future__ import annotations

from collections.abc import Sequence

from sluice.scheduling.model import Op, Path, chain_priorities
from sluice.scheduling.strategies.base import Strategy
from sluice.scheduling.units import SchedulingView, U


class Chain(Strategy):
    name = "chain"

    def prepare(self, paths: Sequence[Path]) -> None:
        super().prepare(paths)
        self._prio = [chain_priorities(p) for p in self.paths]

    def priority(self, unit: U, view: SchedulingView[U]) -> float:
        return self._prio[unit.path][unit.first]


def join_op(
    name: str,
    rate_r: float,
    rate_s: float,
    alpha_wr: float,
    alpha_ws: float,
    t_r: float,
    t_s: float,
    partner: str | None = None,
) -> Op:
    """A sliding-window join as one (t, s) operator (Chain §5): selectivity
    ``(λr·αw(S) + λs·αw(R)) / (λr + λs)``, time per tuple ``(λr·tr + λs·ts) / (λr + λs)``.
    """
    sel = (rate_r * alpha_ws + rate_s * alpha_wr) / (rate_r + rate_s)
    cost = (rate_r * t_r + rate_s * t_s) / (rate_r + rate_s)
    return Op(name, cost, sel, partner)
