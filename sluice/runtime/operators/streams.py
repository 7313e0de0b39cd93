"""Relation → stream (seed §2.2) and the query output.

Istream and Dstream net each *complete* instant (``ts ≤`` watermark): a tuple inserted and
deleted within one instant was never in R(τ).  Over an insert-only input Istream is the
identity.  Rstream emits all of R(τ) at every tick from the engine's first instant.  Each
instant's elements leave in canonical order, the order the reference evaluator gives a
derived stream (which a later ``[Rows N]`` depends on).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa
from sluice.plan.logical import StreamOpKind
from sluice.plan.semantics import sort_key
from sluice.runtime.batch import canonical, concat, from_signed_rows, net, to_elements, ts_of
from sluice.runtime.operators.base import Unary


class _Completing(Unary):
    """Holds elements until their instant is complete."""

    STATE: ClassVar[tuple[str, ...]] = ("_held",)

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
    def setup(self, op: StreamOpKind, passthrough: bool, pure: bool = False) -> IDstream:
        """``pure``: no instant of the input holds a tuple with both signs and no reader needs
        canonical order, so R(τ) − R(τ−1) is the instant's insertions (deletions for Dstream),
        emitted as they arrive — no holding, netting or sorting.
        """
        self.op = op
        self.passthrough = passthrough
        self.pure = pure
        self.insert_only = True
        self.setup_buffer()
        return self

    def process(self, b: pa.Table) -> None:
        if self.passthrough:
            self.emit(b)
        elif self.pure:
            want = 1 if self.op is StreamOpKind.ISTREAM else -1
            d = b.filter(pa.array(b.column(1).to_numpy() == want))
            if d.num_rows:
                self.emit(d if want == 1 else d.set_column(1, "__sign", pa.array(np.ones(d.num_rows, np.int8))))
        else:
            self._held.append(b)

    def progress(self, wm: int) -> None:
        done = self._complete(wm)
        if done is not None:
            d = net(done, self.types)
            if d.num_rows:
                want = 1 if self.op is StreamOpKind.ISTREAM else -1
                d = d.filter(pa.array(d.column(1).to_numpy() == want))
                if d.num_rows:
                    d = d.set_column(1, "__sign", pa.array(np.ones(d.num_rows, dtype=np.int8)))
                    self.emit(canonical(d))
        self.advance(wm)


class Rstream(_Completing):
    STATE = ("state", "_tick", "_table")

    def setup(self) -> Rstream:
        self.insert_only = True
        self.state: Counter[tuple[Any, ...]] = Counter()
        self._tick: int | None = None  # last tick emitted
        self._table: pa.Table | None = None  # R(τ) in canonical order, while it does not change
        self.setup_buffer()
        return self

    def progress(self, wm: int) -> None:
        done = self._complete(wm)
        start = self.ctx.start
        if start is None or wm < start:
            self.advance(wm)
            return
        tick = start if self._tick is None else self._tick + 1
        changes = to_elements(done) if done is not None else []
        pos = 0
        pieces: list[pa.Table] = []
        while tick <= wm:
            while pos < len(changes) and changes[pos][0] <= tick:
                _, sign, row = changes[pos]
                self.state[row] += 1 if sign == "+" else -1
                if self.state[row] == 0:
                    del self.state[row]
                self._table = None
                pos += 1
            # R is constant until its next change: emit it once per tick of that stretch, vectorised
            # (an empty R's ticks are skipped)
            nxt = min(changes[pos][0] if pos < len(changes) else wm + 1, wm + 1)
            if self.state:
                pieces.append(self._repeat(tick, nxt - tick))
            tick = nxt
        self._tick = wm
        if pieces:
            self.emit(concat(pieces, self.types))
        self.advance(wm)

    def _repeat(self, tick: int, n: int) -> pa.Table:
        """R at each of the n ticks from ``tick`` (each tick's rows in canonical order)."""
        if self._table is None:
            rows = [(0, 1, r) for r, k in sorted(self.state.items(), key=lambda kv: sort_key(kv[0])) for _ in range(k)]
            self._table = from_signed_rows(rows, self.types)
        k = self._table.num_rows
        out = self._table.take(pa.array(np.tile(np.arange(k), n)))
        return out.set_column(0, "__ts", pa.array(np.repeat(np.arange(tick, tick + n, dtype=np.int64), k)))

    def state_bytes(self) -> int:
        return super().state_bytes() + 64 * len(self.state)


class Output(_Completing):
    """A query's output: relation changes netted per complete instant; stream elements as produced.

    ``deliver`` receives each finished batch (deletions before insertions within an instant).
    """

    def setup(self, is_stream: bool, deliver: Callable[[pa.Table], None], pure: bool = False) -> Output:
        self.is_stream = is_stream
        self.deliver = deliver
        self.pure = pure  # the input needs no netting (see Operator.pure)
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
            # a pure input needs no netting, and its instants no canonical order: only the
            # contract's "deletions, then insertions" (a stable sort on two integer columns)
            d = done if self.pure else canonical(net(done, self.types))
            if d.num_rows:
                signs = d.column(1).to_numpy()
                order = np.lexsort((signs, ts_of(d)))  # per instant: deletions, then insertions
                d = d.take(pa.array(order))
                self._out += d.num_rows
                self.deliver(d)
        self.advance(wm)

    def flush(self) -> None:
        self.progress(2**62)
