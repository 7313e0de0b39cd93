"""The embedded engine: registered CQL queries run continuously, in process, on one thread.

>>> eng = EmbeddedEngine()
>>> _ = eng.execute("REGISTER STREAM S (A integer)")
>>> q = eng.register_query("select A from S [Rows 1]")
>>> eng.push("S", [(1, 10), (2, 20)]); eng.close()
>>> [tuple(e) for e in q.results()]
[(1, '+', (10,)), (2, '-', (10,)), (2, '+', (20,))]
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from sluice.backends.rows import admit_batch, to_batch
from sluice.catalog import Catalog, Kind, SourceDef
from sluice.cql import ast
from sluice.cql.ast import TimeUnit
from sluice.cql.parser import parse_query, parse_script
from sluice.cql.printer import to_cql
from sluice.errors import SluiceError
from sluice.io.atomic import write_atomic
from sluice.plan import BoundQuery, register_view
from sluice.plan.binder import Binder
from sluice.plan.ddl import execute_statement
from sluice.plan.rules import rewrite
from sluice.reference.evaluator import Element
from sluice.runtime.batch import NEG_INF, dumps, to_elements
from sluice.runtime.operators.base import ExecContext, Operator, OperatorFailure
from sluice.runtime.operators.sources import Source
from sluice.runtime.operators.streams import Output, OutputSpec
from sluice.runtime.planner import Planner
from sluice.runtime.queue import Queue
from sluice.runtime.stats import OperatorStats, QueueStats, SourceStats
from sluice.runtime.synopsis import SynopsisStats
from sluice.runtime.units import EngineUnit, EngineView, OnlineStats, make_units, model_paths, operator_paths
from sluice.scheduling.strategies import make

SNAPSHOT_FORMAT = 1  # EmbeddedEngine.snapshot_state's layout
# EmbeddedEngine.checkpoint's: 2 since operator protocol v2 (checkpoints without it are format 1,
# whose objects this version would misread: refused with a message, never run); 3 since operators
# are built from specs (a format-2 checkpoint's operators have none)
CHECKPOINT_FORMAT = 3


class UnknownNameError(SluiceError):
    """Data was pushed to, or a heartbeat given for, a name that is not a registered stream/relation."""


@dataclass(frozen=True, slots=True)
class EngineStats:
    queue_bytes: int
    synopsis_bytes: int
    peak_queue_bytes: int
    sources: tuple[SourceStats, ...]
    operators: tuple[OperatorStats, ...]
    queues: tuple[QueueStats, ...]
    scheduler: str
    steps: int
    synopses: tuple[tuple[str, SynopsisStats], ...] = ()

    @property
    def memory_bytes(self) -> int:
        return self.queue_bytes + self.synopsis_bytes


@dataclass
class Query:
    """A registered continuous query: its plan, its output so far, its subscribers."""

    name: str
    bound: BoundQuery
    output: Output | None = None
    batches: list[pa.Table] = field(default_factory=list)
    subscribers: list[Callable[[list[Element]], None]] = field(default_factory=list)
    arrow_subscribers: list[Callable[[pa.Table], None]] = field(default_factory=list)
    active: bool = True
    weight: float = 1.0
    start: int | None = None  # its first instant, when registered while the engine runs
    retain: int | None = None  # output elements kept for results()/arrow(): None all, 0 none, N the last N
    delivered: int = 0  # output elements produced so far (kept or not)
    error: str | None = None  # why it stopped, if an operator of it failed (the engine went on)
    rewrites: tuple[str, ...] = ()  # the rewrite rules that changed its plan (sluice.plan.rules)
    _held: int = 0
    _close: Callable[[str], None] | None = None

    @property
    def kind(self) -> Kind:
        return self.bound.kind

    @property
    def schema(self) -> Any:
        return self.bound.schema

    def _deliver(self, b: pa.Table) -> None:
        self.delivered += b.num_rows
        if self.retain != 0:
            self.batches.append(b)
            self._held += b.num_rows
            if self.retain is not None:  # a bounded buffer: keep the last `retain` elements
                while self._held - self.batches[0].num_rows >= self.retain:
                    self._held -= self.batches.pop(0).num_rows
                if self._held > self.retain:
                    cut = self._held - self.retain
                    self.batches[0] = self.batches[0].slice(cut)
                    self._held = self.retain
        for afn in self.arrow_subscribers:
            afn(b)
        if self.subscribers:
            els = [Element(*e) for e in to_elements(b)]
            for fn in self.subscribers:
                fn(els)

    def close(self) -> None:
        """Stop this query: its operators not shared with another query are removed (any time)."""
        if self._close is not None:
            self._close(self.name)
            self._close = None

    def __getstate__(self) -> dict[str, Any]:
        """A checkpoint keeps the query and its retained output, not its subscribers (callables:
        subscribe again after ``EmbeddedEngine.restore``).
        """
        state = dict(self.__dict__)
        state["subscribers"], state["arrow_subscribers"] = [], []
        return state

    def snapshot(self) -> dict[str, Any]:
        """Its retained output and counts (``EmbeddedEngine.snapshot_state``)."""
        return {"batches": list(self.batches), "held": self._held, "delivered": self.delivered, "error": self.error}

    def restore(self, state: dict[str, Any]) -> None:
        self.batches, self._held = list(state["batches"]), state["held"]
        self.delivered, self.error = state["delivered"], state["error"]

    def subscribe(self, fn: Callable[[list[Element]], None]) -> None:
        """Call ``fn(elements)`` with every batch of output as its instants complete."""
        self.subscribers.append(fn)

    def subscribe_arrow(self, fn: Callable[[pa.Table], None]) -> None:
        """Call ``fn(batch)`` with every output batch (``__ts``, ``__sign``, ``c0…``): the columnar path."""
        self.arrow_subscribers.append(fn)

    def arrow(self) -> pa.Table:
        """Output so far as one Arrow table (``__ts``, ``__sign``, then the columns by name)."""
        from sluice.runtime.batch import concat

        t = concat(self.batches, list(self.bound.schema.types))
        return t.rename_columns(["ts", "sign", *self.bound.schema.names])

    def results(self) -> list[Element]:
        """Output so far: ``(ts, sign, row)`` elements, per instant deletions before insertions."""
        out: list[Element] = []
        for b in self.batches:
            out.extend(Element(*e) for e in to_elements(b))
        return out

    def __iter__(self) -> Iterator[Element]:
        return iter(self.results())

    @property
    def count(self) -> int:
        """Output elements produced so far (also those a bounded ``retain`` no longer keeps)."""
        return self.delivered


class EmbeddedEngine:
    """Register streams, relations, views and queries; push data; read answers."""

    def __init__(
        self,
        catalog: Catalog | None = None,
        *,
        time_unit: TimeUnit | str = TimeUnit.SECOND,
        slack: int = 0,
        sharing: bool = True,
        scheduler: str | Any = "round-robin",
        budget: int = 65536,
        seed: int = 0,
        start: int | None = None,
    ) -> None:
        self.checkpoint_format = CHECKPOINT_FORMAT
        self.catalog = catalog if catalog is not None else Catalog(time_unit=time_unit)
        self.slack = slack
        self.ctx = ExecContext(start=start, seed=seed)
        self.sources: dict[str, Source] = {}
        self.planner = Planner(self.sources, self.ctx, sharing=sharing)
        self.queries: dict[str, Query] = {}
        self.failures: dict[str, str] = {}  # query name → why it stopped
        self._budget = budget
        self._steps = 0
        self._units: list[Operator] = []
        self.stats_window = OnlineStats()
        self.view = EngineView(self)
        self._sched_units: list[EngineUnit] | None = None
        self._since_prepare = 0
        self._epoch: int | None = None  # first instant of the queries planned last while running
        self.reprepare_every = 200  # decisions between priority recomputations
        self.set_scheduler(scheduler)
        for d in self.catalog.sources:
            self._add_source(d)

    # -- registration --------------------------------------------------------------------
    def _add_source(self, d: SourceDef) -> None:
        src = Source(d.name, d.schema, self.ctx, self.slack, d.kind is Kind.RELATION)
        src.scale = self.catalog.scale(d)
        self.sources[d.name.lower()] = src

    def register_stream(
        self, name: str, columns: Sequence[tuple[str, Any]], unit: TimeUnit | str | None = None
    ) -> None:
        """A stream; ``unit`` says what its timestamps count if not the catalog's tick (coarser only)."""
        self._add_source(self.catalog.register_stream(name, columns, unit))

    def register_relation(
        self, name: str, columns: Sequence[tuple[str, Any]], unit: TimeUnit | str | None = None
    ) -> None:
        self._add_source(self.catalog.register_relation(name, columns, unit))

    def register_view(self, name: str, query: str, columns: Sequence[str] = (), kind: Kind | None = None) -> None:
        register_view(self.catalog, name, query, columns, kind=kind)

    def register_function(self, name: str, fn: Callable[..., Any], return_type: Any, arg_types: Any = None) -> None:
        self.catalog.register_function(name, fn, return_type, arg_types)

    def register_query(self, query: str | ast.Query, name: str | None = None, *, retain: int | None = None) -> Query:
        """Bind, plan and start a continuous query; its answer accumulates in the returned handle.

        ``retain`` bounds what the handle keeps for ``results()``: None keeps every element,
        ``N`` the last N, 0 none (subscribers still see everything) — for unbounded streams.
        """
        text = query if isinstance(query, str) else to_cql(query)
        q_ast = parse_query(query) if isinstance(query, str) else query
        plan = Binder(self.catalog, text).bind_top(q_ast)
        if retain is not None and retain < 0:
            raise SluiceError(f"retain must be None, 0 or a positive number of elements, not {retain}")
        return self._start_query(BoundQuery(plan, text), name, retain)

    def _start_query(self, bq: BoundQuery, name: str | None, retain: int | None = None) -> Query:
        name = name or f"q{len(self.queries) + 1}"
        if name in self.queries:
            raise SluiceError(f"a query named {name!r} is already registered")
        q = Query(name, bq, retain=retain, _close=self.unregister)
        released = max((s._wm_out for s in self.sources.values()), default=NEG_INF)
        if self.ctx.start is not None and (released > NEG_INF or any(s.output.enqueued for s in self.sources.values())):
            # Registered while running: the query starts at the first instant not yet released
            # (STREAM §3 assumes queries exist before their streams produce; here from that instant).
            since = max(self.ctx.start, released + 1)
            if since != self._epoch:
                self.planner.begin_epoch(ExecContext(start=since, seed=self.ctx.seed), since)
                self._epoch = since
            q.start = since
        n_before = len(self.planner.operators)
        rw = rewrite(bq.plan)
        q.rewrites = rw.applied
        top = self.planner.build(rw.plan, name)
        out = Output(
            OutputSpec(bq.schema, bq.kind is Kind.STREAM, top.pure),
            name=f"output:{name}",
            readers=[top.output.reader()],
            output=Queue(f"q:output:{name}", bq.schema.types),
            ctx=self.planner.ctx,
            deliver=q._deliver,
        )
        out.queries.add(name)
        q.output = out
        self._units.extend(self.planner.operators[n_before:])
        self._units.append(out)
        self.queries[name] = q
        self._sched_units = None  # the plan changed: rebuild the scheduling units (also while running)
        return q

    def _fail(self, failure: OperatorFailure) -> None:
        """An operator raised: every query it serves stops (its output so far stays readable,
        ``Query.error`` says why); the engine and the other queries go on.
        """
        for name in sorted(failure.op.queries):
            q = self.queries.get(name)
            if q is None:
                continue
            q.error = str(failure)
            self.failures[name] = q.error
            self.unregister(name)

    def unregister(self, name: str) -> None:
        """Remove a query, also while running: its output stops, and every operator that served
        only it is removed (shared operators keep serving the other queries).
        """
        q = self.queries.pop(name, None)
        if q is None:
            raise UnknownNameError(f"no query named {name!r} (registered: {', '.join(self.queries) or 'none'})")
        q._close = None
        gone: set[int] = set()
        for op in reversed(self._units):  # consumers before producers
            if op is q.output or (name in op.queries and op.queries == {name}):
                gone.add(id(op))
                for r in op.readers:
                    r.queue.detach(r)
            op.queries.discard(name)
        for s in self.sources.values():
            s.queries.discard(name)
        self._units = [u for u in self._units if id(u) not in gone]
        self.planner.forget(gone)
        self._sched_units = None

    def execute(self, text: str) -> list[Query | str | None]:
        """Run CQL statements: DDL registers, a query starts running, EXPLAIN returns text."""
        out: list[Query | str | None] = []
        for stmt in parse_script(text):
            src = text[stmt.span.start : stmt.span.end]
            if isinstance(stmt, ast.QueryStatement):
                plan = Binder(self.catalog, text).bind_top(stmt.query)
                out.append(self._start_query(BoundQuery(plan, src), None))
                continue
            if isinstance(stmt, ast.Explain):
                plan = Binder(self.catalog, text).bind_top(stmt.query)
                out.append(self.explain_plan(plan))
                continue
            before = {d.name for d in self.catalog.sources}
            execute_statement(self.catalog, stmt, text, src)
            for d in self.catalog.sources:
                if d.name not in before:
                    self._add_source(d)
            out.append(None)
        return out

    # -- input ---------------------------------------------------------------------------
    def _source(self, name: str) -> Source:
        src = self.sources.get(name.lower())
        if src is None:
            known = ", ".join(sorted(s.name for s in self.sources.values())) or "none"
            raise UnknownNameError(f"no stream or relation named {name!r} (registered: {known})")
        return src

    def push(self, name: str, rows: Any, *, ts_column: str = "ts", sign_column: str = "sign") -> None:
        """Push rows to a stream or relation.

        Rows are tuples ``(ts, v1, …)`` (relations: ``(ts, '+'|'-', v1, …)``), dicts with a ``ts``
        key (and ``sign``), an Arrow table or a pandas frame with a ``ts`` column.  Rows that do
        not fit are rejected, counted and described in ``statistics()``; the rest are accepted.
        """
        src = self._source(name)
        tick_ns = self.catalog.time_unit.millis * 1_000_000
        batch, errors = to_batch(rows, src.schema, src.relation, src.name, ts_column, sign_column, tick_ns)
        for msg in errors:
            src.reject("malformed", msg)
        src.push(batch)

    # -- checkpoints ---------------------------------------------------------------------
    def checkpoint(self, path: str | Path) -> None:
        """Save the whole state — catalog, sources (buffered and late-checked), every operator's
        synopses and queues, the queries and their retained output — atomically (temp + rename).
        ``EmbeddedEngine.restore(path)`` continues exactly where this engine is now.
        Subscribers are not saved: subscribe again after restoring.
        """
        p = Path(path)
        try:
            data = dumps(self)
        except (pickle.PicklingError, TypeError, AttributeError) as e:
            raise SluiceError(
                f"checkpoint: the engine's state cannot be saved ({e}); are all UDFs module-level?"
            ) from None
        write_atomic(p, data)

    @staticmethod
    def restore(path: str | Path) -> EmbeddedEngine:
        """An engine from a checkpoint (``checkpoint``): same queries, same state, same answers."""
        with Path(path).open("rb") as f:
            try:
                eng = pickle.load(f)
            except Exception as e:  # a truncated file, or classes this version no longer has
                raise SluiceError(f"{path} cannot be read as an embedded-engine checkpoint ({e})") from None
        if not isinstance(eng, EmbeddedEngine):
            raise SluiceError(f"{path} is not an embedded-engine checkpoint")
        found = eng.__dict__.get("checkpoint_format", 1)
        if found != CHECKPOINT_FORMAT:
            raise SluiceError(
                f"{path} is a checkpoint of format {found}, written by another version of Sluice; this one reads "
                f"format {CHECKPOINT_FORMAT}: run from the start (or with that version)"
            )
        return eng

    def snapshot_state(self) -> dict[str, Any]:
        """The state of every operator, queue and query output (operator protocol v2: each
        operator's ``snapshot()``) — not the catalog, the plans or the scheduler's bookkeeping,
        which change when results appear, never what they are.  :meth:`restore_state` puts it into
        an engine that registered the same streams and queries in the same order.  The Spark
        processor stores this per key.  Values are live objects: pickle them before running on.
        """
        ops = list(self.sources.values()) + self._units
        return {
            "format": SNAPSHOT_FORMAT,
            "start": self.ctx.start,
            "steps": self._steps,
            "operators": {o.name: (o.kind, o.snapshot()) for o in ops},
            "queues": {q.name: q.snapshot() for q in self._queues()},
            "queries": {n: q.snapshot() for n, q in self.queries.items()},
            "failures": dict(self.failures),
        }

    def restore_state(self, state: dict[str, Any]) -> None:
        """Continue from :meth:`snapshot_state` of an engine built the same way (same results)."""
        if not isinstance(state, dict) or state.get("format") != SNAPSHOT_FORMAT:
            raise SluiceError(f"not an engine state snapshot of format {SNAPSHOT_FORMAT}")

        def differ(what: str, here: Any, there: Any) -> None:
            if set(here) != set(there):
                raise SluiceError(
                    f"the snapshot is of a different plan: {what} only in it: {sorted(set(there) - set(here))}, "
                    f"only here: {sorted(set(here) - set(there))}"
                )

        # the queries are checked before anything changes: a snapshot refused here leaves the engine as it was
        differ("queries", set(self.queries) - set(state["failures"]), state["queries"])
        for name, why in state["failures"].items():  # queries that stopped there stop here too
            if name in self.queries:
                self.queries[name].error = why
                self.failures[name] = why
                self.unregister(name)
        ops = {o.name: o for o in list(self.sources.values()) + self._units}
        queues = {q.name: q for q in self._queues()}
        differ("operators", ops, state["operators"])
        differ("queues", queues, state["queues"])
        for name, (kind, _) in state["operators"].items():
            if ops[name].kind != kind:
                raise SluiceError(
                    f"the snapshot is of a different plan: {name} is a {kind} there, {ops[name].kind} here"
                )
        for name, (_, st) in state["operators"].items():
            ops[name].restore(st)
        for name, st in state["queues"].items():
            queues[name].restore(st)
        for name, st in state["queries"].items():
            self.queries[name].restore(st)
        self.ctx.start, self._steps = state["start"], state["steps"]
        # the operators' counters went back or forth: measured statistics start again
        self.stats_window = OnlineStats(self.stats_window.window, static=self.stats_window.static)
        self._sched_units = None

    def reject(self, name: str, messages: Sequence[str]) -> None:
        """Count rows rejected before they reached the engine (a reader's bad lines), as malformed."""
        src = self._source(name)
        for msg in messages:
            src.reject("malformed", msg)

    def push_batch(self, name: str, batch: pa.Table) -> None:
        """Push an already-typed batch (``__ts``, ``__sign``, ``c0…``): the fast path, through
        the same value checks as every other input (vectorised).
        """
        src = self._source(name)
        batch, errors = admit_batch(batch, src.schema, src.name)
        for msg in errors:
            src.reject("malformed", msg)
        src.push(batch)

    def heartbeat(self, ts: int, name: str | None = None) -> None:
        """No element with timestamp ≤ ``ts`` will arrive (on ``name``, or on every source)."""
        for src in [self._source(name)] if name else self.sources.values():
            src.heartbeat(ts)

    def close(self, until: int | None = None) -> None:
        """End of input: complete every instant up to ``until`` (default: the last timestamp pushed)."""
        last = max((s.max_seen for s in self.sources.values()), default=NEG_INF)
        if until is None:
            until = last
        for s in self.sources.values():
            s.close(until)
        self.run()

    # -- scheduling ----------------------------------------------------------------------
    def set_scheduler(self, scheduler: str | Any, **options: Any) -> None:
        """Choose the scheduling strategy (also while running): a name from
        ``sluice.scheduling.strategies.STRATEGIES`` (with ``+oldest-first``, ``+dynamic``,
        ``+exhaustive``, ``+limited`` modifiers) or a strategy object.
        """
        if isinstance(scheduler, str):
            try:
                scheduler = make(scheduler, budget=self._budget, **options)
            except (ValueError, TypeError) as e:
                raise SluiceError(str(e)) from None
        self.strategy = scheduler
        self._sched_units = None

    def set_estimates(self, estimates: dict[str, tuple[float, float]]) -> None:
        """Static (seconds per tuple, selectivity) per operator name (see ``explain``), used by the
        strategies instead of measured statistics for those operators.
        """
        self.stats_window.static.update(estimates)
        self._sched_units = None

    def _prepare(self) -> list[EngineUnit]:
        inner = [u for u in self._units if u.kind != "Output"]
        paths = operator_paths(list(self.sources.values()), self._units)
        self.stats_window.observe(inner)
        self.strategy.prepare(model_paths(paths, self.stats_window))
        units = make_units(paths, self.strategy.granularity, self.strategy)
        covered = {id(o) for u in units for o in u.ops}
        # operators on no path to an output (none today) still get run
        units += [EngineUnit((o,), -1, 0, 0, o.name) for o in inner if id(o) not in covered]
        self._sched_units = units
        self._granularity = self.strategy.granularity
        self._since_prepare = 0
        return units

    # -- execution -----------------------------------------------------------------------
    def _fix_start(self) -> None:
        if self.ctx.start is None:
            firsts = [
                int(b.column(0).to_numpy().min()) for s in self.sources.values() for b in s._pending if b.num_rows
            ]
            beats = [s.complete_upto() for s in self.sources.values() if s.complete_upto() > NEG_INF]
            cands = firsts or beats
            if cands:
                self.ctx.start = min(cands)

    def run(self, max_steps: int | None = None) -> int:
        """Run until no operator has work; returns the number of scheduling decisions.

        Sources release what is due and outputs take what is ready at every step (the root
        consumes at once, Jiang §2.1); the strategy picks among the other units.
        """
        self._fix_start()
        sources = list(self.sources.values())
        outputs = [u for u in self._units if u.kind == "Output"]
        steps = 0
        while max_steps is None or steps < max_steps:
            for s in sources:
                if s.has_work():
                    s.run(self._budget)
            if (
                self._sched_units is None
                or self._since_prepare >= self.reprepare_every
                or (self._granularity != self.strategy.granularity)
            ):
                self._prepare()
            assert self._sched_units is not None
            ready = [u for u in self._sched_units if u.has_work()]
            if ready:
                u = self.strategy.choose(ready, self.view)
                # One time unit of the strategies' model is one turn of `budget` tuples; a quantum
                # (round-robin's, a `+limited` discipline's) scales the turn, and the unit is
                # charged the fraction of a time unit it used.
                budget = self.strategy.budget(u)
                quantum = self.strategy.quantum(u)
                if quantum is not None:
                    budget = max(1, round(budget * quantum))
                try:
                    done = u.run(budget)
                except OperatorFailure as f:
                    self._fail(f)
                    continue
                self.strategy.charge(u, max(done, 1) / self.strategy.budget(u), self.view)
                self._since_prepare += 1
                steps += 1
            done_out = False
            for o in outputs:
                if o.has_work():
                    try:
                        o.run(self._budget)
                    except OperatorFailure as f:
                        self._fail(f)
                        outputs = [u for u in self._units if u.kind == "Output"]
                        break
                    done_out = True
            if not ready and not done_out and not any(s.has_work() for s in sources):
                break
        self._steps += steps
        return steps

    # -- inspection ----------------------------------------------------------------------
    def _queues(self) -> list[Queue]:
        return [q for u in list(self.sources.values()) + self._units for q in u.outputs]

    def results(self, query: str | Query) -> list[Element]:
        """A query's output so far (``Query.results``): the same call as ``SparkEngine.results``."""
        q = query if isinstance(query, Query) else self.queries.get(query)
        if q is None:
            raise SluiceError(f"no query named {query!r}")
        return q.results()

    def statistics(self) -> EngineStats:
        ops = list(self.sources.values()) + self._units
        qs = self._queues()
        return EngineStats(
            queue_bytes=sum(q.nbytes for q in qs),
            synopsis_bytes=sum(o.state_bytes() for o in ops),
            peak_queue_bytes=sum(q.peak_nbytes for q in qs),
            sources=tuple(s.source_statistics() for s in self.sources.values()),
            operators=tuple(o.statistics() for o in ops),
            queues=tuple(
                QueueStats(q.name, q.length, q.nbytes, q.peak_nbytes, q.enqueued, q.readers, q.watermark) for q in qs
            ),
            scheduler=self.strategy.name,
            steps=self._steps,
            synopses=tuple((o.name, syn.statistics()) for o in ops for syn in o.synopses()),
        )

    def rejected(self) -> list[str]:
        """Messages for rejected input (first 100 per source) and for rows an operator could not
        evaluate (first 100 per operator, naming its queries: ``sluice.plan.numeric``).
        """
        return [m for s in self.sources.values() for m in s.messages] + [
            m for u in self._units for m in u.reject_messages
        ]

    def explain_plan(self, plan: Any) -> str:
        from sluice.plan.explain import explain

        return explain(plan)

    def explain(self, query: str | Query | None = None) -> str:
        """The operator DAG of one query (or all): operators, queues, synopses, what is shared."""
        qs = [query if isinstance(query, Query) else self.queries[query]] if query else list(self.queries.values())
        lines: list[str] = []
        for q in qs:
            lines.append(f"query {q.name}: {' '.join(q.bound.text.split())}  -> {q.kind.value}")
            if q.rewrites:
                lines.append(f"rewritten by: {', '.join(q.rewrites)}")
            assert q.output is not None
            self._explain_op(q.output, "", "", lines, q.name)
        return "\n".join(lines)

    def _producer(self, queue: Queue) -> Operator:
        for u in list(self.sources.values()) + self._units:
            if queue in u.outputs:
                return u
        raise KeyError(queue.name)

    def _explain_op(self, op: Operator, prefix: str, child_prefix: str, lines: list[str], qname: str) -> None:
        shared = sorted(op.queries - {qname})
        bits = [op.explain_line()]
        if shared:
            bits.append(f"shared with {', '.join(shared)}")
        lines.append(prefix + " ".join(bits))
        ins = [self._producer(q) for q in op.inputs()]
        for i, c in enumerate(ins):
            last = i == len(ins) - 1
            self._explain_op(
                c, child_prefix + ("└─ " if last else "├─ "), child_prefix + ("   " if last else "│  "), lines, qname
            )
