"""Scheduling units of the real engine, and the view strategies read (the simulator's interface).

Operator paths run from each source through its readers to each query output (Chain §2,
Jiang §2); an operator shared by several queries lies on several paths.  A unit is a run of one
path's operators: one operator, a segment, or the whole path — the ranges ``units_for`` gives the
simulator too; a run several paths share (the same operators) is one unit, which keeps its other
places as ``copies`` and is ranked by the highest (Chain §5).  Running a unit runs its operators
bottom-up.  Per-operator (cost, selectivity)
come from the last ``window`` runs.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from sluice.errors import InternalError
from sluice.runtime.operators.base import Operator
from sluice.runtime.operators.sources import Source
from sluice.runtime.queue import Queue
from sluice.scheduling.model import Op, Path
from sluice.scheduling.units import Granularity, Unit, units_for

DEFAULT_COST = 1e-6  # seconds per tuple before anything was measured
MIN_COST = 1e-9


@dataclass(frozen=True, eq=False)
class EngineUnit:
    """Operators ``first..last`` of path number ``path`` (a ``SchedUnit``), run bottom-up.

    ``copies``: the same operators on other paths (a join lies on each input's path, an operator
    shared by queries on each query's).  It is one unit here — run once, reading all its inputs —
    but "part of two operator chains" (Chain §5): a strategy ranks it by the highest of its places
    (``Strategy.ranked``).
    """

    ops: tuple[Operator, ...]
    path: int
    first: int
    last: int
    name: str = ""
    copies: list[Unit] = field(default_factory=list)

    def has_work(self) -> bool:
        return any(op.has_work() for op in self.ops)

    def run(self, budget: int) -> int:
        return sum(op.run(budget) for op in self.ops)


@dataclass
class OnlineStats:
    """Selectivity and cost per tuple of each operator over a sliding window of its recent runs."""

    window: int = 50
    runs: dict[str, deque[tuple[int, int, float]]] = field(default_factory=dict)
    static: dict[str, tuple[float, float]] = field(default_factory=dict)  # supplied (cost, selectivity)
    _last: dict[str, tuple[int, int, float]] = field(default_factory=dict)

    def observe(self, ops: Sequence[Operator]) -> None:
        for op in ops:
            s = op.statistics()
            prev = self._last.get(op.name, (0, 0, 0.0))
            delta = (s.tuples_in - prev[0], s.tuples_out - prev[1], s.seconds - prev[2])
            self._last[op.name] = (s.tuples_in, s.tuples_out, s.seconds)
            if delta[0] > 0 and delta[1] >= 0:  # (counters restored from a snapshot may go back)
                self.runs.setdefault(op.name, deque(maxlen=self.window)).append(delta)

    def estimate(self, op: Operator) -> tuple[float, float]:
        if op.name in self.static:
            return self.static[op.name]
        runs = self.runs.get(op.name)
        if not runs:
            return DEFAULT_COST, 1.0
        tin = sum(r[0] for r in runs)
        tout = sum(r[1] for r in runs)
        secs = sum(r[2] for r in runs)
        return max(secs / tin, MIN_COST), tout / tin


def operator_paths(sources: Sequence[Operator], units: Sequence[Operator]) -> list[list[Operator]]:
    """Every path from a source to an output through the operator DAG (outputs excluded)."""
    readers: dict[int, list[Operator]] = {}
    for op in units:
        for q in op.inputs():
            readers.setdefault(id(q), []).append(op)
    out: list[list[Operator]] = []

    def walk(op: Operator, acc: list[Operator]) -> None:
        nxt = [r for q in op.outputs for r in readers.get(id(q), [])]
        inner = [r for r in nxt if r.kind != "Output"]
        if not inner:
            if acc:
                out.append(acc)
            return
        for r in inner:
            walk(r, acc + [r])

    for s in sources:
        walk(s, [])
    return out


def model_paths(paths: Sequence[Sequence[Operator]], stats: OnlineStats) -> list[Path]:
    model = []
    for k, ops in enumerate(paths):
        model.append(Path(f"path{k}", tuple(Op(op.name, *stats.estimate(op)) for op in ops)))
    return model


def make_units(
    paths: Sequence[Sequence[Operator]],
    model: Sequence[Path],
    granularity: Granularity,
    segments_of: Callable[[Path], Sequence[tuple[int, int]]],
) -> list[EngineUnit]:
    """The engine's units: ``units_for`` over ``model`` (``model_paths(paths, …)``), each over the
    operators it names; a shared operator (or segment) is one unit, scheduled once.
    """
    if [len(ops) for ops in paths] != [len(p.ops) for p in model]:
        raise InternalError("make_units: the model paths do not match the operator paths")
    units: list[EngineUnit] = []
    seen: dict[tuple[int, ...], EngineUnit] = {}
    for u in units_for(model, granularity, segments_of):
        ops = tuple(paths[u.path][u.first : u.last + 1])
        key = tuple(id(o) for o in ops)
        if key in seen:
            seen[key].copies.append(u)
        else:
            seen[key] = EngineUnit(ops, u.path, u.first, u.last, u.name)
            units.append(seen[key])
    return units


class EngineView:
    """What strategies read about the engine: a ``SchedulingView`` of ``EngineUnit``s."""

    def __init__(self, sources: Mapping[str, Source], queues: Callable[[], Sequence[Queue]]) -> None:
        self.sources = sources
        self.queues = queues

    @property
    def now(self) -> float:
        return float(max((s.max_seen for s in self.sources.values()), default=0))

    def oldest(self, u: EngineUnit) -> float:
        """The timestamp of the oldest element the unit holds; with none, the oldest instant its
        turn would complete (a source releasing, time moving on): a heartbeat is an element of
        its instant too (STREAM §3), and a join waiting for it must not wait behind every newer tuple.
        """
        stamps = [r.queue.next_ts(r.cursor) for op in u.ops for r in op.readers]
        vals = [s for s in stamps if s is not None]
        if vals:
            return float(min(vals))
        return float(min(op.watermark_out for op in u.ops) + 1) if u.ops else float("inf")

    def unit_memory(self, u: EngineUnit) -> float:
        total = 0.0
        for op in u.ops:
            for r in op.readers:
                q = r.queue
                if q.length:
                    total += q.nbytes * r.available() / q.length
        return total

    def memory(self) -> float:
        return float(sum(q.nbytes for q in self.queues()))
