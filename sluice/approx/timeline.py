"""When a stream's elements were kept: offered and kept per time bucket, for the recall of a join
whose inputs were dropped at different times (STREAM §5.3; design 021, "Drops that depend on
time").

§5.3's model gives a join's output tuple the product of its inputs' kept fractions, as if each
element were kept independently of when it came.  Load shedding is not: a join fed all of one
stream before the other keeps S while T has not come and sheds T's batches while S's backlog
drains, and its pairs — each an S and a T within one window of each other — survive far less
often than the whole-run fractions multiplied (157 KB pushed whole: 0.0495 reported where the
kept elements formed 0.0174 of the pairs).  So each stream also counts what it was offered and
kept per bucket of ``2^shift`` ticks (as fine as ``MAX`` buckets over what it has seen allow, up
to a quarter of its largest window), and a join's recall is the pairs
kept over the pairs offered, each pair of buckets weighted by the chance that one element of each
is in both windows at one instant (elements spread evenly in a bucket) — pairs in proportion to
the product of the streams' elements: an equi-join of evenly spread keys.  A join of more than
two reads is left to the product.

>>> import numpy as np
>>> s, t = Timeline(), Timeline()
>>> s.add(np.arange(16), np.arange(16) < 8)    # S kept in its first half
>>> t.add(np.arange(16), np.arange(16) >= 8)   # T in its second
>>> round(joint([s, t], {}, spans=(4, 4)), 2)  # [Range 3] each: 6 of 100 pairs kept; 0.25 if independent
0.06
>>> joint([s], {}), joint([t], {})
(0.5, 0.5)
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

MAX = 512  # buckets a timeline keeps: past it each two are merged into one, up to ``cap``, then the oldest folded


class Timeline:
    """One stream's offered and kept elements per bucket of ``2^shift`` ticks, the last ``MAX``
    of them; those before, counted but not timed (``old``).
    """

    def __init__(self, cap: int | None = None) -> None:
        # (one tick to begin with, twice as wide each time ``MAX`` are not enough — as fine as the
        # span seen allows: a stream's largest window, read by another query, made a 1 s join's
        # buckets 32 s wide and its recall 4.6× the truth — up to ``2^cap`` ticks; past that the
        # oldest buckets are folded into ``old``: one element a day before made buckets 262 s wide,
        # and a backlog looked admitted at a 15th of its rate, 28% of the pairs lost)
        self.shift = 0
        self.cap = cap
        self.lo = 0  # the first bucket's index (ts >> shift)
        self.offered = np.zeros(0, np.int64)
        self.kept = np.zeros(0, np.int64)
        self.old = (0, 0)  # (offered, kept) before the first bucket

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Timeline)
            and (self.shift, self.lo, self.old) == (other.shift, other.lo, other.old)
            and np.array_equal(self.offered, other.offered)
            and np.array_equal(self.kept, other.kept)
        )

    __hash__ = None  # type: ignore[assignment]  # (mutable)

    def __repr__(self) -> str:
        return (
            f"Timeline(buckets of 2^{self.shift} ticks from {self.lo << self.shift}: {len(self.offered)}; "
            f"{self.old[0]} before)"
        )

    def _span(self, lo: int, hi: int) -> None:
        """Make room for buckets ``lo..hi`` (coarser while more than ``MAX`` are needed, up to
        ``cap``; past it, those before the last ``MAX`` are folded into ``old``).
        """
        if not len(self.offered):
            self.lo = lo
        first, last = min(self.lo, lo), max(self.lo + len(self.offered) - 1, hi)
        while last - first + 1 > MAX and (self.cap is None or self.shift < self.cap):
            self._coarsen()
            lo, hi, first, last = lo >> 1, hi >> 1, first >> 1, last >> 1
        first = max(first, last - MAX + 1)
        if first > self.lo:
            cut = min(first - self.lo, len(self.offered))
            self.old = (self.old[0] + int(self.offered[:cut].sum()), self.old[1] + int(self.kept[:cut].sum()))
            self.offered, self.kept, self.lo = self.offered[cut:], self.kept[cut:], first
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
                if i < 0:  # (before the buckets kept)
                    self.old = (self.old[0] + 1, self.old[1] + bool(k))
                    continue
                self.offered[i] += 1
                self.kept[i] += bool(k)
            return
        b = np.asarray(ts, np.int64) >> self.shift
        self._span(int(b.min()), int(b.max()))
        b = np.asarray(ts, np.int64) >> self.shift  # (the shift may have grown)
        early = b < self.lo
        if early.any():
            self.old = (self.old[0] + int(early.sum()), self.old[1] + int(np.count_nonzero(keep[early])))
            b, keep = b[~early], keep[~early]
        self.offered += np.bincount(b - self.lo, minlength=len(self.offered))
        self.kept += np.bincount(b - self.lo, weights=keep, minlength=len(self.kept)).astype(np.int64)

    def offered_since(self, t: int) -> int:
        """Elements offered from the bucket of tick ``t`` on (all before the buckets kept too,
        where ``t`` is before them).
        """
        i = (t >> self.shift) - self.lo
        return int(self.offered[max(i, 0) :].sum()) + (self.old[0] if i < 0 else 0)

    def unkeep(self, ts: np.ndarray) -> None:
        """Kept elements stamped ``ts`` shed since (waiting at the source)."""
        if not len(ts) or not len(self.kept):
            return
        b = (np.asarray(ts, np.int64) >> self.shift) - self.lo
        early = int((b < 0).sum())
        if early:
            self.old = (self.old[0], max(self.old[1] - early, 0))
        b = np.clip(b[b >= 0], 0, len(self.kept) - 1)
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
    the first — both in a window at one instant), over buckets of ``width`` ticks.  Every lag at
    which the two timelines meet, and no other (``m + n − 1`` of them, however far apart in time
    they are: over the span between them, hours apart took seconds).
    """
    (sa, oa, ka), (sb, ob, kb) = parts
    d = (sb - sa) + np.arange(-(len(oa) - 1), len(ob))  # the buckets b is after a, lag by lag
    w = _within(d.astype(float), width, lo, hi)
    if not w.any():
        return None
    offered = float(w @ np.correlate(ob, oa, mode="full"))
    kept = float(w @ np.correlate(kb, ka, mode="full"))
    return kept / offered if offered > 0 else None


