"""Stream and relation sources: where pushed elements enter a plan.

A source admits elements by the lateness rule (``sluice.runtime.admission``: up to ``slack``
ticks out of order; late ones rejected and counted).  Released elements leave in timestamp
order; ties keep arrival order (which ``[Rows N]`` depends on).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import pyarrow as pa
from sluice.catalog import Schema
from sluice.cql.ast import StreamConstraint
from sluice.errors import SluiceError
from sluice.runtime.admission import Admission
from sluice.runtime.batch import META, NEG_INF, concat, from_rows, sort_by_ts, to_elements, ts_of
from sluice.runtime.constraints import Constraints, PunctuationLog, log_column
from sluice.runtime.operators.base import ExecContext, Operator, OperatorSpec
from sluice.runtime.queue import Queue
from sluice.runtime.stats import SourceStats


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
    STATE = ("_pending", "_buffered", "_contents", "_static", "_static_out", "_lo")
    PARTS = ("admission", "checker", "punctuations")
    # the bytes of ``_pending`` (None: to be summed again) — memory is measured at every admission
    # under a limit, and a Table's ``nbytes`` costs ~15 µs: summed over a backlog of small pushes
    # at each one, it made them quadratic
    # and the sorted stamps of ``_pending`` (None: to be gathered again) — its earliest was read
    # several times an admission, each batch's min taken anew: 6,000 one-row pushes with no run
    # between them ran at 110 a second (to each of three streams: 3,594 now)
    CACHES = ("_pending_bytes", "_pending_ts")

    def __init__(
        self,
        name: str,
        schema: Schema,
        ctx: ExecContext,
        slack: int = 0,
        relation: bool = False,
        constraints: tuple[StreamConstraint, ...] = (),
    ) -> None:
        super().__init__(SourceSpec(schema, slack, relation), name, [], Queue(name, schema.types), ctx)
        self.admission = Admission(name, slack)  # the lateness rule and what it rejected (the engine sets its scale)
        # a stream's k-constraints and punctuations (STREAM §4.1), checked as it releases its elements
        self.punctuations = PunctuationLog(name)
        ctx.punctuations[name.lower()] = self.punctuations
        # (a FOREIGN KEY is checked on the stream it references: ``reference``)
        own = [c for c in constraints if c.kind != "REFERENCES"]
        self.checker = Constraints.of_stream(name, schema, own, self.punctuations)
        self.insert_only = not relation
        self._pending: list[pa.Table] = []
        self._pending_bytes: int | None = 0
        self._pending_ts: np.ndarray | None = np.empty(0, np.int64)
        self._buffered = 0
        self._lo: int | None = None  # the earliest timestamp waiting, while the first instant is not fixed
        self._contents: Counter[tuple[Any, ...]] = Counter()  # relations: what is in it now
        # a static relation (``set_static``): its rows, inserted at the first instant, then nothing
        self._static: pa.Table | None = None
        self._static_out = False
        # a static relation's clock: every instant the engine's other sources have completed
        self.follow: Callable[[], int] | None = None
        # a stream's checked elements pass here before they are buffered (the engine's resource
        # manager, under a memory limit: ``sluice.approx.manager``); it returns those it keeps
        self.shed: Callable[[str, pa.Table], pa.Table] | None = None
        # FOREIGN KEY … REFERENCES (design 023, "Referential integrity"): the streams referencing
        # this one, each with its delay k in ticks — this one releases no instant after theirs + k —
        # and, on a referencing stream, what its released elements tell the referenced one
        self.referenced_by: list[tuple[Source, int]] = []
        self.references: list[Reference] = []

    @property
    def constraints(self) -> tuple[StreamConstraint, ...]:
        return tuple(c for c, _ in self.checker.constraints)

    @property
    def slack(self) -> int:
        return self.spec.slack

    @property
    def relation(self) -> bool:
        return self.spec.relation

    @property
    def kind(self) -> str:
        return "RelationSource" if self.relation else "StreamSource"

    @property
    def scale(self) -> int:
        """Ticks per unit of the timestamps pushed here."""
        return self.admission.scale

    @property
    def max_seen(self) -> int:
        return self.admission.max_seen

    @property
    def messages(self) -> list[str]:
        return self.admission.messages

    def contents(self) -> tuple[tuple[Any, ...], ...]:
        """A relation's rows now, each as often as it holds it (what a query registered now sees)."""
        return tuple(row for row, n in self._contents.items() for _ in range(n))

    def reject(self, reason: str, message: str, n: int = 1) -> None:
        self.admission.reject(reason, message, n)

    @property
    def static(self) -> bool:
        return self._static is not None

    def set_static(self, rows: pa.Table) -> None:
        """A relation that holds exactly ``rows`` (typed, all insertions) at every instant from
        the engine's first one, and never changes: they are inserted at that instant, and the
        relation is complete as far as the engine's other sources are (it holds nothing back);
        its output queue then ends (``Queue.ended``), so a join need not keep its other input's
        elements (STREAM §2.2: a stream joined with a static relation needs no window of it).
        """
        self._static = rows
        self._contents.update(row for _, _, row in to_elements(rows))

    def complete_upto(self, waiting: bool = True) -> int:
        """Every instant ≤ this is complete on this source and may be released — a referenced
        stream's no further than each referencing one has released, plus its delay k (unless not
        ``waiting``: what the first instant is fixed by, which they then release from).
        """
        done = self.admission.complete_upto()
        if self.follow is not None and self._static is not None:
            done = max(done, self.follow())
        for src, k in self.referenced_by if waiting else ():
            done = min(done, src._wm_out + k)
        return done

    def reference(self, target: Source, column: str, index: int, ref_column: str, k: int) -> None:
        """Declare ``FOREIGN KEY (column) REFERENCES target(ref_column) WITHIN k`` here (``k`` in
        ticks; ``index``: the attribute's position here): each element this stream releases, at
        ``t`` with value ``v``, says no element of ``target`` stamped after ``t + k`` has ``v`` — a
        punctuation on ``target`` (Tucker et al.), checked where ``target`` releases its elements
        and read by its joins and aggregates, which then forget what ``v`` could still have met.
        ``target`` releases no instant later than this one has released, plus ``k``, so each such
        punctuation comes before ``target`` released anything it is about.
        """
        implied = StreamConstraint("PUNCTUATED", ref_column, k // self.scale, self.name, column)
        target.checker.add(implied, target.spec.schema.index(ref_column), target.punctuations)
        target.referenced_by.append((self, k))
        self.references.append(Reference(target, log_column(implied), index, k, implied))
        if target._wm_out > NEG_INF:
            # declared while running: an element stamped before what ``target`` released, less k,
            # would speak of elements already out — it is late here (rejected as such)
            self.admission.heartbeat(target._wm_out - k - 1, scaled=True)

    def push(self, batch: pa.Table, where: str = "") -> None:
        """Accept a typed batch (``__ts``, ``__sign``, attributes); late elements are rejected."""
        batch = self.admission.admit(batch, where)
        batch = self.admission.from_start(batch, self.ctx.start, self.relation, where)
        if self.shed is not None and not self.relation:
            batch = self.shed(self.name, batch)  # what it drops it counts (not as accepted)
        if batch.num_rows == 0:
            return
        self._pending.append(batch)
        self._buffered += batch.num_rows
        if self._pending_bytes is not None:
            self._pending_bytes += batch.nbytes
        if (held := getattr(self, "_pending_ts", None)) is not None:
            self._pending_ts = _merged(held, ts_of(batch))
        if self.ctx.start is None:  # (kept for ``pending_from``: no rescan of every batch at each run)
            lo = int(ts_of(batch).min())
            self._lo = lo if self._lo is None else min(self._lo, lo)
        self.admission.accepted += batch.num_rows

    def pending_from(self) -> int | None:
        """While the first instant is not fixed (nothing released yet), the smallest timestamp of
        the elements waiting here (None: none wait).
        """
        return self._lo

    def heartbeat(self, ts: int, scaled: bool = False) -> None:
        """Instants up to ``ts`` (in this source's unit; in ticks if ``scaled``) are complete."""
        self.admission.heartbeat(ts, scaled)

    def close(self, until: int | None = None) -> None:
        """End of input: every instant up to ``until`` (default: the last timestamp seen) completes."""
        self.admission.close(until)

    def punctuate(self, column: str, tick: int, values: np.ndarray | None, upto: Any) -> None:
        """No element stamped after ``tick`` (ticks) has one of ``values`` / a value ≤ ``upto`` in
        ``column`` (declared ``PUNCTUATED BY``): the elements released from then on are checked
        against it, and joins and aggregates over the column read it (design 023, "Punctuations").
        A punctuation is about what comes after it: not before what this source already released.
        """
        punctuation_after(self.name, tick, self._wm_out)
        self.punctuations.add(column, tick, values, upto)

    def _static_due(self) -> bool:
        """A static relation's rows are still to be sent, and the first instant to send them at is known."""
        return self._static is not None and not self._static_out and self.ctx.start is not None

    def has_work(self) -> bool:
        if self.ctx.start is None:
            return False  # nothing is released before the first instant is fixed (``Registry.fix_start``)
        if self._static_due():
            return True
        return self._buffered > 0 and self._releasable() or self.complete_upto() > self._wm_out

    def _releasable(self) -> bool:
        done = self.complete_upto()
        first = self.earliest_pending()
        return first is not None and first <= done

    def _run(self, budget: int) -> int:
        if self.ctx.start is None:
            return 0
        done = self.complete_upto()
        n = 0
        if self._pending:
            allb = sort_by_ts(concat(self._pending, self.types))
            ts = ts_of(allb)
            k = int(np.searchsorted(ts, done, side="right"))
            out, rest = allb.slice(0, k), allb.slice(k)
            self._pending = [rest] if rest.num_rows else []
            self._buffered = rest.num_rows
            self._pending_bytes = self._pending_ts = None
            if out.num_rows:
                if self.checker:
                    out = self._check_constraints(out)
                for ref in self.references:
                    ref.tell(out)
                if self.relation:
                    if int(ts[0]) < self.ctx.start:  # changes before the first instant apply at it, in order
                        out = out.set_column(0, "__ts", pa.array(np.maximum(ts_of(out), self.ctx.start)))
                    out = self._check_deletions(out)
                self.emit(out)
                n = out.num_rows
        if self._static_due():
            assert self._static is not None and self.ctx.start is not None
            self._static_out = True
            rows = self._static.set_column(0, "__ts", pa.array(np.full(self._static.num_rows, self.ctx.start)))
            self._static = self._static.slice(0, 0)  # (sent: the relation's rows are ``_contents`` now)
            self.emit(rows)
            self.output.ended = True
            n += rows.num_rows
        self.advance(done)
        if self.punctuations.entries:
            self.punctuations.compact(self._wm_out)  # every element stamped ≤ it is released and checked
        return n

    def _check_constraints(self, b: pa.Table) -> pa.Table:
        """Released elements, in the stream's order, against its k-constraints: one that violates
        one is rejected with its reason (counted when pushed, it is not accepted after all).
        """
        kept = self.admission.constrained(self.checker, b)
        self.admission.accepted -= b.num_rows - kept.num_rows
        return kept

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
                self.admission.accepted -= 1  # it was counted when pushed
                self.reject("absent deletion", f"{self.name}: deletion of {row!r} at {t}, which is not in it")
        return b if keep.all() else b.filter(pa.array(keep))

    def source_statistics(self) -> SourceStats:
        return self.admission.statistics(self._buffered)

    def restore(self, state: dict[str, Any]) -> None:
        super().restore(state)
        self._pending_bytes = self._pending_ts = None

    def _held_bytes(self) -> int:
        """The bytes of the elements buffered here (``_pending``)."""
        if getattr(self, "_pending_bytes", None) is None:  # (absent in a source pickled before it was kept)
            self._pending_bytes = sum(b.nbytes for b in self._pending)
        assert self._pending_bytes is not None
        return self._pending_bytes

    def state_bytes(self) -> int:
        return self._held_bytes() + self.checker.nbytes() + self.punctuations.nbytes()

    def waiting(self) -> tuple[int, int]:
        """Elements accepted here that no operator read yet — buffered, or released into the
        output queue — and their bytes (the resource manager counts them at what they will cost).
        """
        n = self._buffered + sum(q.length for q in self.outputs)
        return n, self._held_bytes() + sum(q.nbytes for q in self.outputs)

    def droppable(self) -> int:
        """How many of the elements waiting here ``drop_waiting`` may drop: those buffered, and
        those in the output queue no reader has read.
        """
        return self._buffered + sum(q.unread_count() for q in self.outputs)

    def earliest_waiting(self) -> int | None:
        """The smallest timestamp of the elements ``waiting`` counts (``waiting_ts()[0]``) without
        gathering and sorting them all (None: none wait).
        """
        firsts = [t for q in self.outputs if (t := q.first_ts()) is not None]
        if (first := self.earliest_pending()) is not None:
            firsts.append(first)
        return min(firsts, default=None)

    def _sorted_pending(self) -> np.ndarray:
        """The stamps of the elements buffered here, sorted (``_pending_ts``)."""
        if getattr(self, "_pending_ts", None) is None:  # (absent in a source pickled before it was kept)
            ts = [ts_of(b) for b in self._pending]
            self._pending_ts = np.sort(np.concatenate(ts)) if ts else np.empty(0, np.int64)
        assert self._pending_ts is not None
        return self._pending_ts

    def earliest_pending(self) -> int | None:
        """The smallest timestamp buffered here (None: none is)."""
        ts = self._sorted_pending()
        return int(ts[0]) if len(ts) else None

    def waiting_ts(self) -> np.ndarray:
        """The timestamps of the elements ``waiting`` counts, sorted (those released, in order,
        before those buffered: every buffered one is after what was released).
        """
        held = [ts_of(q.held()) for q in self.outputs]
        if self._pending:
            held.append(self._sorted_pending())
        out = np.concatenate(held) if held else np.empty(0, np.int64)
        return out if len(self.outputs) == 1 else np.sort(out)

    def drop_waiting(self, keep: Callable[[int], np.ndarray]) -> pa.Table:
        """Load shedding from this source's queues (STREAM §5.2.2): of the elements waiting here
        that no operator read yet — buffered, or in the output queue past every reader — each is
        kept where ``keep(n)`` says (n flags at a time).  Returns those dropped (no longer accepted).
        """
        gone: list[pa.Table] = []
        if self._pending:
            allb = concat(self._pending, self.types)
            flags = keep(allb.num_rows)
            if not flags.all():
                kept = allb.filter(pa.array(flags))
                gone.append(allb.filter(pa.array(~flags)))
                self._pending = [kept] if kept.num_rows else []
                self._buffered, self._pending_bytes, self._pending_ts = kept.num_rows, None, None
                if self.ctx.start is None:
                    self._lo = int(ts_of(kept).min()) if kept.num_rows else None
        for q in self.outputs:
            n = q.unread_count()
            if n:
                gone.append(q.drop_unread(keep(n)))
        out = concat(gone, self.types)
        self.admission.accepted -= out.num_rows
        return out


def punctuation_after(name: str, tick: int, released: int) -> None:
    """A punctuation of stream ``name`` at ``tick`` is about what it has not released (up to
    ``released``): else ``SluiceError`` (the embedded source's rule and the Spark driver's).
    """
    if tick < released:
        raise SluiceError(
            f"{name}: a punctuation at tick {tick} is behind tick {released}, up to which "
            f"{name} has released its elements: punctuate at or after it"
        )


class Referenced(Protocol):
    """A referenced stream as a reference reads it: a ``Source``, or the Spark driver's ``Gate``."""

    name: str
    checker: Constraints
    punctuations: PunctuationLog
    referenced_by: Any  # [(the referencing stream, its k in ticks)]


@dataclass(frozen=True, slots=True)
class Reference:
    """What a referencing stream's released elements say about the referenced one (``target``):
    each one's value of attribute ``index`` (a NULL references nothing), stamped ``t``, as the
    punctuation "none after ``t + k``" on ``column`` of ``target``'s punctuation log.
    """

    target: Referenced
    column: str  # where in the target's log (``constraints.log_column``)
    index: int
    k: int
    implied: StreamConstraint  # the check it makes on the referenced stream

    def tell(self, b: pa.Table) -> None:
        col = b.column(META + self.index)
        if col.null_count:
            valid = np.asarray(col.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
            b, col = b.filter(pa.array(valid)), col.filter(pa.array(valid))
        if not len(col):
            return
        values = np.asarray(col.to_numpy(zero_copy_only=False))
        self.target.punctuations.add_pairs(self.column, ts_of(b) + self.k, values)

    def withdraw(self, gone: object) -> None:
        """The referencing stream ``gone`` is unregistered: ``target`` stops checking this reference
        and waiting for ``gone``.
        """
        self.target.checker.remove(self.implied)
        self.target.punctuations.drop(self.column)
        self.target.referenced_by = [(r, k) for r, k in self.target.referenced_by if r is not gone]


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
        if self._primed and r.queue.ended and not r.available():
            self.output.ended = True
        return b.num_rows


def _merged(sorted_ts: np.ndarray, ts: np.ndarray) -> np.ndarray:
    """``sorted_ts`` with ``ts`` added, sorted (appended where they all come after it)."""
    ts = ts if len(ts) < 2 or bool((ts[1:] >= ts[:-1]).all()) else np.sort(ts)
    both = np.concatenate([sorted_ts, ts])
    return both if not len(sorted_ts) or not len(ts) or ts[0] >= sorted_ts[-1] else np.sort(both, kind="stable")
