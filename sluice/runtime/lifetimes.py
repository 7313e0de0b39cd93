"""A run of a relation's signed elements as lifetimes: each tuple copy an insertion brought, from
the instant it entered to the instant a deletion took it out.

A relation's changes over many instants, read as separate insertions and deletions, make a
bilinear operator pair every change with every change of the other input — also an insertion with a
deletion of a copy that left before it came, pairs whose outputs cancel (issue #11: a join over
derived relations spent its time building them).  Read as lifetimes, a pair contributes exactly
when the two lifetimes overlap: an insertion at the later start and a deletion at the earlier end
(Getta & Vossough §2 read a window the same way: an item is *in* the window from its arrival until
it expires, the negative tuple marking the end).

Copies of one tuple are interchangeable, so a deletion may end any copy held at that instant: the
first deletions end copies held before the run (as many as the relation needs never to go
negative), the rest end the run's own insertions, first in, first out.  A relation that deletes
in the order it inserted (a window over a stream) needs no grouping: its k-th deletion ends the
k-th oldest copy — those held before the run first, then the run's insertions in order.  Each
deletion is checked equal to the copy it ends (here the run's own insertions; the held ones by
``sluice.runtime.synopsis.FifoSynopsis``): a relation that broke the promise is an internal error,
not a wrong answer.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sluice.errors import InternalError
from sluice.runtime.batch import META, NEG_INF, POS_INF, sign_of, ts_of
from sluice.runtime.keys import comparable, row_codes, rows_equal


@dataclass(frozen=True, slots=True)
class Lifetimes:
    """The lifetimes of a run's signed elements ``delta`` (timestamp order).

    ``row``: for each lifetime, the element carrying its tuple; ``start``: the instant it entered
    (``NEG_INF``: held before the run); ``end``: the instant it left (``POS_INF``: held after).
    ``gone``: deletions of copies held before the run; ``kept``: insertions still held after it;
    ``cancelled``: an insertion and a deletion of one tuple at one instant (no lifetime).
    """

    row: np.ndarray
    start: np.ndarray
    end: np.ndarray
    gone: np.ndarray
    kept: np.ndarray
    cancelled: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))

    def __len__(self) -> int:
        return len(self.row)

    def rows(self, delta: pa.Table) -> pa.Table:
        """The elements carrying each lifetime's tuple (``delta`` itself when they are all of it)."""
        n = len(self.row)
        if n == delta.num_rows and (not n or bool((self.row == np.arange(n)).all())):
            return delta
        return delta.take(pa.array(self.row))