def joint(lines: Sequence[Timeline], since: Mapping[int, int | None], spans: Sequence[float] = ()) -> float | None:
    """The fraction kept of the combinations one element of each timeline's stream forms (a
    stream read twice: its timeline twice); ``since[i]``: count line ``i`` only after that tick.
    One line: its elements kept.  Two, with ``spans`` (each read's window, ticks: ``N + 1`` for
    ``[Range N]``): the pairs whose second element comes ``−(spans[1] − ½)..spans[0] − ½`` ticks
    after the first — in both windows at one instant — over the finer buckets both keep.
    ``None``: none offered, or more than two reads (a 3-way join's triples counted within one
    bucket were 20% low, and none where drops lined up with the buckets: left to the product);
    1 for no lines.
    """
    if not lines:
        return 1.0
    if len(lines) == 1:
        _, offered, kept = lines[0].at(lines[0].shift, since.get(0))
        total = float(offered.sum())
        return float(kept.sum()) / total if total > 0 else None
    if len(lines) != 2 or len(spans) != 2 or not all(math.isfinite(x) for x in spans):
        return None
    fine = max(line.shift for line in lines)
    parts = [line.at(fine, since.get(i)) for i, line in enumerate(lines)]
    if not all(len(p[1]) for p in parts):
        return None
    return _pairs(parts, float(2**fine), -(spans[1] - 0.5), spans[0] - 0.5)
