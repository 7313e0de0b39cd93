"""The Spark backend (``Sluice(backend="spark", master="local[2]")``).

Each registered query becomes one Structured Streaming query:

    source event files (Parquet, typed columns) ─┐
    user directories (CSV / JSON / Parquet)  ────┼─ σ pushed down (Spark expressions)
    rate source, socket                      ────┘  ekey = pmod(hash(key columns), n)  (Spark)
        ──> groupBy(ekey).transformWithStateInPandas(SluiceProcessor)   (RocksDB state)
        ──> memory (micro-batches back as Arrow: foreachBatch) / Parquet / JSON (exactly once) / console

The engine is the session users call (registration, and the decision how Spark runs each
query); its parts are the inbox (``inbox.py``: pushed rows after the one admission check and the
embedded engine's lateness rule, markers, attached and static sources, written for Spark to
read), the runner (``runner.py``: starting and feeding the streaming queries) and the inspector
(``inspector.py``: output read back, results, statistics, EXPLAIN).  What Spark computes
natively — the partition key of every element, the selections that can run before any stateful
operator, the fan-out of replicated relations and markers — is decided by
``sluice.backends.spark.compile``; everything stateful runs in the processor, which holds the
embedded engine's own operators (``docs/design/007``).  The DataFrames themselves are built in
``sluice.backends.spark.frames``.
"""

from __future__ import annotations

import tempfile
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from sluice.approx.limits import QueryLimits, parse_latency, parse_size
from sluice.approx.precision import check_shrinkable
from sluice.approx.qos import QoS
from sluice.backends.rows import punctuation_values
from sluice.backends.spark.compile import NativePlan, native, overflow, partitioning, to_column
from sluice.backends.spark.frames import native_columns, source_column
from sluice.backends.spark.inbox import Inbox
from sluice.backends.spark.inspector import Inspector
from sluice.backends.spark.preagg import PreAggregate, preaggregate
from sluice.backends.spark.processor import register_udfs
from sluice.backends.spark.query import SparkQuery
from sluice.backends.spark.runner import Runner
from sluice.backends.spark.shed import Deliveries
from sluice.catalog import Catalog, ConstraintSpec, Kind, SourceDef, ViewDef
from sluice.cql import ast
from sluice.cql.ast import TimeUnit
from sluice.cql.parser import parse_script
from sluice.cql.printer import to_cql
from sluice.errors import SluiceError
from sluice.plan import bind_query, execute, register_view
from sluice.plan import logical as L
from sluice.plan.dataflow import check_join_intermediates
from sluice.plan.ddl import check_unused, execute_statement
from sluice.plan.element import Element
from sluice.plan.explain import explain as explain_plan
from sluice.plan.rules import rewrite
from sluice.runtime.operators.shared_join_spec import shared_join_options
from sluice.runtime.planner import rules_for
from sluice.windows import Range

# why a query over its latency target switches nothing on Spark (an event says so)
SPARK_KEEPS = "Spark: a micro-batch's answers leave together, whatever order its processors run in: nothing to switch"

SINKS = ("memory", "parquet", "json", "console")


