"""Counting aggregates for many groups at once, vectorised across every instant of a batch.

Rows are stably sorted by group, running sums per group (``numpy.cumsum`` with the group's state as
the base) give each group's state after every instant, and the last row of each (group, instant)
run is compared with the one before it.  A batch spanning thousands of instants costs a few array
passes, not a Python step per instant.  Sums stay int64 while a bound shows they cannot overflow;
past that the same arrays hold Python integers (exact, slower).  Float sums are exact and int64 too:
limbs of a fixed-point accumulator over the exponents the data used, rounded once per output value
(``sluice.plan.limbs``, design 011).  MIN/MAX over an input that deletes in insertion order keep a monotonic
queue per group and are answered as range maxima (``Counting._extremes``; design 013).
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from sluice.datatypes import TypeKind
from sluice.errors import InternalError
from sluice.plan import limbs
from sluice.plan.expr import AggCall, AggKind
from sluice.plan.numeric import INT_MAX, INT_MIN
from sluice.runtime.batch import arrow_type, make
from sluice.runtime.keys import INT64_SAFE, first_rows, row_codes
from sluice.runtime.operators.base import Operator, Part

FLOAT_EXACT = float(2**53)  # integers below this are exact doubles: s / n is then correctly rounded


class Counting(Part):
    """Per-group state of counting aggregates as columns of one array, updated for a whole batch.

    State row 0 is COUNT(*); an aggregate with an argument adds its non-null count and, for
    SUM/AVG, its integer sum.  Groups get dense ids (freed when their count returns to 0).

    A float SUM/AVG keeps the exact sum of its finite values as int64 limbs (``sluice.plan.limbs``:
    a second part of the state, ``limbs``, a block of columns per sum laid out by ``lay``) and
    counts of +inf and −inf (state rows).  The same array code cumulates both parts; a value is
    the exact sum rounded once.
    """

    STATE = ("state", "limbs", "lay", "_mag", "gid", "keys", "free", "rejects", "ext")

    def __init__(self, aggs: tuple[AggCall, ...], nkeys: int, insertions: bool = False) -> None:
        self.aggs, self.nkeys = aggs, nkeys
        self.insertions = insertions  # each change's insertion only (AggregateSpec.insertions)
        self.nn_row: list[int] = []
        self.sum_row: list[int] = []
        self.inf_row: list[int] = []  # float SUM/AVG: the row counting +inf (the next one −inf)
        self.owner: list[int] = []  # the aggregate whose state this one reads (itself, or an
        # earlier one over the same argument: SUM(B) and AVG(B) keep one sum)
        self.ins_row: list[int] = []  # MIN/MAX: the row counting the non-NULL values ever inserted
        # MIN/MAX over a FIFO input (a window): per aggregate, per group, the positions and values of
        # the alive values that no later value beats (a monotonic queue; the rest can never be
        # the extreme again, since they leave first)
        self.ext: dict[int, Queues] = {}
        shared: dict[tuple[str, str], int] = {}
        rows = 1
        for i, a in enumerate(aggs):
            summing = a.fn in (AggKind.SUM, AggKind.AVG)
            extreme = a.fn in (AggKind.MIN, AggKind.MAX)
            key = (repr(a.arg), a.fn.value if extreme else str(summing))
            j = shared.get(key) if a.arg is not None else None
            if j is not None:
                self.owner.append(j)
                self.nn_row.append(self.nn_row[j])
                self.sum_row.append(self.sum_row[j])
                self.inf_row.append(self.inf_row[j])
                self.ins_row.append(self.ins_row[j])
                continue
            shared[key] = i
            self.owner.append(i)
            self.nn_row.append(rows if a.arg is not None else 0)
            rows += a.arg is not None
            self.ins_row.append(rows if extreme else -1)
            rows += extreme
            if extreme:
                self.ext[i] = Queues()
            self.sum_row.append(rows if summing else -1)
            rows += summing
            fl = summing and a.arg is not None and a.arg.type.kind is TypeKind.FLOAT
            self.inf_row.append(rows if fl else -1)
            rows += 2 * fl
        # one row per group id, one column per state value: gathering a group's state is contiguous.
        # Two parts: counts and integer sums (int64 until a sum may pass 2^62), and the float sums'
        # limbs (int64 always; a float sum's state row has no column of the first part)
        self.fsums = [i for i, r in enumerate(self.inf_row) if r >= 0 and self.owner[i] == i]
        fsum_rows = {self.sum_row[i] for i in self.fsums}
        self.where: list[int] = []  # state value → its column of ``state`` (−1: a float sum)
        width = 0
        for r in range(rows):
            self.where.append(-1 if r in fsum_rows else width)
            width += r not in fsum_rows
        self.state: np.ndarray = np.zeros((16, width), dtype=np.int64)
        self.limbs: np.ndarray = np.zeros((16, 0), dtype=np.int64)
        # per float sum, in column order: [limbs, base exponent] — its exponent band (no values
        # yet: 0 limbs), widened for a value outside it, narrowed when the values using an end left
        self.lay: dict[int, list[int]] = {i: [0, 0] for i in self.fsums}
        self._mag = 0.0  # an upper bound on |every state value| (int64 while it stays < 2^62)
        self.gid: dict[tuple[Any, ...], int] = {}
        self.keys: list[tuple[Any, ...] | None] = []
        self.free: list[int] = []
        self.rejects: list[str] = []  # rows not emitted since the last batch (a SUM beyond 64 bits)

    def forget(self, keys: list[tuple[Any, ...]]) -> None:
        """Drop these groups' state (no element of theirs comes again: ``Aggregate._forget_closed``);
        their ids are free for new groups.
        """
        gone: list[int] = []
        for key in keys:
            g = self.gid.pop(key, None)
            if g is None:
                continue
            self.keys[g] = None
            self.state[g] = 0
            self.limbs[g] = 0
            self.free.append(g)
            gone.append(g)
        for queues in self.ext.values():
            queues.drop(np.array(gone, np.int64))

    def restore(self, state: dict[str, Any]) -> None:
        super().restore(state)
        self._queues_as_arrays()

    def __setstate__(self, state: dict[str, Any]) -> None:  # (the whole engine pickled: a checkpoint)
        self.__dict__.update(state)
        self._queues_as_arrays()

    def _queues_as_arrays(self) -> None:
        for i, q in self.ext.items():
            if isinstance(q, dict):  # (saved when each group's queue was an entry of a dict)
                self.ext[i] = Queues.of(q)

    def reject_rows(self, op: Operator) -> None:
        op.reject_rows(self.rejects)
        self.rejects = []

    def state_bytes(self) -> int:
        queued = sum(len(q) for q in self.ext.values())  # (group id, position, value: 8 B each)
        return len(self.gid) * (64 + 8 * (self.state.shape[1] + self.limbs.shape[1])) + 24 * queued

    def _parts(self) -> tuple[np.ndarray, np.ndarray]:
        return self.state, self.limbs

    def _alloc(self, key: tuple[Any, ...]) -> int:
        if self.free:
            g = self.free.pop()
        else:
            g = len(self.keys)
            self.keys.append(None)
            if g >= self.state.shape[0]:
                grown = [np.zeros((2 * p.shape[0], p.shape[1]), dtype=p.dtype) for p in self._parts()]
                for new, old in zip(grown, self._parts(), strict=True):
                    new[:g] = old[:g]
                self.state, self.limbs = grown
        self.keys[g] = key
        self.gid[key] = g
        return g

    def group_ids(self, keycols: list[Any], n: int) -> np.ndarray:
        """Each row's group id: distinct keys of the batch found by NumPy, looked up once each."""
        if not keycols:
            if () not in self.gid:
                self._alloc(())
            return np.zeros(n, dtype=np.int64)
        inv, first, dicts = row_codes(keycols, n)
        if first is None:  # one column: its codes are the groups, its values in code order
            d = dicts[0]
            values = [d.tolist() if isinstance(d, np.ndarray) else d.to_pylist()]
        else:
            values = [c.take(pa.array(first)).to_pylist() for c in keycols]
        keys = list(zip(*values, strict=True))
        ids = np.empty(len(keys), dtype=np.int64)
        new: list[int] = []
        for j, key in enumerate(keys):  # once per distinct group of the batch
            g = self.gid.get(key)
            if g is None:
                new.append(j)
            else:
                ids[j] = g
        rows = inv.reshape(-1)
        if len(new) > 1:
            # new groups get ids in the order they first appear, whatever the batch boundaries (the
            # ids order a batch's changes within an instant: the same input gives the same output)
            seen = first_rows(rows, len(keys))
            new.sort(key=lambda j: int(seen[j]))
        for j in new:
            ids[j] = self._alloc(keys[j])
        return ids[rows]

    def _relayout(self, i: int, lo: int, hi: int) -> None:
        """Float sum ``i``'s limbs hold bits [lo, hi) too (a value outside its band widens it); a
        wide band also drops the low limbs no live value uses any more (``limbs.rebase``).
        """
        k, base = self.lay[i]
        if k == 0:
            base, nk = limbs.layout(lo, hi)
            block = np.zeros((self.limbs.shape[0], nk), dtype=np.int64)
        elif lo < base or (hi - 1 - base) // limbs.R + 2 > k or (k > 4 and lo >= base + limbs.R):
            start = self._start(i)
            block, base = limbs.rebase(self.limbs[:, start : start + k], base, lo, hi)
        else:
            return
        start = self._start(i)
        self.limbs = np.concatenate([self.limbs[:, :start], block, self.limbs[:, start + k :]], axis=1)
        self.lay[i] = [block.shape[1], base]

    def _start(self, i: int) -> int:
        """Float sum ``i``'s first column in ``limbs``."""
        return sum(self.lay[j][0] for j in self.fsums[: self.fsums.index(i)])

    def _settle(self, touched: np.ndarray) -> None:
        """After a batch: the touched groups' limbs carried back into range (what keeps the next
        batch's running sums within int64).
        """
        for i in self.fsums:
            (k, _), start = self.lay[i], self._start(i)
            if k:
                self.limbs[touched, start : start + k] = limbs.carry(self.limbs[touched, start : start + k])

    def _deltas(self, sign: np.ndarray, args: list[Any], n: int) -> tuple[np.ndarray, np.ndarray]:
        s = sign.astype(np.int64)
        sums: dict[int, np.ndarray] = {}
        bound = 0.0
        nn: dict[int, np.ndarray] = {}
        split: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        for i, v in enumerate(args):
            if v is None or self.owner[i] != i:
                continue
            valid = pc.is_valid(v).to_numpy(zero_copy_only=False).astype(np.int64)
            nn[self.nn_row[i]] = valid * s
            if self.ins_row[i] >= 0:
                nn[self.ins_row[i]] = valid * (s > 0)
            if self.inf_row[i] >= 0:
                f = pc.fill_null(pc.cast(v, pa.float64()), 0.0).to_numpy(zero_copy_only=False)
                finite = np.isfinite(f)
                m, low, high = limbs.split(f, finite)
                k, base = self.lay[i]
                band = limbs.span(m, low, high, base if k else None)
                if band is not None:
                    self._relayout(i, *band)
                split[i] = (m, low)
                if finite.all():
                    nn[self.inf_row[i]] = nn[self.inf_row[i] + 1] = np.zeros(n, dtype=np.int64)
                else:
                    nn[self.inf_row[i]] = (f == np.inf).astype(np.int64) * s
                    nn[self.inf_row[i] + 1] = (f == -np.inf).astype(np.int64) * s
            elif self.sum_row[i] >= 0:
                x = pc.fill_null(pc.cast(v, pa.int64()), 0).to_numpy(zero_copy_only=False)
                sums[self.sum_row[i]] = x
                bound = max(bound, float(np.abs(x.astype(np.float64)).sum()))
        if self.state.dtype != object:
            if self._mag + bound >= INT64_SAFE:  # the cheap bound says maybe: measure the live state
                self._mag = float(np.abs(self.state.astype(np.float64)).max(initial=0.0))
            if self._mag + bound >= INT64_SAFE:
                self.state = self.state.astype(object)  # exact from here on: Python integers
            self._mag += bound
        d = np.empty((n, self.state.shape[1]), dtype=self.state.dtype)
        d[:, 0] = s
        for r, v in nn.items():
            d[:, self.where[r]] = v
        for r, x in sums.items():
            d[:, self.where[r]] = x.astype(object) * s if d.dtype == object else x * s
        if n >= limbs.MAX_ROWS and self.limbs.shape[1]:  # ≥ 32 GiB of timestamps in one batch
            raise InternalError(f"a batch of {n} rows is beyond the float sums' running-sum bound")
        blocks = [np.zeros((n, 0), dtype=np.int64)]
        for i in self.fsums:  # in column order
            k, base = self.lay[i]
            if k:
                blocks.append(limbs.digits(*split[i], s, base, k))
        return d, blocks[-1] if len(blocks) == 2 else np.concatenate(blocks, axis=1)

    def apply(
        self, ts: np.ndarray, sign: np.ndarray, keycols: list[Any], args: list[Any], types: list[Any]
    ) -> pa.Table | None:
        """The signed output rows for every (instant, group) the batch changes, in time order."""
        n = len(ts)
        if n == 0:
            return None
        keycols = combined(keycols)
        gids = self.group_ids(keycols, n)
        deltas = self._deltas(sign, args, n)
        # by group, time order kept within a group (a radix sort when ids fit 16 bits)
        small = int(gids.max()) < 65536
        order = np.argsort(gids.astype(np.uint16) if small else gids, kind="stable")
        g, t = gids[order], ts[order]
        starts = np.ones(n, dtype=bool)
        starts[1:] = g[1:] != g[:-1]
        ends = np.ones(n, dtype=bool)  # the last row of each (group, instant) run
        ends[:-1] = starts[1:] | (t[1:] != t[:-1])
        e = np.flatnonzero(ends)
        first_row = np.flatnonzero(starts)
        seg_e = np.cumsum(starts)[e] - 1  # the group run each end row belongs to
        ge, te = g[e], t[e]
        first = np.ones(len(e), dtype=bool)
        first[1:] = ge[1:] != ge[:-1]
        last = np.ones(len(e), dtype=bool)
        last[:-1] = ge[1:] != ge[:-1]
        touched = ge[last]
        news, olds = [], []
        for part, d in zip(self._parts(), deltas, strict=True):
            if part.shape[1] == 0:
                news.append(np.zeros((len(e), 0), dtype=part.dtype))
                olds.append(np.zeros((int(first.sum()), 0), dtype=part.dtype))
                continue
            c = np.cumsum(np.take(d, order, axis=0), axis=0)
            # per group run: its state before the batch minus the running sum before the run
            before = np.zeros((len(first_row), c.shape[1]), dtype=c.dtype)
            before[1:] = c[first_row[1:] - 1]
            offset = np.take(part, g[first_row], axis=0) - before
            new = (c if len(e) == n else np.take(c, e, axis=0)) + np.take(offset, seg_e, axis=0)
            olds.append(part[ge[first]])  # a group's state before the batch
            part[touched] = new[last]
            news.append(new)
        self._settle(touched)
        new_e = (news[0], news[1])
        old_first = (olds[0], olds[1])
        ext_n: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        ext_f: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        for i in self.ext:
            ext_n[i], ext_f[i] = self._extremes(i, args[i], sign, order, g, ge, first, last, new_e[0], old_first[0])
        freed: dict[int, tuple[Any, ...]] = {}  # groups gone by the batch's end (named in notes below)
        if self.nkeys:
            for gid in touched[(self.state[touched, 0] == 0).astype(bool)].tolist():
                key = self.keys[gid]
                assert key is not None
                freed[gid] = key
                del self.gid[key]
                self.keys[gid] = None
                self.free.append(gid)
            if freed:
                for queues in self.ext.values():
                    queues.drop(np.fromiter(freed, np.int64, len(freed)))
        # each end row's old state is the previous end row's new one, but for a group's first
        # (its state before the batch): values are computed once per end row, not twice
        vis_n, vals_n = self._values(new_e, ext_n)
        vis_f, vals_f = self._values(old_first, ext_f)
        vis_o = _shifted(vis_n, first, vis_f)
        vals_o = [
            (_shifted(xn, first, xf), None if nn is None or nf is None else _shifted(nn, first, nf))
            for (xn, nn), (xf, nf) in zip(vals_n, vals_f, strict=True)
        ]
        if new_e[0].dtype == object:  # a group whose SUM is beyond 64 bits has no row (numeric.py)
            hidden = np.flatnonzero(~vis_n & (new_e[0][:, 0] > 0 if self.nkeys else True))
            named = [freed.get(int(ge[k]), self.keys[int(ge[k])]) for k in hidden.tolist()]
            self.rejects += [
                f"group {key!r} at {int(te[k])}: SUM outside BIGINT's range; no row"
                for key, k in zip(named, hidden.tolist(), strict=True)
            ]
        changed = vis_o != vis_n
        both = vis_o & vis_n
        for (xo, no), (xn, nn) in zip(vals_o, vals_n, strict=True):
            diff = xo != xn
            if no is not None and nn is not None:
                diff = (no != nn) | (~nn & diff)
            changed |= both & diff
        dels, ins = changed & vis_o, changed & vis_n
        if self.insertions:
            return self._insertions(ins, te, order[e], keycols, vals_n, types)
        if not (dels.any() or ins.any()):
            return None
        # each change as (deletion of the old row, insertion of the new), then stably into time order
        # (a merge of the groups' sorted runs)
        sel = np.stack([dels, ins], axis=1).reshape(-1)
        out_ts = np.repeat(te, 2)[sel]
        out_order = np.argsort(out_ts, kind="stable")
        pick = sel.nonzero()[0][out_order]  # 2·(end row) + (0 deletion | 1 insertion)
        is_ins = (pick & 1).astype(bool)
        at = pick >> 1
        take = pa.array(order[e][at])
        cols: list[Any] = [k.take(take) for k in keycols]
        for (xo, no), (xn, nn), ty in zip(vals_o, vals_n, types[self.nkeys :], strict=True):
            x = np.stack([xo, xn], axis=1).reshape(-1).take(pick)  # old and new interleaved, as pick counts
            mask = None if no is None or nn is None else np.stack([no, nn], axis=1).reshape(-1).take(pick)
            cols.append(pa.array(x, arrow_type(ty), mask=mask))
        sign_out = np.where(is_ins, np.int8(1), np.int8(-1))
        return make(out_ts[out_order], sign_out, cols, types)

    @staticmethod
    def _insertions(
        ins: np.ndarray,
        te: np.ndarray,
        rows: np.ndarray,
        keycols: list[Any],
        vals_n: list[tuple[np.ndarray, np.ndarray | None]],
        types: list[Any],
    ) -> pa.Table | None:
        """The changes' insertions alone (the new rows), in time order: ``apply``'s output
        without its deletions, as a pure Istream above would keep it.
        """
        at = np.flatnonzero(ins)
        if not len(at):
            return None
        at = at[np.argsort(te[at], kind="stable")]
        take = pa.array(rows[at])
        cols: list[Any] = [k.take(take) for k in keycols]
        for (xn, nn), ty in zip(vals_n, types[len(keycols) :], strict=True):
            cols.append(pa.array(xn.take(at), arrow_type(ty), mask=None if nn is None else nn.take(at)))
        return make(te[at], 1, cols, types)

    def _extremes(
        self,
        i: int,
        arg: Any,
        sign: np.ndarray,
        order: np.ndarray,
        g: np.ndarray,
        ge: np.ndarray,
        first: np.ndarray,
        last: np.ndarray,
        new: np.ndarray,
        old: np.ndarray,
    ) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
        """MIN/MAX ``i`` at every end row (``new``: their states) and before the batch for each
        touched group (``old``: the groups' first end rows), with null masks; updates the groups'
        monotonic queues.

        The input deletes in insertion order, so a group's alive values are those with positions
        in [inserted − alive, inserted) of its sequence of non-NULL insertions (both counts are
        state columns, cumulated for every end row like the others).  Per touched group the
        candidates are its queue (older values no later one beats) followed by the batch's
        insertions; every end row's extreme is a range maximum over that concatenation, answered
        for all rows at once with a sparse table of ranks.  No Python step per row or per instant.
        """
        is_max = self.aggs[i].fn is AggKind.MAX
        ins_c, nn_c = self.where[self.ins_row[i]], self.where[self.nn_row[i]]
        groups = ge[first]  # touched groups, ascending (rows are ordered by group)
        gi_e = np.cumsum(first) - 1  # each end row's group index
        base = np.asarray(old[:, ins_c], dtype=np.int64)  # position of the batch's first insertion
        # the batch's non-NULL insertions, by group, in arrival order
        valid = pc.is_valid(arg).to_numpy(zero_copy_only=False)[order] & (sign[order] > 0)
        rows = order[valid]
        col = arg.combine_chunks() if isinstance(arg, pa.ChunkedArray) else arg
        bvals = col.take(pa.array(rows)).to_numpy(zero_copy_only=False)
        bgi = np.searchsorted(groups, g[valid])
        nb = np.bincount(bgi, minlength=len(groups))
        # per touched group: its queue, then the batch's insertions (one concatenation, by group)
        queues = self.ext[i]
        at, nd = queues.find(groups)
        qidx = _ranges(at, nd)
        nq, nbt = len(qidx), len(bvals)
        seg_off = np.concatenate(([0], np.cumsum(nd + nb)))
        bpos = _ranges(base, nb)  # the batch's insertions' positions, group by group
        if nq:
            # where each queued, then each batch value goes: a group's queue, then its insertions
            place = np.concatenate([_ranges(seg_off[:-1], nd), _ranges(seg_off[:-1] + nd, nb)])
            perm = np.empty_like(place)
            perm[place] = np.arange(nq + nbt)
            vals = np.concatenate([queues.v[qidx], bvals])[perm]
            pos = np.concatenate([queues.p[qidx], bpos])[perm]
        else:
            vals, pos = bvals, bpos
        seg = np.repeat(np.arange(len(groups)), nd + nb)
        n_e = len(ge)
        if len(vals) == 0:  # nothing alive anywhere: every value NULL
            empty = np.zeros(n_e, dtype=bvals.dtype)
            return (empty, np.ones(n_e, dtype=bool)), (empty[: len(groups)], np.ones(len(groups), dtype=bool))
        _, inv = np.unique(vals, return_inverse=True)
        rank = inv.reshape(-1).astype(np.int64)
        if not is_max:
            rank = rank.max() - rank
        # every end row's alive range, as indices into the concatenation
        hi = np.asarray(new[:, ins_c], dtype=np.int64)
        alive = np.asarray(new[:, nn_c], dtype=np.int64)
        lo = hi - alive
        b = base[gi_e]
        in_batch = seg_off[gi_e] + nd[gi_e] + (lo - b)
        span = 1 << 40  # group index × span + position: one sorted key for every queue's positions
        qkey = seg * span + pos
        in_queue = np.searchsorted(qkey, gi_e * span + lo)  # the first queued candidate at or after lo
        start = np.where(lo < b, in_queue, in_batch)
        end = seg_off[gi_e] + nd[gi_e] + (hi - b)
        null = alive <= 0
        best = _range_argmax(rank, np.where(null, 0, start), np.where(null, 1, end))
        out_new = vals[best]
        # before the batch: the head of each group's queue (its extreme), if it had values
        had = nd > 0
        out_old = vals[np.where(had, seg_off[:-1], 0)]
        # the new queues: candidates still alive after the batch that no later one beats
        lo_final = lo[last]
        later = _segment_suffix_max(rank, seg, len(groups))
        keep = (rank > later) & (pos >= lo_final[seg])
        kept = np.flatnonzero(keep)
        queues.replace(qidx, groups[seg[kept]], pos[kept], vals[kept])
        return (out_new, null), (out_old, ~had)

    def _values(
        self,
        parts: tuple[np.ndarray, np.ndarray],
        ext: dict[int, tuple[np.ndarray, np.ndarray]] | None = None,
    ) -> tuple[np.ndarray, list[tuple[np.ndarray, np.ndarray | None]]]:
        """(visible, per aggregate (values, null mask)) for state rows (both parts); MIN/MAX come
        from ``ext`` (computed by :meth:`_extremes`; NULL without it).
        """
        st = parts[0]
        floats: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray | None]] = {}  # per float sum: (null,
        # SUM, AVG) — SUM(x) and AVG(x) share one rounding pass

        def col(r: int) -> np.ndarray:
            return st[:, self.where[r]]

        count = st[:, 0]
        visible = (count > 0).astype(bool) if self.nkeys else np.ones(st.shape[0], dtype=bool)
        out: list[tuple[np.ndarray, np.ndarray | None]] = []
        for i, a in enumerate(self.aggs):
            nn = col(self.nn_row[i])
            if self.ins_row[i] >= 0:  # MIN/MAX
                j = self.owner[i]
                if ext is None or j not in ext:
                    out.append((np.zeros(st.shape[0], dtype=np.int64), np.ones(st.shape[0], dtype=bool)))
                else:
                    out.append(ext[j])
                continue
            if a.fn is AggKind.COUNT:
                out.append((nn, None))
                continue
            if self.inf_row[i] >= 0:
                j = self.owner[i]
                if j not in floats:
                    (k, base), start = self.lay[j], self._start(j)
                    mean = any(self.owner[x] == j and b.fn is AggKind.AVG for x, b in enumerate(self.aggs))
                    pinf, ninf = col(self.inf_row[i]), col(self.inf_row[i] + 1)
                    floats[j] = _float_values(parts[1][:, start : start + k], base, nn, pinf, ninf, mean)
                null, sums, means = floats[j]
                out.append((means if a.fn is AggKind.AVG else sums, null))  # type: ignore[arg-type]
                continue
            sm = col(self.sum_row[i])
            null = nn == 0
            if a.fn is AggKind.SUM:
                if st.dtype == object:
                    big = np.array([not INT_MIN <= int(x) <= INT_MAX for x in sm], dtype=bool)
                    if big.any():
                        visible = visible & ~big
                        sm = np.where(big, 0, sm)
                out.append((sm, null))
            elif st.dtype != object and (sm.size == 0 or float(np.abs(sm).max()) < FLOAT_EXACT):
                out.append((sm.astype(np.float64) / np.where(null, 1, nn), null))
            else:  # AVG of integers, correctly rounded
                avg = [float(Fraction(int(x), int(k))) if k else 0.0 for x, k in zip(sm, nn, strict=True)]
                out.append((np.array(avg, dtype=np.float64), null))
        return visible, out

    def initial_row(self) -> tuple[Any, ...]:
        """The one row of an aggregate without GROUP BY over nothing (COUNT 0, SUM/AVG NULL)."""
        _, vals = self._values(
            (np.zeros((1, self.state.shape[1]), self.state.dtype), np.zeros((1, self.limbs.shape[1]), np.int64))
        )
        return tuple(None if m is not None and m[0] else _py(x[0]) for x, m in vals)


