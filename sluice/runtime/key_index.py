"""A persistent key index over an arrival-ordered buffer: which positions hold a key, within a
range of positions — so a probe costs its matches (and a binary search), not the range's size.

Hammad et al. §3.4 build "a memory-based hash index on top of the sliding window" so that an
arriving tuple finds its partners without scanning the window.  Here the buffer is a run of
absolute positions ``base … end`` (appended at the end, dropped from the front), each element with
a 64-bit key code (:func:`key_codes`: equal codes ⇔ equal keys; NULL keys are not indexed, they
match nothing).  The index is a few *sorted runs*, each covering a contiguous range of positions:
an append adds a run of its own, and two neighbouring runs merge when the older is no larger than
the newer (a binary counter: ``O(log n)`` runs, each element re-sorted ``O(log n)`` times).  In a
run, elements are sorted by (key, position), stored as one number ``dense(key) · size + local
position``, so the partners of key ``k`` in ``[lo, hi)`` are one slice found by two binary searches.

>>> ix = KeyIndex()
>>> ix.append(np.array([7, 3, 7]), None); ix.append(np.array([3, 7]), None)
>>> q, j = ix.probe(np.array([7, 3]), np.array([0, 1]), np.array([5, 4]))
>>> list(zip(q.tolist(), j.tolist()))
[(0, 0), (0, 2), (0, 4), (1, 1), (1, 3)]
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sluice.datatypes import DataType, TypeKind
from sluice.runtime.keys import as_integer

_EXACT = {TypeKind.INTEGER, TypeKind.BIGINT, TypeKind.TIMESTAMP, TypeKind.FLOAT, TypeKind.BOOLEAN}


def codable(left: DataType, right: DataType) -> bool:
    """Whether equal keys of these types have equal 64-bit codes (numbers and booleans; not strings)."""
    return left.kind in _EXACT and right.kind in _EXACT


def key_codes(col: pa.ChunkedArray | pa.Array, mixed: bool) -> tuple[np.ndarray, np.ndarray | None]:
    """(codes, valid) of a key column: the integer itself, or a float's bits; ``mixed`` (the two
    sides' key types differ: an integer and a double) codes both as the integers they equal, a
    double with no equal integer as NULL (``sluice.runtime.keys``: compared exactly, as SQL does);
    ``valid`` is None when no key is NULL.
    """
    if mixed:
        col = as_integer(col) if pa.types.is_floating(col.type) else col.cast(pa.int64())
    valid = None
    if col.null_count:
        valid = np.asarray(pc.is_valid(col).to_numpy(zero_copy_only=False), bool)
        col = pc.fill_null(col, pa.scalar(0, col.type) if col.type != pa.bool_() else False)
    arr = col.to_numpy(zero_copy_only=False)
    if arr.dtype == np.float64:
        return (arr + 0.0).view(np.int64), valid  # + 0.0: one zero (−0.0 + 0.0 is 0.0)
    return arr.astype(np.int64, copy=False), valid


@dataclass(slots=True)
class _Run:
    lo: int  # absolute positions lo … hi
    hi: int
    uniq: np.ndarray  # its distinct codes, sorted
    comb: np.ndarray  # dense(code) · (hi − lo) + (position − lo), sorted

    @property
    def size(self) -> int:
        return self.hi - self.lo


def _sorted_run(lo: int, hi: int, codes: np.ndarray, pos: np.ndarray) -> _Run:
    """A run from its codes sorted with their local positions ascending within each code."""
    first = np.empty(len(codes), bool)
    first[:1] = True
    np.not_equal(codes[1:], codes[:-1], out=first[1:])
    dense = np.cumsum(first) - 1
    return _Run(lo, hi, codes[first], dense * (hi - lo) + pos)


def _decode(r: _Run) -> tuple[np.ndarray, np.ndarray]:
    """A run's (code, absolute position) pairs in its order."""
    d, pos = np.divmod(r.comb, r.size)
    return r.uniq[d], pos + r.lo


