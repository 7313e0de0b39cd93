"""When a stream's elements were kept: offered and kept per time bucket, for the recall of a join
whose inputs were dropped at different times (STREAM §5.3; design 021, "Drops that depend on
time").

§5.3's model gives a join's output tuple the product of its inputs' kept fractions, as if each
element were kept independently of when it came.  Load shedding is not: a join fed all of one
stream before the other keeps S while T has not come and sheds T's batches while S's backlog
drains, and its pairs — each an S and a T within one window of each other — survive far less
often than the whole-run fractions multiplied (157 KB pushed whole: 0.0507 reported, 0.0184
measured).  So each stream also counts what it was offered and kept per bucket of ``2^shift``
ticks (a quarter to half its largest window), and a join's recall is the pairs kept over the pairs
offered, each pair of buckets weighted by the chance that one element of each is in both windows
at one instant (elements spread evenly in a bucket) — pairs in proportion to the product of the
streams' elements: an equi-join of evenly spread keys.  More than two reads (a 3-way join): the
combinations within one bucket at least the largest window wide, ``Σ_b Π_s kept_s(b) / Σ_b Π_s
offered_s(b)``.

>>> import numpy as np
>>> s, t = Timeline(4), Timeline(4)
>>> s.add(np.arange(16), np.arange(16) < 8)    # S kept in its first half
>>> t.add(np.arange(16), np.arange(16) >= 8)   # T in its second
>>> round(joint([s, t], {}, spans=(4, 4)), 2)  # 10 of 124 pairs kept; 0.5 × 0.5 assumes independence
0.07
>>> joint([s], {}), joint([t], {})
(0.5, 0.5)
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

MAX = 512  # buckets a timeline keeps; past it, each two are merged into one (bounded state)


class Timeline:
    """One stream's offered and kept elements per bucket of ``2^shift`` ticks."""

    def __init__(self, horizon: float) -> None:
        # (a quarter to half its largest window: pairs are counted across buckets, ``joint``)
        self.shift = max(0, math.ceil(math.log2(horizon)) - 2) if math.isfinite(horizon) and horizon > 1 else 0
        self.lo = 0  # the first bucket's index (ts >> shift)
        self.offered = np.zeros(0, np.int64)
        self.kept = np.zeros(0, np.int64)

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Timeline)
            and (self.shift, self.lo) == (other.shift, other.lo)
            and np.array_equal(self.offered, other.offered)
            and np.array_equal(self.kept, other.kept)
        )

    __hash__ = None  # type: ignore[assignment]  # (mutable)

    def __repr__(self) -> str:
        return f"Timeline(buckets of 2^{self.shift} ticks from {self.lo << self.shift}: {len(self.offered)})"

    def _span(self, lo: int, hi: int) -> None:
        """Make room for buckets ``lo..hi`` (coarser while more than ``MAX`` are needed)."""
        if not len(self.offered):
            self.lo = lo
        first, last = min(self.lo, lo), max(self.lo + len(self.offered) - 1, hi)
        while last - first + 1 > MAX:
            self._coarsen()
            lo, hi, first, last = lo >> 1, hi >> 1, first >> 1, last >> 1
        if first < self.lo or last >= self.lo + len(self.offered):
            size = last - first + 1
            offered, kept = np.zeros(size, np.int64), np.zeros(size, np.int64)
            at = self.lo - first
            offered[at : at + len(self.offered)] = self.offered
            kept[at : at + len(self.kept)] = self.kept
            self.lo, self.offered, self.kept = first, offered, kept

    def _coarsen(self) -> None:
        """Merge each two buckets into one (twice as wide)."""
        if self.lo & 1:  # (start on an even bucket so that pairs stay aligned)
            self.lo -= 1
            self.offered = np.concatenate([[0], self.offered])
            self.kept = np.concatenate([[0], self.kept])
        if len(self.offered) & 1:
            self.offered, self.kept = np.append(self.offered, 0), np.append(self.kept, 0)
        self.offered = self.offered.reshape(-1, 2).sum(axis=1)
        self.kept = self.kept.reshape(-1, 2).sum(axis=1)
        self.lo >>= 1
        self.shift += 1

    def add(self, ts: np.ndarray, keep: np.ndarray) -> None:
        """Elements stamped ``ts`` offered, those where ``keep`` kept."""
        if not len(ts):
            return
        if len(ts) <= 4:  # (a one-row push: no arrays made)
            for t, k in zip(ts.tolist(), keep.tolist(), strict=True):
                b = t >> self.shift
                self._span(b, b)
                i = (t >> self.shift) - self.lo  # (the shift may have grown)
                self.offered[i] += 1
                self.kept[i] += bool(k)
            return
        b = np.asarray(ts, np.int64) >> self.shift
        self._span(int(b.min()), int(b.max()))
        b = np.asarray(ts, np.int64) >> self.shift  # (the shift may have grown)
        self.offered += np.bincount(b - self.lo, minlength=len(self.offered))
        self.kept += np.bincount(b - self.lo, weights=keep, minlength=len(self.kept)).astype(np.int64)

    def unkeep(self, ts: np.ndarray) -> None:
        """Kept elements stamped ``ts`` shed since (waiting at the source)."""
        if not len(ts) or not len(self.kept):
            return
        b = np.clip((np.asarray(ts, np.int64) >> self.shift) - self.lo, 0, len(self.kept) - 1)
        self.kept = np.maximum(self.kept - np.bincount(b, minlength=len(self.kept)), 0)

    def at(self, shift: int, since: int | None) -> tuple[int, np.ndarray, np.ndarray]:
        """(first bucket, offered, kept) in buckets of ``2^shift`` ticks (``shift`` ≥ its own),
        only those wholly after tick ``since`` (None: all).
        """
        k = shift - self.shift
        idx = (np.arange(len(self.offered)) + self.lo) >> k
        lo = int(idx[0]) if len(idx) else 0
        offered = np.bincount(idx - lo, weights=self.offered) if len(idx) else np.zeros(0)
        kept = np.bincount(idx - lo, weights=self.kept) if len(idx) else np.zeros(0)
        if since is not None and len(offered):
            cut = min(max((since >> shift) + 1 - lo, 0), len(offered))
            lo, offered, kept = lo + cut, offered[cut:], kept[cut:]
        return lo, offered, kept