def _range_argmax(rank: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """For each [start, end) (non-empty), the index of its highest rank (a sparse table:
    log2(n) levels of NumPy passes, then two lookups per range).
    """
    n = len(rank)
    levels = [np.arange(n, dtype=np.int64)]
    width = 1
    while 2 * width <= n:
        prev = levels[-1]
        a, b = prev[: n - 2 * width + 1], prev[width : n - width + 1]
        levels.append(np.where(rank[a] >= rank[b], a, b))
        width *= 2
    length = end - start
    j = np.floor(np.log2(np.maximum(length, 1))).astype(np.int64)
    out = np.empty(len(start), dtype=np.int64)
    for lv in np.unique(j).tolist():
        m = j == lv
        table = levels[lv]
        a, b = table[start[m]], table[end[m] - (1 << lv)]
        out[m] = np.where(rank[a] >= rank[b], a, b)
    return out


def _segment_suffix_max(rank: np.ndarray, seg: np.ndarray, nseg: int) -> np.ndarray:
    """For each element, the highest rank after it in its segment (−1 when it is the last)."""
    if len(rank) == 0:
        return rank
    r = rank - rank.min()
    width = int(r.max()) + 1
    key = (nseg - 1 - seg) * width + r  # later segments below earlier ones: a reversed running max stays within
    inclusive = np.maximum.accumulate(key[::-1])[::-1] - (nseg - 1 - seg) * width
    out = np.full(len(rank), -1, dtype=np.int64)
    same = seg[1:] == seg[:-1]
    out[:-1] = np.where(same, inclusive[1:], -1)
    return np.where(out >= 0, out + rank.min(), np.iinfo(np.int64).min)


def _py(v: Any) -> Any:
    """A NumPy scalar as a Python value (object arrays already hold Python values)."""
    return v.item() if isinstance(v, np.generic) else v


def _shifted(new: np.ndarray, first: np.ndarray, at_first: np.ndarray) -> np.ndarray:
    """``new`` moved one row down, with ``at_first`` where a group's run starts."""
    out = np.empty_like(new)
    out[1:] = new[:-1]
    out[first] = at_first
    return out


def _float_values(
    block: np.ndarray, base: int, nn: np.ndarray, pinf: np.ndarray, ninf: np.ndarray, avg: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """(null, SUM, AVG if ``avg``) of float sums held as limbs: the exact value rounded once; NULL
    without values or with both infinities, ±inf with one (``sluice.plan.numeric``).
    """
    nn, pinf, ninf = (np.asarray(x, dtype=np.int64) for x in (nn, pinf, ninf))
    sums, means = limbs.sum_and_mean(block, base, nn if avg else None)
    p, q = pinf > 0, ninf > 0
    null = (nn == 0) | (p & q)
    if p.any() or q.any():
        inf = np.where(p, np.inf, -np.inf)
        sums = np.where(p | q, inf, sums)
        means = None if means is None else np.where(p | q, inf, means)
    return null, sums, means


class Queues:
    """One MIN/MAX's monotonic queues of every group, as three arrays sorted by group: the group
    ids ``g``, the values' positions ``p`` in their group's sequence of insertions (ascending
    within a group) and the values ``v``.  A batch finds the touched groups' entries by binary
    search and replaces them in one merge — array passes, not a Python step per group (with a dict
    of per-group arrays, ``max(B)`` by 10,000 keys over ``[Range 1 Second]`` at millisecond stamps
    ran at 142,192 events a second, 329,245 now: ``benchmarks/fine_time.py --keys 10000``).
    """

    __slots__ = ("g", "p", "v")

    def __init__(self) -> None:
        self.g = np.zeros(0, np.int64)
        self.p = np.zeros(0, np.int64)
        self.v: np.ndarray = np.zeros(0, np.int64)

    @classmethod
    def of(cls, groups: dict[int, tuple[np.ndarray, np.ndarray]]) -> Queues:
        """From a dict of each group's (positions, values)."""
        q = cls()
        if groups:
            ids = sorted(groups)
            q.g = np.repeat(np.array(ids, np.int64), [len(groups[k][0]) for k in ids])
            q.p = np.concatenate([np.asarray(groups[k][0], np.int64) for k in ids])
            q.v = np.concatenate([groups[k][1] for k in ids])
        return q

    def __len__(self) -> int:
        return len(self.g)

    def __getstate__(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return self.g, self.p, self.v

    def __setstate__(self, state: tuple[np.ndarray, np.ndarray, np.ndarray]) -> None:
        self.g, self.p, self.v = state

    def find(self, groups: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For each of ``groups`` (ascending): where its entries start, and how many there are."""
        at = np.searchsorted(self.g, groups, "left")
        return at, np.searchsorted(self.g, groups, "right") - at

    def replace(self, old: np.ndarray, g: np.ndarray, p: np.ndarray, v: np.ndarray) -> None:
        """Entries ``old`` (those of the groups a batch touched) out, the new ones (by group) in."""
        keep = np.ones(len(self.g), dtype=bool)
        keep[old] = False
        if not len(self.v):
            self.v = v[:0]
        gs = np.concatenate([self.g[keep], g])
        merge = np.argsort(gs, kind="stable")  # (two sorted runs, no group in both)
        self.g = gs[merge]
        self.p = np.concatenate([self.p[keep], p])[merge]
        self.v = np.concatenate([self.v[keep], v])[merge]

    def drop(self, groups: np.ndarray) -> None:
        """Every entry of ``groups`` out (groups gone)."""
        if len(groups) and len(self.g):
            keep = ~np.isin(self.g, groups)
            self.g, self.p, self.v = self.g[keep], self.p[keep], self.v[keep]


def combined(cols: list[Any]) -> list[Any]:
    """Columns as one Arrow array each (a chunked array's chunks combined; None stays None)."""
    return [c.combine_chunks() if isinstance(c, pa.ChunkedArray) else c for c in cols]


def _ranges(start: np.ndarray, count: np.ndarray) -> np.ndarray:
    """The indices [start[k], start[k] + count[k]) for every k, concatenated."""
    total = int(count.sum())
    if not total:
        return np.zeros(0, np.int64)
    ends = np.cumsum(count)
    return np.repeat(start - (ends - count), count) + np.arange(total)
