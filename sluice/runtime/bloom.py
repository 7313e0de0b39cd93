"""A Bloom filter over rows, for synopsis compression (STREAM §5.2.1: "using Bloom filters [4]
for duplicate elimination").

``m`` bits, ``k`` positions per value by double hashing (Kirsch & Mitzenmacher: position
``h1 + i·h2 mod m``) of one 64-bit hash per value, computed column by column (pandas' hashing:
numbers mixed as 64-bit words, text by SipHash under a fixed key), so it is the same in every
process (a snapshot taken on one Spark executor is read on another) and equal for values DISTINCT
equates (NULLs alike, ``-0.0`` and ``0.0``).

A filter never forgets a value it was given (no false negatives); it may report a value it was
never given as present, with probability about ``fill^k`` (``fill``: the fraction of bits set) —
for duplicate elimination, a new value taken for a duplicate and lost (a false negative of the
answer, never a false positive).

:meth:`BloomFilter.add_new` judges a batch's values as one-at-a-time insertion would, in their
order, vectorised: a value is "seen" when each of its positions was set before the batch or by
an earlier value of it — so the answer does not depend on where batches are cut.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from sluice.datatypes import DataType, arrow_type
from sluice.runtime.keys import least
from sluice.runtime.operators.base import Part

HASH_KEY = "sluice-bloom-v1."  # SipHash's 16-byte key: fixed, so every process hashes alike
MAX_HASHES = 8


NULL_HASH = np.uint64(0x9E3779B97F4A7C15)  # a NULL's hash, in any column
MIX = np.uint64(0x100000001B3)  # combines the columns' hashes (FNV's prime)


def _column_hash(c: pa.Array) -> np.ndarray:
    """A deterministic 64-bit hash per value of one column, equal for values DISTINCT equates
    (NULLs alike; ``-0.0`` and ``0.0``; NaNs alike).
    """
    t = c.type
    if pa.types.is_null(t):
        return np.full(len(c), NULL_HASH, dtype=np.uint64)
    if pa.types.is_floating(t):
        v = c.cast(pa.float64()).to_numpy(zero_copy_only=False)
        v = np.where(v == 0.0, 0.0, v)  # (NULLs come out as NaN: masked below)
        v = np.where(np.isnan(v), np.nan, v)
    elif pa.types.is_integer(t) or pa.types.is_boolean(t):
        v = pc.fill_null(c.cast(pa.int64()), 0).to_numpy(zero_copy_only=False)
    elif pa.types.is_string(t) or pa.types.is_large_string(t):
        v = pc.fill_null(c, "").to_numpy(zero_copy_only=False).astype(object)
    else:  # (no other type reaches a DISTINCT today: by its text)
        v = np.array(["" if x is None else repr(x) for x in c.to_pylist()], dtype=object)
    h = np.asarray(pd.util.hash_array(v, hash_key=HASH_KEY, categorize=False), dtype=np.uint64)
    if c.null_count:
        h = np.where(pc.is_null(c).to_numpy(zero_copy_only=False), NULL_HASH, h)
    return h


def hashes(cols: Sequence[pa.Array | pa.ChunkedArray]) -> np.ndarray:
    """One deterministic 64-bit hash per row of ``cols`` (the values' columns, Arrow)."""
    out: np.ndarray | None = None
    for c in cols:
        h = _column_hash(c.combine_chunks() if isinstance(c, pa.ChunkedArray) else c)
        with np.errstate(over="ignore"):
            out = h if out is None else (out * MIX) ^ h
    return np.empty(0, dtype=np.uint64) if out is None else out


def row_hashes(rows: Sequence[tuple[Any, ...]], types: Sequence[DataType]) -> np.ndarray:
    """:func:`hashes` of rows given as Python tuples of values of ``types`` (an exact synopsis's keys)."""
    return hashes([pa.array([r[i] for r in rows], arrow_type(t)) for i, t in enumerate(types)])


def hash_count(bits: int, values: float) -> int:
    """The number of positions per value that gives ``values`` values in ``bits`` bits the
    fewest false positives (``ln 2 · m / n``), between 1 and ``MAX_HASHES``.
    """
    return max(1, min(MAX_HASHES, round(math.log(2) * bits / max(values, 1.0))))


@dataclass(frozen=True, slots=True)
class Bloom:
    """What a compressed synopsis's filter is now, as reports read it (on Spark: summed over the
    keys that compressed theirs).
    """

    nbytes: int  # the filter's size
    hashes: int  # positions per value (the most over keys)
    values: int  # values it emitted (the exact synopsis's before it took over included)
    fp_rate: float  # the probability a new value is taken for a seen one now (the most over keys)
    lost: float  # new values expected lost (the sum of the FP rates they met)
    keys: int = 1

    @property
    def recall(self) -> float:
        return self.values / (self.values + self.lost) if self.values + self.lost > 0 else 1.0

    def describe(self) -> str:
        on = f" on {self.keys} keys" if self.keys > 1 else ""
        return (
            f"Bloom filter{'s' if self.keys > 1 else ''}{on} {self.nbytes} B, {self.hashes} hashes, "
            f"{self.values} values, FP rate now {self.fp_rate:.2%}, ~{self.lost:.0f} values lost (estimated)"
        )

    @staticmethod
    def total(parts: Iterable[Bloom]) -> Bloom:
        ps = list(parts)
        return Bloom(
            sum(p.nbytes for p in ps),
            max(p.hashes for p in ps),
            sum(p.values for p in ps),
            max(p.fp_rate for p in ps),
            sum(p.lost for p in ps),
            sum(p.keys for p in ps),
        )


class _Slice:
    """``bits`` bits (a multiple of 8), ``k`` positions per value."""

    def __init__(self, bits: int, k: int) -> None:
        self.bits = max(8, bits - bits % 8)
        self.k = k
        self.words = np.zeros(self.bits // 8, dtype=np.uint8)
        self.set_bits = 0

    def fp_rate(self) -> float:
        return float((self.set_bits / self.bits) ** self.k)

    def positions(self, h: np.ndarray) -> np.ndarray:
        h1 = h & np.uint64(0xFFFFFFFF)
        h2 = (h >> np.uint64(32)) | np.uint64(1)
        i = np.arange(self.k, dtype=np.uint64)
        with np.errstate(over="ignore"):  # (wraps modulo 2^64: deterministic)
            return ((h1[:, None] + i[None, :] * h2[:, None]) % np.uint64(self.bits)).astype(np.int64)

    def isset(self, pos: np.ndarray) -> np.ndarray:
        return ((self.words[pos >> 3] >> (pos & 7).astype(np.uint8)) & 1).astype(bool)

    def set(self, fresh: np.ndarray) -> None:
        """Set these positions (distinct, none set yet)."""
        np.bitwise_or.at(self.words, fresh >> 3, np.left_shift(1, fresh & 7).astype(np.uint8))
        self.set_bits += len(fresh)

    def add(self, pos: np.ndarray) -> None:
        """Set these positions (any)."""
        if 8 * len(pos) < len(self.words):  # a few: the new bits counted among them
            self.set(np.unique(pos[~self.isset(pos)]))
            return
        np.bitwise_or.at(self.words, pos >> 3, np.left_shift(1, pos & 7).astype(np.uint8))
        self.set_bits = int(np.bitwise_count(self.words).sum())


class BloomFilter(Part):
    """A scalable Bloom filter (Almeida et al. 2007): slices, values added to the newest; a value
    is present if any slice reports it.  Counts what it was given and what it expects it lost.
    """

    STATE = ("slices", "added", "lost")

    def __init__(self, bits: int, k: int) -> None:
        self.slices = [_Slice(bits, k)]
        self.added = 0  # values judged new and added
        self.lost = 0.0  # the expected number of new values taken for seen ones (sum of the FP rates)

    @property
    def nbytes(self) -> int:
        return sum(int(s.words.nbytes) for s in self.slices)

    @property
    def k(self) -> int:
        return self.slices[-1].k

    def fp_rate(self) -> float:
        """The probability that a value never added is reported present now."""
        return 1.0 - math.prod(1.0 - s.fp_rate() for s in self.slices)

    def describe(self) -> str:
        return f"a Bloom filter of {self.nbytes} B ({self.k} hashes; FP rate now {self.fp_rate():.2%})"

    def grow(self, bits: int, k: int) -> None:
        """A new slice, where values are added from now on (the others keep theirs)."""
        self.slices.append(_Slice(bits, k))

    def contains(self, h: np.ndarray) -> np.ndarray:
        """Whether each value is reported present (added, or a false positive)."""
        out = np.zeros(len(h), dtype=bool)
        for s in self.slices:
            out |= s.isset(s.positions(h)).all(axis=1)
        return out

    def add_known(self, h: np.ndarray) -> None:
        """Add values already answered (an exact synopsis's, when the filter takes over from it;
        EXCEPT's right side): not counted as judged.
        """
        s = self.slices[-1]
        s.add(s.positions(h).reshape(-1))

    def kept(self, n: int) -> None:
        """``n`` values were judged new (``contains`` false) now: count them, and those expected
        lost beside them at the FP rate now (as :meth:`add_new` does).
        """
        self._count(np.full(n, self.fp_rate()))

    def _count(self, rates: np.ndarray) -> None:
        """Values judged new, each at the FP rate it met: counted, with those expected lost beside
        them (``r / (1 − r)`` for each kept at rate ``r``).
        """
        self.lost += float((rates / np.maximum(1.0 - rates, 1e-9)).sum())
        self.added += len(rates)

    def _rate_at(self, fill: np.ndarray) -> np.ndarray:
        """The FP rate a value met when the newest slice held ``fill`` of its bits set (the older
        slices as they are).
        """
        *old, s = self.slices
        older = 1.0 - math.prod(1.0 - o.fp_rate() for o in old)
        return 1.0 - (1.0 - older) * (1.0 - fill**s.k)

    def add_new(self, h: np.ndarray) -> np.ndarray:
        """Add values (their :func:`hashes`, distinct, in the order they arrived); which were new
        (not reported present), judged one at a time in that order.
        """
        n = len(h)
        new = np.zeros(n, dtype=bool)
        if not n:
            return new
        *old, s = self.slices
        stale = np.zeros(n, dtype=bool)  # reported by an older slice: seen, added nowhere
        for o in old:
            stale |= o.isset(o.positions(h)).all(axis=1)
        pos = s.positions(h)
        before = s.isset(pos)
        # a value with every position set before the batch is seen, whatever its place in it; the
        # others are seen when each position unset before was set by an earlier value of the batch
        # (each such position's first setter; a seen value sets no new position)
        maybe = np.flatnonzero(~before.all(axis=1) & ~stale)
        if not len(maybe):
            return new
        unset = ~before[maybe]
        slots = pos[maybe][unset]
        owner = np.repeat(maybe, unset.sum(axis=1))
        fresh, inv = np.unique(slots, return_inverse=True)
        first = least(inv, len(fresh), owner, n)
        late = first[inv] >= owner  # a position no earlier value set: not yet seen
        late_owner = np.zeros(n, dtype=bool)
        late_owner[owner[late]] = True
        new[maybe] = late_owner[maybe]
        # the expected number of new values taken for seen ones: each value judged at the
        # filter's FP rate then (the newest slice's bits set before the batch and by its earlier values)
        grew = np.bincount(first + 1, minlength=n + 1)
        fill = (s.set_bits + np.cumsum(grew)[:-1]) / s.bits
        self._count(self._rate_at(fill[new]))
        s.set(fresh)
        return new

    def add_then_judge(self, added: np.ndarray, at: np.ndarray, asked: np.ndarray, when: np.ndarray) -> np.ndarray:
        """Add values (their :func:`hashes`) at instants ``at``, not judged (EXCEPT's right side), and
        judge others at instants ``when``: each is present if the filter as it was, plus the values
        added at or before its instant, reports it — as adding an instant's values and then asking
        about its others, one instant at a time, would.  Those judged absent are counted as
        :meth:`kept` counts them, each at the FP rate of its instant.
        """
        *old, s = self.slices
        present = np.zeros(len(asked), dtype=bool)
        for o in old:
            present |= o.isset(o.positions(asked)).all(axis=1)
        pos = s.positions(added).reshape(-1)
        unset = ~s.isset(pos)
        fresh, inv = np.unique(pos[unset], return_inverse=True)
        never = np.iinfo(np.int64).max
        # the instant each new position is set
        first = least(inv, len(fresh), np.repeat(np.asarray(at, dtype=np.int64), s.k)[unset], never)
        q = s.positions(asked)
        set_at = np.full(q.shape, never, dtype=np.int64)
        if len(fresh):
            i = np.minimum(np.searchsorted(fresh, q), len(fresh) - 1)
            set_at = np.where(fresh[i] == q, first[i], never)
        w = np.asarray(when, dtype=np.int64)
        present |= (s.isset(q) | (set_at <= w[:, None])).all(axis=1)
        # the newest slice's fill at each kept value's instant: its bits then, and the older slices'
        fill = (s.set_bits + np.searchsorted(np.sort(first), w[~present], side="right")) / s.bits
        self._count(self._rate_at(fill))
        s.set(fresh)
        return present


class Filtered:
    """What an operator whose synopsis may become a filter (``Distinct``, ``SetOp``) shares: the
    filter once there is one, the values its exact synopsis had answered when it took over, a new
    slice when memory frees (``sluice.approx.synopses.grow``), and its report.
    """

    bloom: BloomFilter | None
    exact_values: int
    FILTER_INPUT: ClassVar[int | None] = None  # the input whose rows the filter holds (None: every input)
    WHAT: ClassVar[str]  # how reports name it
    queries: set[str]  # (the operator's)

    def state_bytes(self) -> int:
        raise NotImplementedError

    def compress(self, nbytes: int) -> str:
        """Replace the exact synopsis by a filter of ``nbytes``; what it did."""
        raise NotImplementedError

    @property
    def bloomable(self) -> bool:
        """Its synopsis may be a filter (the input the filter would hold only inserts)."""
        raise NotImplementedError

    @property
    def compressible(self) -> bool:
        """It may be a filter and is not one yet (``sluice.approx.synopses``)."""
        return self.bloomable and self.bloom is None

    def new_filter(self, nbytes: int, values: int) -> BloomFilter:
        """A filter of ``nbytes``, its hashes for twice ``values`` or a 1% FP rate if that is more."""
        bits = 8 * max(1, nbytes)
        self.bloom = BloomFilter(bits, hash_count(bits, max(2.0 * values, bits / 9.6)))
        return self.bloom

    def grow(self, nbytes: int) -> str:
        """Give the filter a new slice of ``nbytes`` (memory freed; its FP rate high); what it did."""
        assert self.bloom is not None
        rate = self.bloom.fp_rate()
        bits = 8 * max(1, nbytes)
        self.bloom.grow(bits, hash_count(bits, bits / 9.6))
        return f"FP rate {rate:.2%}: a slice of {nbytes} B added, {self.bloom.nbytes} B in all"

    def synopsis(self) -> Bloom | None:
        """What compression did to it, as a report reads it (None: exact)."""
        f = self.bloom
        return None if f is None else Bloom(f.nbytes, f.k, self.exact_values + f.added, f.fp_rate(), f.lost)
