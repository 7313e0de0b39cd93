"""Play arrivals into the embedded engine on a virtual clock, and time each output tuple.

The harness of the shared-window-join experiments (``shared_joins.py``; Hammad et al. 2003 §5).
Virtual time ``V`` (milliseconds, the streams' tick) starts at the first arrival.  Each turn:

1. push every element with timestamp ≤ ``V`` (an element's timestamp is its arrival time) and
   heartbeat ``⌊V⌋`` — every element of that instant has arrived;
2. let the engine make one scheduling decision (``EmbeddedEngine.run(max_steps=1)``): one operator
   runs one turn (the shared join: read what has arrived, then join work until its ``budget`` is
   spent, then release in order);
3. advance ``V`` by what that turn cost, and stamp every output tuple the join released during the
   turn (its ``on_release`` hook) with the new ``V``: its response time is ``V`` minus its
   timestamp, the arrival of the later of its two elements (§3.1.1).

When no operator has work, ``V`` jumps to the next arrival.  What a turn costs is the clock's:

* ``MeasuredClock`` — the turn's wall time (``time.perf_counter``): the real engine's cost, every
  operator's work included (and, on a shared machine, the waits for a core: it sums the thread's
  CPU time beside it);
* ``CpuClock`` — the turn's CPU time in this thread (``time.thread_time``);
* ``WorkClock`` — deterministic: the join's work in the turn (from its ``statistics()``: elements
  probed plus pairs examined, per (unit, band) scanned — with hashing the pairs found, in the
  nested-loop variant every pair of the band, see :class:`WorkClock`) times a fixed cost per unit
  of work; the other operators cost nothing.  Tests assert on it: no wall clock in any threshold.

>>> s = Workload({"A": (np.array([0, 0, 5]), np.array([1, 1, 1])), "B": (np.array([1]), np.array([1]))})
>>> r = play(s, [4, 9], "lwo", "hash", budget=8, clock=WorkClock(0.5))
>>> [p.count for p in r.ports], r.work  # a0, a0' probe (1 each); b1 finds 2 pairs (3); a5 finds b1 (2)
([3, 3], 7)
>>> r.ports[0].mean  # b1's pairs leave at 2.5 ms (1.5 after ts 1), a5's at 6 ms (1 after ts 5)
1.3333333333333333
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import pyarrow as pa

from sluice.backends.embedded import EmbeddedEngine
from sluice.runtime.batch import SIGN, ts_of
from sluice.runtime.operators.shared_join import SharedWindowJoin
from sluice.scheduling.strategies.round_robin import RoundRobin
from sluice.scheduling.units import SchedUnit

DDL = "REGISTER STREAM A (K integer, V integer); REGISTER STREAM B (K integer, W integer)"
STREAMS = ("A", "B")


def query(window_ms: int) -> str:
    """The paper's query (§5), one per window: an equi-join of A and B over both windows."""
    w = f"[Range {window_ms} milliseconds]"
    return f"Istream(SELECT * FROM A {w}, B {w} WHERE A.K = B.K)"


@dataclass(frozen=True)
class Workload:
    """Per stream: arrival timestamps (ms, non-decreasing) and join keys; ``since``: outputs whose
    later element arrived before it are warm-up (§5: "fast forwarded"), not measured.
    """

    streams: dict[str, tuple[np.ndarray, np.ndarray]]
    since: int = 0

    def __len__(self) -> int:
        return sum(len(ts) for ts, _ in self.streams.values())


class Clock(Protocol):
    name: str

    def start(self, op: SharedWindowJoin) -> None: ...

    def turn(self, run: Any) -> tuple[Any, float]:
        """Call ``run()``; return its result and what it cost in virtual milliseconds."""
        ...


class MeasuredClock:
    """A turn costs its wall time (``time.perf_counter``).  The thread's CPU time is summed beside it
    (``cpu_ms``): on a machine shared with other work, wall time also counts the moments this
    process waited for a core, and ``cpu_ms / wall`` says how much.  ``CpuClock`` advances by the CPU
    time instead.
    """

    name = "measured"

    def __init__(self) -> None:
        self.cpu_ms = 0.0

    def start(self, op: SharedWindowJoin) -> None:
        pass

    def turn(self, run: Any) -> tuple[Any, float]:
        c0, t0 = time.thread_time(), time.perf_counter()
        out = run()
        wall, cpu = (time.perf_counter() - t0) * 1000.0, (time.thread_time() - c0) * 1000.0
        self.cpu_ms += cpu
        return out, self.cost(wall, cpu)

    def cost(self, wall: float, cpu: float) -> float:
        return wall


class CpuClock(MeasuredClock):
    """A turn costs the CPU time of this thread (``time.thread_time``): other processes' load does
    not count.
    """

    name = "cpu"

    def cost(self, wall: float, cpu: float) -> float:
        return cpu


