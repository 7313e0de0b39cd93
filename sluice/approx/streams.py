"""What the resource manager knows of each stream (``sluice.approx.manager``): the memory its
elements hold now (``Usage``, measured by the engine) and what became of its elements at its input
queue (``StreamShedding``: offered, kept, sampled out, shed — per stream, and through the streams a
query reads, per query).
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sluice.approx.allocate import FLOOR
from sluice.approx.report import Resizable
from sluice.approx.synopses import Found
from sluice.approx.timeline import Timeline
from sluice.approx.timeline import joint as joint_recall
from sluice.approx.waiting import FEW, Waiting, entering, held_cost


@dataclass(frozen=True, slots=True)
class Usage:
    """Memory now: the total, and the part attributable to each base stream (the state and
    queued elements of the operators it feeds: what an input's rows hold to the streams feeding
    it where the operator says, ``state_by_input``, the rest shared equally among its streams).
    """

    total: int
    by_stream: dict[str, float]
    holders: dict[str, int]  # per stream: synopses that hold one of its elements (its cost multiple)
    windows: tuple[tuple[Resizable, tuple[str, ...]], ...] = ()  # windows that may shrink, and their streams
    queued: dict[str, tuple[int, int]] = field(default_factory=dict)  # per stream: (elements, bytes) at its source
    synopses: Found = ()  # synopses that may be Bloom filters (``synopses``: DISTINCT, EXCEPT), their streams
    sources: dict[str, Waiting] = field(default_factory=dict)  # per stream: its source (``waiting``: shed from)


def _first(r: tuple[int, ...]) -> int:
    return r[3] if len(r) > 3 else r[0]  # (a checkpoint's batch may lack its first stamp)


def _last(r: tuple[int, ...]) -> int:
    return r[0]


@dataclass
class StreamShedding:
    """One stream's input queue: what it was offered and what became of it."""

    name: str
    rate: float = 1.0
    offered: int = 0
    kept: int = 0
    sampled_out: int = 0  # dropped by dynamic sampling
    shed: int = 0  # dropped by load shedding (the limit reached)
    horizon: float = 0.0  # ticks its elements stay in the largest window over it (inf: for ever)
    # its synopses (or queues past its source) held some of its elements once: its cost was measured,
    # no probe for it (``guessed``) — a 10 ms window emptied between bursts was probed at every push
    held_once: bool = False
    waiting_from: int | None = None  # the first of its elements waiting at its source (as last measured)
    # per admitted batch: (last ts, offered, kept, first ts) — a checkpoint's may lack the first
    _recent: deque[tuple[int, ...]] = field(default_factory=deque, repr=False)
    _out: int = field(default=0, repr=False)  # the first of them past the horizon (in no ``_in_horizon``)

    @property
    def dropped(self) -> int:
        return self.sampled_out + self.shed

    _in_horizon: list[int] = field(default_factory=lambda: [0, 0], repr=False)  # their (offered, kept)

    first_ts: int | None = None  # the first admitted batch's last timestamp (for the arrival rate)
    last_ts: int | None = None
    # arrivals, read or not (what a query registered later would receive: ``sample_at_registration``)
    arrived: int = 0
    arrival_first: int | None = None  # the first batch's first timestamp
    arrival_last: int | None = None
    row_bytes: float = 0.0  # bytes an element, as offered (the mean over the batches seen)
    # offered and kept per time bucket (``timeline``: a join's recall; not in ``statistics()``)
    _timeline: Timeline | None = field(default=None, repr=False)

    def arrive(self, first_ts: int, last_ts: int, n: int, nbytes: int) -> None:
        self.arrived += n
        self.row_bytes += (nbytes / n - self.row_bytes) * n / self.arrived
        if self.arrival_first is None:
            self.arrival_first = first_ts
        self.arrival_last = last_ts if self.arrival_last is None else max(self.arrival_last, last_ts)

    def record(self, last_ts: int, offered: int, kept: int, first_ts: int | None = None) -> None:
        if self.first_ts is None:
            self.first_ts = last_ts
        self.last_ts = last_ts if self.last_ts is None else max(self.last_ts, last_ts)
        self.offered += offered
        self.kept += kept
        if math.isfinite(self.horizon):
            recent = self._recent
            recent.append((last_ts, offered, kept, last_ts if first_ts is None else first_ts))
            self._in_horizon[0] += offered
            self._in_horizon[1] += kept
            while self._out < len(recent) and recent[self._out][0] < last_ts - self.horizon:
                self._in_horizon[0] -= recent[self._out][1]
                self._in_horizon[1] -= recent[self._out][2]
                self._out += 1
            # (kept a second horizon before what waits: what its windows hold while a backlog waits,
            # ``kept_before`` — before the last admitted, a backlog 3 s ahead of its 1 s windows left
            # none of what they held, and each held element looked unmeasured)
            ref = last_ts if self.waiting_from is None else min(last_ts, self.waiting_from)
            while self._out and recent[0][0] < ref - 2 * self.horizon:
                recent.popleft()
                self._out -= 1

    def kept_before(self, t: int) -> int:
        """Kept elements stamped before ``t`` and within the horizon before it — about what its
        windows hold while the elements from ``t`` on wait (a batch's kept elements taken as
        spread evenly over its stamps: a slice straddling ``t`` is held in part — counted whole
        or not at all, a backlog's held elements were 64 of 1,000 and each looked 16x its cost).
        """
        if not math.isfinite(self.horizon):
            return self.kept
        return kept_in(self.held_stamps(t))

    def held_stamps(self, t: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """What ``kept_before(t)`` counts, batch by batch: the first and last stamp of each
        batch's part within the horizon before ``t``, and its kept elements there (``waiting.
        entering``: when they leave the windows).
        """
        rows: list[tuple[float, float, float]] = []
        if not math.isfinite(self.horizon):  # (no batches kept: nothing leaves)
            return np.empty(0), np.empty(0), np.empty(0)
        lo, hi = math.floor(t - self.horizon) + 1, t - 1  # (stamps in [lo, hi]: in the windows at t)
        recent = self._recent
        # (only the batches around [lo, hi]: found by bisection, the batches in admission order —
        # walked whole, 20,000 one-row pushes ran at a quarter of the speed; a few out of order
        # within a slack reached by stepping on)
        start, end = bisect_left(recent, lo, key=_last), bisect_left(recent, t, key=_first)
        while start > 0 and _last(recent[start - 1]) >= lo:
            start -= 1
        while end < len(recent) and _first(recent[end]) < t:
            end += 1
        for i in range(start, end):
            r = recent[i]
            first, last, k = _first(r), _last(r), r[2]
            a, b = max(first, lo), min(last, hi)
            if k and a <= b:
                rows.append((a, b, k * (b - a + 1) / (last - first + 1)))
        out = np.array(rows, dtype=np.float64).reshape(-1, 3)
        return out[:, 0], out[:, 1], out[:, 2]

    def count(self, ts: np.ndarray, keep: np.ndarray) -> None:
        """Elements stamped ``ts`` offered, those where ``keep`` kept, in the timeline."""
        if self._timeline is None:
            self._timeline = Timeline()
        # (buckets no wider than a quarter of its largest window: older ones folded, not widened)
        h = self.horizon
        self._timeline.cap = max(0, math.floor(math.log2(max(h, 4.0) / 4))) if math.isfinite(h) else None
        self._timeline.add(ts, keep)

    def unkeep(self, m: int, ts: np.ndarray | None = None) -> None:
        """``m`` elements kept were shed since, waiting at the source, stamped ``ts``: each taken
        off the batch its stamp came in (``held_stamps`` reads when each batch's elements leave:
        taken off the newest batches, a uniform shed made older batches' elements look gone —
        30 estimated where 533 were held), the rest (no stamps) off the newest.
        """
        if self._timeline is not None and ts is not None:
            self._timeline.unkeep(ts)
        m = min(m, self.kept)  # (never below what was counted)
        self.kept -= m
        self.shed += m
        recent = self._recent
        want = np.zeros(len(recent), dtype=np.int64)
        if ts is not None and len(ts) and recent:
            lasts = np.fromiter((r[0] for r in recent), np.int64, len(recent))
            at = np.minimum(np.searchsorted(lasts, ts, side="left"), len(recent) - 1)
            want = np.bincount(at, minlength=len(recent))
        for i in np.flatnonzero(want).tolist():  # (each batch's own first)
            m -= self._take(i, min(int(want[i]), m))
        for i in range(len(recent) - 1, -1, -1):  # (what its batch could not give: the newest)
            if m <= 0:
                break
            m -= self._take(i, m)

    def _take(self, i: int, m: int) -> int:
        """Up to ``m`` of batch ``i``'s kept elements counted shed; how many."""
        r = self._recent[i]
        d = min(r[2], max(m, 0))
        if d:
            self._recent[i] = (r[0], r[1], r[2] - d, *r[3:])
            if i >= self._out:
                self._in_horizon[1] -= d
        return d

    def filling(self) -> bool:
        """Whether its largest window has not yet spanned its range since its first kept element
        (or never will: Unbounded) — while it fills, an element entering it pushes none out.
        """
        if not math.isfinite(self.horizon):
            return True
        # (an element stamped t enters a window holding [t − range, t]: it pushes an older one out
        # once t is a range past the first — however long it waited at the source)
        return self.first_ts is None or self.last_ts is None or self.last_ts - self.first_ts < self.horizon

    def live(self) -> int:
        """Kept elements that may still be held (within the horizon) — of the oldest batch in it,
        only its part stamped within (its kept elements taken as spread evenly over its stamps:
        counted whole, a batch of 391 of which the window held 2 made a join's elements look to
        cost 42 B where they held 73, 1.018x a 140 KB limit).
        """
        if not math.isfinite(self.horizon):
            return self.kept
        n = float(self._in_horizon[1])
        if self._out < len(self._recent) and self.last_ts is not None:
            r = self._recent[self._out]
            first, last = _first(r), _last(r)
            lo = math.floor(self.last_ts - self.horizon) + 1  # (stamped from lo on: within)
            if first < lo:
                n -= r[2] * (min(lo, last + 1) - first) / (last - first + 1)
        return max(round(n), 0)

    def wanted(self) -> float:
        """Elements offered within its (finite) horizon, kept or not — while its windows fill,
        projected over the whole horizon at the rate offered so far (once a tenth of it has
        passed: a window still filling must not look small to the fair shares).
        """
        n = float(self._in_horizon[0])
        if self.filling() and self.first_ts is not None and self.last_ts is not None:
            span = self.last_ts - self.first_ts
            if span >= self.horizon / 10 and span > 0:
                n *= self.horizon / span
        return n

    def held_rate(self) -> float:
        """The fraction kept of the elements that may still be held (those within the horizon):
        the rate at which the state held now was admitted.
        """
        if not math.isfinite(self.horizon):
            return self.kept / self.offered if self.offered else 1.0
        offered, kept = self._in_horizon
        return kept / offered if offered else self.rate


def kept_in(stamps: tuple[np.ndarray, np.ndarray, np.ndarray]) -> int:
    """The kept elements ``held_stamps`` found (``kept_before``, where its batches are needed too)."""
    return round(float(stamps[2].sum()))


def span_of(batch: pa.Table) -> tuple[int, int]:
    """A batch's last and first timestamps."""
    mm = pc.min_max(batch.column(0))
    return int(mm["max"].as_py()), int(mm["min"].as_py())


def observe(streams: Mapping[str, StreamShedding], u: Usage) -> None:
    """What each stream's manager learns from a measure: whether its synopses held one of its
    elements (``held_once``: ``guessed``) and the first of it waiting (``waiting_from``: ``record``).
    """
    for s, st in streams.items():
        n, b = u.queued.get(s, (0, 0))
        st.held_once = st.held_once or u.by_stream.get(s, 0.0) - b > 0
        src = u.sources.get(s)
        st.waiting_from = src.earliest_waiting() if n and src is not None else None


def held_now(st: StreamShedding, usage: Usage) -> tuple[float, float]:
    """The elements of ``st`` its synopses hold now, and their bytes: those waiting at its
    source left out, the kept ones within the horizon before the first of them (``kept_before``:
    what a window lagging its admissions by what waits holds — not the horizon before the last
    admitted, which a backlog run ahead of its join moves past what the windows hold: 123-173 B
    an element measured where they held 73, and a join fed 5 s of each stream in turn under
    400 KB kept 0.80 of its pairs, never past 0.62 of the limit).
    """
    name = st.name.lower()
    n, b = usage.queued.get(name, (0, 0))
    src = usage.sources.get(name)
    t = src.earliest_waiting() if n > FEW and src is not None else None  # (a few: as they come)
    count = st.kept_before(t) if t is not None else st.live() - n
    if count <= 0 < usage.by_stream.get(name, 0.0) - b:
        # (held, yet none before what waits: a reader that does not wait — an aggregate beside a
        # join waiting for its other input — took the waiting ones in; counted at 2x the guess,
        # the other input was sampled to 1% with the limit far off: over all it holds, as before)
        return float(st.live()), usage.by_stream.get(name, 0.0)
    return float(count), usage.by_stream.get(name, 0.0) - b


def new_cost(st: StreamShedding, row_bytes: float, usage: Usage) -> float:
    """Bytes one more kept element (``row_bytes`` its own) will hold: its own bytes once per
    synopsis holding it and once at its source, or what each held element costs now (measured:
    indexes, masks, groups; ``held_now``), whichever is more — twice the first before anything
    was measured.
    """
    static = row_bytes * (1 + usage.holders.get(st.name.lower(), 0))
    count, held = held_now(st, usage)
    return max(static, 1.1 * held / count) if count > 0 and held > 0 else 2 * static


def frontier(streams: Mapping[str, StreamShedding], groups: list[tuple[str, ...]], name: str) -> float:
    """How far the windows over ``name`` can move with its own elements: the latest element
    admitted of each stream read with it (a join's other inputs, ``groups``: each reader's
    streams), the least of them; ``inf`` where no reader reads another stream beside it.
    """
    lasts = [streams[o].last_ts for g in groups if name in g for o in g if o != name and o in streams]
    return min((-math.inf if x is None else float(x)) for x in lasts) if lasts else math.inf


def at_once(
    st: StreamShedding, ts: np.ndarray, row_bytes: float, cost: float, usage: Usage, until: float = math.inf
) -> float:
    """What one of a batch's elements (stamped ``ts``) costs, counting only those held at once:
    each waits at its source at its own bytes, and only as many as the stream's windows hold at
    once (``entering``, as for a backlog) cost ``cost`` — a batch of 4 s into a window of 1 s
    holds a second of it.  (Counted whole, a join fed 5 s of each stream in turn under 400 KB
    kept 0.80 of its pairs, memory never past 0.62 of the limit, once an element's cost was
    measured over what its windows hold.)  ``cost`` itself for a batch within one horizon (what a
    held element costs is measured per element; a group's is not: discounted as each entering
    element pushing an older one out, a join beside a GROUP BY passed its limit by 2.4%), while
    more than a few of the stream wait (the backlog enters first: ``_will``), for a few, or where
    no window bounds the stream.
    """
    n = len(ts)
    waiting = usage.queued.get(st.name.lower(), (0, 0))[0]
    if n <= FEW or cost <= row_bytes or not math.isfinite(st.horizon) or waiting > FEW:
        return cost
    ts = np.sort(ts)
    if ts[-1] - ts[0] < st.horizon or until < ts[-1]:
        # (``until``: ``frontier`` — a join's other input behind the batch holds its windows
        # where they are: none of them leaves while the batch waits, and a reader that does not
        # wait takes it in; discounted, an aggregate beside such a join passed its limit by 8%)
        return cost
    stamps = st.held_stamps(int(ts[0]))
    more = min(entering(ts, st.horizon, kept_in(stamps), stamps), n)
    return row_bytes + more / n * (cost - row_bytes)


def cost_held(st: StreamShedding, row_bytes: float, usage: Usage) -> float:
    """What an element of ``st`` holds once past its source (``waiting.held_cost``), from
    what each element its synopses hold costs now (``held_now``).
    """
    return held_cost(row_bytes, usage.holders.get(st.name.lower(), 0), *held_now(st, usage))


def guessed(
    streams: dict[str, StreamShedding], stream: str, usage: Usage, room: float, batch: tuple[int, float] = (0, 0.0)
) -> bool:
    """Whether more than ``FEW`` elements whose held cost is a guess (``held_cost`` before
    anything was measured: their stream's synopses never held one) could not all be held at that
    guess's double within ``room`` bytes: those waiting at another stream's source, or ``batch``
    (rows, bytes) of ``stream`` itself while none of it waits — a join's U, its first 480
    beside T's backlog, held 73 B an element where 57 were guessed: 1.026× a 120 KB limit.
    (Otherwise no probe: a push's extra run for nothing, 2.13 s against 1.37 s for 300 pushes
    under a limit 1% used; a stream whose elements wait for another's enters no synopsis in a
    probe's run — probed at every push, 10 → 244 runs for 300.)
    """
    candidates: list[tuple[str, tuple[int, float]]] = [(s, q) for s, q in usage.queued.items() if s != stream]
    if not usage.queued.get(stream, (0, 0))[0]:
        candidates.append((stream, batch))
    for s, (n, b) in candidates:
        st = streams.get(s)
        holders = usage.holders.get(s, 0)
        if st is None or st.held_once or n <= FEW or not holders:  # (``held_once``: ``observe``d)
            continue
        if n * 2 * held_cost(b / n, holders, 0, 0) > room:
            return True
    return False


def joint_of(
    streams: Mapping[str, StreamShedding], since: Mapping[str, int]
) -> Callable[[list[str], list[float]], float | None]:
    """For ``precision.estimate``: the fraction kept of the combinations of the given stream
    reads' elements (each read's window span in ticks), bucket by bucket in time after ``since``
    (per stream: the latest timestamp counted when the query started; ``timeline.joint``); None
    where a stream has no timeline.
    """

    def joint(reads: list[str], spans: list[float]) -> float | None:
        lines = [st._timeline if (st := streams.get(s)) is not None else None for s in reads]
        if any(x is None for x in lines):
            return None
        return joint_recall([x for x in lines if x is not None], {i: since.get(s) for i, s in enumerate(reads)}, spans)

    return joint


def scaling(
    streams: Mapping[str, StreamShedding], u: Usage, small: float, locked: set[str]
) -> tuple[dict[str, float], dict[str, float]]:
    """For the allocator (``allocate``): per stream, the bytes it holds and the rate they were
    admitted at, so that ``held / rate`` is what it would hold unsampled.  Streams holding less
    than ``small`` are left out — but a lowered one (left out, a join's T lowered to 1% at a
    peak was never raised: ``benchmarks/join_backlog.py``, 1,123 of 50,000 kept at 250 KB).
    Its elements waiting at the source were admitted over the backlog's whole span, not at the
    rate of the latest horizon's admissions (``held_rate``): priced so, a join's S, its backlog
    kept at rate 1 and then shed, looked admitted at rate 0.0 and cost 100× what it held; left
    out, S was never sampled, and kept only its backlog's first seconds where a rate would have
    spread what it keeps over all of them — 145 pairs where 207 were (a Spark key's batch, 1/16
    of its peak).  So the plan's part counts at ``held_rate`` and the backlog's at the fraction
    of the elements offered since its first one that wait (``backlog_rate``).
    """
    live: dict[str, float] = {}
    rates: dict[str, float] = {}
    for s, st in streams.items():
        held = u.by_stream.get(s, 0.0)
        if held < small and not (st.rate < 1.0 and s not in locked):
            continue
        n, waiting = u.queued.get(s, (0, 0))
        unit = max(held - waiting, 0.0) / max(st.held_rate(), FLOOR)
        if n and waiting:
            unit += waiting / max(backlog_rate(st, u.sources.get(s), n), FLOOR)
        live[s] = held
        rates[s] = held / unit if unit > 0 else st.held_rate()
    return live, rates


def backlog_rate(st: StreamShedding, src: Waiting | None, n: int) -> float:
    """The fraction of a stream's elements offered since the first of its ``n`` waiting ones
    that wait (its rate, for a few of them or without a timeline).
    """
    if src is None or n <= FEW or st._timeline is None:
        return st.rate
    first = src.earliest_waiting()
    offered = st._timeline.offered_since(first) if first is not None else 0
    return min(1.0, n / offered) if offered else st.rate
