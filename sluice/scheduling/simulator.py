"""Virtual-time simulator of the Chain model (Chain §3, §6; Jiang §5), sharing the strategy code.

Tuples are fluid memory units moving along operator paths.  Each queue holds batches
``[arrival time, amount, tuple id]`` (amount in input-tuple units, so a batch at operator i occupies
``amount · S_{i−1}`` memory).  Time advances in unit slots: arrivals of slot k enter at time k,
memory is recorded, then the strategy spends the slot: it picks a unit, which runs until the slot
ends, its queue empties, or its quantum (if any) is used; then it picks again (work-conserving).
A unit is an operator, a path, or a segment (a contiguous run of a path's operators); inside a
path or segment the oldest batch is pushed through first (Jiang's bottom-up internal scheduling).

>>> from sluice.scheduling.model import Op, Path
>>> from sluice.scheduling.strategies import make
>>> p = Path("p", (Op("o1", 1.0, 0.2), Op("o2", 5.0, 1.0)))
>>> r = simulate([p], {"p": [0] + [1] * 7}, make("chain"), horizon=16)
>>> [round(m, 2) for m in r.memory[1:8]], round(r.memory[15], 2)
([1.0, 1.2, 1.4, 1.6, 1.8, 2.0, 2.2], 0.0)
"""

from __future__ import annotations

import graphlib
from collections import Counter, deque
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

from sluice.scheduling.model import Path
from sluice.scheduling.strategies.base import Strategy
from sluice.scheduling.units import Granularity, SchedUnit, Unit, units_for

EPS = 1e-12


@dataclass
class SimResult:
    memory: list[float]  # total queue memory at the start of each slot (after its arrivals)
    output: list[float]  # input-tuple units that left the system during each slot
    latencies: list[tuple[float, float, int]]  # (latency, amount, path) of every output fragment
    decisions: int
    completions: dict[int, tuple[float, float, int]] = field(default_factory=dict)  # id: (arrival, done, path)

    @property
    def peak(self) -> float:
        return max(self.memory, default=0.0)

    def mean_latency(self) -> float:
        """Mean tuple latency (arrival to completion)."""
        return self.total_latency() / len(self.completions) if self.completions else 0.0

    def total_latency(self) -> float:
        """Σ over input tuples of (time its last part left − its arrival): Jiang's tuple latency."""
        return sum(done - arr for arr, done, _ in self.completions.values())

    def fluid_latency(self) -> float:
        """Σ latency × amount over output fragments (what leaves early counts early)."""
        return sum(lat * a for lat, a, _ in self.latencies)

    def output_latency(self) -> float | None:
        """Mean latency of what left as output (an engine times its output tuples only); None: none left."""
        out = sum(a for _, a, _ in self.latencies)
        return self.fluid_latency() / out if out > 0 else None


