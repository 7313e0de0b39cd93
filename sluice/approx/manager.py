"""The resource manager: holds the engine inside its memory limit by dynamic sampling and, as a
last resort, load shedding at the streams' input queues (STREAM §5.2.2, §5.4), and tells each
query what approximation it gets (§5.3).

Where elements are dropped: at a base stream's source, after the input check and before any
window — dropping a stream element there means it never enters a window, so it never leaves one
either, and every operator above stays exact *for the elements kept* (a relation's deletions are
never dropped: relations are not approximated).  Two ways (STREAM §5.2.2):

* **dynamic sampling** — each element kept independently with the stream's rate; the rates are
  chosen by ``sluice.approx.allocate`` (weighted precision, §5.3) when memory passes
  ``REALLOCATE`` of the limit, aiming at ``TARGET``, and raised again when it falls below ``RAISE``
  (Jiang's overload detection, by memory like the Threshold strategy's ``T_max``/``T_min``);
* **load shedding** — when an arriving batch would take memory past ``CAP`` of the limit with
  each kept element costing its bytes once per synopsis that holds it (and the elements still
  waiting at the sources counted at what they will hold), only as many as fit are kept (chosen
  uniformly: no part of a batch is favoured): the limit held when sampling has not caught up (a
  burst) — and when it would not fit beside the elements of other streams still waiting at
  their sources (a join waiting for its other input), those are shed with it, from the queues
  (``_with_queued``).  Synopses are compressed first (§5.2.1), also to leave the batches
  admitted between runs room: windows that may shrink (``[Range T At Least t]``; design 021, "Who shrinks it") are
  cut, a DISTINCT over an input that only inserts becomes a Bloom filter (``synopses``).

Nothing is dropped silently: every element is counted — per stream (its input queue) as offered,
kept, sampled out or shed, and per query through the streams it reads — and ``on_shed`` callbacks
receive the dropped elements themselves.  A query registered with ``min_precision=1`` (exact only)
locks its streams at rate 1: the manager never drops their elements (nor compresses its synopses)
and records when the limit is exceeded because of it.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from sluice.approx.allocate import Demand, allocate
from sluice.approx.limits import QueryLimits
from sluice.approx.precision import base_streams, bloom_sites, estimate, horizons, unsafe_streams
from sluice.approx.report import Approximation, Event, Resizable, shrunk_windows
from sluice.approx.resize import GROW, regrow, shrink
from sluice.approx.shares import FairShares, water_fill
from sluice.approx.static import StaticSample, choose, chosen_in
from sluice.approx.streams import (
    StreamShedding,
    Usage,
    at_once,
    cost_held,
    frontier,
    guessed,
    joint_of,
    kept_in,
    new_cost,
    observe,
    scaling,
    span_of,
)
from sluice.approx.synopses import candidates, compress, compressed, grow
from sluice.approx.waiting import FEW, entering, held_cost, shed_waiting, waiting_totals
from sluice.plan import logical as L
from sluice.runtime.batch import nbytes

CAP = 0.95  # no batch is admitted past this fraction of the limit
REALLOCATE = 0.85  # above it the rates are chosen again …
TARGET = 0.70  # … so that the projected memory is this fraction
RAISE = 0.50  # below it, lowered rates are raised (towards TARGET)
NEGLIGIBLE = 0.01  # a stream holding less than this fraction of the limit is never dropped
SLICE = 0.2  # a large push is admitted in slices of this fraction of the limit, the plan run between
RECENT = 8  # the batches the windows leave room for: the largest of this many adjustments' admissions
ROOM = 0.90  # … under this fraction of the limit, with the plan's state (between the band and the cap)
Will = dict[str, tuple[float, float]]  # per stream: the bytes its waiting elements take now, and will (``_will``)


def _static_recall(static: tuple[StaticSample, ...]) -> float:
    """The recall left by samples lowered at registration (what the dynamic path may not spend)."""
    return float(np.prod([c.chosen / c.most for c in static])) if static else 1.0


@dataclass
class _Reader:
    plan: L.LogicalNode
    limits: QueryLimits
    streams: tuple[str, ...]
    unsafe: dict[str, str]
    baseline: dict[str, tuple[int, int, int, int]]  # stream → (offered, kept, dropped, shed) when it started
    static: tuple[StaticSample, ...] = ()  # its Sample(a To b) rates chosen at registration
    since: dict[str, int] | None = None  # stream → its latest timestamp counted when the query started


@dataclass
class ResourceManager:
    """Keeps one engine within ``limit`` bytes (queues + synopses): see the module docstring."""

    limit: int
    seed: int = 0
    measure: Callable[[], Usage] | None = None  # set by the engine
    streams: dict[str, StreamShedding] = field(default_factory=dict)
    readers: dict[str, _Reader] = field(default_factory=dict)
    events: list[Event] = field(default_factory=list)
    peak: int = 0  # measured between runs: at admissions, and when a run starts and ends
    peak_in_runs: int = 0  # the same and after every step of a run: the most the engine held
    last: int = 0  # memory at the last adjustment
    adjustments: int = 0
    on_shed: list[Callable[[str, pa.Table, str], None]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.rng = np.random.default_rng(self.seed)
        # (query, bytes, until tick): what a query sampled at registration holds once its window fills
        self._reserved: list[tuple[str, float, float]] = []
        self._shedding = False  # inside a shedding episode (one event per episode)
        self._shed_since = False  # elements shed since the last adjustment (an episode goes on)
        self._culprit_said = False  # the culprits named (once per episode of them)
        self._over = False  # inside an over-limit episode (likewise)
        # the most an admission asked for outside the plan's state since the last adjustment (None:
        # none came) — the elements waiting at the sources and its own, at what they will cost:
        # the batches the windows must leave room for, which memory after a run does not show —
        # and that of the last RECENT adjustments that had admissions (runs with none, and a
        # push's last small slice, do not make the windows forget the batches that come)
        self._transient: float | None = None
        self._recent: deque[float] = deque(maxlen=RECENT)
        # the plan's state at the last RECENT adjustments: a window grows only if the batches fit beside the
        # most of them (between one stream's slice and the next, a join's state is lowest: 33 cuts, 33 growths)
        self._bases: deque[float] = deque(maxlen=RECENT)
        self._fair = FairShares()  # each stream's share of the limit (``shares``: drops aimed at the culprit)

    @staticmethod
    def _later_fields() -> dict[str, object]:
        """Fields a checkpoint or a key's snapshot may predate, at their starting values."""
        return {
            "_transient": None,
            "_recent": deque(maxlen=RECENT),
            "_bases": deque(maxlen=RECENT),
            "_fair": FairShares(),
            "_shed_since": False,
            "_culprit_said": False,
            "peak_in_runs": 0,
        }

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(self._later_fields() | state)
        self.note_peak(self.peak)  # (a checkpoint before ``peak_in_runs``)

    def __getstate__(self) -> dict[str, object]:
        state = dict(self.__dict__)
        state["on_shed"] = []  # callables: subscribe again after a restore
        return state

    # -- what a key holds (the Spark processor: one manager, each key's counters restored into it)
    _KEY_STATE = (
        "streams", "events", "peak", "peak_in_runs", "last", "adjustments", "_reserved", "_shedding", "_shed_since",
        "_culprit_said", "_over", "_transient", "_recent", "_bases", "_fair",
    )  # fmt: skip

    def snapshot(self) -> dict[str, Any]:
        """What changes as elements arrive — each stream's rate and counters, the memory measured,
        the random generator — not the queries, which registration sets: a Spark processor keeps
        one per key (``EmbeddedEngine.snapshot_state``).  Live objects: pickle before running on.
        """
        out = {k: getattr(self, k) for k in self._KEY_STATE}
        out["rng"] = self.rng.bit_generator.state
        return out

    def restore(self, state: dict[str, Any]) -> None:
        fresh = self._later_fields()
        for k in self._KEY_STATE:
            setattr(self, k, state[k] if k in state else fresh[k])
        self.note_peak(self.peak)
        self.rng.bit_generator.state = state["rng"]

    # -- queries -------------------------------------------------------------------------
    def add_stream(self, name: str) -> None:
        self.streams.setdefault(name.lower(), StreamShedding(name))

    def add_query(
        self, name: str, plan: L.LogicalNode, limits: QueryLimits, static: tuple[StaticSample, ...] = ()
    ) -> None:
        streams = tuple(base_streams(plan))
        base = {s: (st.offered, st.kept, st.dropped, st.shed) for s in set(streams) if (st := self.streams.get(s))}
        since = {s: st.last_ts for s in set(streams) if (st := self.streams.get(s)) and st.last_ts is not None}
        self.readers[name] = _Reader(plan, limits, streams, unsafe_streams(plan), base, chosen_in(plan), since)
        for c in static:
            if c.chosen < c.most:
                assert c.need is not None
                self._event(
                    "static-sample",
                    f"{name}: {c.describe()} at registration: its window would hold about {c.need:.0f} B "
                    f"at {c.most * 100:g}%, more than the {max(c.free, 0):.0f} B the limit ({self.limit} B) "
                    "leaves free",
                )
            if c.need is not None:  # (its window fills over its span: held in reserve until then)
                st = self.streams.get(c.stream.lower())
                if st is not None and st.arrival_last is not None:
                    self._reserved.append((name, c.need * c.chosen / c.most, st.arrival_last + c.span))
        for s, span in horizons(plan).items():
            if s in self.streams:
                self.streams[s].horizon = max(self.streams[s].horizon, span)

    def forget_query(self, name: str) -> None:
        self.readers.pop(name, None)

    def _exact_only(self) -> set[str]:
        """Streams an exact-only query reads: never dropped."""
        return {s for q in self._exact() for s in self.readers[q].streams}

    def locked(self) -> dict[str, str]:
        """Streams whose elements are never dropped by sampling, with the query that says so."""
        out: dict[str, str] = {}
        for q, r in self.readers.items():
            for s in r.streams:
                if r.limits.exact_only:
                    out.setdefault(s, f"{q} is exact only (min_precision=1)")
                elif s in r.unsafe:
                    out.setdefault(s, f"{q}: {r.unsafe[s]}")
        return out

    # -- admission -----------------------------------------------------------------------
    def admit(self, stream: str, batch: pa.Table) -> pa.Table:
        """What of a checked batch of stream elements enters the plan; the rest is counted (the
        counters first: a failing ``on_shed`` callback loses nothing uncounted).
        """
        st = self.streams[stream.lower()]
        n = batch.num_rows
        name = st.name.lower()
        if n == 0:
            return batch
        last, first = span_of(batch)
        st.arrive(first, last, n, nbytes(batch))  # (read or not: for ``sample_at_registration``)
        if not any(name in r.streams for r in self.readers.values()):
            return batch  # a stream nobody reads holds nothing: never dropped
        usage = self._usage()
        exact = name in self._exact_only()
        keep = np.ones(n, dtype=bool)
        drops: list[tuple[np.ndarray, str]] = []
        if st.rate < 1.0 and not exact:
            keep = self.rng.random(n) < st.rate
            st.sampled_out += int(n - keep.sum())
            drops.append((~keep, "sampled"))
        # a stream holding next to nothing (its elements pass a filter to a subscriber, say) costs
        # its own bytes once — and what a synopsis adds to each, once per synopsis that may hold
        # them (a join's other input's first batch, at its own bytes, passed the limit by 11%);
        # judged at twice that before anything was measured, it was shed while the limit was far off
        small = usage.by_stream.get(name, 0.0) < NEGLIGIBLE * self.limit
        row = nbytes(batch) / n
        cost = held_cost(row, usage.holders.get(name, 0), 0, 0) if small else new_cost(st, row, usage)
        until = frontier(self.streams, [r.streams for r in self.readers.values()], name)  # (``at_once``)
        cost = at_once(st, batch.column(0).to_numpy()[keep], row, cost, usage, until)
        # elements waiting at their sources hold only their own bytes: counted at what they will cost
        per_stream = self._will(usage)
        now, will = waiting_totals(per_stream)
        held = usage.total - now + will
        k = int(keep.sum())
        room = self._room(name, k, cost, held, usage)
        if k > room and not exact and self._blooms(usage, None, admitting=True):
            usage = self._usage()  # a DISTINCT compressed rather than elements shed (§5.2.1 before §5.2.2)
            held = usage.total - now + will
            room = self._room(name, k, cost, held, usage)
        self._transient = max(self._transient or 0.0, will + k * cost)  # (asked: shed or not)
        if k > room and not exact:
            room = self._with_queued(name, k, cost, room, usage, per_stream)
        if k > room:
            if exact:
                if not self._over:
                    self._event(
                        "over-limit", f"{st.name}: elements admitted past the limit: an exact-only query reads it"
                    )
                    self._over = True
            else:
                chosen = np.flatnonzero(keep)
                cut = np.sort(self.rng.choice(chosen, size=room, replace=False)) if room else np.empty(0, np.int64)
                shed = keep.copy()
                keep[:] = False
                keep[cut] = True
                shed &= ~keep
                st.shed += k - room
                drops.append((shed, "shed"))
                self._shed_since = True
                self._shedding_begins(st.name, usage, "; ")
        st.record(last, n, int(keep.sum()), first)
        st.count(batch.column(0).to_numpy(), keep)
        for mask, reason in drops:
            self._drop(st, batch, mask, reason)
        return batch if keep.all() else batch.filter(pa.array(keep))

    def _room(self, name: str, k: int, cost: float, held: float, usage: Usage) -> int:
        """How many of ``k`` elements costing ``cost`` each fit under the cap.  While the shares
        bind (``shares``; judged with this batch in its stream's want), a stream whose state
        neither sampling, time nor compression shrinks (an unsafe reader's groups, ``[Rows N]``)
        past its share leaves the others within theirs the room they will take again; once an
        exact-only reader's stream has taken memory past the limit beyond its own share, a
        stream within its share is not shed for it (the limit is passed already, and reported).
        """
        room = max(0, math.floor((self.limit * CAP - held) / max(cost, 1.0)))
        fair = self._fair
        mine, want = usage.by_stream.get(name, 0.0), fair.wants.get(name)
        if want is None:  # (no share yet: registered since the last adjustment)
            return room
        shares, tight = fair.share, fair.tight
        if mine + k * cost > want:  # (growing past what it wanted at the last adjustment)
            wants = fair.wants | {name: mine + k * cost}
            shares, tight = water_fill(wants, fair.total), sum(wants.values()) > fair.total
        if not tight:
            return room
        share, locked = shares[name], self.locked()
        exact = self._exact_only()
        filters = [(op, s) for op, s in usage.synopses if op.synopsis() is not None]  # (fixed in size)
        if usage.synopses:  # (and those that will be)
            filters += candidates(usage.synopses, self.limit, self._exact(), self._sites())
        shrinks = any(name in streams for _, streams in [*usage.windows, *filters])
        unbounded = not math.isfinite(self.streams[name].horizon)  # (time never frees its state)
        if name in locked and name not in exact and unbounded and not shrinks and mine + k * cost > share:
            reserve = sum(max(0.0, sh - usage.by_stream.get(s, 0.0)) for s, sh in shares.items() if s != name)
            room = max(0, math.floor((self.limit * CAP - held - reserve) / max(cost, 1.0)))
        culprits = [s for s in fair.over(shares, usage.by_stream) if s in exact and s != name]
        if usage.total > self.limit and mine < share and culprits:  # (measured, not what waits will hold)
            room = max(room, math.floor((share - mine) / max(cost, 1.0)))
        return room

    def _shedding_begins(self, stream: str, usage: Usage, how: str) -> None:
        """One ``shed`` event an episode (``how``: what is shed besides the batch of ``stream``)."""
        if not self._shedding:
            self._event(
                "shed",
                f"{stream}: memory {usage.total} B of {self.limit} B: load shedding begins{how}"
                + self._holders_text(usage)
                + self._shares_text(),
            )
            self._shedding = True

    def _with_queued(self, name: str, k: int, cost: float, room: int, usage: Usage, per_stream: Will) -> int:
        """Load shedding from the queues (STREAM §5.2.2): when ``k`` arriving elements do not all
        fit, the elements of other streams still waiting at their sources — no operator read
        them yet, so no answer depends on them — are judged with them: one share ``p`` of each
        kept, uniformly, the batch's and every other stream's past its fair share (``shares``;
        but an exact-only query's), so that all of it fits under the cap.  Without it, a join fed
        all of one stream before the other kept that backlog and shed the other's batches, or
        passed its limit by 29% (design 021).  The batch's room: ``p`` of it, if more than
        ``room``.  (Not the batch's own stream's earlier slices: priced at what each will hold
        with nothing leaving, a batch shed them to make room: 0.873 of a join's pairs kept where
        0.928 are, the limit never near — ``benchmarks/join_backlog.py``, 400 KB in chunks.)
        """
        exact, share = self._exact_only(), self._fair.share
        # (a stream within its fair share keeps its elements, ``_room``; one nobody reads holds
        # nothing and was never counted: ``admit``.  Its share judged by what it will hold: at
        # its waiting elements' own bytes a backlog stayed within its share, the other stream's
        # batches were shed instead and the backlog entered the windows anyway, 1.07× a 100 KB
        # limit)
        read = {s for r in self.readers.values() for s in r.streams}
        now, will_all = waiting_totals(per_stream)
        free = self.limit * CAP - (usage.total - now + will_all)  # (under the cap beside the plan and what waits)
        # (past the cap with none of the batch: every backlog, within its share or not — a join's
        # T past its share holds its 5 s window however its batches are shed, and S's backlog,
        # within its share, entered beside it: 1.015× a 60 KB limit)
        will = {
            s: w * usage.sources[s].droppable() / usage.queued[s][0]  # (what a reader read stays)
            for s, (_, w) in per_stream.items()
            if s not in exact
            and s in read
            and s in usage.sources
            and s != name
            and (free < 0 or usage.by_stream.get(s, 0.0) - per_stream[s][0] + per_stream[s][1] > share.get(s, 0.0))
        }
        waiting = sum(will.values())
        if not waiting:
            return room
        # the bytes the batch may take beside what waits: under the cap, or, where the fair shares
        # gave it less (room kept for the others), that
        if room < math.floor(free / max(cost, 1.0)):
            free = room * cost
        p = min(max((free + waiting) / (waiting + k * cost), 0.0), 1.0)
        if math.floor(p * k) <= room and free >= 0:
            return room
        gone = self._thin({s: 1.0 - p for s in will}, usage)
        if gone:
            queued = ", ".join(f"{self.streams[s].name} {t.num_rows} waiting" for s, t in sorted(gone.items()))
            self._shedding_begins(
                self.streams[name].name,
                usage,
                f", from the queues too: {queued} (kept {p:.3g} of them and of the batch); ",
            )
            self._shed_since = True
        return max(room, math.floor(p * k))

    def _thin(self, share: dict[str, float], usage: Usage) -> dict[str, pa.Table]:
        """Shed a uniform ``share[s]`` of each stream's elements waiting at its source, counted
        and handed to ``on_shed``.
        """
        before = {s: usage.queued[s][0] for s in share if s in usage.queued}
        gone = shed_waiting(usage.sources, share, self.rng)
        for s, t in gone.items():
            st, m = self.streams[s], t.num_rows
            # a query registered while some waited counted them in its baseline: its share of the
            # drop leaves it too (in proportion), or its kept fraction went negative (kept -28)
            for r in self.readers.values():
                if s in r.baseline:
                    o0, k0, d0, s0 = r.baseline[s]
                    pre = min(max(k0 - (st.kept - before[s]), 0), before[s])  # (waiting, admitted before it)
                    x = min(round(m * pre / max(before[s], 1)), k0)
                    r.baseline[s] = (o0, k0 - x, d0 + x, s0 + x)
            st.unkeep(m, t.column(0).to_numpy())
            self._drop(st, t, np.ones(m, dtype=bool), "shed")
        return gone

    def slice_rows(self, stream: str, batch: pa.Table) -> tuple[int, int]:
        """How many rows of a batch to admit before the plan runs on them — the first slice, then
        each — a fifth of the limit's worth at their own bytes once per synopsis that will hold
        them (a whole file in one push must not be judged before any of it ran; not at the
        measured cost, which for a rare stream joined with a busy one is most of the join's state
        an element: one row a run).  While another stream's backlog is priced at a guess (nothing
        its synopses held was measured), the first slice is ``FEW`` rows: it lets that backlog
        in for its span, measured before the rest is judged — a join fed all of one stream
        before the other, its backlog priced at ``PER_HELD``, took in a second of both at once
        and passed a 250 KB limit by 5.3% (its elements held 73 B each, not 57).  So is the
        batch's own stream's, its first elements priced at a guess (``guessed``).
        """
        if batch.num_rows <= 1:
            return 1, 1  # (never sliced: no need to measure the holders, at every one-row push)
        usage = self._usage()
        per_row = nbytes(batch) / batch.num_rows
        per_row *= 1 + usage.holders.get(stream.lower(), 0)
        step = max(1, int(self.limit * SLICE / max(per_row, 1.0)))
        room = self.limit * RAISE - usage.total
        probe = guessed(self.streams, stream.lower(), usage, room, (batch.num_rows, nbytes(batch)))
        return (min(step, FEW) if probe else step), step

    def _will(self, usage: Usage) -> Will:
        """Per stream with elements waiting at its source: the bytes they take now, and what they
        will hold once past it — their own bytes, and for as many as its windows will hold at once
        beyond what they hold now (``waiting.entering``: a backlog denser than the window, or
        filling an empty one), what each synopsis's element costs more.  (Each entering element
        pushing an older one out: counted at what it will hold with nothing leaving, a review
        measured a join of 2 s batches losing 18% of its pairs under a limit above its exact need;
        at its own bytes, a join fed all of one stream before the other passed its limit by 29%.)
        """
        out: dict[str, tuple[float, float]] = {}
        for s, (n, b) in usage.queued.items():
            if n and s in self.streams:
                st = self.streams[s]
                row, src = b / n, usage.sources.get(s)
                # (a few waiting, or no timestamps to go by: all of them while its windows fill —
                # a backlog's timestamps read at each one-row push under a limit doubled its cost)
                ts = src.waiting_ts() if src is not None and n > FEW and not self._far(st, n, b, usage) else None
                # what its windows hold: kept within the horizon before the first waiting (they lag by it)
                stamps = st.held_stamps(int(ts[0])) if ts is not None and len(ts) else None
                held = st.live() - n if stamps is None else kept_in(stamps)
                cost = held_cost(row, usage.holders.get(s, 0), held, usage.by_stream.get(s, 0.0) - b)
                if ts is None or stamps is None:
                    more = n if st.filling() else 0
                else:
                    more = entering(ts, st.horizon, max(held, 0), stamps)
                out[s] = (b, b + more * max(cost - row, 0.0))
        return out

    def _far(self, st: StreamShedding, n: int, b: float, usage: Usage) -> bool:
        """Whether the limit is far even were every one of ``n`` waiting elements (``b`` bytes)
        to stay in the windows at the most a held one may cost: then they are priced by the rule
        for a few (``FEW``), without reading their timestamps (read at every push while a backlog
        grew under a limit it never neared, they made a push's cost grow with the backlog: 0.77 s
        → 25 s for 4,000 pushes).
        """
        row = b / n
        most = max(cost_held(st, row, usage), held_cost(row, usage.holders.get(st.name.lower(), 0), 0, 0))
        return usage.total + n * max(most - row, 0.0) <= self.limit * RAISE

    def _holders_text(self, u: Usage) -> str:
        """Whose memory it is: the streams holding the most, and why one cannot be sampled."""
        locked = self.locked()
        top = sorted(u.by_stream.items(), key=lambda kv: -kv[1])[:3]
        parts = [
            f"{self.streams[s].name if s in self.streams else s} {b / max(u.total, 1):.0%}"
            + (f" (not sampled: {locked[s]})" if s in locked else "")
            for s, b in top
            if b > 0
        ]
        return "held by " + ", ".join(parts) if parts else "held by no stream's state (queues)"

    def _drop(self, st: StreamShedding, batch: pa.Table, mask: np.ndarray, reason: str) -> None:
        if self.on_shed and mask.any():
            gone = batch.filter(pa.array(mask))
            for fn in self.on_shed:
                try:
                    fn(st.name, gone, reason)
                except Exception as e:  # the callback's failure is reported, never the engine's
                    self._event(
                        "callback", f"on_shed callback {fn!r} failed on {gone.num_rows} {st.name} elements: {e!r}"
                    )

    # -- adjustment ----------------------------------------------------------------------
    def _usage(self) -> Usage:
        assert self.measure is not None, "the engine sets measure"
        u = self.measure()
        self.note_peak(u.total)
        observe(self.streams, u)
        return u

    def note_peak(self, total: int, in_run: bool = False) -> None:
        """Memory measured (``in_run``: after a step of a run): ``peak`` and ``peak_in_runs``."""
        if not in_run:
            self.peak = max(self.peak, total)
        self.peak_in_runs = max(self.peak_in_runs, self.peak, total)

    def _event(self, action: str, detail: str) -> None:
        self.events.append(Event(self.adjustments, action, detail))

    def at_risk(self) -> bool:
        """Memory above the band where the rates are chosen again (as last measured)."""
        return self.last > self.limit * REALLOCATE

    def adjust(self) -> None:
        """After the engine ran: choose the sampling rates again if memory calls for it."""
        self.adjustments += 1
        shed_since, self._shed_since = self._shed_since, False
        u = self._usage()
        self.last = u.total
        # what the windows must leave room for: the batches of recent admissions (``transient``)
        # besides the plan's state, and what waits at the sources now — else memory settles
        # under the band while every such batch is shed
        if self._transient is not None:
            self._recent.append(self._transient)
        self._transient = None
        now, will = waiting_totals(self._will(u))
        transient = max(max(self._recent, default=0.0), will)
        base = u.total - now  # the plan's state
        self._bases.append(base)
        outside = u.total - sum(u.by_stream.values())  # bytes no stream's elements hold (queues of relations…)
        self._fair.update(self._wants(u), self.limit * CAP - outside)
        demand = base + transient
        lowered = any(st.rate < 1.0 for st in self.streams.values())
        for s in self.locked():  # never sampled: a stream lowered before an unsafe reader came goes back to 1
            if s in self.streams and self.streams[s].rate < 1.0:
                self._event("raise", f"{self.streams[s].name} back to rate 1: {self.locked()[s]}")
                self.streams[s].rate = 1.0
        # compression (§5.2.1) before sampling: a DISTINCT past its share, windows, other DISTINCTs
        past = set(self._fair.over(self._fair.share, u.by_stream))
        if self._blooms(u, past) or self._compress(u, base, transient) or self._blooms(u, None):
            return
        if u.total <= self.limit * REALLOCATE:
            # an episode ends when memory is back under the band (shedding: and nothing shed since the
            # last run — a culprit held at its share sheds just under it, one episode)
            self._shedding = self._shedding and shed_since
            self._over = False
            # (grown only where the batches would still fit under the band after it)
            fits = max(self._bases) * GROW + transient < self.limit * REALLOCATE
            self._grow_filters(u)  # (whenever the target leaves room beside a push's slice)
            if u.total < self.limit * RAISE and not lowered and fits:
                self._grow(u, demand)
            if not (lowered and u.total < self.limit * RAISE):
                return
        locked = self.locked()
        # streams holding memory, and lowered ones (one that holds nothing now may be raised freely)
        small = NEGLIGIBLE * self.limit
        for s, st in self.streams.items():  # sampling a stream that holds next to nothing frees nothing
            whole = u.by_stream.get(s, 0.0) / max(st.held_rate(), 1e-3)  # what it would hold unsampled
            if st.rate < 1.0 and whole < small:
                self._event("raise", f"{st.name} back to rate 1: unsampled it would hold about {whole:.0f} B")
                st.rate = 1.0
        live, rates = scaling(self.streams, u, small, set(locked))
        fixed = u.total - sum(live.values())
        demands = [
            Demand(r.limits.weight, r.streams, min(1.0, r.limits.min_precision / _static_recall(r.static)))
            for r in self.readers.values()
        ]
        a = allocate(live, rates, fixed, self.limit * TARGET, demands, frozenset(locked) & set(live))
        share = self._fair.shares(self.limit * TARGET - outside)
        over = self._fair.over(share, u.by_stream) if not a.feasible else []
        culprits = [s for s in over if s in locked and not math.isfinite(self.streams[s].horizon)]
        if culprits:  # sampling the others frees only their own: each kept at its share
            floors = self._fair.floors(share, [s for s in live if s not in locked])
            a = allocate(live, rates, fixed, self.limit * TARGET, demands, frozenset(locked) & set(live), floors)
            if not self._culprit_said:
                self._event("culprit", self._culprits_text(culprits, share, u))
        self._culprit_said = bool(culprits)
        changed: list[tuple[str, float, float]] = []
        for s, p in a.rates.items():
            old = self.streams[s].rate
            if s in locked:
                continue
            new = min(1.0, p, old * 2) if p > old else p  # raise at most ×2 per adjustment
            if abs(new - old) > 1e-3:
                self.streams[s].rate = new
                changed.append((self.streams[s].name, old, new))
        if changed:
            raised = all(new > old for _, old, new in changed)
            where = "above" if u.total > self.limit * REALLOCATE else "below"
            self._event(
                "raise" if raised else "sample",
                f"memory {u.total} B {where} the limit's band ({self.limit} B): rates "
                + ", ".join(f"{n} {old:.3g}→{new:.3g}" for n, old, new in changed)
                + ("" if a.feasible else " (the limit cannot be met with every query's least precision)"),
            )

    def _wants(self, u: Usage) -> dict[str, float]:
        """What each stream's elements would hold had none been dropped (``shares``): a stream
        with windows, its elements offered within its horizon at what each holds (projected while
        they fill); one whose state is not bounded by time (groups, ``[Rows N]``, none), what it
        holds over the fraction of its elements kept; nothing for a stream nobody reads, and what
        it holds for one offered nothing since the last adjustment.
        """
        read = {s for r in self.readers.values() for s in r.streams}
        out: dict[str, float] = {}
        for s, st in self.streams.items():
            held = u.by_stream.get(s, 0.0)
            fresh = st.offered > self._fair.seen.get(s, 0)
            if s not in read:
                out[s] = 0.0
            elif not fresh:  # (offered nothing since: what it still holds, no more)
                out[s] = held
            elif math.isfinite(st.horizon):
                out[s] = st.wanted() * cost_held(st, st.row_bytes, u)
            else:
                out[s] = held / max(st.held_rate(), 1e-3)
            self._fair.seen[s] = st.offered
        return out

    def _shares_text(self) -> str:
        """The streams' fair shares, when they bind (``shares``)."""
        if not self._fair.tight:
            return ""
        return "; fair shares of the cap (what each stream's elements may hold of it): " + ", ".join(
            f"{self.streams[s].name} {sh:.0f} B" for s, sh in sorted(self._fair.share.items()) if sh > 0
        )

    def _culprits_text(self, culprits: list[str], share: dict[str, float], u: Usage) -> str:
        """Whose memory cannot be sampled and is over its share of the allocator's target: what is
        shed, and why.
        """
        locked = self.locked()
        return (
            f"memory {u.total} B of {self.limit} B: over their share of the allocator's target and not sampled: "
            + ", ".join(
                f"{self.streams[s].name} {u.by_stream.get(s, 0.0):.0f} B of {share[s]:.0f} B ({locked[s]})"
                for s in culprits
            )
            + " — sampling the others would free only their own: they are kept at their shares, and the "
            "culprits' elements shed (an exact-only reader's admitted past the limit)"
        )

    def sample_at_registration(
        self, plan: L.LogicalNode, limits: QueryLimits
    ) -> tuple[L.LogicalNode, tuple[StaticSample, ...]]:
        """Sampling rate reduction at registration (STREAM §5.1.2, ``sluice.approx.static``):
        each ``Sample(a To b)`` of a new query at the rate its window fits in what the limit leaves
        free (``TARGET``), from its stream's measured arrival rate and bytes an element — never
        below ``min_precision`` of ``b`` (so an exact-only query keeps ``b``).
        """
        u = self._usage()
        now = max((st.arrival_last for st in self.streams.values() if st.arrival_last is not None), default=0)
        # what queries given a rate before will hold once their windows have filled
        self._reserved = [r for r in self._reserved if r[2] > now and r[0] in self.readers]
        free = self.limit * TARGET - u.total - sum(b for _, b, _ in self._reserved)
        return choose(plan, self._arrival_need, free, limits.min_precision)

    def _arrival_need(self, stream: str, span: float) -> float | None:
        """Bytes a window of ``span`` ticks over ``stream`` would hold at its measured arrival
        rate, each element's bytes twice (the window and what its query keeps above it); None
        for a stream with no history to estimate from.
        """
        st = self.streams.get(stream)
        if st is None or st.arrival_first is None or st.arrival_last is None or st.arrival_last <= st.arrival_first:
            return None
        return st.arrived / (st.arrival_last - st.arrival_first) * span * 2 * st.row_bytes

    def reduce_windows(self, query: str) -> None:
        """Window reduction at registration (STREAM §5.1.1, static approximation): a new query's
        windows that may shrink start at the size its streams' measured arrival rate and cost per
        element (what one costs now per synopsis holding it, twice: the window and what its query
        keeps above it) say fits in what the limit leaves free (``TARGET``), never below ``At Least``.  A
        stream with no history yet gives no estimate: the window starts whole, and the dynamic
        path (``_compress``) shrinks it if need be.
        """
        u = self._usage()
        free = self.limit * TARGET - u.total
        lowered = {c.stream.lower() for c in self.readers[query].static}
        for op, streams in u.windows:
            if op.queries != {query} or self.readers[query].limits.exact_only or op.unit != "ticks":
                continue  # (a [Rows N] window's need is its N rows: the dynamic path shrinks it)
            if lowered & set(streams):
                continue  # its stream's sample was lowered to fit already (``sample_at_registration``)
            need = self._window_need(op.spec.window.range, streams, u)
            if need is None or need <= free:
                continue
            r0 = op.range_now
            r = op.resize(int(r0 * max(free, 0.0) / need))
            if r != r0:
                self._event(
                    "reduce",
                    f"{query}: window [{op.spec.window.describe()}] starts at {r} ticks: its estimated "
                    f"{need:.0f} B exceed the {max(free, 0):.0f} B the limit leaves free",
                )

    def _window_need(self, span: int, streams: tuple[str, ...], u: Usage) -> float | None:
        """Bytes a window of ``span`` ticks over ``streams`` would hold at their measured arrival
        rate and an element's bytes per synopsis holding it now, twice (the window and what its
        query keeps above it); None for a stream with no history to estimate from.
        """
        need = 0.0
        for s in streams:
            st = self.streams.get(s)
            if st is None or st.first_ts is None or st.last_ts is None or st.last_ts <= st.first_ts:
                return None
            live, held = st.live(), u.by_stream.get(s, 0.0)
            if not (live and held):
                return None
            rate = st.kept / (st.last_ts - st.first_ts)  # elements a tick
            need += rate * span * 2 * held / live / max(1, u.holders.get(s, 1))
        return need

    def _windows(self, u: Usage) -> list[Resizable]:
        """The windows that may shrink, but none serving an exact-only query."""
        return [op for op, _ in u.windows if not (op.queries & self._exact())]

    def _sites(self) -> dict[str, frozenset[str]]:
        return {q: bloom_sites(r.plan) for q, r in self.readers.items()}

    def _exact(self) -> set[str]:
        return {q for q, r in self.readers.items() if r.limits.exact_only}

    def _compress(self, u: Usage, base: float, transient: float) -> bool:
        """Synopsis compression (STREAM §5.2.1): when memory is above the band, every window that
        may shrink is cut by the factor that would bring it to ``TARGET`` of the limit if it all
        scaled with the windows; when the plan's state (``base``) and the batches recent
        admissions asked room for (``transient``) would not fit under ``CAP`` together — their
        elements were shed — by the factor that leaves the batches room under ``ROOM``.  Never
        below ``At Least``.  Whether any window changed.
        """
        factors = []
        if u.total > self.limit * REALLOCATE:
            factors.append(self.limit * TARGET / max(u.total, 1))
        if base + transient > self.limit * CAP:
            factors.append(max(self.limit * ROOM - transient, 0.0) / max(base, 1.0))
        if not factors:
            return False
        changed = shrink(self._windows(u), min(factors))
        if changed:
            self._event(
                "compress",
                f"memory {u.total} B (with room for the batches admitted, {base + transient:.0f} B) above the "
                f"limit's band ({self.limit} B): windows " + ", ".join(changed),
            )
        return bool(changed)

    def _blooms(self, u: Usage, streams: set[str] | None, admitting: bool = False) -> bool:
        """Synopses that may be Bloom filters (over ``streams``) become ones: after a run above the
        band, or at admission when a batch does not fit; sized leaving room for a push's slice.
        """
        if not admitting and u.total <= self.limit * REALLOCATE:
            return False
        excess = u.total + self.limit * (SLICE - TARGET)
        done = compress(u.synopses, self.limit, excess, self._exact(), self._sites(), streams)
        if done:
            self._event("compress", f"memory {u.total} B near the limit ({self.limit} B): " + "; ".join(done))
        return bool(done)

    def _grow_filters(self, u: Usage) -> None:
        """Memory low: a Bloom filter whose FP rate has risen gets a new slice (``synopses.grow``)."""
        done = grow(u.synopses, self.limit, self.limit * (TARGET - SLICE) - u.total)
        if done:
            self._event("grow", f"memory {u.total} B below the limit's band ({self.limit} B): " + "; ".join(done))

    def _grow(self, u: Usage, demand: float) -> None:
        """Shrunk windows grow back (×GROW an adjustment) once memory is low and no stream is sampled."""
        changed = regrow(self._windows(u))
        if changed:
            self._event(
                "grow",
                f"memory {u.total} B (with room for the batches admitted, {demand:.0f} B) below the limit's band "
                f"({self.limit} B): windows " + ", ".join(changed),
            )

    def approximation(self, query: str) -> Approximation:
        r = self.readers[query]
        kept: dict[str, float] = {}
        dropped = 0
        shed: set[str] = set()
        for s in set(r.streams) & set(self.streams):
            st = self.streams[s]
            o0, k0, d0, s0 = r.baseline.get(s, (0, 0, 0, 0))
            offered = st.offered - o0
            kept[s] = (st.kept - k0) / offered if offered else 1.0
            dropped += st.dropped - d0
            if st.shed > s0:
                shed.add(s)
        rates = {s: self.streams[s].rate for s in kept}
        u = self._usage()
        windows, shrunk = shrunk_windows(query, u.windows)
        syn = compressed(query, u.synopses)
        joint = joint_of(self.streams, r.since or {})  # (drops that depend on time)
        precision = estimate(r.plan, kept, windows, syn, joint)  # (a sample lowered at registration: at its node)
        reads = {s: r.streams.count(s) for s in shed if r.streams.count(s) > 1}
        fn_low = None
        if precision is not None and reads:
            low = estimate(r.plan, {s: k ** (1 / reads.get(s, 1)) for s, k in kept.items()}, None, syn)
            fn_low = low.fn if low is not None else None
        return Approximation(rates, kept, dropped, precision, dict(r.unsafe), r.limits, fn_low, shrunk, r.static, syn)
