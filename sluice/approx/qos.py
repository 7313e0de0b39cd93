"""Latency targets met by choosing the scheduling strategy (issue #13 item 5; Jiang et al. §3–4).

Jiang et al. give the strategies their properties — path capacity the best tuple latency, Chain
(and segment) the least queue memory, Threshold switching between them on memory — and leave
"guarantee user-specified QoS requirements" as future work.  Here a query may state
``max_latency``; after each run the engine measures every query's latency and, unless the user
chose the scheduler, switches: **path capacity** while some query's latency exceeds its target,
**Chain** while memory is at risk (under a memory limit) and latency is not, back to the default
when neither.  Shedding (``manager.py``) stays the last resort: it acts on memory, never on
latency alone.  Every switch, and every target missed, is recorded with the numbers behind it.

**Latency measured.**  An output element with timestamp τ could not leave before the input that
completed τ was pushed, so its latency is the time from the first push whose timestamps reached τ
to its delivery (the engine's clock, ``time.perf_counter`` unless injected).  For an output caused
by a heartbeat alone (a window expiring) this over-states it — a latency target is then met with
margin, never missed unseen.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from sluice.approx.report import Event

KEEP = 100_000  # pushes remembered (oldest forgotten: their outputs are long delivered)
CALM = 5  # quiet runs before returning to the default strategy


@dataclass
class LatencyStats:
    """One query's output latency so far (seconds) against its target."""

    target: float | None = None
    count: int = 0  # output batches measured
    total: float = 0.0
    max: float = 0.0
    missed: int = 0  # batches over the target
    recent_max: float = 0.0  # since the controller last looked

    @property
    def mean(self) -> float:
        return self.total / self.count if self.count else 0.0

    def describe(self) -> str:
        if not self.count:
            return "latency: no output yet"
        s = f"latency: {self.count} output batches, mean {self.mean * 1000:.3g} ms, max {self.max * 1000:.3g} ms"
        if self.target is not None:
            tgt = f"target {self.target * 1000:g} ms"
            s += f"; {tgt} met" if not self.missed else f"; {tgt} missed by {self.missed}"
        return s


@dataclass
class QoS:
    """Arrival times of pushed input, each query's latency, and the strategy it asks for."""

    pinned: bool  # the user chose the scheduler: measure and report, never switch
    clock: Callable[[], float] = time.perf_counter
    kept: str = "scheduler chosen by the user: kept"  # why a late query switches nothing (pinned)
    default: str = "round-robin"
    _ts: deque[int] = field(default_factory=deque)  # the highest timestamp pushed so far, per push
    _wall: deque[float] = field(default_factory=deque)  # … and when
    queries: dict[str, LatencyStats] = field(default_factory=dict)
    events: list[Event] = field(default_factory=list)
    _late: set[str] = field(default_factory=set)  # pinned: the queries in a late episode
    _counted: dict[str, int] = field(default_factory=dict)  # per query: its measurements at the last check
    checks: int = 0
    _calm: int = 0  # consecutive checks without a reason to leave the default

    def pushed(self, max_ts: int) -> None:
        now = self.clock()
        if self._ts and max_ts <= self._ts[-1]:
            return  # nothing new reached: the earlier push stays the one that did
        self._ts.append(max_ts)
        self._wall.append(now)
        if len(self._ts) > KEEP:
            self._ts.popleft()
            self._wall.popleft()

    def add(self, name: str, target: float | None) -> None:
        self.queries[name] = LatencyStats(target)
        self._fresh(name)

    def forget(self, name: str) -> None:
        self.queries.pop(name, None)
        self._fresh(name)

    def __setstate__(self, state: dict[str, Any]) -> None:  # (a meter pickled before episodes lacks them)
        self.__dict__.update({"_late": set(), "_counted": {}} | state)

    def _fresh(self, name: str) -> None:
        """No episode or count carried over to a query of the same name (a review: one removed and
        added again before the next run kept its late episode, and its next on-time run went unseen).
        """
        self._late.discard(name)
        self._counted.pop(name, None)

    def delivered(self, name: str, batch: pa.Table) -> None:
        if batch.num_rows:
            self.answered(name, int(np.max(batch.column(0).to_numpy())))

    def answered(self, name: str, tau: int) -> None:
        """Query ``name`` delivered its answer through instant ``tau`` now: one latency measured."""
        st = self.queries.get(name)
        if st is None or not self._ts:
            return
        now = self.clock()
        i = bisect_left(self._ts, tau)  # the first push reaching τ
        self.waited(name, max(0.0, now - self._wall[min(i, len(self._wall) - 1)]))

    def waited(self, name: str, lat: float) -> None:
        """One latency of query ``name`` measured: ``lat`` seconds."""
        st = self.queries.get(name)
        if st is None:
            return
        st.count += 1
        st.total += lat
        st.max = max(st.max, lat)
        st.recent_max = max(st.recent_max, lat)
        if st.target is not None and lat > st.target:
            st.missed += 1

    def _episodes(self, over: dict[str, str], measured: set[str]) -> None:
        """Late queries with nothing to switch, as episodes: a ``late`` event when a query first
        misses its target, an ``on-target`` one when a measured run meets it again — not one per
        run (a pipeline late at every run of a day would keep an event for each).  The misses
        themselves are counted per query (``LatencyStats.missed``).
        """
        was = self._late
        new = [text for n, text in over.items() if n not in was]
        if new:
            self.events.append(Event(self.checks, "late", f"latency over target: {', '.join(new)} ({self.kept})"))
        again = sorted(n for n in was if n not in over and n in measured and n in self.queries)
        if again:
            self.events.append(Event(self.checks, "on-target", f"latency within target again: {', '.join(again)}"))
        self._late = (was | set(over)) - set(again) - {n for n in was if n not in self.queries}

    def choose(self, current: str, memory_at_risk: bool) -> str | None:
        """After a run: the strategy to switch to (None: keep ``current``)."""
        self.checks += 1
        over = {
            n: f"{n} (max {s.recent_max * 1000:.3g} ms > {s.target * 1000:g} ms)"
            for n, s in self.queries.items()
            if s.target is not None and s.recent_max > s.target
        }
        late = list(over.values())
        measured = {n for n, s in self.queries.items() if s.count > self._counted.get(n, 0)}
        self._counted = {n: s.count for n, s in self.queries.items()}
        for s in self.queries.values():
            s.recent_max = 0.0
        if self.pinned:
            self._episodes(over, measured)
            return None
        self._calm = 0 if late or memory_at_risk else self._calm + 1
        if late:
            want, why = "path-capacity", f"latency over target: {', '.join(late)}"
        elif memory_at_risk:
            want, why = "chain", "memory near the limit, latencies on target"
        elif self._calm >= CALM:  # back only after a few quiet runs: no flapping
            want, why = self.default, f"latencies on target and memory under the limit for {CALM} runs"
        else:
            return None
        if want == current:
            return None
        self.events.append(Event(self.checks, "strategy", f"{current} → {want}: {why}"))
        return want
