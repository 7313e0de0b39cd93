"""The embedded engine: registered CQL queries run continuously, in process, on one thread.

The engine is the session users call; it holds the catalog and delegates to three parts: the
query registry (sources, the operator DAG, the queries — ``registry.py``), the scheduler loop
(``loop.py``) and the inspector (statistics, rejections, EXPLAIN — ``inspector.py``).

>>> eng = EmbeddedEngine()
>>> _ = eng.execute("REGISTER STREAM S (A integer)")
>>> q = eng.register_query("select A from S [Rows 1]")
>>> eng.push("S", [(1, 10), (2, 20)]); eng.close()
>>> [tuple(e) for e in q.results()]
[(1, '+', (10,)), (2, '-', (10,)), (2, '+', (20,))]
"""

from __future__ import annotations

import pickle
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from sluice.approx.limits import QueryLimits, parse_latency, parse_size
from sluice.approx.manager import ResourceManager
from sluice.approx.precision import check_shrinkable
from sluice.approx.qos import QoS
from sluice.approx.static import StaticSample
from sluice.backends.embedded.inspector import Inspector
from sluice.backends.embedded.loop import SchedulerLoop
from sluice.backends.embedded.pacing import Pacer
from sluice.backends.embedded.query import EngineStats, Query
from sluice.backends.embedded.registry import QueryRegistry
from sluice.backends.embedded.usage import UsageMeter
from sluice.backends.rows import admit_batch, punctuation_values, static_refusal, static_rows, to_batch
from sluice.catalog import Catalog, ConstraintSpec, Kind, SourceDef, ViewDef
from sluice.cql import ast
from sluice.cql.ast import TimeUnit
from sluice.cql.parser import parse_query, parse_script
from sluice.cql.printer import to_cql
from sluice.errors import InUseError, SluiceError
from sluice.io.atomic import write_atomic
from sluice.plan import BoundQuery, register_view
from sluice.plan.binder import Binder
from sluice.plan.dataflow import check_join_intermediates
from sluice.plan.ddl import check_unused, execute_statement
from sluice.plan.element import Element
from sluice.plan.explain import explain
from sluice.runtime.batch import NEG_INF, dumps, ts_of
from sluice.runtime.operators.base import ExecContext, Operator
from sluice.runtime.operators.shared_join_spec import SharedJoinOptions, shared_join_options
from sluice.runtime.operators.sources import Source
from sluice.runtime.planner import Planner
from sluice.runtime.queue import Queue
from sluice.scheduling.strategies import Strategy

# EmbeddedEngine.snapshot_state's layout: 2 since a source's lateness state is its Admission's; 3 since
# the shared window join keeps its work counters in its state; 4 since a time window keeps its range
# in force and what a shrink cut (``[Range T At Least t]``); 5 since the shared join counts the
# elements no port selects (and holds none of them); 6 since queues say whether they ended and a
# source may be a static relation; 7 since a source keeps its earliest waiting timestamp until the
# first instant is fixed; 8 since sources, joins and aggregates keep what k-constraints track; 9
# since each operator's entry names what it computes (``_plan_mark``: a rewrite rule can give the
# same operator names and kinds to another plan); 10 since DISTINCT keeps its counts as a counting
# part (``Counting``), not a dictionary of rows; 11 since a selection keeps the profile of its
# conjuncts (a ``Monitor`` part) and a join of three or more inputs may be one ``DataflowJoin``;
# 12 since a source keeps its punctuations (a ``PunctuationLog`` part); 13 since the log keeps
# where its first entry kept stands (it merges the punctuations its source has passed); 14 since a
# [Rows N] window keeps the rows in force and what it held (``[Rows N At Least m]``)
SNAPSHOT_FORMAT = 14
# EmbeddedEngine.checkpoint's: 2 since operator protocol v2 (checkpoints without it are format 1,
# whose objects this version would misread: refused with a message, never run); 3 since operators
# are built from specs and the engine is a session over a registry, a scheduler loop and an inspector;
# 4 since the planner keeps shared window joins and shared windows (an older planner lacks them);
# 5 since the shared join counts its work and the engine holds a resource manager and a latency meter;
# 6 since time windows may be resized and the engine holds its usage meter always; 7 since the
# scheduler loop keeps which units each step affects, aggregates may emit insertions only and user
# functions may be vectorized (fields an older pickle lacks); 8 since queues may end and sources
# be static relations; 9 since sources keep their earliest waiting timestamp (the first instant);
# 10 since sources, joins and aggregates keep what k-constraints track; 11 since DISTINCT keeps
# its counts as a counting part; 12 since a selection orders its conjuncts (a monitor an older
# pickle lacks) and the planner may build dataflow joins; 13 since sources keep punctuations;
# 14 since queues index their batches (a list with a head and each batch's start) and the loop
# keeps its units' has-work answers between runs; 15 since a punctuation log merges what its source
# has passed (a field an older pickle lacks); 16 since sources may reference other streams (FOREIGN
# KEY … REFERENCES: fields an older pickle lacks); 17 since a sample may carry a range and the
# resource manager measures arrivals (Sample(a To b): fields an older pickle lacks); 18 since a
# [Rows N] window may be resized (its rows in force and what it held: state an older pickle lacks)
CHECKPOINT_FORMAT = 18


