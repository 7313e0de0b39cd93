"""The shared window join (Hammad, Franklin, Aref & Elmagarmid, *Scheduling for Shared Window
Joins over Data Streams*, 2003): one symmetric join serving every query that joins the same two
streams on the same predicate, whatever its windows — ``docs/design/020-shared-window-joins.md``.

**What each query gets (§2.2, objective 1).**  Port ``p`` of the operator carries exactly the
signed changes that ``Window_p^L(L) ⋈ Window_p^R(R)`` — the query's isolated join — would give,
instant by instant.  With windows whose elements stay from their timestamp until a leave time
``d`` (``[Range T]``: ``d = ts + T + 1``; ``[Now]`` = ``[Range 0]``; ``[Rows N]``: the timestamp
of the N-th later element; Unbounded: never), the pair ``(x, y)`` is in the join from
``max(ts_x, ts_y)`` until ``min(d_x, d_y)`` when the first is before the second (the containment
property of §2.2 is this with nested windows).  So the operator emits ``+(x, y)`` when the later
element arrives (the join step) and ``−(x, y)`` when the first of the two leaves that port's
window; the routing step (§3.1) sends a pair to the ports whose windows hold both elements.
Per-stream windows (§2.1: "associate different windows with each stream") are the same rule
with two window sizes.  Selections the query applies to one input (pulled up above the join,
§2.1, so that queries with different selections still share it) are per-port masks over the
buffered elements.  A query registered while the engine runs reads the streams from its first
instant on (as ``sources.Since``): per-port start positions.

**The join step (§3.4).**  One JoinBuffer per input holds the elements the largest window can
still use, in arrival order, so every window of a port is a *suffix* of the other buffer at any
instant and the windows of all ports are nested suffixes: the band of a window is the part of
its suffix outside the next smaller window's (the "partial window" of §3.2).  An arriving
element joins with the other buffer band by band — by hashing on the equality conjuncts (a probe
of the other buffer's ``KeyIndex``, costing its matches; Arrow's hash join of the band's rows for
keys the index cannot code) or, in the nested-loop variant, by checking every element of the
band — vectorised over the elements that arrived together.

**Scheduling (§3;** ``shared_join_queues.py``**).**  Join work is queued as *units* (the elements
of one input read together, or at most ``unit`` of them; the paper's tuple is ``unit=1``), each
with the extent of the windows it has already scanned (the resume pointer of §3.2).  The policy
picks the next (unit, band):

* ``LWO`` (§3.1): the oldest unit scans the largest window in one go;
* ``SWF`` (§3.2): the unit whose next band completes the smallest window (new units start at the
  smallest), oldest first; output is held until its unit has scanned the port's whole window;
* ``GREEDY`` (§3.3): the unit whose next band is the narrowest (priority inversely proportional
  to the partial window), and — the order being static — output is released as soon as nothing
  earlier can still come (early release).

A port's output is released in timestamp order (the ordered output buffer of §3.2): everything
before the oldest unit still owing the port work, which also bounds the port's watermark.  The
policies change when answers appear, never what they are.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from sluice import windows as W
from sluice.errors import InternalError
from sluice.plan.expr import BExpr
from sluice.runtime.batch import META, NEG_INF, POS_INF, SIGN, arrow_type, concat, make, nbytes, sort_by_ts, ts_of
from sluice.runtime.key_index import codable
from sluice.runtime.keys import comparable, key_pairs
from sluice.runtime.operators.base import Operator, PortHandle, new_port, port_line
from sluice.runtime.operators.join import most_per_element
from sluice.runtime.operators.join_buffer import Family, JoinBuffer, extent, family
from sluice.runtime.operators.shared_join_queues import Unit, UnitView, next_band, pick
from sluice.runtime.operators.shared_join_spec import (
    LEFT,
    RIGHT,
    Policy,
    PortDef,
    SharedWindowJoinSpec,
    Variant,
)
from sluice.runtime.queue import count_upto
from sluice.runtime.stats import SharedJoinStats
from sluice.runtime.vexpr import VFn, compile_expr, evaluate_rows, truth_mask


@dataclass
class Port:
    """What the planner gave one output (fixed once added; its changing state is the operator's)."""

    index: int
    definition: PortDef
    filters: tuple[VFn | None, VFn | None]
    queries: set[str]
    handle: PortHandle
    ext: tuple[int, int] = (0, 0)  # the extents of its windows on each input (``extent``)


@dataclass
class SharedWindowJoin(Operator):
    """One join for many windows (see the module docstring); port ``p`` is query group ``p``'s input."""

    spec: SharedWindowJoinSpec
    STATE = (
        "_units",
        "_order",
        "_complete",
        "_starts",
        "_active",
        "_held",
        "_port_wm",
        "_held_peak",
        "_work",
        "_released",
        "_steps",
        "_probes",
        "_examined",
        "_found",
        "_inserted",
        "_deleted",
        "_unselected",
    )
    PARTS = ("left", "right")

    def __post_init__(self) -> None:
        super().__post_init__()
        self.stateful = True
        self.residual = compile_expr(self.spec.residual) if self.spec.residual is not None else None
        keyed = self.spec.variant is Variant.HASH and len(self.spec.keys) == 1
        ((kl, kr),) = self.spec.keys if keyed else ((0, 0),)
        lt, rt = self.spec.left_types[kl], self.spec.right_types[kr]
        indexed = keyed and codable(lt, rt)
        mixed = arrow_type(lt) != arrow_type(rt)  # an integer and a double key: coded exactly
        self.left = JoinBuffer(self.spec.left_types, (kl, mixed) if indexed else None, partners=True)
        self.right = JoinBuffer(self.spec.right_types, (kr, mixed) if indexed else None, partners=True)
        self.ports: list[Port] = []
        self._units: list[Unit] = []
        self._order = 0
        self._complete = NEG_INF  # every input element with ts ≤ this is in the buffers
        self._starts: list[tuple[int, int]] = []  # per port: first queue position of each input
        self._active: list[bool] = []
        self._held: list[list[pa.Table]] = []  # per port: output not yet released (§3.2's output buffer)
        self._port_wm: list[int] = []
        self._held_peak = 0  # most rows ever held for release (§5.3)
        self._work = 0  # per (unit, band) step its probes and the pairs found (at least 1), all runs
        self._released = 0
        # the join's own counts (``statistics()``): steps, elements probed, pairs examined and found
        # by them; per port, rows released (insertions, deletions)
        self._steps = self._probes = self._examined = self._found = 0
        self._unselected = 0  # elements read that no port selected (not held)
        self._inserted: list[int] = []
        self._deleted: list[int] = []
        # the band scan checks every pair of the band (§3.1) rather than hashing on equal keys
        self._nested = not (self.spec.variant is Variant.HASH and self.spec.keys)
        self._bands: tuple[list[int], list[int]] = ([], [])
        # what a pending unit's scans share: its window bounds, its matches (see UnitView)
        self._views: dict[tuple[int, int, int], UnitView] = {}
        # experiments: called with (port, released batch) as output leaves the operator
        self.on_release: Any = None

    CACHES = ("_bands", "_views")

    # -- ports ---------------------------------------------------------------------------
    def add_port(self, d: PortDef, query: str, starts: tuple[int, int]) -> PortHandle:
        """The output for a query with these windows: an existing one (same windows, selections and
        first instant) or a new one.  ``starts``: where each input's queue is now (the port sees
        what is appended from there on; 0, 0 before the engine runs).
        """
        for p in self.ports:
            if self._active[p.index] and p.definition == d and (d.since is None or self._starts[p.index] == starts):
                p.queries.add(query)
                self.queries.add(query)
                return p.handle
        for s in (LEFT, RIGHT):
            w = d.side(s).window
            if family(w) != self.spec.families[s]:
                raise InternalError(
                    f"{self}: a {_name(family(w))} window on input {s}, whose windows are "
                    f"{_name(self.spec.families[s])}"
                )
        index = len(self.ports)
        handle = new_port(self, index)
        handle.insert_only = all(isinstance(d.side(s).window, W.Unbounded) for s in (LEFT, RIGHT)) and self.insert_only
        filters = tuple(_compiled(d.side(s).filter) for s in (LEFT, RIGHT))
        ext = (extent(d.left.window), extent(d.right.window))
        self.ports.append(Port(index, d, (filters[0], filters[1]), {query}, handle, ext))
        self._starts.append(starts)
        self._active.append(True)
        self._held.append([])
        self._port_wm.append(NEG_INF)
        self._inserted.append(0)
        self._deleted.append(0)
        self.left.add_port(d.left.filter is not None)
        self.right.add_port(d.right.filter is not None)
        self.queries.add(query)
        self._rebands()
        return handle

    def forget_query(self, name: str) -> None:
        for p in self.ports:
            p.queries.discard(name)
            p.handle.queries.discard(name)  # (a handle is in no operator list: the registry cannot)
            if not p.queries and self._active[p.index]:
                self._active[p.index] = False
                self._held[p.index] = []
                self.left.forget_port(p.index)
                self.right.forget_port(p.index)
        self._rebands()

    def _rebands(self) -> None:
        """The window extents each input's elements scan, smallest first (the SchedulingQueues)."""
        act = [p for p in self.ports if self._active[p.index]]
        self._bands = (sorted({p.ext[RIGHT] for p in act}), sorted({p.ext[LEFT] for p in act}))

    def add_query(self, index: int, query: str) -> None:
        """One more query reads port ``index`` (the planner reused the port for an equal subplan)."""
        self.ports[index].queries.add(query)
        self.queries.add(query)

    def serves(self, index: int, query: str) -> bool:
        return query in self.ports[index].queries

    def port_active(self, index: int) -> bool:
        return self._active[index]

    def active_ports(self) -> list[Port]:
        return [p for p in self.ports if self._active[p.index]]

    def declare(self, inputs: Sequence[Operator]) -> None:
        self.insert_only = all(i.insert_only for i in inputs)

    # -- running -------------------------------------------------------------------------
    def _buf(self, s: int) -> JoinBuffer:
        return self.left if s == LEFT else self.right

    def has_work(self) -> bool:
        bound = self._arrival_bound()
        if self._units or any(count_upto(r, bound, 1) for r in self.readers):
            return True
        if min(bound, self._input_watermark()) > self._complete:
            return True
        return any(self._releasable(p) for p in self.active_ports())

    def _run(self, budget: int) -> int:
        bound = self._arrival_bound()
        starts = [r.cursor for r in self.readers]
        work = 0
        if self.ctx.paced:  # under a memory limit: the pairing it owes before it reads more (its
            while self._units and work < budget:  # pairs leave before more come; a backlog of
                work += self._step()  # units made every turn slow with what each cost: a review)
        batches = [] if self.ctx.paced and self._units else self.read_aligned(budget)
        new: list[Unit] = []
        for s, b in enumerate(batches):
            if b.num_rows:
                lo = self._buf(s).end
                self._append(s, b, starts[s])
                new += self._make_units(s, lo, self._buf(s).end, budget)
        new.sort(key=lambda u: (u.first_ts, u.side))
        for u in new:
            u.order = self._order
            self._order += 1
        self._units += new
        while self._units and (work == 0 or work < budget):
            work += self._step()
        self._work += work
        # deletions after the join steps: the pairs those found tell which leaving elements have
        # partners (``JoinBuffer.later``/``earlier``), so the others need no probe
        done = min(bound, self._input_watermark())
        if done > self._complete:
            self._expire(self._complete, done)
            self._complete = done
        if self._views:
            live = {(u.side, u.lo, u.hi) for u in self._units}
            self._views = {k: v for k, v in self._views.items() if k in live}
        # held output only grows until the release: its peak is now (summing it per hold cost more)
        self._held_peak = max(self._held_peak, self.held_rows())
        for p in self.active_ports():
            self._release(p)
        wms = [self._port_wm[i] for i, a in enumerate(self._active) if a]
        self._wm_out = max(self._wm_out, min(wms, default=NEG_INF))
        self._retain()
        return sum(b.num_rows for b in batches)

    def _append(self, s: int, b: pa.Table, seq0: int | np.ndarray) -> None:
        masks: list[np.ndarray | None] = []
        for p in self.ports:
            fn = p.filters[s]
            if fn is None or not self._active[p.index]:  # (an inactive port's mask is never read)
                masks.append(None)
                continue
            f = p.definition.side(s).filter
            assert f is not None
            r = evaluate_rows([fn], [f], b)
            self._reject_for(p, r.rejected)
            m = np.zeros(b.num_rows, bool)
            ok = np.asarray(truth_mask(r.values[0], r.batch.num_rows).to_numpy(zero_copy_only=False), bool)
            if r.kept is None:
                m = ok
            else:
                m[r.kept] = ok
            masks.append(m)
        live = [m for p, m in zip(self.ports, masks, strict=True) if self._active[p.index]]
        if self.spec.families[s] is Family.TIME and live and all(m is not None for m in live):
            # An element no active port selects can never be in a pair any port emits, and a port
            # added later sees only elements from its start on: it need not be held.  (Not under
            # [Rows N], where the window counts every element, selected or not.)
            keep = np.logical_or.reduce([m for m in live if m is not None])
            if not keep.all():
                at = np.flatnonzero(keep)
                self._unselected += len(keep) - len(at)
                if not len(at):
                    return
                b, seq0, masks = b.take(pa.array(at)), seq0 + at, [None if m is None else m[at] for m in masks]
        self._buf(s).append(b, seq0, masks)

    def _reject_for(self, p: Port, reasons: Sequence[str]) -> None:
        if reasons:
            saved = set(self.queries)
            self.queries = set(p.queries)
            try:
                self.reject_rows(reasons)
            finally:
                self.queries = saved

    def _make_units(self, s: int, lo: int, hi: int, budget: int) -> list[Unit]:
        if hi <= lo:  # (every element read was one no port selects)
            return []
        size = self.spec.options.unit or (hi - lo)
        if self.ctx.paced and self._probes:  # a unit's scans find about ``budget`` pairs (as measured)
            size = min(size, max(1, int(budget * self._probes / max(self._found, 1))))
        ts = self._buf(s).ts
        base = self._buf(s).base
        return [Unit(s, a, min(a + size, hi), int(ts[a - base]), 0) for a in range(lo, hi, size)]

    # -- scheduling (§3) -----------------------------------------------------------------
    def _step(self) -> int:
        """Do one (unit, band) of join work; return its work (elements probed + pairs examined)."""
        bands = self._bands
        self._units = [u for u in self._units if next_band(bands, u) is not None]
        if not self._units:
            return 0
        u, upto = pick(self.spec.options.policy, self._units, bands)
        work = self._scan(u, u.done, upto)
        self._steps += 1
        u.done = upto
        if next_band(bands, u) is None:
            self._units.remove(u)
        return max(work, 1)

    # -- the join step -------------------------------------------------------------------
    def _scan(self, u: Unit, done: int, upto: int) -> int:
        """Join elements ``u.lo … u.hi`` with the other input's band (done, upto]: the pairs each
        finds there, routed to the ports that hold both.
        """
        own, other = self._buf(u.side), self._buf(1 - u.side)
        v = self._view(u)
        lo = v.start(upto)
        hi = v.hz if done < 0 else np.minimum(v.hz, v.start(done))
        i, j, probed, examined = self._band_candidates(u, v, lo, hi, upto)
        work = probed + len(i)
        self._probes += probed
        self._examined += examined
        self._found += len(i)
        if not len(i):
            return work
        own.met_earlier(i, j)
        other.met_later(j, i)
        # which ports hold each pair — decided before the residual predicate runs, so it runs (and
        # rejects rows) only on pairs some query's own WHERE keeps, as each query alone would
        k = i - u.lo
        routes: list[tuple[Port, np.ndarray]] = []
        for p in self.active_ports():
            e = p.ext[1 - u.side]
            if e <= done:
                continue
            st = self._starts[p.index]
            keep = j >= v.start(e)[k]
            if not own.sees_all(p.index, st[u.side], p.definition.since):
                keep &= own.ok(i, p.index, st[u.side], p.definition.since)
            if not other.sees_all(p.index, st[1 - u.side], p.definition.since):
                keep &= other.ok(j, p.index, st[1 - u.side], p.definition.since)
            if v.own_fam is Family.ROWS:  # the arriving element is still in its own window at its instant
                keep &= i >= v.own_start(p.ext[u.side])[k]
            if keep.any():
                routes.append((p, keep))
        if not routes:
            return work
        some = np.logical_or.reduce([keep for _, keep in routes])
        i, j = i[some], j[some]
        pairs, kept = self._pairs(u.side, i, j, own.ts[i - own.base], 1)
        if pairs is None:
            return work
        for p, keep in routes:
            self._hold(p, pairs, keep[some][kept])
        return work

    def _view(self, u: Unit) -> UnitView:
        key = (u.side, u.lo, u.hi)
        v = self._views.get(key)
        if v is None:
            own, other = self._buf(u.side), self._buf(1 - u.side)
            self._views[key] = v = UnitView(u, own, other, self.spec.families[u.side], self.spec.families[1 - u.side])
        return v

    def _band_candidates(
        self, u: Unit, v: UnitView, lo: np.ndarray, hi: np.ndarray, upto: int
    ) -> tuple[np.ndarray, np.ndarray, int, int]:
        """The unit's candidates in one band (``lo ≤ j < hi`` per element), the elements probed and
        the pairs examined (the nested loop: every pair of the band; hashing: those with equal
        keys).  With an index a probe costs its matches whatever its range, so the unit's first
        band probes every band it will scan and the later bands select from those matches (no
        other partner can come: the read was a timestamp prefix of both inputs).
        """
        idx = v.idx
        if self._buf(u.side).index is None or self._buf(1 - u.side).index is None:
            i, j = self._candidates(u.side, idx, lo, hi)
            return i, j, len(idx), int(np.maximum(hi - lo, 0).sum()) if self._nested else len(i)
        ext = self._bands[u.side][-1]
        probed = 0
        if v.matches is None or v.matches[0] < ext:
            if upto >= ext:  # the last band: nothing to keep
                i, j = self._candidates(u.side, idx, lo, hi)
                return i, j, len(idx), len(i)
            v.matches = (ext, *self._candidates(u.side, idx, v.start(ext), v.hz))
            probed = len(idx)
        _, i, j = v.matches
        k = i - u.lo
        m = (j >= lo[k]) & (j < hi[k])
        return i[m], j[m], probed, int(m.sum())

    def _candidates(self, s: int, idx: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(outer, inner) absolute index pairs with ``lo ≤ inner < hi`` per outer element and equal keys."""
        empty_pair = (np.empty(0, np.int64), np.empty(0, np.int64))
        live = hi > lo
        if not live.any():
            return empty_pair
        idx, lo, hi = idx[live], lo[live], hi[live]
        own, other = self._buf(s), self._buf(1 - s)
        a, z = int(lo.min()), int(hi.max())
        keys = self.spec.keys
        if own.index is not None and other.index is not None:  # §3.4: the index, a probe costs its matches
            codes, valid = own.codes_at(idx)
            if valid is not None:  # a NULL key matches nothing
                idx, lo, hi, codes = idx[valid], lo[valid], hi[valid], codes[valid]
            q, j = other.index.probe(codes, lo, hi)
            return idx[q], j
        if self.spec.variant is Variant.HASH and keys:
            outer = own.rows(int(idx[0]), int(idx[-1]) + 1)
            inner = other.rows(a, z)
            oi = [k[s] for k in keys]
            ii = [k[1 - s] for k in keys]
            i_loc, j_loc = hash_match(outer, inner, META, META, oi, ii)
            i = i_loc + int(idx[0])
            j = j_loc + a
            # outer rows not in this unit's live set, and inner rows outside each one's band, go
            pos = np.searchsorted(idx, i)
            ok = (pos < len(idx)) & (idx[np.minimum(pos, len(idx) - 1)] == i)
            i, j, pos = i[ok], j[ok], pos[ok]
            ok = (j >= lo[pos]) & (j < hi[pos])
            return i[ok], j[ok]
        # nested loop (§3.1): every element of the band is checked
        lens = hi - lo
        i = np.repeat(idx, lens)
        starts = np.repeat(lo - np.concatenate([[0], np.cumsum(lens)[:-1]]), lens)
        j = np.arange(len(i), dtype=np.int64) + starts
        if keys and len(i):
            ok = np.ones(len(i), bool)
            for k in keys:
                a_col = own.take(i, [META + k[s]]).column(0)
                b_col = other.take(j, [META + k[1 - s]]).column(0)
                a_col, b_col = comparable(a_col, b_col)
                eq = pc.fill_null(pc.equal(a_col, b_col), False)
                ok &= np.asarray(eq.to_numpy(zero_copy_only=False), bool)
            i, j = i[ok], j[ok]
        return i, j

    def _pairs(
        self, s: int, i: np.ndarray, j: np.ndarray, ts: np.ndarray, sign: int
    ) -> tuple[pa.Table | None, np.ndarray]:
        """The joined rows of pairs (``i`` on input ``s``), stamped ``ts``, through the residual
        predicate; with the positions (in ``i``, ``j``) of the pairs it kept.
        """
        own, other = self._buf(s), self._buf(1 - s)
        li, ri = (i, j) if s == LEFT else (j, i)
        lb, rb = (own, other) if s == LEFT else (other, own)
        lt = lb.take(li)
        rt = rb.take(ri)
        cols = lt.columns[META:] + rt.columns[META:]
        b = make(ts, sign, cols, self.types)
        kept = np.arange(len(i), dtype=np.int64)
        if self.residual is not None and self.spec.residual is not None:
            r = evaluate_rows([self.residual], [self.spec.residual], b)
            self.reject_rows(r.rejected)
            if r.kept is not None:
                kept = kept[r.kept]
            mask = np.asarray(truth_mask(r.values[0], r.batch.num_rows).to_numpy(zero_copy_only=False), bool)
            b, kept = r.batch.filter(pa.array(mask)), kept[mask]
        return (b if b.num_rows else None), kept

    def _hold(self, p: Port, pairs: pa.Table, keep: np.ndarray) -> None:
        if keep.all():
            out = pairs
        elif keep.any():
            out = pairs.filter(pa.array(keep))
        else:
            return
        self._held[p.index].append(out)

    # -- deletions: a pair leaves when the first of its elements leaves the port's window --
    def _expire(self, after: int, upto: int) -> None:
        """The deletions of every port at instants ``(after, upto]``: for each input, the elements
        leaving some port's window that may have partners in it probe the other buffer once; each
        (element, port) keeps the partners in its range.
        """
        # where the units still owing join work start, per input: partners there may be unseen
        pending = [min((u.lo for u in self._units if u.side == t), default=POS_INF) for t in (LEFT, RIGHT)]
        for s in (LEFT, RIGHT):
            own, other = self._buf(s), self._buf(1 - s)
            fam, fam_other = self.spec.families[s], self.spec.families[1 - s]
            parts: list[tuple[np.ndarray, ...]] = []
            ports = [p for p in self.active_ports() if p.ext[s] < POS_INF]
            if not ports or not len(own):
                continue
            # which elements leave each port's window in (after, upto]: one search for every port
            e_all = np.array([p.ext[s] for p in ports], np.int64)
            if fam is Family.TIME:  # x leaves at ts + e + 1
                ends = np.asarray(own.count_upto(np.concatenate([after - e_all - 1, upto - e_all - 1])), np.int64)
                firsts, lasts = np.maximum(ends[: len(ports)], own.base), ends[len(ports) :]
            else:  # [Rows N]: x leaves when the element N after it arrives
                a, z = (int(c) for c in own.count_upto(np.array([after, upto], np.int64)))
                firsts, lasts = np.maximum(a - e_all, own.base), z - e_all
            for p, e_own, first, last in zip(ports, e_all.tolist(), firsts.tolist(), lasts.tolist(), strict=True):
                if first >= last:
                    continue
                x = np.arange(first, last, dtype=np.int64)
                if fam is Family.TIME:
                    leave = own.ts[x - own.base] + e_own + 1
                else:
                    leave = own.ts[x + e_own - own.base]
                if len(x) and pending[1 - s] >= POS_INF:  # all partners met: most elements have none
                    loc = x - own.base
                    met = (own.later[loc] < POS_INF) | (own.earlier[loc] >= 0) | (x >= pending[s])
                    x, leave = x[met], leave[met]
                if not len(x):
                    continue
                st = self._starts[p.index]
                keep = (own.ts[x - own.base] < leave) & own.ok(x, p.index, st[s], p.definition.since)
                x, leave = x[keep], leave[keep]
                e_other = p.ext[1 - s]
                # partners: in their window at leave − 1 (they leave at or after it); the left
                # element of a pair leaving together emits it, so the right one wants them later
                at = leave - 1 if s == LEFT else leave
                lo = np.maximum(other.window_start(fam_other, e_other, at), other.base)
                hi = np.asarray(other.count_upto(leave - 1), np.int64)
                # a partner in [lo, hi) was met by a join step (the later of the two finds the pair
                # when it scans: every pair a port held was) unless that step is still owed
                loc = x - own.base
                live = (hi > lo) & (
                    (own.later[loc] < hi) | (own.earlier[loc] >= lo) | (hi > pending[1 - s]) | (x >= pending[s])
                )
                if live.any():
                    parts.append((x[live], leave[live], np.full(int(live.sum()), p.index), lo[live], hi[live]))
            if parts:
                self._expire_side(s, *(np.concatenate(c) for c in zip(*parts, strict=True)))

    def _expire_side(
        self, s: int, x: np.ndarray, leave: np.ndarray, port: np.ndarray, lo: np.ndarray, hi: np.ndarray
    ) -> None:
        """Deletions for entries (element ``x`` of input ``s`` leaves ``port``'s window at ``leave``;
        its partners there are ``lo ≤ j < hi`` of the other input), found with one probe.
        """
        order = np.lexsort((port, x))
        x, leave, port, lo, hi = x[order], leave[order], port[order], lo[order], hi[order]
        i, j, e = self._entry_pairs(s, x, lo, hi)
        if not len(i):
            return
        # the partners each entry's port sees, before the residual predicate runs (see _scan)
        other = self._buf(1 - s)
        seen = np.zeros(len(i), bool)
        for p in self.active_ports():
            mine = port[e] == p.index
            if mine.any():
                st = self._starts[p.index]
                seen |= mine & other.ok(j, p.index, st[1 - s], p.definition.since)
        i, j, e = i[seen], j[seen], e[seen]
        if not len(i):
            return
        pairs, kept = self._pairs(s, i, j, leave[e], -1)
        if pairs is None:
            return
        e = e[kept]
        for p in self.active_ports():
            mine = port[e] == p.index
            if mine.any():
                self._hold(p, pairs, mine)

    def _entry_pairs(
        self, s: int, x: np.ndarray, lo: np.ndarray, hi: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(element, partner, entry) for entries sorted by element: element ``x[e]`` of input ``s``
        with its partners ``lo[e] ≤ j < hi[e]``.
        """
        own, other = self._buf(s), self._buf(1 - s).index
        if own.index is not None and other is not None:  # one probe per entry, costing its matches
            e = np.arange(len(x), dtype=np.int64)
            codes, valid = own.codes_at(x)
            if valid is not None:  # a NULL key matches nothing
                e, codes = e[valid], codes[valid]
            q, j = other.probe(codes, lo[e], hi[e])
            return x[e[q]], j, e[q]
        # one probe per element over the union of its entries' ranges, each pair then kept once per
        # entry whose range holds the partner
        ux, first, counts = np.unique(x, return_index=True, return_counts=True)
        i, j = self._candidates(s, ux, np.minimum.reduceat(lo, first), np.maximum.reduceat(hi, first))
        if not len(i):
            return i, j, i
        u = np.searchsorted(ux, i)
        n = counts[u]
        rep = np.repeat(np.arange(len(i)), n)
        within = np.arange(len(rep)) - np.repeat(np.cumsum(n) - n, n)
        e = first[u][rep] + within
        i, j = i[rep], j[rep]
        ok = (j >= lo[e]) & (j < hi[e])
        return i[ok], j[ok], e[ok]

    # -- the routing step's ordered release (§3.2) ---------------------------------------
    def _frontier(self, p: Port) -> int:
        """The first instant for which some unit still owes this port join work (POS_INF: none)."""
        f = POS_INF
        for u in self._units:
            if u.done < p.ext[1 - u.side] and u.first_ts < f:
                buf = self._buf(u.side)
                if buf.seq[u.hi - 1 - buf.base] >= self._starts[p.index][u.side]:
                    f = u.first_ts
        return f

    def _limits(self, p: Port) -> tuple[int, int]:
        """(release output up to, complete up to) for a port."""
        f = self._frontier(p) if self._units else POS_INF
        complete = min(self._complete, f - 1)
        if f >= POS_INF:
            return self._complete, complete
        if self.spec.options.policy is Policy.SWF:  # held until the unit has scanned the window
            return complete, complete
        return min(self._complete, f), complete  # the order is static: release early (§3.3)

    def _releasable(self, p: Port) -> bool:
        upto, complete = self._limits(p)
        if complete > self._port_wm[p.index]:
            return True
        return any(b.num_rows and int(ts_of(b).min()) <= upto for b in self._held[p.index])

    def _release(self, p: Port) -> None:
        upto, complete = self._limits(p)
        held = self._held[p.index]
        if held:
            b = sort_by_ts(held[0] if len(held) == 1 else concat(held, self.types))
            k = int(np.searchsorted(ts_of(b), upto, side="right"))
            if k:
                out = b.slice(0, k)
                self.emit(out, p.index)
                self._released += k
                plus = int(np.count_nonzero(np.asarray(out.column(SIGN).to_numpy()) > 0))
                self._inserted[p.index] += plus
                self._deleted[p.index] += k - plus
                if self.on_release is not None:
                    self.on_release(p.index, out)
            self._held[p.index] = [b.slice(k)] if k < b.num_rows else []
        if complete > self._port_wm[p.index]:
            self._port_wm[p.index] = complete
            self.outputs[p.index].advance(complete)

    def held_rows(self) -> int:
        return sum(b.num_rows for h in self._held for b in h)

    # -- what the buffers must keep ------------------------------------------------------
    def _retain(self) -> None:
        act = self.active_ports()
        if not act:
            return
        for s in (LEFT, RIGHT):
            fam = self.spec.families[s]
            buf = self._buf(s)
            if not len(buf):
                continue
            e_max = max(p.ext[s] for p in act)
            if e_max >= POS_INF:
                continue
            # an element goes once it has left every port's window by the instant complete
            if fam is Family.TIME:
                cut = int(buf.count_upto(self._complete - e_max - 1))
            else:
                cut = int(buf.count_upto(self._complete)) - e_max
            # ... and no unit of the other input still has it to scan
            e_scan = max(self._bands[1 - s], default=0)
            for u in self._units:
                if u.side != s:
                    first = self._buf(u.side).ts[u.lo - self._buf(u.side).base]
                    cut = min(cut, int(buf.window_start(fam, e_scan, np.array([first]))[0]))
            # ... nor of its own (a unit's own elements are read as it scans)
            for u in self._units:
                if u.side == s:
                    cut = min(cut, u.lo)
            buf.drop_before(cut)

    # -- inspection ----------------------------------------------------------------------
    def explain_line(self) -> str:
        bits = [self.kind]
        if self.detail:
            bits.append(f"[{self.detail}]")
        for p in self.active_ports():
            d = p.definition
            bits.append(port_line(self, p.index, p.queries, f"{d.left.describe()} ⋈ {d.right.describe()}", d.since))
        bits.append(f"synopsis {self.state_bytes()} B")
        return " ".join(bits)

    def synopses(self) -> list[Any]:
        return [self.left, self.right]

    def most_bytes_per_element(self) -> float:
        # an element pairs at most with all the other input holds or has waiting, for every active port
        held = [(len(b), len(b), b.nbytes) for b in (self.left, self.right)]
        return most_per_element(self, held, len(self.active_ports()))

    def state_bytes(self) -> int:
        return self.left.nbytes + self.right.nbytes + sum(nbytes(b) for h in self._held for b in h)

    def state_by_input(self) -> list[int]:
        return [self.left.nbytes, self.right.nbytes]  # (the output held back: shared)

    def pending_elements(self) -> int:
        """Elements waiting in the SchedulingQueues (§5.3's input buffer)."""
        return sum(u.hi - u.lo for u in self._units)

    def statistics(self) -> SharedJoinStats:
        """Every operator's statistics and the join's own counts (see :class:`SharedJoinStats`).

        >>> from sluice.backends.embedded import EmbeddedEngine
        >>> eng = EmbeddedEngine(start=0)
        >>> _ = eng.execute("REGISTER STREAM A (K integer); REGISTER STREAM B (K integer)")
        >>> for w in (1, 5):
        ...     _ = eng.register_query(f"SELECT * FROM A [Range {w}], B [Range {w}] WHERE A.K = B.K")
        >>> eng.push("A", [(0, 1)]); eng.push("B", [(2, 1)]); eng.close(20)
        >>> st = next(s for s in eng.statistics().operators if isinstance(s, SharedJoinStats))
        >>> st.found, st.inserted, st.deleted, st.pending_units, st.held_rows
        (1, (0, 1), (0, 1), 0, 0)
        """
        b = super().statistics()
        return SharedJoinStats(
            *(b.name, b.kind, b.tuples_in, b.tuples_out, b.runs, b.seconds, b.state_bytes, b.rejected),
            steps=self._steps,
            probes=self._probes,
            examined=self._examined,
            found=self._found,
            work=self._work,
            inserted=tuple(self._inserted),
            deleted=tuple(self._deleted),
            pending_units=len(self._units),
            pending_elements=self.pending_elements(),
            held_rows=self.held_rows(),
            held_peak=max(self._held_peak, self.held_rows()),
            unselected=self._unselected,
        )


def _name(f: Family | None) -> str:
    return "unshared" if f is None else f.value


def _compiled(e: BExpr | None) -> VFn | None:
    return None if e is None else compile_expr(e)


def hash_match(
    left: pa.Table, right: pa.Table, loff: int, roff: int, lcols: Sequence[int], rcols: Sequence[int]
) -> tuple[np.ndarray, np.ndarray]:
    """Row index pairs (i, j) whose key columns are equal (``sluice.runtime.keys.key_pairs``)."""
    lk, rk = [left.column(loff + c) for c in lcols], [right.column(roff + c) for c in rcols]
    return key_pairs(lk, rk, left.num_rows, right.num_rows)
