"""Stream and relation sources: where pushed elements enter a plan.

A stream source accepts elements up to ``slack`` ticks out of order.  Having seen timestamp M,
it knows every instant ≤ M − slack − 1 is complete (an automatic heartbeat); an explicit
heartbeat(τ) says the same of τ.  An element stamped at or before a complete instant is *late*:
it is rejected and counted with its reason, never silently dropped.  Released elements leave
in timestamp order; ties keep arrival order (which ``[Rows N]`` depends on).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
from sluice.catalog import Schema
from sluice.runtime.batch import NEG_INF, concat, from_rows, sort_by_ts, to_elements, ts_of
from sluice.runtime.operators.base import ExecContext, Operator, OperatorSpec
from sluice.runtime.queue import Queue
from sluice.runtime.stats import SourceStats

MAX_MESSAGES = 100


@dataclass(frozen=True, slots=True)
class SourceSpec(OperatorSpec):
    slack: int  # ticks an element may arrive out of order
    relation: bool  # a relation (insertions and deletions), else a stream


@dataclass(frozen=True, slots=True)
class SinceSpec(OperatorSpec):
    start: int  # the query's first instant
    relation: bool  # it reads a relation's source
    prime: tuple[tuple[Any, ...], ...]  # the relation's rows at registration (inserted at ``start``)


class Source(Operator):
    """Built by the engine, not the planner: from a registered stream's or relation's definition."""

    spec: SourceSpec
    STATE = ("_pending", "_buffered", "max_seen", "heartbeat_ts", "accepted", "rejected", "messages", "_contents")

    def __init__(self, name: str, schema: Schema, ctx: ExecContext, slack: int = 0, relation: bool = False) -> None:
        super().__init__(SourceSpec(schema, slack, relation), name, [], Queue(name, schema.types), ctx)
        self.scale = 1  # ticks per unit of the timestamps pushed here (the engine sets it)
        self.insert_only = not relation
        self._pending: list[pa.Table] = []
        self._buffered = 0
        self.max_seen = NEG_INF
        self.heartbeat_ts = NEG_INF
        self.accepted = 0
        self.rejected: Counter[str] = Counter()
        self.messages: list[str] = []
        self._contents: Counter[tuple[Any, ...]] = Counter()  # relations: what is in it now

    @property
    def slack(self) -> int:
        return self.spec.slack

    @property
    def relation(self) -> bool:
        return self.spec.relation

    @property
    def kind(self) -> str:
        return "RelationSource" if self.relation else "StreamSource"

    def contents(self) -> tuple[tuple[Any, ...], ...]:
        """A relation's rows now, each as often as it holds it (what a query registered now sees)."""
        return tuple(row for row, n in self._contents.items() for _ in range(n))

    def reject(self, reason: str, message: str, n: int = 1) -> None:
        self.rejected[reason] += n
        if len(self.messages) < MAX_MESSAGES:
            self.messages.append(message)

    def complete_upto(self) -> int:
        """Every instant ≤ this is complete on this source."""
        auto = self.max_seen - self.slack - 1 if self.max_seen > NEG_INF else NEG_INF
        return max(self.heartbeat_ts, auto)

    def admit(self, batch: pa.Table, where: str = "") -> pa.Table:
        """The elements of a typed batch that are not late, with timestamps in ticks; late ones
        are rejected with their reason and the rest count as seen (for the slack's completion).
        """
        if batch.num_rows == 0:
            return batch
        if self.scale != 1:
            batch = batch.set_column(0, "__ts", pa.array(ts_of(batch) * self.scale))
        ts = ts_of(batch)
        # each element against what was complete when it arrived — the elements before it in this
        # batch count as seen — so the answer does not depend on how the input was batched
        seen = np.maximum.accumulate(np.concatenate(([self.max_seen], ts[:-1])))
        wide = self.slack >= 2**62  # seen − slack − 1 may not fit 64 bits: Python integers
        lag = seen.astype(object) if wide else np.where(seen > NEG_INF, seen, 0)
        auto = np.where(seen > NEG_INF, lag - (self.slack + 1), NEG_INF)
        done = np.maximum(auto, self.heartbeat_ts)
        late = ts <= done
        if late.any():
            idx = np.flatnonzero(late)
            for i in idx[:5]:
                self.reject(
                    "late",
                    f"{self.name}{where}: element at ts {int(ts[i])} arrived after instant {int(done[i])} was "
                    f"complete (slack {self.slack})",
                    1,
                )
            if len(idx) > 5:
                self.rejected["late"] += len(idx) - 5
            batch = batch.filter(pa.array(~late))
            ts = ts[~late]
        if batch.num_rows:
            self.max_seen = max(self.max_seen, int(ts.max()))
        return batch

    def push(self, batch: pa.Table, where: str = "") -> None:
        """Accept a typed batch (``__ts``, ``__sign``, attributes); late elements are rejected."""
        batch = self.admit(batch, where)
        if batch.num_rows == 0:
            return
        self._pending.append(batch)
        self._buffered += batch.num_rows
        self.accepted += batch.num_rows

    def heartbeat(self, ts: int, scaled: bool = False) -> None:
        """Instants up to ``ts`` (in this source's unit; in ticks if ``scaled``) are complete."""
        tick = ts if scaled else (ts + 1) * self.scale - 1
        self.heartbeat_ts = max(self.heartbeat_ts, tick)

    def close(self, until: int | None = None) -> None:
        """End of input: every instant up to ``until`` (default: the last timestamp seen) completes."""
        last = self.max_seen if until is None else max(until, self.max_seen)
        self.heartbeat(last, scaled=True)

    def has_work(self) -> bool:
        return self._buffered > 0 and self._releasable() or self.complete_upto() > self._wm_out

    def _releasable(self) -> bool:
        done = self.complete_upto()
        return any(int(ts_of(b).min()) <= done for b in self._pending)

    def _run(self, budget: int) -> int:
        done = self.complete_upto()
        n = 0
        if self._pending:
            allb = sort_by_ts(concat(self._pending, self.types))
            ts = ts_of(allb)
            k = int(np.searchsorted(ts, done, side="right"))
            out, rest = allb.slice(0, k), allb.slice(k)
            self._pending = [rest] if rest.num_rows else []
            self._buffered = rest.num_rows
            if out.num_rows:
                if self.ctx.start is None:
                    self.ctx.start = int(ts[0])
                if self.relation:
                    out = self._check_deletions(out)
                self.emit(out)
                n = out.num_rows
        if self.ctx.start is None and done > NEG_INF:
            self.ctx.start = done
        self.advance(done)
        return n

    def _check_deletions(self, b: pa.Table) -> pa.Table:
        """A relation may only delete what it holds; a bad deletion is rejected with its row."""
        keep = np.ones(b.num_rows, dtype=bool)
        for i, (t, sign, row) in enumerate(to_elements(b)):
            if sign == "+":
                self._contents[row] += 1
            elif self._contents[row] > 0:
                self._contents[row] -= 1
            else:
                keep[i] = False
                self.accepted -= 1  # it was counted when pushed
                self.reject("absent deletion", f"{self.name}: deletion of {row!r} at {t}, which is not in it")
        return b if keep.all() else b.filter(pa.array(keep))

    def source_statistics(self) -> SourceStats:
        return SourceStats(
            self.name,
            self.accepted,
            sum(self.rejected.values()),
            tuple(sorted(self.rejected.items())),
            self.complete_upto(),
            self._buffered,
        )

    def state_bytes(self) -> int:
        return sum(b.nbytes for b in self._pending)