class Simulator:
    """The fluid model running ``strategy``: a ``SchedulingView`` of ``Unit``s."""

    def __init__(
        self,
        paths: Sequence[Path],
        strategy: Strategy,
        preemptive: bool = True,
        whole: bool = False,
        passes: Mapping[str, Sequence[int]] | None = None,
        waits: Mapping[str, Collection[str]] | None = None,
    ) -> None:
        """``preemptive``: the strategy chooses again at every time unit, also in the middle of a
        tuple (Chain's fluid model); False: a tuple an operator has begun finishes first (the
        engine, where an operator's turn is one call).  ``whole``: tuples stay whole, as in an
        engine — an operator of selectivity s passes s of the tuples it finishes (deterministically:
        the k-th passes when ⌊k·s + ½⌋ grows — rounded to nearest, not down: an operator that
        finishes only a few tuples, such as a copy past a join of an operator on several paths,
        would otherwise pass half a tuple too few, and a chain of them compounds it), each costs
        the operator's time per tuple, and a tuple holds one unit of memory until it is finished;
        the fluid model instead turns every tuple into s of one (Chain §3), the same on average.
        ``passes`` (whole): per operator (by name), how many tuples each tuple it finishes passes,
        in order — a run's own data (an engine's selection passes what its data satisfies, not
        every 1/s-th tuple); past its end, ⌊k·s + ½⌋.
        ``waits``: per operator (by name), the operators below it whose tuples it must have seen
        first — an exact engine's join reads its inputs in timestamp order, whole instants at a
        time, and an Istream over a relation that deletes emits an instant once it is complete: such
        an operator takes its oldest tuple only when none of those holds one that arrived no later.
        (Without it, Chain §5's rule: a join half waits only while its partner's queue is empty and
        tuples may still reach it.)
        """
        self.paths = list(paths)
        self.preemptive = preemptive
        self.whole = whole
        self.progress: dict[tuple[int, int, float], float] = {}  # whole: work done on a begun tuple
        self.passed = [[0.5] * len(p.ops) for p in paths]  # whole: ½ + Σ selectivity over finished tuples
        self.passes = [[(passes or {}).get(op.name) for op in p.ops] for p in paths]
        self.finished = [[0] * len(p.ops) for p in paths]  # whole: tuples each operator finished
        self.in_service: tuple[Unit, float, int] | None = None  # the unit, the tuple it has begun, at which operator
        self.parts: Counter[float] = Counter()  # per tuple id: its parts still queued (a tuple has left when none is)
        self.strategy = strategy
        repeated = sorted(n for n, k in Counter(op.name for p in self.paths for op in p.ops).items() if k > 1)
        if repeated:  # units are named after their operators, and join partners found by name
            raise ValueError(f"operator names must be unique across paths; repeated: {', '.join(repeated)}")
        self.sizes = [[1.0] * (len(p.ops) + 1) if whole else p.sizes() for p in self.paths]
        self.unit_costs = [[op.cost for op in p.ops] if whole else p.unit_costs() for p in self.paths]
        self.queues: list[list[deque[list[float]]]] = [[deque() for _ in p.ops] for p in self.paths]
        self.now = 0.0
        self.by_name = {op.name: (pi, i) for pi, p in enumerate(self.paths) for i, op in enumerate(p.ops)}
        unknown = sorted({n for m in (waits or {}).values() for n in m} - set(self.by_name))
        if unknown:
            raise ValueError(f"waits: no operator named {', '.join(unknown)}")
        try:  # an operator waiting for itself, or two for each other, would never run: refused
            graphlib.TopologicalSorter({n: set(m) for n, m in (waits or {}).items()}).prepare()
        except graphlib.CycleError as e:
            raise ValueError(f"waits: operators wait for each other: {' → '.join(e.args[1])}") from None
        # per (path, operator): the queues it waits for (``waits``), or None: Chain §5's rule
        self.waits = [
            [
                [self.queues[qi][qj] for qi, qj in (self.by_name[n] for n in waits[op.name])]
                if waits and op.name in waits
                else None
                for op in p.ops
            ]
            for p in self.paths
        ]
        self.latencies: list[tuple[float, float, int]] = []
        self.completions: dict[int, tuple[float, float, int]] = {}
        self._next_id = 0
        self.out_slot = 0.0
        self.decisions = 0
        self._units: dict[Granularity, list[Unit]] = {}
        self._scan: dict[Granularity, list[tuple[Unit, list[deque[list[float]]], bool]]] = {}
        strategy.prepare(self.paths)

    def units(self, granularity: Granularity) -> list[Unit]:
        """Every unit at ``granularity``, built once (``units_for``, as the engine builds its own)."""
        if granularity not in self._units:
            self._units[granularity] = units_for(self.paths, granularity, self.strategy.segments_of)
        return self._units[granularity]

    # -- views the strategies read -------------------------------------------------------
    def memory(self) -> float:
        return float(
            sum(self.sizes[pi][i] * b[1] for pi, qs in enumerate(self.queues) for i, q in enumerate(qs) for b in q)
        )

    def unit_memory(self, u: SchedUnit) -> float:
        return sum(self.sizes[u.path][i] * b[1] for i in range(u.first, u.last + 1) for b in self.queues[u.path][i])

    def oldest(self, u: SchedUnit) -> float:
        """Arrival time of the oldest batch in the unit's queues (inf if none)."""
        if u.first == u.last:  # an operator
            q = self.queues[u.path][u.first]
            return q[0][0] if q else float("inf")
        heads = [self.queues[u.path][i][0][0] for i in range(u.first, u.last + 1) if self.queues[u.path][i]]
        return min(heads, default=float("inf"))

    def _blocked(self, pi: int, i: int) -> bool:
        below = self.waits[pi][i]
        if below is not None:  # (queues are ordered by arrival: a head is the oldest)
            own = self.queues[pi][i]
            head = own[0][0] if own else float("inf")
            return any(q and q[0][0] <= head for q in below)
        partner = self.paths[pi].ops[i].partner
        if partner is None or partner not in self.by_name:
            return False
        qi, qj = self.by_name[partner]
        if self.queues[qi][qj]:
            return False
        return any(self.queues[qi][k] for k in range(qj))  # the other side may still deliver

    def ready(self, granularity: Granularity) -> list[Unit]:
        """The units at ``granularity`` with a tuple they can process: a queue that is not empty and not blocked."""
        if granularity not in self._scan:  # per unit: its queues, and whether a join half may block it
            self._scan[granularity] = [
                (
                    u,
                    [self.queues[u.path][i] for i in range(u.first, u.last + 1)],
                    any(
                        self.paths[u.path].ops[i].partner or self.waits[u.path][i] is not None
                        for i in range(u.first, u.last + 1)
                    ),
                )
                for u in self.units(granularity)
            ]
        out = []
        for u, qs, partnered in self._scan[granularity]:
            if not partnered:
                if any(qs):
                    out.append(u)
            elif any(q and not self._blocked(u.path, u.first + k) for k, q in enumerate(qs)):
                out.append(u)
        return out

    # -- running -------------------------------------------------------------------------
    def run_unit(self, u: Unit, budget: float) -> float:
        """Run ``u`` for up to ``budget`` time, oldest tuple first, until a tuple leaves the unit
        (then the strategy chooses again, as both papers decide at every such event).
        """
        used = 0.0
        qs = self.queues[u.path]
        m = len(self.paths[u.path].ops)
        while budget - used > EPS:
            best = None
            for i in range(u.first, u.last + 1):
                if qs[i] and not self._blocked(u.path, i):
                    key = (qs[i][0][0], -i)
                    if best is None or key < best[0]:
                        best = (key, i)
            if best is None:
                break
            i = best[1]
            arrival, amount, tid = qs[i][0]
            cost = self.unit_costs[u.path][i]
            if self.whole:
                begun = (u.path, i, tid)
                left = amount * cost - self.progress.get(begun, 0.0)
                if left > budget - used + EPS:  # the budget runs out first: the tuple keeps its progress
                    self.progress[begun] = self.progress.get(begun, 0.0) + budget - used
                    used = budget
                    if not self.preemptive:
                        self.in_service = (u, tid, i)
                    break
                used += max(left, 0.0)
                self.progress.pop(begun, None)
                qs[i].popleft()
                if self.in_service is not None and self.in_service[1:] == (tid, i):
                    self.in_service = None
                acc = self.passed[u.path]
                before = acc[i]
                acc[i] += amount * self.paths[u.path].ops[i].sel
                n = float(int(acc[i] + EPS) - int(before + EPS))  # the whole tuples that pass
                given, k = self.passes[u.path][i], self.finished[u.path][i]
                if given is not None and k < len(given):
                    n = float(given[k])
                self.finished[u.path][i] = k + 1
                t_end = self.now + used
                self.parts[tid] -= 1
                if i + 1 < m:
                    for _ in range(int(n)):  # each whole tuple its own: the next operator may stop between them
                        _insert(qs[i + 1], arrival, 1.0, tid, merge=False)
                    self.parts[tid] += int(n)
                else:
                    if n > 0:
                        self.latencies.append((t_end - arrival, n, u.path))
                    self.out_slot += amount
                if self.parts[tid] <= 0:  # its last part delivered or filtered out: the tuple has left
                    self.completions[int(tid)] = (arrival, t_end, u.path)
                if i == u.last:
                    break  # a tuple left the unit
                continue
            need = amount * cost
            if need <= budget - used + EPS:
                done, used = amount, used + need
                qs[i].popleft()
                if self.in_service is not None and self.in_service[1:] == (tid, i):
                    self.in_service = None
            else:
                done = (budget - used) / cost
                qs[i][0][1] -= done
                used = budget
                if not self.preemptive:
                    self.in_service = (u, tid, i)
            t_end = self.now + used
            if i + 1 < m:
                _insert(qs[i + 1], arrival, done, tid)
            else:
                self.latencies.append((t_end - arrival, done, u.path))
                self.completions[int(tid)] = (arrival, t_end, u.path)
                self.out_slot += done
            if i == u.last and done >= amount - EPS:
                break  # a whole tuple left the unit
        return used

    def step(self) -> None:
        """Spend one time unit."""
        remaining = 1.0
        while remaining > EPS:
            ready = self.ready(self.strategy.granularity)
            if not ready:
                break
            if self.in_service is not None and self.in_service[0] in ready:
                u = self.in_service[0]  # non-preemptive: the tuple in service finishes first
                quantum = None
            else:
                u = self.strategy.choose(ready, self)
                self.decisions += 1
                quantum = self.strategy.quantum(u)
            used = self.run_unit(u, min(remaining, quantum) if quantum else remaining)
            self.strategy.charge(u, used, self)
            self.now += used
            remaining -= used
            if used <= EPS:
                break