def lifetimes(delta: pa.Table, fifo_held: int | None = None) -> Lifetimes:
    """Pair each deletion of ``delta`` with the insertion (or the copy held before) it ends;
    ``fifo_held``: the relation deletes oldest first and held this many copies before the run.
    """
    n = delta.num_rows
    ts, sign = ts_of(delta).astype(np.int64), sign_of(delta)
    everything = np.arange(n, dtype=np.int64)
    none = np.empty(0, np.int64)
    if bool((sign > 0).all()):  # insertions only (a stream's window before anything expires)
        return Lifetimes(everything, ts, np.full(n, POS_INF, np.int64), none, everything)
    if bool((sign < 0).all()):  # deletions only: every one ends a copy held before the run
        return Lifetimes(everything, np.full(n, NEG_INF, np.int64), ts, everything, none)
    if fifo_held is not None:
        found = _in_order(delta, ts, sign, fifo_held)
        if found is None:
            raise InternalError("a relation said to delete oldest first deleted another tuple")
        return found
    group, _, _ = row_codes(delta.columns[META:], n)
    # by tuple, by instant, within an instant insertions first (the relation at an instant's end
    # is what counts: a copy inserted and deleted at one instant lives for none of them, in
    # whichever order they came), then in arrival order
    by_instant = np.lexsort((sign < 0, ts))
    order = by_instant[np.argsort(group[by_instant], kind="stable")]
    # a tuple inserted and deleted at one instant is there before and after it, or neither: those
    # changes cancel (a one-row relation re-emitted unchanged must not end every pairing with it)
    g, tt, ins = group[order], ts[order], sign[order] > 0
    starts = np.r_[True, (g[1:] != g[:-1]) | (tt[1:] != tt[:-1])]
    heads = np.flatnonzero(starts)
    seg = np.cumsum(starts) - 1
    n_in = np.add.reduceat(ins.astype(np.int64), heads)
    cancel = np.minimum(n_in, np.add.reduceat((~ins).astype(np.int64), heads))[seg]
    at = np.arange(len(order)) - heads[seg] - n_in[seg]  # insertions first: < 0, deletions ≥ 0
    dropped = (ins & (at >= -cancel)) | (~ins & (at < cancel))
    cancelled = np.sort(order[dropped])
    order = order[~dropped]
    if not len(order):
        return Lifetimes(none, none, none, none, none, cancelled)
    g = group[order]
    ins = sign[order] > 0
    head = np.flatnonzero(np.r_[True, g[1:] != g[:-1]])  # each tuple's first position
    run = np.cumsum(np.r_[True, g[1:] != g[:-1]]) - 1  # each position's tuple (0 … groups-1)

    def ranks(mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each position's rank among its tuple's ``mask`` positions, and each tuple's count."""
        c = np.cumsum(mask)
        before = c[head] - mask[head]
        counts = np.add.reduceat(mask.astype(np.int64), head)
        return c - 1 - before[run], counts

    ins_rank, n_ins = ranks(ins)
    del_rank, n_del = ranks(~ins)
    # copies held before the run that its deletions end: the deepest the running count goes
    level = np.cumsum(np.where(ins, 1, -1))
    level = level - (level[head] - np.where(ins[head], 1, -1))[run]
    held = np.maximum(0, -np.minimum.reduceat(level, head))
    ends_held = ~ins & (del_rank < held[run])
    # the k-th deletion after those ends the tuple's k-th insertion
    ins_pos = np.flatnonzero(ins)
    first_ins = np.cumsum(np.r_[0, n_ins])[:-1]
    ending = ~ins & ~ends_held
    d_at = np.flatnonzero(ending)
    i_at = ins_pos[first_ins[run[d_at]] + del_rank[d_at] - held[run[d_at]]]
    end = np.full(n, POS_INF, np.int64)
    end[order[i_at]] = ts[order[d_at]]
    ins_el = order[ins]
    gone = np.sort(order[ends_held])
    kept = np.sort(order[ins & (ins_rank >= (n_del - held)[run])])
    row = np.concatenate([ins_el, gone])
    start = np.concatenate([ts[ins_el], np.full(len(gone), NEG_INF, np.int64)])
    stop = np.concatenate([end[ins_el], ts[gone]])
    return Lifetimes(row, start, stop, gone, kept, cancelled)


def _in_order(delta: pa.Table, ts: np.ndarray, sign: np.ndarray, held: int) -> Lifetimes | None:
    """The lifetimes of a relation that deletes oldest first, by position; None if a deletion
    does not end an equal tuple inserted before it (then it does not delete in that order).
    """
    ins = np.flatnonzero(sign > 0)
    dels = np.flatnonzero(sign < 0)
    g = min(len(dels), held)
    gone, ending = dels[:g], dels[g:]
    k = len(ending)
    # (within an instant a window emits its deletions first: a copy may come and go at one
    # instant, after its deletion — an empty lifetime)
    if k > len(ins) or not bool((ts[ending] >= ts[ins[:k]]).all()):
        return None
    if k and not rows_equal(delta.take(pa.array(ins[:k])).columns[META:], delta.take(pa.array(ending)).columns[META:]):
        return None
    end = np.full(len(ins), POS_INF, np.int64)
    end[:k] = ts[ending]
    row = np.concatenate([ins, gone])
    start = np.concatenate([ts[ins], np.full(len(gone), NEG_INF, np.int64)])
    stop = np.concatenate([end, ts[gone]])
    return Lifetimes(row, start, stop, gone, ins[k:])


def overlapping(
    lkeys: list[pa.Array | pa.ChunkedArray], left: Lifetimes, rkeys: list[pa.Array | pa.ChunkedArray], right: Lifetimes
) -> tuple[np.ndarray, np.ndarray]:
    """Pairs (i, j) of a left and a right lifetime whose keys are equal (NULL equals nothing; keys
    made comparable by ``sluice.runtime.keys.comparable``) and that overlap — found without
    forming the pairs that do not: two lifetimes overlap exactly when one starts while the other
    holds, so each pair is one lifetime's start found in a range of the other side's starts,
    sorted by (key, start): two binary searches per lifetime (an interval join).
    """
    nl, nr = len(left), len(right)
    none = np.empty(0, np.int64)
    if not nl or not nr:
        return none, none
    key, ok = _joint_keys(lkeys, rkeys, nl, nr)
    ok &= np.r_[left.start < left.end, right.start < right.end]  # an empty lifetime meets nothing
    times, rank = np.unique(np.concatenate([left.start, left.end, right.start, right.end]), return_inverse=True)
    span = len(times) + 1
    rank = rank.reshape(-1)
    ls, le = rank[:nl], rank[nl : 2 * nl]
    rs, re = rank[2 * nl : 2 * nl + nr], rank[2 * nl + nr :]
    lk, rk = key[:nl] * span, key[nl:] * span
    lok, rok = np.flatnonzero(ok[:nl]), np.flatnonzero(ok[nl:])
    lorder = lok[np.argsort(lk[lok] + ls[lok], kind="stable")]
    rorder = rok[np.argsort(rk[rok] + rs[rok], kind="stable")]
    lsorted, rsorted = lk[lorder] + ls[lorder], rk[rorder] + rs[rorder]
    # a right lifetime starting while a left one holds (at or after its start)
    lo = np.searchsorted(rsorted, lk[lok] + ls[lok], side="left")
    hi = np.searchsorted(rsorted, lk[lok] + le[lok], side="left")
    i1, j1 = _expand(lok, lo, hi, rorder)
    # a left lifetime starting while a right one holds (strictly after its start)
    lo = np.searchsorted(lsorted, rk[rok] + rs[rok], side="right")
    hi = np.searchsorted(lsorted, rk[rok] + re[rok], side="left")
    j2, i2 = _expand(rok, lo, hi, lorder)
    return np.concatenate([i1, i2]), np.concatenate([j1, j2])


def pair_count(
    lkeys: list[pa.Array | pa.ChunkedArray], rkeys: list[pa.Array | pa.ChunkedArray], nl: int, nr: int
) -> int:
    """How many pairs of a left and a right row have equal keys (without forming them)."""
    if not lkeys:
        return nl * nr
    key, ok = _joint_keys(lkeys, rkeys, nl, nr)
    size = int(key.max()) + 1 if len(key) else 0
    left = np.bincount(key[:nl][ok[:nl]], minlength=size)
    right = np.bincount(key[nl:][ok[nl:]], minlength=size)
    return int(left @ right)


def _joint_keys(
    lkeys: list[pa.Array | pa.ChunkedArray], rkeys: list[pa.Array | pa.ChunkedArray], nl: int, nr: int
) -> tuple[np.ndarray, np.ndarray]:
    """One code per row of the left then the right rows, equal where their keys are (compared as
    ``sluice.runtime.keys.comparable`` does; one float zero), and which rows have no NULL key.
    """
    ok = np.ones(nl + nr, bool)
    cols = []
    for a, b in zip(lkeys, rkeys, strict=True):
        a, b = comparable(a, b)
        both = pa.chunked_array([*_chunks(a), *_chunks(b)], type=a.type).combine_chunks()
        if pa.types.is_floating(both.type):
            both = pc.add(both, pa.scalar(0.0, both.type))  # one zero: −0.0 + 0.0 is 0.0
        if both.null_count:
            ok &= np.asarray(pc.is_valid(both).to_numpy(zero_copy_only=False), bool)
        cols.append(both)
    key, _, _ = row_codes(cols, nl + nr)
    return key, ok


def _chunks(a: pa.Array | pa.ChunkedArray) -> list[pa.Array]:
    return a.chunks if isinstance(a, pa.ChunkedArray) else [a]


def _expand(q: np.ndarray, lo: np.ndarray, hi: np.ndarray, order: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each ``q[k]`` with each of ``order[lo[k]:hi[k]]``."""
    counts = np.maximum(hi - lo, 0)
    total = int(counts.sum())
    if not total:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    first = np.cumsum(counts) - counts
    pos = np.repeat(lo - first, counts) + np.arange(total)
    return np.repeat(q, counts), order[pos]
