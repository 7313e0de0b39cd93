"""Segment scheduling and simplified segment scheduling (Jiang §3.3).

A segment is a maximal run of a path's operators whose memory release capacities do not fall
(``C^M_{j+1} ≥ γ·C^M_j``; γ = 1 for segment scheduling).  Priority = the segment's release
capacity (eq. 3.2); ties to the oldest tuple.  Jiang Thm 3 — segment scheduling never needs more
memory than Chain — holds when the segments are Chain's lower-envelope segments, which its proof
assumes (``envelope=True``); with the published construction it can fail (docs/design/006).
The simplified variant cuts each path into at most two segments with γ = 3/4 by default: fewer
switches, better latency, a little more memory.  In the engine a segment several paths share (the
same operators) is one unit, run for all of them and ranked by the highest of its places
(``Strategy.ranked``); segments that overlap without being the same stay apart.
"""

from __future__ import annotations

from sluice.scheduling.model import Path, lower_envelope, segment_release_capacity, segments
from sluice.scheduling.strategies.base import Strategy
from sluice.scheduling.units import Granularity, SchedulingView, U


class Segment(Strategy):
    name = "segment"
    granularity = Granularity.SEGMENT

    def __init__(
        self, gamma: float = 1.0, at_most_two: bool = False, envelope: bool = False, budget: int = 65536
    ) -> None:
        super().__init__(budget)
        self.gamma = gamma
        self.at_most_two = at_most_two
        self.envelope = envelope  # use Chain's lower-envelope segments (Jiang Thm 3's premise)

    def segments_of(self, path: Path) -> list[tuple[int, int]]:
        if self.envelope:
            env = lower_envelope(path.chart())
            return [(a, b - 1) for a, b in zip(env, env[1:], strict=False)]
        return segments(path, self.gamma, self.at_most_two)

    def priority(self, unit: U, view: SchedulingView[U]) -> float:
        return segment_release_capacity(self.paths[unit.path], unit.first, unit.last)


class SimplifiedSegment(Segment):
    name = "simplified-segment"

    def __init__(self, gamma: float = 0.75, budget: int = 65536) -> None:
        super().__init__(gamma, True, False, budget)
