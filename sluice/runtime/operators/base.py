"""The operator protocol (STYLE §6): ``name``, ``schema``, ``inputs``, ``run(budget)``,
``statistics()``, capability flags with safe defaults.  EXPLAIN renders from this alone.

Spec and state (protocol v2): an operator is built in one step from its kind's
:class:`OperatorSpec` — a frozen record of what the planner decided — and its wiring
(``Kind(spec, name, readers, output, ctx)``); ``__post_init__`` derives the rest, so no
half-built operator exists.  Each class names the attributes that change while it runs in
``STATE`` (inherited names included); everything else is fixed when the operator is built.
``snapshot()`` returns that state and ``restore()`` puts it into an operator built the same way —
the unit the Spark processor stores per key (``EmbeddedEngine.snapshot_state``).  A test runs every
operator kind and fails if an attribute outside ``STATE`` changed (``tests/test_snapshots.py``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa
from sluice.catalog import Schema
from sluice.datatypes import DataType
from sluice.errors import EvaluationError, InternalError
from sluice.runtime.batch import NEG_INF
from sluice.runtime.queue import Queue, Reader, count_upto
from sluice.runtime.stats import OperatorStats


class OperatorFailure(EvaluationError):
    """An operator raised while running: its queries cannot go on (the others can)."""

    def __init__(self, op: Operator, cause: BaseException) -> None:
        self.op, self.cause = op, cause
        queries = ", ".join(sorted(op.queries)) or "?"
        super().__init__(f"{queries}: {op.kind} {op.name} failed: {type(cause).__name__}: {cause}")


MAX_MESSAGES = 100  # per operator: the rest are counted only


class Part:
    """Something with declared state — an operator, or a helper an operator keeps state in (named in
    its ``PARTS``): ``STATE`` lists what changes while it runs (a subclass adds to its bases'),
    everything else is fixed when it is built.
    """

    STATE: ClassVar[tuple[str, ...]] = ()
    # attributes holding a helper with state of its own (a Part, a list of Parts, or None): its
    # ``snapshot()`` is saved, never the helper itself (it may hold compiled plans or user functions)
    PARTS: ClassVar[tuple[str, ...]] = ()
    # ``STATE`` names added since snapshots were first taken, with the value one that predates them
    # means (immutable: a checkpoint written by an earlier version restores with these)
    LATER: ClassVar[dict[str, Any]] = {}

    @classmethod
    def state_names(cls) -> tuple[str, ...]:
        """Every ``STATE`` name of the class and its bases, base first."""
        names: list[str] = []
        for k in reversed(cls.__mro__):
            names += [n for n in vars(k).get("STATE", ()) if n not in names]
        return tuple(names)

    def snapshot(self) -> dict[str, Any]:
        """Its state (an operator's queues are not: the engine saves those).  The values are the
        live objects: serialise them (pickle) before it runs again.
        """
        out = {n: getattr(self, n) for n in self.state_names()}
        for p in self.PARTS:
            part = getattr(self, p)
            saved = (
                None if part is None else [x.snapshot() for x in part] if isinstance(part, list) else part.snapshot()
            )
            out[f"part:{p}"] = saved
        return out

    def restore(self, state: dict[str, Any]) -> None:
        """Put a :meth:`snapshot` of one built the same way into this one."""
        names = self.state_names()
        want = set(names) | {f"part:{p}" for p in self.PARTS}
        state = {n: v for n, v in self.LATER.items() if n in want} | state
        if set(state) != want:
            raise InternalError(f"{self}: a snapshot with state {sorted(state)} cannot restore {sorted(want)}")
        for n in names:
            setattr(self, n, state[n])
        for p in self.PARTS:
            part, saved = getattr(self, p), state[f"part:{p}"]
            if (part is None) != (saved is None):
                raise InternalError(f"{self}: the snapshot's {p} does not match this one's")
            if isinstance(part, list):
                if len(part) != len(saved):
                    raise InternalError(f"{self}: the snapshot's {p} does not match this one's")
                for x, y in zip(part, saved, strict=True):
                    x.restore(y)
            elif part is not None:
                part.restore(saved)

    def __str__(self) -> str:
        return type(self).__name__


@dataclass
class ExecContext:
    """What every operator of one engine shares: the first instant, the sampling seed, and the
    clock its costs are measured with (seconds; the cost-based strategies read them).
    """

    start: int | None = None
    seed: int = 0
    clock: Callable[[], float] = time.perf_counter
    # each stream's punctuations (its source's ``PunctuationLog``), by lower-case name: what a
    # join or aggregate over a ``PUNCTUATED BY`` attribute reads
    punctuations: dict[str, Any] = field(default_factory=dict)
    # under a memory limit (``sluice.backends.embedded.pacing``): an operator that queues work of
    # its own splits it so that a step's work stays near its budget (the shared join's units)
    paced: bool = False


@dataclass(frozen=True, slots=True)
class OperatorSpec:
    """What the planner decides for one operator: its output schema, its EXPLAIN detail and (in
    a subclass per kind) its parameters — never what changes while it runs.  Compared and hashed
    by value.  Each build gives a new operator with state of its own; a snapshot does not carry
    the spec (the plan is rebuilt, then its ``STATE`` restored).
    """

    schema: Schema
    detail: str = field(default="", kw_only=True)


@dataclass
class Operator(Part):
    """Base of physical operators: reads input queues, writes its output queues (ports).

    A kind redeclares ``spec`` with its own spec class, so building it from another kind's spec is
    a type error.
    """

    spec: OperatorSpec
    name: str
    readers: list[Reader]
    output: Queue  # port 0
    ctx: ExecContext
    extra_outputs: list[Queue] = field(default_factory=list)  # ports 1…: an operator feeding several consumers
    stateful: bool = False
    insert_only: bool = False  # its output never holds a deletion
    # Within an instant no tuple of its output has both a deletion and an insertion, so netting an
    # instant is the identity: Istream/Dstream need neither hold nor net it.
    pure: bool = False
    _in: int = 0
    _out: int = 0
    _runs: int = 0
    _seconds: float = 0.0
    _wm_out: int = NEG_INF
    queries: set[str] = field(default_factory=set)
    # rows this operator could not evaluate (sluice.plan.numeric: dropped, counted, described)
    rows_rejected: int = 0
    reject_messages: list[str] = field(default_factory=list)

    # what changes while it runs (subclasses add theirs; see the module docstring)
    STATE: ClassVar[tuple[str, ...]] = (
        "_in",
        "_out",
        "_runs",
        "_seconds",
        "_wm_out",
        "rows_rejected",
        "reject_messages",
    )
    # derived lookups that fill while it runs but are rebuilt on demand: neither state nor fixed
    CACHES: ClassVar[tuple[str, ...]] = ()

    def __post_init__(self) -> None:
        """What its spec implies — compiled expressions, empty synopses, the capabilities of its
        kind; a kind extends this (calling ``super()``), so the constructor returns it whole.
        """

    def __str__(self) -> str:
        return f"{self.kind} {self.name}"

    @property
    def schema(self) -> Schema:
        return self.spec.schema

    @property
    def detail(self) -> str:
        return self.spec.detail

    @property
    def types(self) -> list[DataType]:
        return list(self.schema.types)

    @property
    def kind(self) -> str:
        return type(self).__name__

    @property
    def outputs(self) -> list[Queue]:
        """Its output queues by port (most operators have one)."""
        return [self.output, *self.extra_outputs]

    def add_output(self, name: str, types: Sequence[DataType] | None = None) -> Queue:
        """A further output queue (the next port); its elements are what :meth:`emit` sends there."""
        q = Queue(name, self.types if types is None else types)
        self.extra_outputs.append(q)
        return q

    def forget_query(self, name: str) -> None:
        """A query it served is removed while others go on: stop the work done only for it (an
        operator with per-query outputs — a shared window join — drops that output).
        """

    def declare(self, inputs: Sequence[Operator]) -> None:
        """Set the capabilities that follow from its inputs' (``insert_only``, ``pure``): called
        once by the planner when it is built.  The default keeps the values its construction set.
        """

    def explain_line(self) -> str:
        """Its EXPLAIN line: kind, detail, output queues, synopsis size."""
        bits = [self.kind]
        if self.detail:
            bits.append(f"[{self.detail}]")
        for q in self.outputs:
            bits.append(f"queue {q.name} ({q.length} held, {q.readers} reader(s))")
        if self.stateful:
            bits.append(f"synopsis {self.state_bytes()} B")
        return " ".join(bits)

    def has_work(self) -> bool:
        return any(r.available() for r in self.readers) or self._input_watermark() > self._wm_out

    def moves_time_quietly(self) -> bool:
        """Whether its next turn would read nothing and emit nothing, only move time on — the
        scheduler loop then runs it at once, outside the strategy (``SchedulerLoop._move_time``).
        False unless the operator says so: most operators emit on time alone (windows expire,
        Istream completes an instant).
        """
        return False

    def _input_watermark(self) -> int:
        """What the unread input allows this operator to assume complete."""
        return min((r.watermark() for r in self.readers), default=NEG_INF)

    def _arrival_bound(self) -> int:
        """Every input element with ``ts ≤`` this has arrived (read or not)."""
        return min((r.queue.watermark for r in self.readers), default=NEG_INF)

    def aligned_has_work(self) -> bool:
        """``has_work`` of an operator that reads its inputs with :meth:`read_aligned`."""
        bound = self._arrival_bound()
        return any(count_upto(r, bound, 1) for r in self.readers) or min(bound, self._input_watermark()) > self._wm_out

    def read_aligned(self, budget: int) -> list[pa.Table]:
        """Read a timestamp *prefix* of every input: all elements with ``ts ≤ cut`` and none after,
        where ``cut`` ≤ the arrival bound keeps the read near ``budget`` elements (whole instants).
        Multi-input operators rely on it: whatever they hold is older than what they read next.
        """
        bound = self._arrival_bound()
        # (capped past the budget: beyond it only whether the sum exceeds the budget matters)
        counts = [count_upto(r, bound, budget + 1) for r in self.readers]
        if sum(counts) > budget:
            stamps = np.sort(
                np.concatenate([r.peek_ts(min(c, budget)) for r, c in zip(self.readers, counts, strict=True)])
            )
            cut = int(stamps[min(budget, len(stamps)) - 1])
            counts = [count_upto(r, cut) for r in self.readers]
        return [r.read(c) for r, c in zip(self.readers, counts, strict=True)]

    def run(self, budget: int) -> int:
        """Process up to about ``budget`` input elements; return how many were processed.
        Anything it raises comes out as an :class:`OperatorFailure` naming it and its queries.
        """
        t0 = self.ctx.clock()
        try:
            n = self._run(budget)
        except OperatorFailure:
            raise
        except Exception as ex:  # the engine decides: the queries it serves fail, the rest run on
            raise OperatorFailure(self, ex) from ex
        self._seconds += self.ctx.clock() - t0
        self._runs += 1
        self._in += n
        return n

    def _run(self, budget: int) -> int:
        raise NotImplementedError

    def reject_rows(self, reasons: Sequence[str]) -> None:
        """Count rows dropped because they could not be evaluated; keep the first messages."""
        if not reasons:
            return
        self.rows_rejected += len(reasons)
        room = MAX_MESSAGES - len(self.reject_messages)
        if room > 0:
            where = f"{', '.join(sorted(self.queries)) or '?'}: {self.kind} {self.name}"
            self.reject_messages.extend(f"{where}: {r}" for r in reasons[:room])

    def emit(self, b: pa.Table, port: int = 0) -> None:
        self._out += b.num_rows
        (self.output if port == 0 else self.extra_outputs[port - 1]).append(b)

    def advance(self, wm: int) -> None:
        """Every output port is complete up to ``wm``."""
        if wm > self._wm_out:
            self._wm_out = wm
            for q in self.outputs:
                q.advance(wm)

    def holds_elements(self) -> bool:
        """Whether it keeps input elements now (the resource manager's estimate of what an
        element costs counts each holder): a stateful operator does, unless it says otherwise.
        """
        return self.stateful

    def most_bytes_per_element(self) -> float:
        """At most the bytes one element it reads next adds to what it holds and emits, where
        that is bounded by its state (a join: the element's pairs with the other input's whole
        synopsis); 0: not known (the memory limit's pacing measures instead).
        """
        return 0.0

    def synopses(self) -> list[Any]:
        """The synopses this operator keeps (seed §3)."""
        return []

    def state_by_input(self) -> list[int] | None:
        """The part of :meth:`state_bytes` each input's rows hold, where the operator knows it
        (the resource manager attributes it to the streams feeding that input); None: shared
        equally among all its streams.
        """
        return None

    def state_bytes(self) -> int:
        return sum(s.nbytes for s in self.synopses())

    @property
    def watermark_out(self) -> int:
        """Every instant ≤ this (ticks) is complete in its output."""
        return self._wm_out

    @property
    def busy_seconds(self) -> float:
        """The time its runs took so far (``statistics().seconds`` without sizing its state)."""
        return self._seconds

    @property
    def tuples_in(self) -> int:
        """The elements it has read so far (``statistics().tuples_in``)."""
        return self._in

    @property
    def tuples_out(self) -> int:
        """The elements it has written so far (``statistics().tuples_out``)."""
        return self._out

    def statistics(self) -> OperatorStats:
        return OperatorStats(
            self.name, self.kind, self._in, self._out, self._runs, self._seconds, self.state_bytes(), self.rows_rejected
        )

    def inputs(self) -> Sequence[Queue]:
        return [r.queue for r in self.readers]


@dataclass(frozen=True, slots=True)
class PortSpec(OperatorSpec):
    port: int  # which output of its owner


@dataclass
class PortHandle(Operator):
    """What the planner hands the operators above one output port of an operator that serves
    several queries on ports of their own (a shared window join, a shared window): that port's
    queue and capabilities.  It never runs (its owner writes the queue); it is in no operator list.
    """

    spec: PortSpec
    owner: Any = None  # the operator writing the port (wiring)

    @property
    def port(self) -> int:
        return self.spec.port

    def has_work(self) -> bool:
        return False

    def _run(self, budget: int) -> int:
        raise InternalError(f"{self} is a port of {self.owner}, which runs it")


def new_port(op: Operator, index: int) -> PortHandle:
    """Port ``index`` of an operator serving queries on ports of their own (port 0 is its output,
    each later one a further queue), as the handle the planner gives the port's readers.
    """
    queue = op.output if index == 0 else op.add_output(f"q:{op.name}:{index}")
    return PortHandle(
        PortSpec(op.schema, index), name=f"{op.name}:{index}", readers=[], output=queue, ctx=op.ctx, owner=op
    )


def port_line(op: Operator, index: int, queries: set[str], what: str, since: int | None) -> str:
    """One port's part of a multi-port operator's EXPLAIN line: its queries, what it carries, its queue."""
    q = op.outputs[index]
    start = f" from instant {since}" if since is not None else ""
    return (
        f"port {index} → {', '.join(sorted(queries))}: {what}{start} "
        f"queue {q.name} ({q.length} held, {q.readers} reader(s))"
    )


class Unary(Operator):
    """A one-input operator that handles each available batch, then forwards the watermark.

    ``PASSES_END``: an operator that emits only while it reads (σ, π) — once its input has
    ended and it has read everything, its own output has ended too (``Queue.ended``).
    """

    PASSES_END: ClassVar[bool] = False

    def _run(self, budget: int) -> int:
        r = self.readers[0]
        b = r.read(budget)
        if b.num_rows:
            self.process(b)
        self.progress(r.watermark())
        self.pass_end()
        return b.num_rows

    def moves_time_quietly(self) -> bool:
        return not self.readers[0].available() and self.quiet_in_time()

    def quiet_in_time(self) -> bool:
        """Whether a turn reading nothing emits nothing (only moves time on): σ and π; a window
        or Istream that emits only as it reads says so too.
        """
        return self.PASSES_END

    def pass_end(self) -> None:
        r = self.readers[0]
        if self.PASSES_END and r.queue.ended and not r.available():
            self.output.ended = True

    def process(self, b: pa.Table) -> None:
        raise NotImplementedError

    def progress(self, wm: int) -> None:
        self.advance(wm)
