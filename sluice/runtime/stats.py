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