def _within(d: np.ndarray, width: float, lo: float, hi: float) -> np.ndarray:
    """For an element anywhere in a bucket and another anywhere in the bucket ``d`` later (both
    ``width`` ticks wide, spread evenly), the chance that the second comes ``lo``..``hi`` ticks
    after the first: their distance is ``d·width`` plus a triangle on (−width, width).
    """

    def cdf(t: np.ndarray) -> np.ndarray:
        t = np.clip(t, -width, width)
        return np.where(t <= 0, (t + width) ** 2, 2 * width**2 - (width - t) ** 2) / (2 * width**2)

    return cdf(hi - d * width) - cdf(lo - d * width)


def _pairs(parts: list[tuple[int, np.ndarray, np.ndarray]], width: float, lo: float, hi: float) -> float | None:
    """The fraction kept of the pairs (one of each stream, the second ``lo``..``hi`` ticks after
    the first — both in a window at one instant), over buckets of ``width`` ticks.
    """
    first = min(p[0] for p in parts)
    size = max(p[0] + len(p[1]) for p in parts) - first
    grid = []
    for start, o, k in parts:
        at = start - first
        go, gk = np.zeros(size), np.zeros(size)
        go[at : at + len(o)], gk[at : at + len(k)] = o, k
        grid.append((go, gk))
    (oa, ka), (ob, kb) = grid
    # lag d: Σ_b a(b)·b(b + d), for d in −(size − 1)..size − 1
    lags = np.arange(-(size - 1), size)
    w = _within(lags.astype(float), width, lo, hi)
    offered = float(w @ np.correlate(ob, oa, mode="full"))
    kept = float(w @ np.correlate(kb, ka, mode="full"))
    return kept / offered if offered > 0 else None


def joint(
    lines: Sequence[Timeline], since: Mapping[int, int | None], shift: int = 0, spans: Sequence[float] = ()
) -> float | None:
    """The fraction kept of the combinations one element of each timeline's stream forms (a
    stream read twice: its timeline twice); ``since[i]``: count line ``i`` only after that tick.
    Two lines with ``spans`` (each read's window, ticks): the pairs whose second element comes
    ``−spans[1]..spans[0]`` ticks after the first — in both windows at one instant — over the
    finest buckets both keep.  Otherwise: within one bucket of at least ``2^shift`` ticks.
    ``None``: none offered; 1 for no lines.
    """
    if not lines:
        return 1.0
    if len(lines) == 2 and len(spans) == 2:
        fine = max(line.shift for line in lines)
        parts = [line.at(fine, since.get(i)) for i, line in enumerate(lines)]
        if not all(len(p[1]) for p in parts):
            return None
        return _pairs(parts, float(2**fine), -spans[1], spans[0])
    shift = max(shift, *(line.shift for line in lines))
    parts = [line.at(shift, since.get(i)) for i, line in enumerate(lines)]
    lo = max(p[0] for p in parts)
    hi = min(p[0] + len(p[1]) for p in parts)
    if hi <= lo:
        return None
    offered = np.ones(hi - lo)
    kept = np.ones(hi - lo)
    for first, o, k in parts:
        offered *= o[lo - first : hi - first]
        kept *= k[lo - first : hi - first]
    total = float(offered.sum())
    return float(kept.sum()) / total if total > 0 else None