class SparkEngine:
    """Register, push, run and read results like the embedded engine; executed by Spark."""

    def __init__(
        self,
        master: str = "local[2]",
        *,
        workdir: str | Path | None = None,
        time_unit: TimeUnit | str = TimeUnit.SECOND,
        seed: int = 0,
        start: int | None = None,
        slack: int = 0,
        scheduler: str = "round-robin",
        spark: Any = None,
        preaggregate: bool = True,
        shared_join: str | None = None,
        memory_limit: int | str | None = None,
        key_memory_limit: int | str | None = None,
        join_intermediates: str = "auto",
        sharing: bool = True,
    ) -> None:
        """``scheduler`` is the strategy each processor's operators run under (as ``EmbeddedEngine``);
        ``preaggregate=False`` sends every element of a sliding-window group-by to the processor
        instead of Spark's partial aggregates (the same answer: for comparison and benchmarks).
        ``shared_join`` is the policy of a window join inside a processor (same names and errors as
        ``EmbeddedEngine``); unless it is ``"off"``, queries started together that join the same
        streams through windows on the same keys run in one processor per key (docs/design/020).
        ``join_intermediates``: whether a processor's join of three or more inputs keeps its
        intermediate results (as ``EmbeddedEngine``; docs/design/024).  ``sharing=False``: each
        query's operators are its own inside a processor (as ``EmbeddedEngine``): no shared
        windows or window joins, so no processor serves several queries.  ``key_memory_limit``
        (bytes, or ``"4MB"``): each processor key's queues and synopses are held within it by
        sampling and shedding the key's input, as the embedded engine holds its ``memory_limit``;
        each query's ``approximation`` and ``statistics()`` say what was dropped (design 021,
        "On Spark").  Without it every query is exact whatever its state.
        """
        from sluice.backends.spark.session import get_session
        from sluice.scheduling.strategies import make

        if memory_limit is not None:
            parse_size(memory_limit)  # the same check as the embedded engine's, then a clear refusal
            raise SluiceError(
                "memory_limit (one limit for the whole engine) is not available on the Spark backend: its state "
                "is spread over keys in the RocksDB state store; key_memory_limit holds each key's state within "
                "a limit by sampling and shedding its input (docs/design/021, 'On Spark')"
            )
        self.key_memory_limit = None if key_memory_limit is None else parse_size(key_memory_limit)
        try:
            make(scheduler)  # the same names, parameters and errors as the embedded engine
        except ValueError as e:
            raise SluiceError(str(e)) from None
        self.scheduler = scheduler
        check_join_intermediates(join_intermediates)
        self.join_intermediates = join_intermediates
        self.sharing = sharing
        # the same names, options and errors as the embedded engine; None is its default (Greedy)
        self.groups_joins = shared_join_options(shared_join, sharing) is not None
        self.shared_join = shared_join
        self.preaggregate = preaggregate
        self.spark = spark or get_session(master)
        self.catalog = Catalog(time_unit=time_unit)
        self.seed = seed
        self.start = start
        self.slack = slack
        self.workdir = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="sluice-spark-"))
        # every registration by name (lower case), in order: replayed by each key's engine on the workers
        self.ddl: dict[str, str] = {}
        self.udfs: list[tuple[Any, ...]] = []  # (name, fn, return type, argument types, strict, vectorized)
        self.queries: dict[str, SparkQuery] = {}
        self.inbox = Inbox(self.catalog, self.workdir, slack, start)
        self.deliveries = Deliveries()  # on_shed's callbacks and what they were handed
        # latency targets, measured and reported as on the embedded engine; nothing to switch: a
        # processor's strategy orders work inside a micro-batch, whose answers leave together
        self.qos = QoS(pinned=True, kept=SPARK_KEEPS)
        self._answered: dict[str, int] = {}  # per query: the last memory-sink batch measured (−1: none)
        self._first_push: float | None = None  # when the first push since the last run came (qos clock)
        self.runner = Runner(self)
        self.inspector = Inspector(self)

    @property
    def external(self) -> dict[str, tuple[str, dict[str, Any]]]:
        """Attached sources: name → (kind, options) — "directory", "rate", "socket"."""
        return self.inbox.external

    @property
    def static(self) -> dict[str, list[tuple[Any, ...]]]:
        """Static relations: name → their fixed rows."""
        return self.inbox.static

    # -- registration --------------------------------------------------------------------
    def execute(self, text: str) -> list[Any]:
        out: list[Any] = []
        for stmt in parse_script(text):
            src = text[stmt.span.start : stmt.span.end]
            if isinstance(stmt, ast.QueryStatement):
                out.append(self.register_query(src))
            elif isinstance(stmt, ast.RegisterQuery):
                w, p = stmt.weight, stmt.precision
                qsrc = text[stmt.query.span.start : stmt.query.span.end]
                out.append(
                    self.register_query(
                        qsrc,
                        stmt.name,
                        weight=1.0 if w is None else w,
                        min_precision=0.0 if p is None else p,
                        max_latency=stmt.latency,
                    )
                )
            elif isinstance(stmt, ast.Explain):
                out.append(explain_plan(bind_query(self.catalog, stmt.query, source=text).plan))
            else:
                assert isinstance(stmt, ast.RegisterSource | ast.RegisterView)  # (the rest are handled above)
                execute_statement(self.catalog, stmt, text, src)
                if isinstance(stmt, ast.RegisterSource):
                    self._register(self._source(stmt.name))
                else:
                    self.ddl[stmt.name.lower()] = to_cql(stmt) + ";"
                out.append(None)
        return out

    def register_stream(
        self,
        name: str,
        columns: Sequence[tuple[str, Any]],
        unit: TimeUnit | str | None = None,
        constraints: Sequence[ConstraintSpec] = (),
    ) -> None:
        """A stream, as ``EmbeddedEngine.register_stream`` (``unit``: what its timestamps count)."""
        self._register(self.catalog.register_stream(name, columns, unit, constraints))

    def register_relation(
        self, name: str, columns: Sequence[tuple[str, Any]], unit: TimeUnit | str | None = None
    ) -> None:
        """A relation, as ``EmbeddedEngine.register_relation``."""
        self._register(self.catalog.register_relation(name, columns, unit))

    def _register(self, d: SourceDef) -> None:
        """Record a source registered through the API as DDL: every key's engine on the workers
        replays ``self.ddl``.
        """
        kind = "RELATION" if d.kind is Kind.RELATION else "STREAM"
        cols = tuple(ast.ColumnDef(c.name, c.type) for c in d.schema.columns)
        if d.kind is Kind.STREAM:
            for c in d.constraints:
                why = self._reference_refused(d, c) if c.kind == "REFERENCES" else None
                if why is not None:
                    self.catalog.unregister(d.name)
                    raise SluiceError(f"{d.name}: FOREIGN KEY ({c.column}) REFERENCES {c.ref}: {why}")
            self.inbox.declare(d)
        # The driver holds and checks the stream's constraints as the embedded engine's source
        # does (``gate``).  A processor's engine sees one key's rows, in the driver's order:
        # ORDERED BY, UNIQUE BY, punctuations (every key gets each as a marker) and a referencing
        # stream's values hold of any subsequence — its joins and aggregates then forget state,
        # and its check rejects nothing — CLUSTERED BY need not (design 023, "On Spark")
        kept = tuple(c for c in d.constraints if c.kind != "CLUSTERED")
        self.ddl[d.name.lower()] = to_cql(ast.RegisterSource(kind, d.name, cols, d.unit, kept)) + ";"

    def _reference_refused(self, d: SourceDef, c: ast.StreamConstraint) -> str | None:
        """Why Spark cannot check ``d``'s FOREIGN KEY ``c`` (None: it can)."""
        target = self._source(c.ref)
        if target.name.lower() in self.inbox.external:
            return "Spark reads its rows itself (attached), unchecked: push them to check the reference"
        return None

    def register_view(self, name: str, query: str, columns: Sequence[str] = (), kind: Kind | None = None) -> None:
        """A named view (STREAM's ``vquery``/``vtable``), checked as ``EmbeddedEngine.register_view``."""
        register_view(self.catalog, name, query, columns, kind=kind)
        cols = f" ({', '.join(columns)})" if columns else ""
        self.ddl[name.lower()] = f"REGISTER VIEW {name}{cols} AS {query};"

    def register_query(
        self,
        query: str,
        name: str | None = None,
        *,
        sink: str = "memory",
        path: str | Path | None = None,
        weight: float = 1.0,
        min_precision: float = 0.0,
        max_latency: float | str | None = None,
    ) -> SparkQuery:
        """Start a query.  ``weight`` and ``min_precision`` mean what they mean on the embedded
        engine, inside each key's engine under a ``key_memory_limit``; without one every query is
        exact.  ``max_latency`` (seconds or ``"200ms"``): measured from the push that reached an
        answer's instant to the end of the ``run()`` that delivered it, and reported (``statistics()
        ["latency"]``, ``explain``, ``latency``) as on the embedded engine; a target missed is an
        event, and nothing is switched for it (design 021, "Latency targets on Spark").
        """
        limits = QueryLimits(weight, min_precision, None if max_latency is None else parse_latency(max_latency))
        bq = bind_query(self.catalog, query)
        check_shrinkable(bq.plan)
        name = name or f"q{len(self.queries) + 1}"
        if name in self.queries:
            raise SluiceError(f"a query named {name!r} is already registered")
        if sink not in SINKS:
            raise SluiceError(f"sink must be one of {', '.join(SINKS)}")
        out_path = Path(path) if path else (self.workdir / name / "out" if sink in ("parquet", "json") else None)
        if out_path is not None and (out_path / "_spark_metadata").exists():
            if not (self.workdir / name / "checkpoint").exists():
                raise SluiceError(
                    f"{out_path} holds an earlier streaming query's output (_spark_metadata): Spark would take this "
                    "query's first batches for ones written there already and skip them; choose another path "
                    "or delete it"
                )
        sources: list[str] = []
        for n in L.walk_plan(bq.plan):
            if isinstance(n, L.Scan) and n.name.lower() not in {s.lower() for s in sources}:
                sources.append(self._source(n.name).name)
        attached = [s for s in sources if s.lower() in self.inbox.external]
        if limits.max_latency is not None and attached:
            raise SluiceError(
                f"max_latency of {name}: latency is measured from the pushes that reach an instant, and "
                f"{', '.join(attached)} is read by Spark itself (attached): the driver never sees its rows arrive"
            )
        # As on the embedded engine: what was pushed but not yet run is a new query's input too
        rw = rewrite(bq.plan, rules_for(self.sharing))  # (the rules of the processors' engines)
        part = partitioning(rw.plan)
        q = SparkQuery(
            name,
            bq,
            rw.plan,
            rw.applied,
            part,
            sources,
            self.inbox.released,
            sink,
            out_path,
            engine=self,
            limits=limits,
        )
        q.since = self.inbox.since()  # (registered while running: from after what was released)
        self.queries[name] = q
        self.qos.add(name, limits.max_latency)
        return q

    def unregister(self, name: str, *more: str) -> None:
        """Remove queries, also while running (``EmbeddedEngine.unregister``): each one's
        streaming query stops and its checkpoint goes, so its name is free for a new query that
        starts afresh; a file sink's output stays.  Queries that run in one processor (a shared
        window join: design 020) keep their state in one checkpoint, so they leave together:
        ``unregister("a", "b")``.
        """
        qs = [self._query(n) for n in dict.fromkeys((name, *more))]
        leaving = {q.name for q in qs}
        for q in qs:  # every check before anything stops: all of them leave, or none
            self.runner.check_leaving(q, leaving)
        for q in qs:
            self.runner.remove(q)
            del self.queries[q.name]
            self.qos.forget(q.name)
            self._answered.pop(q.name, None)

    def unregister_source(self, name: str) -> SourceDef | ViewDef:
        """Remove a stream, relation or view once no view or query uses it (else ``InUseError``
        naming them).  A source's pushed events, pending or written, go with it: no query reads
        them, and a source registered again under the name starts empty.
        """
        d = check_unused(self.catalog, name, {n: q.bound.text for n, q in self.queries.items()})
        if isinstance(d, SourceDef) and any(c.kind == "REFERENCES" for c in d.constraints):
            self._references_unused(d)
        self.catalog.unregister(d.name)
        self.ddl.pop(d.name.lower(), None)
        if isinstance(d, SourceDef):
            self.inbox.forget(d)
        return d

    def _references_unused(self, d: SourceDef) -> None:
        """``InUseError`` if a query's processors forget state by ``d``'s references (as
        ``EmbeddedEngine._drop_references``): asked of an engine built as the processors build theirs.
        """
        from sluice.backends.embedded import EmbeddedEngine

        scratch = EmbeddedEngine(
            time_unit=self.catalog.time_unit, sharing=self.sharing, join_intermediates=self.join_intermediates
        )
        register_udfs(scratch.catalog, self.udfs)
        scratch.execute("\n".join(self.ddl.values()))
        for n, q in self.queries.items():
            scratch.register_query(q.bound.text, name=n)
        scratch.unregister_source(d.name)  # (raises InUseError naming the queries)

    def register_function(
        self,
        name: str,
        fn: Any,
        return_type: Any,
        arg_types: Any = None,
        *,
        strict: bool = True,
        vectorized: bool = False,
    ) -> None:
        """A Python scalar UDF callable from CQL; ``fn`` must pickle (a module-level function)
        because every partition key's engine on the workers registers it too.  ``vectorized``:
        it takes an Arrow array per argument and returns the array of results.
        """
        self.catalog.register_function(name, fn, return_type, arg_types, strict=strict, vectorized=vectorized)
        self.udfs.append((name, fn, return_type, arg_types, strict, vectorized))

    def native_of(self, q: SparkQuery) -> list[NativePlan] | None:
        """The query's native branches, if every expression translates, from any source kind:
        an element's output depends on that element alone, so there is nothing for it to be late
        for (the lateness rule, ``docs/design/014``).
        """
        branches = native(q.plan)
        if branches is None:
            return None
        reads = [b.source.lower() for b in branches]
        if any(reads.count(r) > 1 and self.external.get(r, ("",))[0] in ("socket", "rate") for r in reads):
            return None  # each branch would open its own connection/generator: the processor reads it once
        for plan in branches:
            if plan.static is not None and plan.static.lower() not in self.static:
                return None  # a relation that may change: the processor keeps it
            column = native_columns(self, plan)
            if any(to_column(e, column) is None for e in plan.predicates + plan.columns):
                return None
        return branches

    def preagg_of(self, q: SparkQuery) -> PreAggregate | None:
        """Spark's pre-aggregation of a split group-by over a sliding window, where provably exact:
        the partition key among the group's columns, every WHERE conjunct translatable to Spark
        without overflow, and the rewritten query binding to the original's output types over
        windows of the same ticks (``sluice.backends.spark.preagg``).
        """
        if not self.preaggregate or q.native is not None or q.part is None:
            return None
        if self.key_memory_limit is not None:  # a limit samples elements, not Spark's partials of them
            return None
        pre = preaggregate(q.bound.text, self.catalog, q.bound.plan)
        if pre is None:
            return None
        key = q.part.keys.get(pre.source.lower())
        if key is None or not set(key) <= set(pre.keys):
            return None
        if any(to_column(p, source_column) is None or overflow(p, source_column) is not None for p in pre.filters):
            return None
        scratch = Catalog(time_unit=self.catalog.time_unit)
        register_udfs(scratch, self.udfs)
        try:
            execute(scratch, pre.ddl)
            plan = bind_query(scratch, pre.query).plan
        except SluiceError:
            return None
        spans = sorted(
            (n.spec.range, n.spec.slide)
            for n in L.walk_plan(plan)
            if isinstance(n, L.Window) and isinstance(n.spec, Range)
        )
        want = sorted((r, pre.slide) for r in (pre.range, pre.lower_range) if r is not None)
        if plan.schema.types != q.bound.plan.schema.types or spans != want:
            return None
        return pre

    # -- input ---------------------------------------------------------------------------
    def _source(self, name: str) -> SourceDef:
        return self.inbox.source(name)

    def _attach(self, name: str, kind: str, options: dict[str, Any]) -> None:
        d = self._source(name)
        gate = self.inbox.gates.get(d.name.lower())
        if d.constraints or (gate is not None and gate.referenced_by):
            why = "declares k-constraints" if d.constraints else "is referenced by a FOREIGN KEY"
            raise SluiceError(
                f"{d.name} {why}, which the driver checks on the rows pushed to it; Spark would read "
                "these rows itself, unchecked: push them, or declare the stream without"
            )
        if any(q.stream is not None for q in self.queries.values()):
            raise SluiceError(f"attach sources before the first run() that releases input ({d.name})")
        self.inbox.attach(d, kind, options)

    def attach_directory(self, name: str, path: str | Path, fmt: str = "csv", **options: str) -> None:
        """Read a stream or relation from files appearing in ``path`` (``csv``, ``json`` or
        ``parquet``), picked up by Spark as they arrive.  Files have a ``ts`` column (and ``sign``,
        ``+``/``-``, for a relation) and the attributes by name; CSV files have a header.
        """
        if fmt not in ("csv", "json", "parquet"):
            raise SluiceError(f"format must be csv, json or parquet, not {fmt!r}")
        self._attach(name, "directory", {"path": str(path), "format": fmt, "options": options})

    def attach_rate(self, name: str, rows_per_second: int, columns: dict[str, str] | None = None) -> None:
        """Spark's ``rate`` source as a stream for load: ``ts`` is the generated timestamp in the
        engine's time unit, ``value`` (0, 1, 2, …) feeds every integer attribute unless ``columns``
        gives a Spark SQL expression over ``value`` per attribute.
        """
        d = self._source(name)
        if d.kind is not Kind.STREAM:
            raise SluiceError(f"{d.name} is a relation; a rate source feeds a stream")
        self._attach(name, "rate", {"rows_per_second": rows_per_second, "columns": columns or {}})

    def attach_socket(self, name: str, host: str, port: int) -> None:
        """Lines ``ts,v1,v2,…`` (relations: ``ts,sign,v1,…``) from a TCP socket (Spark's ``socket``
        source: for demos and tests, it is not fault tolerant).
        """
        self._attach(name, "socket", {"host": host, "port": int(port)})

    def attach_static(self, name: str, rows: list[tuple[Any, ...]]) -> None:
        """Declare a relation static: it holds exactly ``rows`` (attribute tuples) at every instant
        from the start, and nothing may be pushed to it.  Queries that join a stream with it
        (``Istream`` over ``[Range Unbounded]``, ``Rstream`` over ``[Now]``) then run as Spark
        stream–static joins, without state; other queries see the rows inserted at the start.
        """
        d = self._source(name)
        if any(q.stream is not None for q in self.queries.values()):
            raise SluiceError(f"attach static relations before the first run() that releases input ({d.name})")
        self.inbox.set_static(d, rows)

    def is_static(self, name: str) -> bool:
        """Whether ``name`` is a static relation (``attach_static``): pushes to it are refused."""
        return self._source(name).name.lower() in self.inbox.static

    def push(self, name: str, rows: Any, *, ts_column: str = "ts", sign_column: str = "sign") -> None:
        """Push rows: tuples ``(ts, v1, …)`` / ``(ts, '+'|'-', v1, …)``, dicts, an Arrow table or a pandas frame."""
        self.inbox.push(name, rows, ts_column, sign_column)
        self._pushed()

    def push_batch(self, name: str, batch: pa.Table) -> None:
        """Push an already-typed batch (``__ts``, ``__sign``, ``c0…``), through the same checks."""
        self.inbox.push_batch(name, batch)
        self._pushed()

    def _pushed(self) -> None:
        if self.inbox.last_ts is not None:  # (when the latest instant pushed was reached: latency)
            self.qos.pushed(self.inbox.last_ts)
        if self._first_push is None:
            self._first_push = self.qos.clock()

    def reject(self, name: str, messages: Sequence[str]) -> None:
        """Count rows rejected before they reached the engine (a reader's bad lines), as malformed."""
        self.inbox.reject(name, messages)

    def heartbeat(self, ts: int, name: str | None = None) -> None:
        """No element stamped ≤ ts will still arrive (every source; one source's heartbeat is an
        embedded-engine call: Spark's watermark is one for all inputs).
        """
        if name is not None:
            raise SluiceError(
                f"heartbeat(ts, {name!r}): Spark completes instants on every source at once; call heartbeat(ts)"
            )
        self.inbox.complete("h", ts, self.start)

    def close(self, until: int | None = None) -> None:
        """End of input: complete every instant up to ``until`` (default: the last timestamp pushed).
        The streaming queries keep running (more may be pushed, as on the embedded engine):
        ``stop()``, or leaving a ``with`` block, ends them.
        """
        inbox = self.inbox
        idle = inbox.last_ts is None and inbox.completed is None and not inbox.static and not inbox.external
        if until is None and idle and inbox.fresh:
            return  # nothing pushed or completed: no first instant, nothing to answer (as the embedded engine)
        last = inbox.last_ts if inbox.last_ts is not None else 0
        inbox.complete("e", until if until is not None else last, self.start)
        self.run()

    # -- running -------------------------------------------------------------------------
    def run(self) -> None:
        """Hand Spark every event pushed so far and wait until each query has processed them."""
        pushed, self._first_push = self._first_push, None
        self.runner.run()
        self._latencies(pushed)

    def _latencies(self, pushed: float | None) -> None:
        """After a run, each query's latency (``sluice.approx.qos``).  A memory sink's new
        micro-batches count as deliveries of the instants they answer (a group's member: its own
        rows).  A file or console sink's rows are never read back by the driver, so its latency is
        the wait of the first element pushed since the last run: every one of them has been
        processed when ``run`` returns, so this is never under-stated.  A run with no push since
        the last is not measured there.
        """
        for name, q in self.queries.items():
            if name not in self.qos.queries:
                continue
            if q.collected is not None:
                grouped = len(q.group) > 1
                for b, t in q.collected.after(self._answered.get(name, -1)):
                    t = t.select(["ts", "sign", "query"] if grouped else ["ts", "sign"])  # (not every column)
                    mine = pc.not_equal(t.column("sign"), 0)  # (a group's member: its own rows)
                    if grouped:
                        mine = pc.and_(mine, pc.fill_null(pc.equal(t.column("query"), name), False))
                    self.qos.delivered(name, t.filter(mine))
                    self._answered[name] = b
            elif q.stream is not None and pushed is not None:
                self.qos.waited(name, self.qos.clock() - pushed)
        self.qos.choose("spark", False)

    def on_shed(self, fn: Callable[[str, pa.Table, str], None]) -> None:
        """Call ``fn(stream, elements, reason)`` with every batch of stream elements a key's memory
        limit made its engine drop (reason ``"sampled"`` or ``"shed"``), as ``EmbeddedEngine.on_shed``:
        shipped from the executors as note rows and handed over on the driver at the end of each
        ``run()``/``close()``, each batch once.  An element of a stream sent to every key (one a
        query cannot split) comes once per key that dropped it, as the keys' counters count it.
        A running query whose processor does not ship its drops yet is started again from its
        checkpoint, shipping them.  Without ``key_memory_limit`` nothing is dropped.
        """
        self.deliveries.callbacks.append(fn)
        self.runner.ship_shed()

    def __enter__(self) -> SparkEngine:
        return self

    def __exit__(self, kind: type[BaseException] | None, *exc: object) -> None:
        """``with SparkEngine() as eng:`` — leaving without an error closes the input (``close()``,
        every answer delivered), then the streaming queries stop either way (``stop()``): a query
        left running keeps polling its sources (22 left by a test suite kept Spark's JVM at 113% of
        a core).
        """
        failed = kind is not None
        try:
            if not failed:
                self.close()
        except BaseException:
            failed = True
            raise
        finally:
            try:
                self.stop()
            except Exception as e:
                if not failed:
                    raise
                # (the error already on its way is the one to see; this one is said, not lost)
                warnings.warn(
                    f"stop() after an error in the with block failed too: {e!r}", RuntimeWarning, stacklevel=2
                )

    def stop(self) -> None:
        """Stop the streaming queries (their checkpoints stay; a new engine on the same workdir
        resumes, with the rows pushed here whose instants were not complete yet).
        """
        self.runner.stop()
        self.inbox.save_held()

    def punctuate(
        self, name: str, column: str, *, values: Sequence[Any] | None = None, upto: Any = None, ts: int | None = None
    ) -> int:
        """A punctuation, as ``EmbeddedEngine.punctuate``: no element of ``name`` stamped after
        ``ts`` has one of ``values`` (or a value ≤ ``upto``) in ``column``.  The driver checks it
        (``gate``): an element that breaks it is rejected (reason ``constraint``).  Returns the ``ts``
        it holds from.  Design 023, "On Spark".
        """
        d = self.inbox.source(name)
        vals, bound = punctuation_values(d, column, values, upto)
        return self.inbox.punctuate(d, column, vals, bound, ts)

    def deactivate(self, name: str) -> None:
        """Refused with a message: a Spark streaming query cannot yet be stopped and resumed
        from a later instant (the embedded engine's ``deactivate``, STREAM §2.4).
        """
        self._query(name)
        raise SluiceError(
            f"deactivate({name!r}) is not available on the Spark backend yet: a streaming query cannot be "
            "resumed from a later instant there; use the embedded engine"
        )

    def activate(self, name: str) -> None:
        """Refused with a message, as ``deactivate``."""
        self._query(name)
        raise SluiceError(f"activate({name!r}) is not available on the Spark backend yet; use the embedded engine")

    def stateful(self, query: str | SparkQuery) -> bool:
        """Whether the query's Spark plan holds state (a processor); False for native plans."""
        q = self._query(query)
        if q.stream is None:
            raise SluiceError(
                f"query {q.name} has not started: run() starts it once the first instant is fixed (an element "
                "can be released: its instant complete by the slack, a heartbeat or close())"
            )
        return any(p.get("stateOperators") for p in q.stream.recentProgress)

    # -- output and inspection -----------------------------------------------------------
    def _query(self, query: str | SparkQuery) -> SparkQuery:
        if isinstance(query, SparkQuery):
            return query
        q = self.queries.get(query)
        if q is None:
            raise SluiceError(f"no query named {query!r}")
        return q

    def arrow(self, query: str | SparkQuery) -> pa.Table:
        """The query's output elements so far as one Arrow table: ``ts``, ``sign`` (+1/−1), then
        the columns by name — as ``Query.arrow()`` on the embedded engine, in Spark's order.
        """
        q = self._query(query)
        return self.inspector.elements(q).rename_columns(["ts", "sign", *q.bound.plan.schema.names])

    def results(self, query: str | SparkQuery) -> list[Element]:
        """The query's output so far, netted per instant (deletions before insertions)."""
        return self.inspector.results(self._query(query))

    def rejected(self) -> list[str]:
        """Messages for rejected input (the first 100 per source) and for rows a query could not
        evaluate (an integer overflow, a failing UDF: each query's notes), as the embedded engine's.
        """
        return self.inspector.rejected()

    def statistics(self) -> dict[str, Any]:
        """Rejections (the driver's and each query's processors'), per query; per source, rows
        accepted and rejected by the admission check (``SourceStats``, as the embedded engine's).
        """
        return self.inspector.statistics()

    def explain(self, query: str | SparkQuery) -> str:
        return self.inspector.explain(self._query(query))