def _guards(op: Operator) -> tuple[Any, ...]:
    """The k-constraint guards a join or aggregate forgets state by (STREAM §4.1)."""
    return tuple(getattr(op.spec, "guards", ()))


def _plan_mark(o: Operator) -> str:
    """What an operator computes, as a snapshot records it: its kind, EXPLAIN detail and output
    columns (a plan rewritten otherwise — another version's rules — may keep its operators' names
    and kinds: ``S × T`` and ``S ⋈ U`` are both ``join#3``; their state must not be swapped).
    """
    cols = ", ".join(f"{c.name} {c.type.sql()}" for c in o.spec.schema.columns)
    return f"{o.kind} [{o.spec.detail}] ({cols})"


class EmbeddedEngine:
    """Register streams, relations, views and queries; push data; read answers.

    ``clock`` measures operators' costs for the cost-based strategies (default
    ``time.perf_counter``; a test may inject a deterministic one).

    ``shared_join``: how queries that join the same two streams on the same predicate share one
    join whatever their windows (Hammad et al.; ``docs/design/020``) — ``"greedy"`` (the default
    with ``sharing``: the paper's best), ``"swf"``, ``"lwo"``, or ``"off"`` (a join per window
    pair); options after a colon, e.g. ``"swf:variant=nested-loop,unit=1"``.

    ``memory_limit`` (bytes, or ``"64MB"``): queues and synopses are held within it by dynamic
    sampling and, as a last resort, load shedding at the streams' input — every dropped element
    counted per stream and per query, each query told its approximation and estimated precision
    (``Query.approximation``; ``sluice.approx``, ``docs/design/021``).  None (the default): exact,
    whatever the memory.
    """

    pacer: Pacer | None = None  # (also what an engine checkpointed before pacing restores with)

    def __init__(
        self,
        catalog: Catalog | None = None,
        *,
        time_unit: TimeUnit | str = TimeUnit.SECOND,
        slack: int = 0,
        sharing: bool = True,
        shared_join: str | SharedJoinOptions | None = None,
        scheduler: str | Strategy | None = None,
        budget: int = 65536,
        seed: int = 0,
        start: int | None = None,
        clock: Callable[[], float] = time.perf_counter,
        memory_limit: int | str | None = None,
        join_intermediates: str = "auto",
        key_memory_limit: int | str | None = None,
    ) -> None:
        if key_memory_limit is not None:  # (the same options on both backends: each names its own)
            raise SluiceError(
                "key_memory_limit is the Spark backend's limit per key; the embedded engine holds one limit for "
                "all its state: memory_limit (--memory-limit)"
            )
        self.checkpoint_format = CHECKPOINT_FORMAT
        check_join_intermediates(join_intermediates)
        self.catalog = catalog if catalog is not None else Catalog(time_unit=time_unit)
        self.slack = slack
        self.shared_join = shared_join_options(shared_join, sharing)
        self.registry = QueryRegistry(
            ExecContext(start=start, seed=seed, clock=clock), slack, sharing, self.shared_join, join_intermediates
        )
        self.loop = SchedulerLoop(self.registry, "round-robin" if scheduler is None else scheduler, budget)
        # latency targets: the strategy is switched for them unless the user chose one (design 021)
        # (its own wall clock: ``clock`` measures operators' costs and may be a test's counter)
        self.qos = QoS(pinned=scheduler is not None)
        self.registry.on_remove.append(self.qos.forget)
        self.limits: ResourceManager | None = None
        self.meter = UsageMeter(self.registry)
        if memory_limit is not None:
            self.limits = ResourceManager(parse_size(memory_limit), seed, self.meter)
            self.pacer = Pacer(self.meter, self.limits)  # (it marks the context paced)
            self.registry.on_remove.append(self.limits.forget_query)
        self.inspector = Inspector(self.registry, self.loop, self.limits, self.qos)
        for d in self.catalog.sources:
            self._add_source(d)

    # -- the parts' state, read by tests, the CLI and the Spark processor ----------------------
    @property
    def ctx(self) -> ExecContext:
        return self.registry.ctx

    @property
    def sources(self) -> dict[str, Source]:
        return self.registry.sources

    @property
    def queries(self) -> dict[str, Query]:
        return self.registry.queries

    @property
    def failures(self) -> dict[str, str]:
        """Query name → why it stopped (an operator of it failed; the engine went on)."""
        return self.registry.failures

    @property
    def operators(self) -> list[Operator]:
        """Every operator but the sources (outputs included), in creation order."""
        return self.registry.operators

    @property
    def planner(self) -> Planner:
        return self.registry.planner

    @property
    def strategy(self) -> Strategy:
        return self.loop.strategy

    # -- registration --------------------------------------------------------------------
    def _add_source(self, d: SourceDef) -> None:
        self.registry.add_source(d, self.catalog.scale(d))
        if self.limits is not None and d.kind is Kind.STREAM:
            self.limits.add_stream(d.name)
            self.registry.source(d.name).shed = self.limits.admit

    def register_stream(
        self,
        name: str,
        columns: Sequence[tuple[str, Any]],
        unit: TimeUnit | str | None = None,
        constraints: Sequence[ConstraintSpec] = (),
    ) -> None:
        """A stream; ``unit`` says what its timestamps count if not the catalog's tick (coarser only);
        ``constraints``: its k-constraints (``("ordered", "oid", 2)``, or ``ast.StreamConstraint``;
        CQL: ``ORDERED BY oid WITHIN 2``) — elements that violate one are rejected as the source
        releases them, and joins keep less (STREAM §4.1, design 023).
        """
        self._add_source(self.catalog.register_stream(name, columns, unit, constraints))

    def register_relation(
        self, name: str, columns: Sequence[tuple[str, Any]], unit: TimeUnit | str | None = None
    ) -> None:
        self._add_source(self.catalog.register_relation(name, columns, unit))

    def register_view(self, name: str, query: str, columns: Sequence[str] = (), kind: Kind | None = None) -> None:
        register_view(self.catalog, name, query, columns, kind=kind)

    def register_function(
        self,
        name: str,
        fn: Callable[..., Any],
        return_type: Any,
        arg_types: Any = None,
        *,
        strict: bool = True,
        vectorized: bool = False,
    ) -> None:
        """A Python scalar function callable from CQL (``Catalog.register_function``): ``strict``
        gives NULL for a NULL argument without calling it; a ``vectorized`` one takes an Arrow
        array per argument and returns the array of results.
        """
        self.catalog.register_function(name, fn, return_type, arg_types, strict=strict, vectorized=vectorized)

    def register_query(
        self,
        query: str | ast.Query,
        name: str | None = None,
        *,
        retain: int | None = None,
        weight: float = 1.0,
        min_precision: float = 0.0,
        max_latency: float | str | None = None,
    ) -> Query:
        """Bind, plan and start a continuous query; its answer accumulates in the returned handle.

        ``retain`` bounds what the handle keeps for ``results()``: None keeps every element,
        ``N`` the last N, 0 none (subscribers still see everything) — for unbounded streams.
        Under a ``memory_limit``: ``weight`` is the query's importance when the engine must
        approximate (STREAM §2.4), ``min_precision`` the least recall it accepts (1: exact only).
        ``max_latency`` (seconds or ``"200ms"``): the push-to-output latency it tolerates; the engine
        measures it and, unless a scheduler was chosen, switches to path capacity while it is missed.
        """
        text = query if isinstance(query, str) else to_cql(query)
        q_ast = parse_query(query) if isinstance(query, str) else query
        latency = None if max_latency is None else parse_latency(max_latency)
        limits = QueryLimits(weight, min_precision, latency)
        plan = Binder(self.catalog, text).bind_top(q_ast)
        if retain is not None and retain < 0:
            raise SluiceError(f"retain must be None, 0 or a positive number of elements, not {retain}")
        return self._start(BoundQuery(plan, text), name, retain, limits)

    def _start(self, bq: BoundQuery, name: str | None, retain: int | None, limits: QueryLimits) -> Query:
        check_shrinkable(bq.plan)
        static: tuple[StaticSample, ...] = ()
        if self.limits is not None:  # a Sample(a To b)'s rate, chosen once (STREAM §5.1.2)
            plan, static = self.limits.sample_at_registration(bq.plan, limits)
            bq = BoundQuery(plan, bq.text)
        q = self.registry.start(bq, name, retain)
        q.limits, q.weight, q.manager, q.qos = limits, limits.weight, self.limits, self.qos
        q.windows = self.meter.windows
        if self.limits is not None:
            self.limits.add_query(q.name, bq.plan, limits, static)
            self.limits.reduce_windows(q.name)
        self.qos.add(q.name, limits.max_latency)
        return q

    def unregister(self, name: str, *more: str) -> None:
        """Remove queries, also while running: each one's output stops, and every operator that
        served only it is removed (shared operators keep serving the other queries).  Every name
        is checked before any query goes (as ``SparkEngine.unregister``, whose shared processors
        need it).
        """
        names = list(dict.fromkeys((name, *more)))
        reg = self.registry
        for n in names:
            if n not in reg.queries and n not in reg.inactive:
                reg.unregister(n)  # (its error, naming the registered queries)
        for n in names:
            reg.unregister(n)

    def unregister_source(self, name: str) -> SourceDef | ViewDef:
        """Remove a stream, relation or view once nothing uses it: else ``InUseError`` naming
        the views and queries (active or not) that need it, or saying a stream is still read.
        """
        regs = {**self.registry.queries, **self.registry.inactive}
        d = check_unused(self.catalog, name, {n: q.bound.text for n, q in regs.items()})
        if isinstance(d, SourceDef):
            if self.sources[d.name.lower()].output.readers:
                raise InUseError(f"{d.name} is still read by an operator: unregister its queries first")
            self._drop_references(self.sources[d.name.lower()])
            del self.sources[d.name.lower()]
        self.catalog.unregister(d.name)
        return d

    def _drop_references(self, gone: Source) -> None:
        """A referencing stream going: each stream it references stops waiting for it and stops
        checking its references — unless a join or aggregate forgets state by them (a later
        element they would have rejected could need what it forgot): ``InUseError`` then.
        """
        targets = [(ref, ref.target) for ref in gone.references]
        for ref, t in targets:
            users = sorted(
                q
                for op in self.registry.operators
                if any(g.constraint == ref.implied and g.stream.lower() == t.name.lower() for g in _guards(op))
                for q in op.queries
            )
            if users:
                raise InUseError(
                    f"{gone.name}: queries {', '.join(users)} forget state by its references to {t.name} "
                    f"({ref.implied.sql()}): unregister them first"
                )
        for ref in gone.references:
            ref.withdraw(gone)

    def deactivate(self, name: str) -> None:
        """Stop maintaining a query (STREAM §2.4: "the system may not maintain the answer"): the
        operators only it used are removed (its state freed), its handle and output so far stay.
        A relation's answer becomes empty at the next instant (its contents deleted then; needs
        ``retain=None``); ``activate`` resumes it.
        """
        q = self.registry.queries.get(name)
        if q is None:
            self.registry.deactivate(name)  # an inactive one: nothing to do; unknown: the error
            return
        self.run()
        gone = None
        if q.kind is Kind.RELATION:
            gone = q.contents()
        assert q.output is not None
        at = q.output._wm_out + 1
        self.registry.deactivate(name)
        if gone is not None and gone.num_rows:
            gone = gone.set_column(0, "__ts", pa.array(np.full(gone.num_rows, at, np.int64)))
            q._deliver(gone.set_column(1, "__sign", pa.array(np.full(gone.num_rows, -1, np.int8))))
        q.inactive_since = at

    def activate(self, name: str) -> Query:
        """Maintain an inactive query again, as if registered now: its answer resumes from the
        first instant not yet released, its windows filling from then on (what arrived while it was
        inactive is not in it).
        """
        q = self.registry.activate(name)
        if self.limits is not None and name not in self.limits.readers:
            self.limits.add_query(name, q.bound.plan, q.limits)
        if name not in self.qos.queries:
            self.qos.add(name, q.limits.max_latency)
        q.inactive_since = None
        return q

    def set_weight(self, name: str, weight: float) -> None:
        """A query's importance when the engine must approximate (STREAM §2.4), also while running:
        the resource manager's next allocation reads it.
        """
        q = self.registry.queries.get(name) or self.registry.inactive.get(name)
        if q is None:
            raise SluiceError(f"no query named {name!r}")
        limits = QueryLimits(weight, q.limits.min_precision, q.limits.max_latency)  # checks the weight
        q.limits, q.weight = limits, weight
        if self.limits is not None and name in self.limits.readers:
            self.limits.readers[name].limits = limits

    def execute(self, text: str) -> list[Query | str | None]:
        """Run CQL statements: DDL registers, a query starts running, EXPLAIN returns text."""
        out: list[Query | str | None] = []
        for stmt in parse_script(text):
            src = text[stmt.span.start : stmt.span.end]
            if isinstance(stmt, ast.QueryStatement):
                plan = Binder(self.catalog, text).bind_top(stmt.query)
                out.append(self._start(BoundQuery(plan, src), None, None, QueryLimits()))
                continue
            if isinstance(stmt, ast.RegisterQuery):
                limits = QueryLimits(
                    1.0 if stmt.weight is None else stmt.weight,
                    0.0 if stmt.precision is None else stmt.precision,
                    stmt.latency,
                )
                bq = execute_statement(self.catalog, stmt, text, src)
                assert isinstance(bq, BoundQuery)
                out.append(self._start(bq, stmt.name, None, limits))
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
    def attach_static(self, name: str, rows: Sequence[Sequence[Any]]) -> None:
        """Declare a relation static: it holds exactly ``rows`` (attribute tuples) at every instant
        from the first, and nothing may be pushed to it (as ``SparkEngine.attach_static``).  It
        holds no query back (complete as far as the other sources are), and a join of it with a
        stream keeps no synopsis of the stream's side once its rows are in (STREAM §2.2's
        transformation of a window over a stream joined with a static relation: design 012).
        """
        src = self.registry.source(name)
        d = self.catalog.lookup(name)
        assert isinstance(d, SourceDef)
        batch = static_rows(d, rows)
        if self.registry.running():
            raise SluiceError(f"attach static relations before the first run() that releases input ({d.name})")
        if src.static or src.admission.accepted or src._pending:
            raise SluiceError(f"{d.name} already has contents")
        src.set_static(batch)
        src.admission.accepted += batch.num_rows  # (counted as Spark counts them)
        src.follow = self.registry.others_complete

    def is_static(self, name: str) -> bool:
        """Whether ``name`` is a static relation (``attach_static``): pushes to it are refused."""
        return self.registry.source(name).static

    def _changeable(self, name: str) -> Source:
        src = self.registry.source(name)
        if src.static:
            raise static_refusal(src.name)
        return src

    def push(self, name: str, rows: Any, *, ts_column: str = "ts", sign_column: str = "sign") -> None:
        """Push rows to a stream or relation.

        Rows are tuples ``(ts, v1, …)`` (relations: ``(ts, '+'|'-', v1, …)``), dicts with a ``ts``
        key (and ``sign``), an Arrow table or a pandas frame with a ``ts`` column.  Rows that do
        not fit are rejected, counted and described in ``statistics()``; the rest are accepted.
        """
        src = self._changeable(name)
        tick_ns = self.catalog.time_unit.millis * 1_000_000
        batch, errors = to_batch(rows, src.schema, src.relation, src.name, ts_column, sign_column, tick_ns)
        for msg in errors:
            src.reject("malformed", msg)
        self._admit(src, batch)

    def _admit(self, src: Source, batch: pa.Table) -> None:
        """Into the source; under a memory limit a large batch in slices with the plan run between
        them, so that what the kept elements cost is measured before the rest is judged.
        """
        n = batch.num_rows
        first, step = (n, n) if self.limits is None or src.relation else self.limits.slice_rows(src.name, batch)
        if first < n and self.registry.ctx.start is None:
            # (the runs between slices may fix the first instant: at the earliest element of the push
            # its source will take — of the first slice, the later slices' earlier elements were
            # rejected as before it, 30 of 230 lost; of every row, one it rejects as late moved it
            # 990 instants early, as many answers of count 0 for an exact-only query)
            self.registry.pushing_from = src.admission.earliest_kept(ts_of(batch) * src.scale)
        try:
            i = 0
            while True:
                size = first if i == 0 else step
                src.push(batch.slice(i, size) if i or size < n else batch)
                self.qos.pushed(src.max_seen)
                i += max(size, 1)
                if i >= n:
                    return
                self.run()
        finally:
            self.registry.pushing_from = None

    def push_batch(self, name: str, batch: pa.Table) -> None:
        """Push an already-typed batch (``__ts``, ``__sign``, ``c0…``): the fast path, through
        the same value checks as every other input (vectorised).
        """
        src = self._changeable(name)
        batch, errors = admit_batch(batch, src.schema, src.name)
        for msg in errors:
            src.reject("malformed", msg)
        self._admit(src, batch)

    def reject(self, name: str, messages: Sequence[str]) -> None:
        """Count rows rejected before they reached the engine (a reader's bad lines), as malformed."""
        src = self.registry.source(name)
        for msg in messages:
            src.reject("malformed", msg)

    def heartbeat(self, ts: int, name: str | None = None) -> None:
        """No element with timestamp ≤ ``ts`` will arrive (on ``name``, or on every source)."""
        for src in [self.registry.source(name)] if name else self.sources.values():
            src.heartbeat(ts)

    def punctuate(
        self, name: str, column: str, *, values: Sequence[Any] | None = None, upto: Any = None, ts: int | None = None
    ) -> int:
        """A punctuation (STREAM §4.1; Tucker et al.): no element of stream ``name`` stamped after
        ``ts`` (default: the latest timestamp pushed to it) has one of ``values`` — or, with
        ``upto``, a value ≤ it — in ``column``, which the stream declares ``PUNCTUATED BY``.  Joins
        and aggregates over the column forget what only such elements could still need; a later
        element that breaks it is rejected (reason ``constraint``), never silently wrong.  Returns
        the ``ts`` it holds from.  Design 023, "Punctuations".
        """
        src = self.registry.source(name)
        d = self.catalog.lookup(src.name)
        assert isinstance(d, SourceDef)
        vals, bound = punctuation_values(d, column, values, upto)
        if ts is None:  # the latest instant pushed to it (or released: a heartbeat's)
            if max(src.max_seen, src.watermark_out) == NEG_INF:
                raise SluiceError(
                    f"{src.name}: nothing was pushed to it yet, so a punctuation has no latest instant to "
                    "follow: give ts=… (no element stamped after it has those values)"
                )
            ts = max(src.max_seen, src.watermark_out) // src.scale
        tick = (int(ts) + 1) * src.scale - 1  # the last tick of instant ts, as a heartbeat's
        src.punctuate(column, tick, vals, bound)
        return int(ts)

    def __enter__(self) -> EmbeddedEngine:
        return self

    def __exit__(self, kind: type[BaseException] | None, *exc: object) -> None:
        """``with EmbeddedEngine() as eng:`` — leaving without an error closes the input (``close()``);
        with one, nothing is run (the error goes on).
        """
        if kind is None:
            self.close()

    def close(self, until: int | None = None) -> None:
        """End of input: complete every instant up to ``until`` (default: the last timestamp pushed)."""
        last = max((s.max_seen for s in self.sources.values()), default=NEG_INF)
        if until is None:
            until = last
            if until == NEG_INF and any(s.static for s in self.sources.values()):
                # nothing pushed but static relations: their rows at the first instant (0 if
                # not given, as on Spark), so a query over them answers
                until = self.ctx.start if self.ctx.start is not None else 0
        for s in self.sources.values():
            s.close(until)
        self.run()

    # -- scheduling and execution --------------------------------------------------------
    def set_scheduler(self, scheduler: str | Strategy, **options: Any) -> None:
        """Choose the scheduling strategy (also while running): a name from
        ``sluice.scheduling.strategies.STRATEGIES`` (with ``+oldest-first``, ``+dynamic``,
        ``+exhaustive``, ``+limited`` modifiers) or a strategy object.  The engine then keeps it:
        latency targets no longer switch it (they are still measured and reported).
        """
        self.loop.set_scheduler(scheduler, **options)
        self.qos.pinned = True

    def set_estimates(self, estimates: dict[str, tuple[float, float]]) -> None:
        """Static (seconds per tuple, selectivity) per operator name (see ``explain``), used by the
        strategies instead of measured statistics for those operators.
        """
        self.loop.set_estimates(estimates)

    def run(self, max_steps: int | None = None) -> int:
        """Run until no operator has work; returns the number of scheduling decisions."""
        if self.limits is None:
            steps = self.loop.run(max_steps)
        else:  # the peak: also what a push left waiting for the run, and what the run's steps hold
            self._note_peak()
            if self.pacer is None:  # (an engine restored from a checkpoint of before pacing)
                self.pacer = Pacer(self.meter, self.limits)
            steps = self.loop.run(max_steps, self.pacer)
            self.limits.adjust()
        at_risk = self.limits is not None and self.limits.at_risk()
        want = self.qos.choose(self.loop.strategy.name, at_risk)
        if want is not None:
            self.loop.set_scheduler(want)
        return steps

    def _note_peak(self) -> None:
        assert self.limits is not None
        self.limits.note_peak(self.meter.total())

    def on_shed(self, fn: Callable[[str, pa.Table, str], None]) -> None:
        """Call ``fn(stream, elements, reason)`` with every batch of stream elements the memory
        limit made the engine drop (reason ``"sampled"`` or ``"shed"``): to keep them elsewhere.
        """
        if self.limits is not None:
            self.limits.on_shed.append(fn)

    # -- checkpoints and snapshots -------------------------------------------------------
    def checkpoint(self, path: str | Path) -> None:
        """Save the whole state — catalog, sources (buffered and late-checked), every operator's
        synopses and queues, the queries and their retained output — atomically (temp + rename).
        ``EmbeddedEngine.restore(path)`` continues exactly where this engine is now.
        Subscribers are not saved: subscribe again after restoring.
        """
        try:
            data = dumps(self)
        except (pickle.PicklingError, TypeError, AttributeError) as e:
            raise SluiceError(
                f"checkpoint: the engine's state cannot be saved ({e}); are all UDFs (and an injected clock) "
                "module-level functions?"
            ) from None
        write_atomic(Path(path), data)

    @staticmethod
    def restore(path: str | Path) -> EmbeddedEngine:
        """An engine from a checkpoint (``checkpoint``): same queries, same state, same answers."""
        with Path(path).open("rb") as f:
            try:
                eng = pickle.load(f)
            except Exception as e:  # a truncated file, or classes this version no longer has
                raise SluiceError(
                    f"{path} cannot be read as an embedded-engine checkpoint of this version of Sluice ({e}); "
                    "run from the start (or with the version that wrote it)"
                ) from None
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
        reg = self.registry
        return {
            "format": SNAPSHOT_FORMAT,
            "start": reg.ctx.start,
            "steps": self.loop.steps,
            "operators": {o.name: (_plan_mark(o), o.snapshot()) for o in reg.all_operators()},
            "queues": {q.name: q.snapshot() for q in reg.queues()},
            "queries": {n: q.snapshot() for n, q in reg.queries.items()},
            "failures": dict(reg.failures),
            # the memory limit's rates and counters (a Spark processor's key budget: design 021)
            "limits": None if self.limits is None else self.limits.snapshot(),
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

        reg = self.registry
        # the queries are checked before anything changes: a snapshot refused here leaves the engine as it was
        differ("queries", set(reg.queries) - set(state["failures"]), state["queries"])
        for name, why in state["failures"].items():  # queries that stopped there stop here too
            if name in reg.queries:
                reg.stop(name, why)
        ops = {o.name: o for o in reg.all_operators()}
        queues: dict[str, Queue] = {q.name: q for q in reg.queues()}
        differ("operators", ops, state["operators"])
        differ("queues", queues, state["queues"])
        for name, (mark, _) in state["operators"].items():
            if _plan_mark(ops[name]) != mark:
                raise SluiceError(
                    f"the snapshot is of a different plan: {name} is {mark} there, {_plan_mark(ops[name])} here"
                )
        for name, (_, st) in state["operators"].items():
            ops[name].restore(st)
        for name, st in state["queues"].items():
            queues[name].restore(st)
        for name, st in state["queries"].items():
            reg.queries[name].restore(st)
        reg.ctx.start, self.loop.steps = state["start"], state["steps"]
        if self.limits is not None and state.get("limits") is not None:  # (none: taken without a limit)
            self.limits.restore(state["limits"])
        self.loop.forget_measurements()
        if self.pacer is not None:
            self.pacer.forget()

    # -- inspection ----------------------------------------------------------------------
    def results(self, query: str | Query) -> list[Element]:
        """A query's output so far (``Query.results``): the same call as ``SparkEngine.results``."""
        q = query if isinstance(query, Query) else self.queries.get(query) or self.registry.inactive.get(query)
        if q is None:
            raise SluiceError(f"no query named {query!r}")
        return q.results()

    def statistics(self) -> EngineStats:
        return self.inspector.statistics()

    def rejected(self) -> list[str]:
        """Messages for rejected input (first 100 per source) and for rows an operator could not
        evaluate (first 100 per operator, naming its queries: ``sluice.plan.numeric``).
        """
        return self.inspector.rejected()

    def explain_plan(self, plan: Any) -> str:
        return explain(plan)

    def explain(self, query: str | Query | None = None) -> str:
        """The operator DAG of one query (or all): operators, queues, synopses, what is shared."""
        everyone = {**self.queries, **self.registry.inactive}
        if isinstance(query, str) and query not in everyone:
            raise SluiceError(f"no query named {query!r} (registered: {', '.join(everyone) or 'none'})")
        qs = [query if isinstance(query, Query) else everyone[query]] if query else list(everyone.values())
        return self.inspector.explain(qs)