@dataclass
class Since(Operator):
    """Where a query registered while the engine runs reads a source (STREAM §3 assumes queries
    are registered before their streams produce; this moves that moment to the query's first
    instant τ0).  It reads only what the source releases from registration on: a stream's
    elements with ``ts ≥ τ0``; a relation's contents at registration as insertions at τ0, then
    its changes (any stamped before τ0 apply at τ0).
    """

    spec: SinceSpec
    # the rows to prime with are state, not only spec: an engine restored from a snapshot was
    # built when the relation may have held other rows
    STATE = ("_prime", "_primed")

    def __post_init__(self) -> None:
        super().__post_init__()
        self._prime = list(self.spec.prime)
        self._primed = not self._prime

    def declare(self, inputs: Sequence[Operator]) -> None:
        self.insert_only = inputs[0].insert_only

    def has_work(self) -> bool:
        return not self._primed or super().has_work()

    def _run(self, budget: int) -> int:
        if not self._primed:
            self._primed = True
            self.emit(from_rows([(self.spec.start, row) for row in self._prime], self.types))
        r = self.readers[0]
        b = r.read(budget)
        if b.num_rows:
            ts = ts_of(b)
            start = self.spec.start
            if self.spec.relation:
                if ts[0] < start:
                    b = b.set_column(0, "__ts", pa.array(np.maximum(ts, start)))
            elif ts[0] < start:
                b = b.filter(pa.array(ts >= start))
            if b.num_rows:
                self.emit(b)
        self.advance(r.watermark())
        return b.num_rows
