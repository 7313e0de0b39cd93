"""Elements waiting at the sources: what they will hold once past them, and load shedding from
the queues where they wait (STREAM §5.2.2; design 021, "Shedding from the queues").

An element admitted to a source waits there — buffered, or in the source's output queue until
every operator reading it has — holding its own bytes; a join waiting for its other input keeps
a whole batch there.  Once past, it holds what a synopsis's element costs (its row, its timestamp
and position, an index entry) for as long as a window keeps it.  Counting a backlog at its own
bytes let a join fed all of one stream before the other pass its limit by 29% (design 021, "A join
fed one stream's big batch before the other's"): its window, empty until then, filled at the
backlog's density while most of the backlog still waited.

>>> import numpy as np
>>> entering(np.arange(0, 3000, 1), 1001.0, 0)  # a dense backlog: a window's range of it at once
1001
>>> entering(np.arange(0, 3000, 1), 1001.0, 1001)  # a full window: each pushes an older one out
2
>>> entering(np.arange(0, 3000, 100), 1001.0, 30)  # sparser than what it holds
1
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Protocol

import numpy as np
import pyarrow as pa

# bytes the synopses add to an element they hold (its timestamp and queue position, an index
# entry) before one was measured: a window join's measured 57-107 B an element of 25 B
PER_HELD = 32
# elements waiting at a source below which what they will hold is not traced (``_will``), and a
# probe's size (``slice_rows``)
FEW = 64


class Waiting(Protocol):
    """A stream's source as the manager sheds from it (``Source``)."""

    def waiting(self) -> tuple[int, int]: ...

    def droppable(self) -> int: ...

    def waiting_ts(self) -> np.ndarray: ...

    def earliest_waiting(self) -> int | None: ...

    def drop_waiting(self, keep: Callable[[int], np.ndarray]) -> pa.Table: ...


def held_cost(row_bytes: float, holders: int, live: float, held: float) -> float:
    """What an element holds once past its source: what each of the ``live`` elements the
    synopses hold costs now (``held`` bytes), at least its own bytes once per synopsis holding
    it — and ``PER_HELD`` more before anything was measured (once: per synopsis, a join's two
    holders priced at 114 B an element that holds ~75 B cut its windows early for good, 26.7%
    → 19.1% of the pairs on ``benchmarks/window_compression.py``) — and only its own bytes (its
    queue's, while it waits) when no synopsis holds the stream's elements.
    """
    if not holders:
        return row_bytes
    if live > 0 and held > 0:
        return max(row_bytes * holders, held / live)
    return row_bytes * holders + PER_HELD


def entering(
    ts: np.ndarray,
    horizon: float,
    held: int,
    stamps: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
) -> int:
    """How many elements more than the ``held`` its windows hold now a stream's windows will hold
    at once after its waiting elements (timestamps ``ts``, sorted) enter them: the most of them
    within one horizon, or — while the held ones still leave, each a horizon after its stamp —
    those entered so far beside the held ones left.  ``stamps``: the held ones' batches, each
    one's first and last stamp and its elements, taken as spread evenly between them
    (``StreamShedding.held_stamps``); without, they are taken as spread evenly over the horizon
    before the first waiting one.  (Spread so, where shedding had left them in its last half,
    half of them looked gone before they were: 1.012× a 120 KB limit, a join fed 500 ms of each
    stream in turn.  Each batch's leaving at its last stamp, a window filled by one batch looked
    full until the backlog's end: a thousand more held where one was.)  All of them when no
    window bounds the stream (``inf``).
    """
    n = len(ts)
    if not n:
        return 0
    if not math.isfinite(horizon):
        return n
    ends = np.searchsorted(ts, ts + horizon, side="left")
    peak = float((ends - np.arange(n)).max())  # the densest horizon of the backlog
    first = int(ends[0])
    if held and first:
        if stamps is None:
            left = held * np.clip(1.0 - (ts[:first] - ts[0]) / horizon, 0.0, 1.0)
        else:  # (at ts[i], those stamped after ts[i] − horizon are still in the windows)
            left = _left((ts[:first] - horizon).astype(np.float64), *stamps)
        peak = max(peak, float((left + np.arange(1, first + 1)).max()))
    return max(math.ceil(peak - held), 0)


def _left(x: np.ndarray, first: np.ndarray, last: np.ndarray, count: np.ndarray) -> np.ndarray:
    """At each ``x``, how many of the batches' elements are stamped after it: ``count[r]`` spread
    evenly over the integer stamps ``first[r]..last[r]``, so batch r has all of them after
    ``x ≤ first − 1``, none after ``x ≥ last`` and ``(last − x) / (last − first + 1)`` of them
    between — summed over the batches with prefix sums (sorted by each end), not batch by batch.
    """
    a = first - 1.0
    w = last - a

    def past(ends: np.ndarray, v: np.ndarray) -> np.ndarray:  # Σ v over the batches whose ``ends`` ≤ x
        order = np.argsort(ends, kind="stable")
        pre = np.concatenate([[0.0], np.cumsum(v[order])])
        return pre[np.searchsorted(ends[order], x, side="right")]

    def linear(ends: np.ndarray) -> np.ndarray:  # Σ count · (last − x) / w over those batches
        return past(ends, count * last / w) - x * past(ends, count / w)

    # all of each batch, less all of those past ``a``, plus their linear part until past ``last``
    return float(count.sum()) - past(a, count) + linear(a) - linear(last)


def waiting_totals(will: dict[str, tuple[float, float]]) -> tuple[float, float]:
    """The elements waiting at the sources: the bytes they take now, and what they will add
    once past them (``ResourceManager._will``, summed).
    """
    return sum(b for b, _ in will.values()), sum(w for _, w in will.values())


def shed_waiting(sources: dict[str, Waiting], share: dict[str, float], rng: np.random.Generator) -> dict[str, pa.Table]:
    """Load shedding from the queues: of each stream's waiting elements, a uniform ``share[s]``
    dropped (each independently: no part of a backlog is favoured).  What was dropped, per stream.
    """
    out: dict[str, pa.Table] = {}
    for s, p in share.items():
        if p > 0 and s in sources:

            def keep(n: int, p: float = p) -> np.ndarray:
                return rng.random(n) >= p

            gone = sources[s].drop_waiting(keep)
            if gone.num_rows:
                out[s] = gone
    return out
