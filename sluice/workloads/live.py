"""Generators as live sources: feed an engine in event-time order, paced to the wall clock.

``feed(engine, events, unit_seconds=…, speedup=…)`` takes ``(stream, row)`` pairs in timestamp
order (``row[0]`` is the timestamp; relation rows are ``(ts, sign, …)``), pushes them in batches
when the wall clock reaches their time (event time ÷ ``speedup``; ``speedup=inf`` replays as fast
as possible), sends a heartbeat after each batch (everything up to the batch's last timestamp − 1
has arrived) and runs the engine.  It works with either backend (``push``, ``heartbeat``,
``run``).  Adapters turn the workloads into such pairs: ``merge`` (per-stream rows, e.g.
``examples.datacenter``) and ``nexmark_events``.

>>> from sluice.backends.embedded import EmbeddedEngine
>>> eng = EmbeddedEngine()
>>> _ = eng.execute("register stream S (A integer)")
>>> q = eng.register_query("select count(*) from S [Range Unbounded]")
>>> stats = feed(eng, [("S", (t, t)) for t in range(10)], unit_seconds=1.0, speedup=float("inf"), batch=4)
>>> stats.events, stats.batches, q.results()[-1].row
(10, 3, (10,))
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any


@dataclass
class FeedStats:
    events: int = 0
    batches: int = 0
    slept_s: float = 0.0  # time spent waiting for the wall clock to reach event time
    behind_s: float = 0.0  # the most the feed fell behind event time (the engine was slower)


def feed(
    engine: Any,
    events: Iterable[tuple[str, tuple[Any, ...]]],
    *,
    unit_seconds: float,
    speedup: float = 1.0,
    batch: int = 1000,
    heartbeat: bool = True,
    close: bool = True,
    clock: Callable[[], float] = time.perf_counter,
    sleep: Callable[[float], None] = time.sleep,
) -> FeedStats:
    """Push ``events`` into ``engine`` as they fall due; see the module docstring."""
    if speedup <= 0:
        raise ValueError("speedup must be positive")
    stats = FeedStats()
    start_wall: float | None = None
    first_ts: int | None = None
    pending: dict[str, list[tuple[Any, ...]]] = {}
    count = 0
    last_ts: int | None = None

    def flush() -> None:
        nonlocal count
        for name, rows in pending.items():
            engine.push(name, rows)
        pending.clear()
        if heartbeat and last_ts is not None:
            engine.heartbeat(last_ts - 1)
        engine.run()
        stats.batches += 1
        count = 0

    for name, row in events:
        ts = int(row[0])
        if last_ts is not None and ts < last_ts:
            raise ValueError(f"{name}: event at {ts} after {last_ts}; feed wants timestamp order")
        if first_ts is None:
            first_ts, start_wall = ts, clock()
        assert start_wall is not None
        due = start_wall + (ts - first_ts) * unit_seconds / speedup
        now = clock()
        if due > now:
            if pending:  # what is due now goes out before the wait
                flush()
            sleep(due - now)
            stats.slept_s += due - now
        else:
            stats.behind_s = max(stats.behind_s, now - due)
        pending.setdefault(name, []).append(row)
        last_ts = ts
        count += 1
        stats.events += 1
        if count >= batch:
            flush()
    if pending:
        flush()
    if close:
        engine.close()
    return stats


def merge(streams: dict[str, list[tuple[int, tuple[Any, ...]]]]) -> Iterator[tuple[str, tuple[Any, ...]]]:
    """``{name: [(ts, values), …]}`` (each sorted) → ``(name, (ts, *values))`` in timestamp order."""

    def tagged(i: int, name: str, rows: list[tuple[int, tuple[Any, ...]]]) -> Iterator[tuple[Any, ...]]:
        for ts, vals in rows:
            yield ts, i, name, vals

    iters = [tagged(i, name, rows) for i, (name, rows) in enumerate(streams.items())]
    for ts, _, name, vals in heapq.merge(*iters, key=lambda e: (e[0], e[1])):
        yield name, (ts, *vals)


def nexmark_events(count: int, rate: int = 10_000, first: int = 0) -> Iterator[tuple[str, tuple[Any, ...]]]:
    """NEXMark events (Beam's generator) as ``(stream, row)`` pairs, millisecond timestamps."""
    from sluice.workloads.nexmark import NexmarkGenerator, as_rows

    gen = NexmarkGenerator(rate=rate, extras=False)  # as_rows drops them
    for e in gen.events(count, first):
        for name, rows in as_rows(iter([e])).items():
            for r in rows:
                yield name, r


def time_slices(tables: dict[str, Any], step: int) -> Iterator[tuple[int, dict[str, Any]]]:
    """Per-stream Arrow tables, each with a sorted ``ts`` column, cut every ``step`` ticks of event
    time: for each cut, the instant every stream is complete up to (a heartbeat's) and each
    stream's rows since the last cut (a stream with none is left out).  The last cut is the last
    timestamp.
    """
    import numpy as np

    stamps = {s: t.column("ts").to_numpy() for s, t in tables.items()}
    end = max((int(x[-1]) for x in stamps.values() if len(x)), default=0)
    done = dict.fromkeys(tables, 0)
    for cut in range(step - 1, end + step, step):
        parts = {}
        for s, tab in tables.items():
            upto = int(np.searchsorted(stamps[s], cut, side="right"))
            if upto > done[s]:
                parts[s] = tab.slice(done[s], upto - done[s])
                done[s] = upto
        yield min(cut, end), parts