def _insert(q: deque[list[float]], arrival: float, amount: float, tid: float, merge: bool = True) -> None:
    """Keep a queue ordered by arrival; the parts of one tuple (same id) stay one batch (``merge``:
    the fluid model's fractions of one tuple; whole tuples stay apart, each one element).
    """
    if merge and q and q[-1][2] == tid:
        q[-1][1] += amount
        return
    if not q or q[-1][0] <= arrival:
        q.append([arrival, amount, tid])
        return
    items = list(q)
    items.append([arrival, amount, tid])
    items.sort(key=lambda b: b[0])
    q.clear()
    q.extend(items)


def simulate(
    paths: Sequence[Path],
    arrivals: Mapping[str, Sequence[float]],
    strategy: Strategy,
    horizon: int | None = None,
    preemptive: bool = True,
    whole: bool = False,
    passes: Mapping[str, Sequence[int]] | None = None,
    waits: Mapping[str, Collection[str]] | None = None,
) -> SimResult:
    """Run ``strategy`` over ``paths``; ``arrivals[path][k]`` input-tuple units arrive at time k
    (``preemptive``, ``whole``, ``passes``, ``waits``: see ``Simulator``).
    """
    sim = Simulator(paths, strategy, preemptive, whole, passes, waits)
    if horizon is None:
        horizon = max((len(a) for a in arrivals.values()), default=0)
    memory: list[float] = []
    output: list[float] = []
    for k in range(horizon):
        sim.now = float(k)
        for pi, p in enumerate(paths):
            a = arrivals.get(p.name, ())
            if k < len(a) and a[k] > 0:
                # a "tuple" is one memory unit (Chain §3): arrivals enter as unit tuples
                left = float(a[k])
                while left > EPS:
                    sim.queues[pi][0].append([float(k), min(1.0, left), float(sim._next_id)])
                    sim.parts[float(sim._next_id)] += 1
                    sim._next_id += 1
                    left -= 1.0
        memory.append(sim.memory())
        sim.out_slot = 0.0
        sim.step()
        output.append(sim.out_slot)
    return SimResult(memory, output, sim.latencies, sim.decisions, sim.completions)