class WorkClock:
    """A turn costs the join work it did × ``ms_per_work``.

    The join's ``statistics().work`` counts, per (unit, band) scanned, the unit's elements probed
    plus the pairs its band scan *found*.  That is the hash variant's cost (a probe and its bucket
    of matches, §3.4) but not the nested loop's, which examines every pair of the band (§3.1); the
    clock adds the pairs examined and not found (``examined − found``: none with hashing).
    """

    name = "work"

    def __init__(self, ms_per_work: float) -> None:
        self.ms_per_work = ms_per_work
        self.op: SharedWindowJoin | None = None

    def start(self, op: SharedWindowJoin) -> None:
        self.op = op

    def work(self) -> int:
        assert self.op is not None
        return join_work(self.op)

    def turn(self, run: Any) -> tuple[Any, float]:
        w0 = self.work()
        out = run()
        return out, (self.work() - w0) * self.ms_per_work


def join_work(op: SharedWindowJoin) -> int:
    """The join's work so far as the work clock charges it (see :class:`WorkClock`)."""
    st = op.statistics()
    return st.work + st.examined - st.found


class _JoinTurns(RoundRobin):
    """Round-robin over the operators; the shared join's turn is ``budget`` (elements read, then
    join work), every other operator drains its input in one turn.
    """

    name = "round-robin/join-budget"

    def __init__(self, budget: int) -> None:
        super().__init__()
        self.join_budget = budget

    def budget(self, unit: SchedUnit) -> int:
        ops = getattr(unit, "ops", ())
        return self.join_budget if any(isinstance(o, SharedWindowJoin) for o in ops) else self._budget


@dataclass
class PortTimes:
    """Response times (virtual ms) of one query's output tuples, and a checksum of every tuple it
    got (warm-up included) to compare answers across policies.
    """

    window_ms: int
    count: int = 0
    total: float = 0.0
    peak: float = 0.0
    count_all: int = 0
    rows_all: int = 0  # every row released, deletions and warm-up included
    checksum: int = 0

    @property
    def mean(self) -> float:
        return self.total / self.count if self.count else float("nan")

    def add(self, rows: pa.Table, at: float, since: int, arrival: float | None = None) -> None:
        """Rows released at virtual time ``at``: insertions whose timestamp is ≥ ``since`` count,
        each from its timestamp (or from ``arrival`` when given).
        """
        plus = np.asarray(rows.column(SIGN).to_numpy(), np.int64) > 0
        ts = np.asarray(ts_of(rows), np.int64)
        n = rows.num_columns
        key = ts * 1_000_003 + np.asarray(rows.column(n - 3).to_numpy(), np.int64) * 65_537
        key += np.asarray(rows.column(n - 1).to_numpy(), np.int64)
        self.count_all += int(plus.sum())
        self.rows_all += rows.num_rows
        self.checksum = (self.checksum + int(key[plus].sum())) % (1 << 61)
        mine = plus & (ts >= since)
        resp = at - (ts[mine] if arrival is None else np.full(int(mine.sum()), arrival))
        if len(resp):
            self.count += len(resp)
            self.total += float(resp.sum())
            self.peak = max(self.peak, float(resp.max()))


@dataclass
class RunResult:
    """One run: per query (smallest window first) response times; the buffers' peaks (§5.3)."""

    policy: str
    variant: str
    ports: list[PortTimes]
    join_buffer_peak: dict[str, int]  # elements in each input's JoinBuffer
    pending_peak: int  # elements in the scheduling queues (the input buffer)
    unread_peak: int  # elements arrived but not yet read by the join
    held_peak: int  # rows held for ordered release, between turns (the output buffer)
    held_peak_in_turn: int  # the operator's held_peak: also rows released in the turn they were found
    busy_ms: float  # virtual time spent in turns
    cpu_ms: float  # measured clocks: this thread's CPU time in turns (0 on the work clock)
    span_ms: float  # virtual time from the first arrival to the last release
    work: int  # the join's work (WorkClock's count)
    steps: int  # (unit, band) steps of join work
    turns: int  # engine turns (every operator's)
    join_turns: int  # the join's own turns (its statistics().runs)
    wall_s: float

    @property
    def outputs(self) -> int:
        return sum(p.count for p in self.ports)

    @property
    def mean(self) -> float:
        """Response time averaged over every output tuple of every query (Fig 7)."""
        n = self.outputs
        return sum(p.total for p in self.ports) / n if n else float("nan")

    @property
    def utilisation(self) -> float:
        return self.busy_ms / self.span_ms if self.span_ms else 0.0


def batch_of(ts: np.ndarray, keys: np.ndarray, first: int = 0) -> pa.Table:
    """A typed batch for stream A or B: timestamps, keys, and a serial number (V or W)."""
    n = len(ts)
    return pa.table(
        {
            "__ts": pa.array(ts, pa.int64()),
            "__sign": pa.array(np.ones(n, np.int8)),
            "c0": pa.array(keys, pa.int64()),
            "c1": pa.array(np.arange(first, first + n), pa.int64()),
        }
    )


