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
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa
from sluice.plan.logical import StreamOpKind
from sluice.plan.semantics import sort_key
from sluice.runtime.batch import canonical, concat, from_signed_rows, net, to_elements, ts_of
from sluice.runtime.operators.base import OperatorSpec, Unary


@dataclass(frozen=True, slots=True)
class IDstreamSpec(OperatorSpec):
    op: StreamOpKind  # ISTREAM or DSTREAM
    passthrough: bool  # Istream over an insert-only input: the identity
    # no instant of the input holds a tuple with both signs and no reader needs canonical order,
    # so R(τ) − R(τ−1) is the instant's insertions (deletions for Dstream), emitted as they
    # arrive — no holding, netting or sorting
    pure: bool


@dataclass(frozen=True, slots=True)
class RstreamSpec(OperatorSpec):
    """Rstream has no parameters of its own."""


@dataclass(frozen=True, slots=True)
class OutputSpec(OperatorSpec):
    is_stream: bool  # the query's answer is a stream (else a relation's changes, netted)
    pure: bool  # the input needs no netting (see Operator.pure)


@dataclass
class _Completing(Unary):
    """Holds elements until their instant is complete."""

    STATE: ClassVar[tuple[str, ...]] = ("_held",)

    def __post_init__(self) -> None:
        super().__post_init__()
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

    def holding(self) -> int:
        """Elements read and held until their instant is complete (not yet passed on)."""
        return sum(b.num_rows for b in self._held)


@dataclass
class IDstream(_Completing):
    spec: IDstreamSpec

    def __post_init__(self) -> None:
        super().__post_init__()
        self.pure = self.spec.pure
        self.insert_only = True

    def process(self, b: pa.Table) -> None:
        if self.spec.passthrough:
            self.emit(b)
        elif self.spec.pure:
            want = 1 if self.spec.op is StreamOpKind.ISTREAM else -1
            d = b.filter(pa.array(b.column(1).to_numpy() == want))
            if d.num_rows:
                self.emit(d if want == 1 else d.set_column(1, "__sign", pa.array(np.ones(d.num_rows, np.int8))))
        else:
            self._held.append(b)

    def quiet_in_time(self) -> bool:
        return not self._held  # (passing through or pure, it never holds: it emits as it reads)

    def progress(self, wm: int) -> None:
        done = self._complete(wm)
        if done is not None:
            d = net(done, self.types)
            if d.num_rows:
                want = 1 if self.spec.op is StreamOpKind.ISTREAM else -1
                d = d.filter(pa.array(d.column(1).to_numpy() == want))
                if d.num_rows:
                    d = d.set_column(1, "__sign", pa.array(np.ones(d.num_rows, dtype=np.int8)))
                    self.emit(canonical(d))
        self.advance(wm)


@dataclass
class Rstream(_Completing):
    spec: RstreamSpec
    STATE = ("state", "_tick", "_table")

    def __post_init__(self) -> None:
        super().__post_init__()
        self.insert_only = True
        self.state: Counter[tuple[Any, ...]] = Counter()
        self._tick: int | None = None  # last tick emitted
        self._table: pa.Table | None = None  # R(τ) in canonical order, while it does not change

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


@dataclass
class Output(_Completing):
    """A query's output: relation changes netted per complete instant; stream elements as produced.

    ``deliver`` receives each finished batch (deletions before insertions within an instant).  It
    is wiring, like the queues, not part of the spec: the engine's callback into the query handle.
    """

    spec: OutputSpec
    deliver: Callable[[pa.Table], None] = field(kw_only=True)

    def __post_init__(self) -> None:
        super().__post_init__()
        self.pure = self.spec.pure

    def process(self, b: pa.Table) -> None:
        if self.spec.is_stream:
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