class KeyIndex:
    """The sorted runs over positions ``base … end`` (see the module docstring).  It keeps no
    per-element copy of the codes: the runs hold them, and a probe's own codes come from its caller.
    """

    def __init__(self, base: int = 0) -> None:
        self.base = self.end = base
        self.runs: list[_Run] = []

    def append(self, codes: np.ndarray, valid: np.ndarray | None) -> None:
        """The codes of positions ``end …`` (``valid``: which keys are not NULL; None: all)."""
        lo, n = self.end, len(codes)
        if not n:
            return
        self.end += n
        pos = np.arange(n, dtype=np.int64) if valid is None else np.flatnonzero(valid).astype(np.int64)
        c = codes.astype(np.int64, copy=False)[pos]
        order = np.argsort(c, kind="stable")  # stable: positions ascend within a code
        self.runs.append(_sorted_run(lo, lo + n, c[order], pos[order]))
        while len(self.runs) > 1 and self.runs[-2].size <= self.runs[-1].size:
            b = self.runs.pop()
            self.runs.append(self._merge(self.runs.pop(), b))

    def drop_before(self, base: int) -> None:
        """Forget positions before ``base``: runs wholly before it go, and the oldest run is rebuilt
        without them once they are more than a quarter of it (the oldest run is the largest and merges
        least often; a linear filter of its sorted entries, so amortised O(1) per element).
        """
        self.base = max(self.base, min(base, self.end))
        self.runs = [r for r in self.runs if r.hi > self.base]
        if self.runs and 4 * (self.base - self.runs[0].lo) > self.runs[0].size:
            r = self.runs[0]
            c, pos = _decode(r)
            keep = pos >= self.base
            self.runs[0] = _sorted_run(self.base, r.hi, c[keep], pos[keep] - self.base)

    def _merge(self, a: _Run, b: _Run) -> _Run:
        """Two neighbouring runs as one, without what was dropped: a merge of two sorted sequences
        (the stable sort finds the two runs and merges them in linear time).
        """
        lo = max(a.lo, self.base)
        ca, pa_ = _decode(a)
        cb, pb = _decode(b)
        keep = pa_ >= lo
        c, pos = np.concatenate([ca[keep], cb]), np.concatenate([pa_[keep], pb])
        order = np.argsort(c, kind="stable")  # within a code: a's positions, then b's, ascending
        return _sorted_run(lo, b.hi, c[order], pos[order] - lo)

    def probe(self, codes: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(query, position) pairs, ordered so, with ``codes[query]`` the code at ``position`` and
        ``lo[query] ≤ position < hi[query]``.
        """
        qs: list[np.ndarray] = []
        js: list[np.ndarray] = []
        if not len(codes):
            return np.empty(0, np.int64), np.empty(0, np.int64)
        lo_min, hi_max = max(int(lo.min()), self.base), int(hi.max())
        lo = np.maximum(lo, self.base)  # a run may still hold positions dropped since it was built
        # binary searches for keys in ascending order are several times faster (locality): search
        # in code order, report in query order
        by_code = np.argsort(codes, kind="stable")
        codes, lo, hi = codes[by_code], lo[by_code], hi[by_code]
        for r in self.runs:
            if r.hi <= lo_min or r.lo >= hi_max or not len(r.uniq):
                continue
            a = np.maximum(lo, r.lo) - r.lo
            b = np.minimum(hi, r.hi) - r.lo
            sel = np.flatnonzero(b > a)
            if not len(sel):
                continue
            c = codes[sel]
            d = np.searchsorted(r.uniq, c)
            hit = d < len(r.uniq)
            hit[hit] = r.uniq[d[hit]] == c[hit]
            sel, d = sel[hit], d[hit]
            base = d * r.size
            s = np.searchsorted(r.comb, base + a[sel])
            e = np.searchsorted(r.comb, base + b[sel])
            n = e - s
            total = int(n.sum())
            if not total:
                continue
            q = np.repeat(sel, n)
            k = np.arange(total, dtype=np.int64) + np.repeat(s - (np.cumsum(n) - n), n)
            qs.append(q)
            js.append(r.comb[k] % r.size + r.lo)
        if not qs:
            return np.empty(0, np.int64), np.empty(0, np.int64)
        q, j = by_code[np.concatenate(qs)], np.concatenate(js)
        order = np.argsort(q, kind="stable")  # runs are in position order: j ascends within a query
        return q[order], j[order]

    @property
    def nbytes(self) -> int:
        return sum(r.uniq.nbytes + r.comb.nbytes for r in self.runs)