def build(
    windows_ms: Sequence[int], policy: str, variant: str, *, budget: int, unit: int = 1, retain: int | None = 0
) -> tuple[EmbeddedEngine, SharedWindowJoin, list[Any]]:
    """An engine running the paper's query for each window, sharing one join under the policy."""
    eng = EmbeddedEngine(
        time_unit="millisecond",
        shared_join=f"{policy}:unit={unit},variant={variant}",
        scheduler=_JoinTurns(budget),
        budget=budget,
        start=0,
    )
    eng.execute(DDL)
    handles = [eng.register_query(query(x), name=f"w{i}", retain=retain) for i, x in enumerate(windows_ms)]
    ops = [o for o in eng.operators if isinstance(o, SharedWindowJoin)]
    if len(ops) != 1 or len(ops[0].ports) != len(windows_ms):
        raise AssertionError("the queries must share one join, a port per window")
    return eng, ops[0], handles


class Feed:
    """Pushes each stream's elements as virtual time reaches their timestamps."""

    def __init__(self, eng: EmbeddedEngine, w: Workload) -> None:
        self.eng = eng
        self.batches = {s: batch_of(ts, keys) for s, (ts, keys) in w.streams.items()}
        self.stamps = {s: ts for s, (ts, _) in w.streams.items()}
        self.pos = {s: 0 for s in self.stamps}
        self.beat: int | None = None

    def first(self) -> float:
        return float(min((int(t[0]) for t in self.stamps.values() if len(t)), default=0))

    def due(self, v: float) -> None:
        now = int(v)
        for s, ts in self.stamps.items():
            j = int(np.searchsorted(ts, now, side="right"))
            if j > self.pos[s]:
                self.eng.push_batch(s, self.batches[s].slice(self.pos[s], j - self.pos[s]))
                self.pos[s] = j
        if self.beat != now:
            self.eng.heartbeat(now)
            self.beat = now

    def next(self) -> float | None:
        later = [int(ts[self.pos[s]]) for s, ts in self.stamps.items() if self.pos[s] < len(ts)]
        return float(min(later)) if later else None


@dataclass
class _Peaks:
    join_buffer: dict[str, int] = field(default_factory=lambda: {"A": 0, "B": 0})
    pending: int = 0
    unread: int = 0
    held: int = 0

    def sample(self, op: SharedWindowJoin) -> None:
        jb = self.join_buffer
        jb["A"], jb["B"] = max(jb["A"], len(op.left)), max(jb["B"], len(op.right))
        self.pending = max(self.pending, op.pending_elements())
        self.unread = max(self.unread, sum(r.available() for r in op.readers))
        self.held = max(self.held, op.held_rows())


def turns(
    eng: EmbeddedEngine,
    op: SharedWindowJoin,
    clock: Clock,
    ports: list[PortTimes],
    *,
    start: float,
    feed: Feed | None = None,
    since: int = 0,
    arrival: float | None = None,
) -> tuple[float, float, int, _Peaks]:
    """Turn the engine on the virtual clock until it is idle and ``feed`` is empty (see the module
    docstring); returns (busy ms, last release time, turns, the buffers' peaks).
    """
    released: list[tuple[int, pa.Table]] = []
    op.on_release = lambda p, b: released.append((p, b))
    v, busy, n, last = start, 0.0, 0, start
    peaks = _Peaks()

    def one() -> int:
        return eng.run(max_steps=1)

    while True:
        if feed is not None:
            feed.due(v)
        steps, cost = clock.turn(one)
        if not steps:
            if eng.loop.moved:  # (time moved on through operators that only move it: work, not a decision)
                busy += cost
                v += cost
            nxt = feed.next() if feed is not None else None
            if nxt is None:
                break
            v = max(v, nxt)
            continue
        n += 1
        busy += cost
        v += cost
        for p, b in released:
            ports[p].add(b, v, since, arrival)
            last = v
        released.clear()
        peaks.sample(op)
    op.on_release = None
    return busy, last, n, peaks


def play(
    w: Workload,
    windows_ms: Sequence[int],
    policy: str,
    variant: str,
    *,
    budget: int,
    clock: Clock,
    unit: int = 1,
    keep: list[list[Any]] | None = None,
) -> RunResult:
    """Run the queries (one per window) under ``policy``/``variant`` over ``w`` on ``clock``.
    ``keep``: a list to receive each query's output elements (for exactness checks).
    """
    t0 = time.perf_counter()
    eng, op, handles = build(
        windows_ms, policy, variant, budget=budget, unit=unit, retain=None if keep is not None else 0
    )
    clock.start(op)
    ports = [PortTimes(x) for x in windows_ms]
    feed = Feed(eng, w)
    first = feed.first()
    busy, last, n, peaks = turns(eng, op, clock, ports, start=first, feed=feed, since=w.since)
    if keep is not None:
        keep.extend([h.results() for h in handles])
    st = op.statistics()
    return RunResult(
        policy,
        variant,
        ports,
        peaks.join_buffer,
        peaks.pending,
        peaks.unread,
        peaks.held,
        st.held_peak,
        busy,
        clock.cpu_ms if isinstance(clock, MeasuredClock) else 0.0,
        last - first,
        join_work(op),
        st.steps,
        n,
        st.runs,
        time.perf_counter() - t0,
    )
