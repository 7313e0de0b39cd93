"""Statistics snapshots (frozen) of operators, queues and the engine."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class OperatorStats:
    name: str
    kind: str
    tuples_in: int
    tuples_out: int
    runs: int
    seconds: float
    state_bytes: int
    rejected: int = 0  # rows it could not evaluate (dropped and counted: sluice.plan.numeric)

    @property
    def selectivity(self) -> float:
        return self.tuples_out / self.tuples_in if self.tuples_in else 0.0

    @property
    def seconds_per_tuple(self) -> float:
        return self.seconds / self.tuples_in if self.tuples_in else 0.0


@dataclass(frozen=True, slots=True)
class QueueStats:
    name: str
    length: int
    nbytes: int
    peak_nbytes: int
    enqueued: int
    readers: int
    watermark: int


@dataclass(frozen=True, slots=True)
class SourceStats:
    name: str
    accepted: int
    rejected: int
    rejected_reasons: tuple[tuple[str, int], ...]
    watermark: int
    buffered: int


@dataclass(frozen=True, slots=True)
class SharedJoinStats(OperatorStats):
    """A shared window join's own counts (Hammad et al.; design 020), besides every operator's.

    ``steps``: (unit, band) steps of join work; ``probes``: elements those steps probed;
    ``examined``: pairs they checked (the nested loop: every pair of the band; hashing: the pairs
    of the band with equal keys, which the index or Arrow's hash join picks out, so as many as it
    finds); ``found``: pairs found there (equal keys), before routing and the residual predicate;
    ``work``: what the experiments' work clock charges (per step, its probes plus the pairs found,
    at least 1); ``inserted``/``deleted``: per port, the rows released to it; ``pending_units`` and
    ``pending_elements``: join work queued (§5.3's input buffer); ``held_rows``: rows in the
    ordered output buffer now, ``held_peak`` the most ever; ``unselected``: elements read that
    no port's selection keeps (under time-based windows they are not held at all).
    """

    steps: int = 0
    probes: int = 0
    examined: int = 0
    found: int = 0
    work: int = 0
    inserted: tuple[int, ...] = ()
    deleted: tuple[int, ...] = ()
    pending_units: int = 0
    pending_elements: int = 0
    held_rows: int = 0
    held_peak: int = 0
    unselected: int = 0
