"""Relation → stream (seed §2.2) and the query output.

Istream and Dstream net each *complete* instant (``ts ≤`` watermark): a tuple inserted and
deleted within one instant was never in R(τ).  Over an insert-only input Istream is the
identity.  Rstream emits all of R(τ) at every tick from the engine's first instant.  Each
instant's elements leave in canonical order, the order the reference evaluator gives a
derived stream (which a later ``[Rows N]`` depends on).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pyarrow as pa
from sluice.runtime.batch import NEG_INF, canonical, concat, make, net, sort_by_ts, ts_of
from sluice.runtime.operators.base import Unary
from sluice.runtime.weights import W, WeightedState


class _Completing(Unary):
    """Holds elements until their instant is complete."""

    def setup_buffer(self) -> None:
        self._held: list[pa.Table] = []

    def process(self, b: pa.Table) -> None:
        self._held.append(b)

    def _complete(self, wm: int) -> pa.Table | None:
        if not self._held:
            return None
        allb = concat(self._held, self.types)
        k = int(np.searchsorted(ts_of(allb), wm, side="right"))
        done, rest = allb.slice(0, k), allb.slice(k)
        self._held = [rest] if rest.num_rows else []
        return done if done.num_rows else None

    def state_bytes(self) -> int:
        return sum(b.nbytes for b in self._held)


class IDstream(_Completing):
    def setup(self, op: str, passthrough: bool) -> IDstream:
        self.op = op
        self.passthrough = passthrough
        self.insert_only = True
        self.setup_buffer()
        return self

    def process(self, b: pa.Table) -> None:
        if self.passthrough:
            self.emit(b)
        else:
            self._held.append(b)

    def progress(self, wm: int) -> None:
        done = self._complete(wm)
        if done is not None:
            d = net(done, self.types)
            if d.num_rows:
                want = 1 if self.op == "ISTREAM" else -1
                d = d.filter(pa.array(d.column(1).to_numpy() == want))
                if d.num_rows:
                    d = d.set_column(1, "__sign", pa.array(np.ones(d.num_rows, dtype=np.int8)))
                    self.emit(canonical(d))
        self.advance(wm)


class Rstream(_Completing):
    def setup(self) -> Rstream:
        self.insert_only = True
        self.state = WeightedState(self.types)
        self._tick: int | None = None  # last tick emitted
        self.setup_buffer()
        return self

    def progress(self, wm: int) -> None:
        done = self._complete(wm)
        start = self.ctx.start
        if start is None or wm < start:
            self.advance(wm)
            return
        tick = start if self._tick is None else self._tick + 1
        pts = ts_of(done) if done is not None else np.empty(0, np.int64)
        pos = 0
        out = []
        while tick <= wm:
            k = int(np.searchsorted(pts, tick, side="right"))
            if k > pos:
                assert done is not None
                self.state.add(done.slice(pos, k - pos))
                pos = k
            rel = self.state.consolidated()
            if rel.num_rows:
                w = rel.column(W).to_numpy()
                idx = np.repeat(np.arange(rel.num_rows), w)
                cols = [rel.column(i).take(pa.array(idx)) for i in range(len(self.types))]
                out.append(canonical(make(np.full(len(idx), tick), 1, cols, self.types)))
                tick += 1
            else:  # R is empty until its next change: skip the empty ticks
                tick = max(tick + 1, int(pts[pos]) if pos < len(pts) else wm + 1)
        self._tick = wm
        if out:
            self.emit(concat(out, self.types))
        self.advance(wm)


class Output(_Completing):
    """A query's output: relation changes netted per complete instant; stream elements as produced.

    ``deliver`` receives each finished batch (deletions before insertions within an instant).
    """

    def setup(self, is_stream: bool, deliver: Callable[[pa.Table], None]) -> Output:
        self.is_stream = is_stream
        self.deliver = deliver
        self.setup_buffer()
        return self

    def process(self, b: pa.Table) -> None:
        if self.is_stream:
            self._out += b.num_rows
            self.deliver(b)
        else:
            self._held.append(b)

    def progress(self, wm: int) -> None:
        done = self._complete(wm)
        if done is not None:
            d = canonical(net(done, self.types))
            if d.num_rows:
                signs = d.column(1).to_numpy()
                order = np.lexsort((signs, ts_of(d)))  # per instant: deletions, then insertions
                d = d.take(pa.array(order))
                self._out += d.num_rows
                self.deliver(d)
        self.advance(wm)

    def flush(self) -> None:
        self.progress(2**62)


__all__ = ["IDstream", "NEG_INF", "Output", "Rstream", "sort_by_ts"]
