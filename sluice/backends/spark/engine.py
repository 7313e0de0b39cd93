"""The Spark backend (``Sluice(backend="spark", master="local[2]")``).

Each registered query becomes one Structured Streaming query:

    source event files (Parquet, typed columns) ─┐
    user directories (CSV / JSON / Parquet)  ────┼─ σ pushed down (Spark expressions)
    rate source, socket                      ────┘  ekey = pmod(hash(key columns), n)  (Spark)
        ──> groupBy(ekey).transformWithStateInPandas(SluiceProcessor)   (RocksDB state)
        ──> memory table ("back into Python") / Parquet / JSON (exactly once) / console

``push`` appends typed Arrow batches (after the driver's lateness check — the same rule as the
embedded engine's sources, so a partitioned query rejects exactly what the embedded one would);
``heartbeat`` and ``close`` append markers that reach every partition key; ``run`` hands Spark
what is there.  What Spark computes natively — the partition key of every element, the
selections that can run before any stateful operator, the fan-out of replicated relations and
markers — is decided by ``sluice.backends.spark.compile``; everything stateful runs in the
processor, which holds the embedded engine's own operators (``docs/design/007``).  The
DataFrames themselves — sources, a stateful query's keyed input, a native query's output, the
committed output files — are built in ``sluice.backends.spark.frames``.
"""

from __future__ import annotations

import re
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.sql.pandas.types import to_arrow_schema

from sluice.backends.rows import admit_batch, rows_to_batch, to_batch
from sluice.backends.spark.compile import (
    NativePlan,
    Partitioning,
    native,
    overflow,
    partitioning,
    pushdown,
    to_column,
    unsplittable,
)
from sluice.backends.spark.frames import input_frame, native_columns, native_frame, read_committed, source_column
from sluice.backends.spark.preagg import LOWER, UPPER, PreAggregate, preaggregate
from sluice.backends.spark.processor import SluiceProcessor, output_schema
from sluice.catalog import Catalog, Kind, SourceDef
from sluice.cql import ast
from sluice.cql.ast import TimeUnit
from sluice.cql.parser import parse_script
from sluice.cql.printer import to_cql
from sluice.errors import SluiceError
from sluice.io.atomic import write_atomic
from sluice.plan import BoundQuery, bind_query, execute, register_view
from sluice.plan import logical as L
from sluice.plan.ddl import execute_statement
from sluice.plan.explain import explain as explain_plan
from sluice.plan.expr import render
from sluice.plan.semantics import sort_key
from sluice.reference.evaluator import Element
from sluice.runtime.batch import arrow_schema, signed_counts, to_elements, ts_of
from sluice.runtime.operators.base import ExecContext
from sluice.runtime.operators.sources import Source
from sluice.windows import Range

SINKS = ("memory", "parquet", "json", "console")
LEGACY_BUCKETS = 8  # keys of a split query whose checkpoint predates the saved number


def _late(q: SparkQuery) -> str:
    if q.preagg is None:
        return f"{q.dropped} element(s) arrived behind Spark's watermark (late)"
    # Spark's streaming aggregation drops late rows after aggregating them per partition
    return (
        f"at least {q.dropped} element(s) arrived behind Spark's watermark (late; Spark pre-aggregates "
        "before it drops them and counts one per slide, group and partition: design 015)"
    )


def notes(t: pa.Table) -> list[str]:
    """The notes of an output table's sign-0 rows: inputs a query rejected, rows it could not evaluate."""
    return [n for n in t.filter(pc.equal(t.column("sign"), 0)).column("note").to_pylist() if n]


@dataclass
class SparkQuery:
    name: str
    bound: BoundQuery
    part: Partitioning | None
    sources: list[str]  # catalog names of the sources the plan reads, in event-column order
    seq_from: int  # events handed to Spark before the query was registered are not its input
    sink: str
    out_path: Path | None
    stream: Any = None
    table: str = ""
    notes: list[str] = field(default_factory=list)
    native: list[NativePlan] | None = None  # one per branch of a Union All
    preagg: PreAggregate | None = None  # what Spark aggregates before the processor (design 015)
    dropped: int = 0  # elements Spark dropped behind its watermark
    seen_batches: set[int] = field(default_factory=set)
    buckets: int = 0  # partition keys, fixed when the query first starts (SparkEngine._buckets)
    engine: Any = field(default=None, repr=False, compare=False)  # the SparkEngine that runs it
    processor: Any = field(default=None, repr=False, compare=False)  # the driver's copy of its processor

    def results(self) -> list[Element]:
        """Its output so far (``SparkEngine.results``): the same call as on an embedded ``Query``."""
        out: list[Element] = self.engine.results(self)
        return out

    def arrow(self) -> pa.Table:
        """Its output so far as one Arrow table (``SparkEngine.arrow``), as on an embedded ``Query``."""
        out: pa.Table = self.engine.arrow(self)
        return out

    @property
    def kind(self) -> Kind:
        return self.bound.kind

    def partition_note(self, catalog: Catalog, buckets: int) -> str:
        if self.native is not None:
            statics = sorted({b.static for b in self.native if b.static})
            what = f" joined with the static relation {', '.join(statics)}" if statics else ""
            union = f" of {', '.join(b.source for b in self.native)} (Union All)" if len(self.native) > 1 else ""
            return (
                f"runs as native Spark expressions (no state): a selection and projection of each element{union}{what}"
            )
        if self.part is None:
            return f"runs on one key: {unsplittable(self.bound.plan)}, so no split of its input keeps the answer exact"
        how = []
        for src in self.sources:
            cols = self.part.keys.get(src.lower())
            if cols is not None:
                names = catalog.lookup(src).schema.names
                what = "whole elements" if len(cols) == len(names) else ", ".join(names[c] for c in cols)
                how.append(f"{src} by {what}")
        replicated = [s for s in self.sources if s.lower() not in self.part.keys]
        rep = f"; replicated to every key: {', '.join(replicated)}" if replicated else ""
        return f"partitioned into {buckets} hash buckets: {'; '.join(how)}{rep}"


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
    ) -> None:
        """``scheduler`` is the strategy each processor's operators run under (as ``EmbeddedEngine``);
        ``preaggregate=False`` sends every element of a sliding-window group-by to the processor
        instead of Spark's partial aggregates (the same answer: for comparison and benchmarks).
        """
        from sluice.backends.spark.session import get_session
        from sluice.scheduling.strategies import make

        try:
            make(scheduler)  # the same names, parameters and errors as the embedded engine
        except ValueError as e:
            raise SluiceError(str(e)) from None
        self.scheduler = scheduler
        self.preaggregate = preaggregate
        self.spark = spark or get_session(master)
        self.catalog = Catalog(time_unit=time_unit)
        self.seed = seed
        self.start = start
        self.slack = slack
        self.workdir = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="sluice-spark-"))
        self.ddl: list[str] = []
        self.udfs: list[tuple[str, Any, Any, Any, bool]] = []
        self.queries: dict[str, SparkQuery] = {}
        self._batches: dict[str, list[pa.Table]] = {}  # source -> pending event batches
        self._markers: list[tuple[int, str, int]] = []
        self._seq = 0
        self._released = 0  # events handed to Spark (flushed); later ones are every new query's input
        self._min_ts: int | None = None
        self._last_ts: int | None = None
        self._admit: dict[str, Source] = {}  # the driver's lateness check, per source (_shadow)
        # source -> (kind, options): "directory" (path, format, options), "rate", "socket"
        self.external: dict[str, tuple[str, dict[str, Any]]] = {}
        self.static: dict[str, list[tuple[Any, ...]]] = {}  # relation -> its fixed rows

    # -- registration --------------------------------------------------------------------
    def execute(self, text: str) -> list[Any]:
        out: list[Any] = []
        for stmt in parse_script(text):
            src = text[stmt.span.start : stmt.span.end]
            if isinstance(stmt, ast.QueryStatement):
                out.append(self.register_query(src))
            elif isinstance(stmt, ast.Explain):
                out.append(explain_plan(bind_query(self.catalog, stmt.query, source=text).plan))
            else:
                execute_statement(self.catalog, stmt, text, src)
                self.ddl.append(to_cql(stmt) + ";")
                out.append(None)
        return out

    def register_stream(
        self, name: str, columns: Sequence[tuple[str, Any]], unit: TimeUnit | str | None = None
    ) -> None:
        """A stream, as ``EmbeddedEngine.register_stream`` (``unit``: what its timestamps count)."""
        self._register(self.catalog.register_stream(name, columns, unit))

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
        self.ddl.append(to_cql(ast.RegisterSource(kind, d.name, cols, d.unit)) + ";")

    def register_view(self, name: str, query: str, columns: Sequence[str] = (), kind: Kind | None = None) -> None:
        """A named view (STREAM's ``vquery``/``vtable``), checked as ``EmbeddedEngine.register_view``."""
        register_view(self.catalog, name, query, columns, kind=kind)
        cols = f" ({', '.join(columns)})" if columns else ""
        self.ddl.append(f"REGISTER VIEW {name}{cols} AS {query};")

    def register_query(
        self, query: str, name: str | None = None, *, sink: str = "memory", path: str | Path | None = None
    ) -> SparkQuery:
        bq = bind_query(self.catalog, query)
        name = name or f"q{len(self.queries) + 1}"
        if name in self.queries:
            raise SluiceError(f"a query named {name!r} is already registered")
        if sink not in SINKS:
            raise SluiceError(f"sink must be one of {', '.join(SINKS)}")
        out_path = Path(path) if path else (self.workdir / name / "out" if sink in ("parquet", "json") else None)
        sources: list[str] = []
        for n in L.walk_plan(bq.plan):
            if isinstance(n, L.Scan) and n.name.lower() not in {s.lower() for s in sources}:
                sources.append(self._source(n.name).name)
        # As on the embedded engine: what was pushed but not yet run is a new query's input too
        q = SparkQuery(name, bq, partitioning(bq.plan), sources, self._released, sink, out_path, engine=self)
        self.queries[name] = q
        return q

    def register_function(
        self, name: str, fn: Any, return_type: Any, arg_types: Any = None, *, strict: bool = True
    ) -> None:
        """A Python scalar UDF callable from CQL; ``fn`` must pickle (a module-level function)
        because every partition key's engine on the workers registers it too.
        """
        self.catalog.register_function(name, fn, return_type, arg_types, strict=strict)
        self.udfs.append((name, fn, return_type, arg_types, strict))

    def _native(self, bq: BoundQuery) -> list[NativePlan] | None:
        """The query's native branches, if every expression translates, from any source kind:
        an element's output depends on that element alone, so there is nothing for it to be late
        for (the lateness rule, ``docs/design/014``).
        """
        branches = native(bq.plan)
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

    def _preagg(self, q: SparkQuery) -> PreAggregate | None:
        """Spark's pre-aggregation of a split group-by over a sliding window, where provably exact:
        the partition key among the group's columns, every WHERE conjunct translatable to Spark
        without overflow, and the rewritten query binding to the original's output types over
        windows of the same ticks (``sluice.backends.spark.preagg``).
        """
        if not self.preaggregate or q.native is not None or q.part is None:
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
        for name, fn, ret, args, strict in self.udfs:
            scratch.register_function(name, fn, ret, args, strict=strict)
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
        try:
            d = self.catalog.lookup(name)
        except KeyError:
            raise SluiceError(f"no stream or relation named {name!r}") from None
        if not isinstance(d, SourceDef):
            raise SluiceError(f"{name} is a view; push to its streams")
        return d

    def _attach(self, name: str, kind: str, options: dict[str, Any]) -> None:
        d = self._source(name)
        if any(q.stream is not None for q in self.queries.values()):
            raise SluiceError(f"attach sources before the first run() ({d.name})")
        self.external[d.name.lower()] = (kind, options)

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
        if d.kind is not Kind.RELATION:
            raise SluiceError(f"{d.name} is a stream; only a relation can be static")
        if d.name.lower() in self.static or d.name.lower() in self._admit:
            raise SluiceError(f"{d.name} already has contents")
        if any(q.stream is not None for q in self.queries.values()):
            raise SluiceError(f"attach static relations before the first run() ({d.name})")
        batch, errors = rows_to_batch([(0, "+", *r) for r in rows], d.schema, True, d.name)
        if errors:
            raise SluiceError(f"{d.name}: " + "; ".join(errors[:3]))
        self.static[d.name.lower()] = [tuple(r) for _, _, r in to_elements(batch)]

    def _push_static(self) -> None:
        """Static relations enter the processors' engines once, inserted at the start."""
        start = self.start if self.start is not None else (self._min_ts or 0)
        for key, rows in self.static.items():
            if key in self._admit or not rows:
                continue
            d = self._source(key)
            at = start // self.catalog.scale(d)  # the relation's unit; never after the start
            self._push(d, [(at, "+", *r) for r in rows])

    def push(self, name: str, rows: Any, *, ts_column: str = "ts", sign_column: str = "sign") -> None:
        """Push rows: tuples ``(ts, v1, …)`` / ``(ts, '+'|'-', v1, …)``, dicts, an Arrow table or a pandas frame."""
        d = self._source(name)
        if d.name.lower() in self.static:
            raise SluiceError(f"{d.name} is static (attach_static): its contents cannot change")
        self._push(d, rows, ts_column=ts_column, sign_column=sign_column)

    def push_batch(self, name: str, batch: pa.Table) -> None:
        """Push an already-typed batch (``__ts``, ``__sign``, ``c0…``), through the same checks."""
        d = self._source(name)
        if d.name.lower() in self.static:
            raise SluiceError(f"{d.name} is static (attach_static): its contents cannot change")
        batch, errors = admit_batch(batch, d.schema, d.name)
        self._push_typed(d, batch, errors)

    def _push(self, d: SourceDef, rows: Any, *, ts_column: str = "ts", sign_column: str = "sign") -> None:
        tick_ns = self.catalog.time_unit.millis * 1_000_000
        relation = d.kind is Kind.RELATION
        batch, errors = to_batch(rows, d.schema, relation, d.name, ts_column, sign_column, tick_ns)
        self._push_typed(d, batch, errors)

    def _push_typed(self, d: SourceDef, batch: pa.Table, errors: list[str]) -> None:
        src = self._shadow(d)
        for msg in errors:
            src.reject("malformed", msg)
        batch = src.admit(batch)  # in ticks
        src.accepted += batch.num_rows
        if batch.num_rows == 0:
            return
        n = batch.num_rows
        seq = pa.array(np.arange(self._seq + 1, self._seq + 1 + n, dtype=np.int64))
        self._seq += n
        ticks = ts_of(batch)
        lo, hi = int(ticks.min()), int(ticks.max())
        self._min_ts = lo if self._min_ts is None else min(self._min_ts, lo)
        self._last_ts = hi if self._last_ts is None else max(self._last_ts, hi)
        ts = batch.column(0) if src.scale == 1 else pa.array(ticks // src.scale)  # as pushed: the processor scales
        cols = {"seq": seq, "ts": ts, "sign": batch.column(1).cast(pa.int32())}
        cols.update({f"c{j}": batch.column(2 + j) for j in range(len(d.schema))})
        self._batches.setdefault(d.name.lower(), []).append(pa.table(cols))

    def _shadow(self, d: SourceDef) -> Source:
        """The driver's copy of a source: the embedded engine's lateness rule over everything pushed
        (a partition key sees only its own elements), and the place rejections are recorded.
        """
        key = d.name.lower()
        if key not in self._admit:
            src = Source(d.name, d.schema, ExecContext(), self.slack, d.kind is Kind.RELATION)
            src.scale = self.catalog.scale(d)
            self._admit[key] = src
        return self._admit[key]

    def rejected(self) -> list[str]:
        """Messages for rejected input (the first 100 per source) and for rows a query could not
        evaluate (an integer overflow, a failing UDF: each query's notes), as the embedded engine's.
        """
        out = [m for src in self._admit.values() for m in src.messages]
        for q in self.queries.values():
            if q.stream is not None and q.sink != "console":
                t = self._output(q)
                if t is not None:
                    q.notes = notes(t)
            out += q.notes
        return out

    def reject(self, name: str, messages: Sequence[str]) -> None:
        """Count rows rejected before they reached the engine (a reader's bad lines), as malformed."""
        src = self._shadow(self._source(name))
        for msg in messages:
            src.reject("malformed", msg)

    def _marker(self, kind: str, ts: int) -> None:
        self._push_static()  # static rows are in before any instant completes
        self._seq += 1
        self._markers.append((self._seq, kind, ts))
        for src in self._admit.values():
            src.heartbeat(ts)

    def stateful(self, query: str | SparkQuery) -> bool:
        """Whether the query's Spark plan holds state (a processor); False for native plans."""
        q = query if isinstance(query, SparkQuery) else self.queries[query]
        if q.stream is None:
            raise SluiceError(f"query {q.name} has not started: run() first")
        return any(p.get("stateOperators") for p in q.stream.recentProgress)

    def heartbeat(self, ts: int, name: str | None = None) -> None:
        """No element stamped ≤ ts will still arrive (every source; one source's heartbeat is an
        embedded-engine call: Spark's watermark is one for all inputs).
        """
        if name is not None:
            raise SluiceError(
                f"heartbeat(ts, {name!r}): Spark completes instants on every source at once; call heartbeat(ts)"
            )
        self._marker("h", ts)

    def close(self, until: int | None = None) -> None:
        """End of input: complete every instant up to ``until`` (default: the last timestamp pushed)."""
        self._marker("e", until if until is not None else (self._last_ts if self._last_ts is not None else 0))
        self.run()

    # -- running -------------------------------------------------------------------------
    def _write(self, directory: Path, table: pa.Table) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        # unique across engines on one workdir (a restarted engine keeps adding files)
        stem = f"part-{time.time_ns():020d}-{uuid.uuid4().hex[:8]}"
        tmp = directory / f".{stem}.parquet"
        pq.write_table(table, tmp)
        tmp.rename(directory / f"{stem}.parquet")  # appears atomically

    def _flush(self) -> None:
        # data before markers: a micro-batch that sees a marker has seen the data before it
        for src, batches in self._batches.items():
            if batches:
                self._write(self.workdir / "sources" / src, pa.concat_tables(batches))
                batches.clear()
        if self._markers:
            seq, kind, ts = zip(*self._markers, strict=True)
            self._write(
                self.workdir / "markers",
                pa.table({"seq": pa.array(seq, pa.int64()), "kind": pa.array(kind), "ts": pa.array(ts, pa.int64())}),
            )
            self._markers.clear()
        self._released = self._seq

    def _buckets(self, q: SparkQuery) -> int:
        """How many keys a split query's input spreads over: ``spark.sql.shuffle.partitions``,
        fixed at the query's first start — a restart on the same workdir keeps the number its
        checkpointed state was made with, whatever the session now says.
        """
        if not q.buckets:
            saved = self._buckets_file(q)
            if saved.exists():
                q.buckets = int(saved.read_text())
            elif (self.workdir / q.name / "checkpoint").exists():
                q.buckets = LEGACY_BUCKETS  # a checkpoint from before the number was saved
            else:
                q.buckets = max(1, int(self.spark.conf.get("spark.sql.shuffle.partitions")))
        return q.buckets

    def _buckets_file(self, q: SparkQuery) -> Path:
        return self.workdir / q.name / "buckets"

    def _start(self, q: SparkQuery) -> None:

        start = self.start if self.start is not None else self._min_ts
        if start is None and any(k == "rate" for k, _ in self.external.values()):
            start = time.time_ns() // 1_000_000 // self.catalog.time_unit.millis  # the rate source starts now
        start = start or 0
        q.preagg = self._preagg(q)
        ddl, text = "\n".join(self.ddl), q.bound.text
        inputs = [(d.name, list(d.schema.types)) for d in map(self._source, q.sources)]
        if q.preagg is not None:  # the processor runs the rewritten query over Spark's partials
            ddl, text = q.preagg.ddl, q.preagg.query
            inputs = [(s, q.preagg.types(self._source(q.preagg.source))) for s in (UPPER, LOWER)]
        proc = SluiceProcessor(
            ddl,
            text,
            start,
            self.catalog.time_unit.name,
            self.seed,
            self.slack,
            inputs,
            list(q.bound.plan.schema.types),
            self.udfs,
            self.scheduler,
            lag=1 if q.preagg is not None else 0,
        )
        q.processor = proc
        if q.native is None and q.part is not None:
            buckets = self._buckets(q)  # before the checkpoint directory exists
            write_atomic(self._buckets_file(q), str(buckets).encode())
        if q.native is not None:
            out = native_frame(self, q)
        else:
            out = (
                input_frame(self, q)
                .groupBy("ekey")
                .transformWithStateInPandas(
                    statefulProcessor=proc,
                    outputStructType=output_schema(q.bound.plan.schema.types),
                    outputMode="Append",
                    timeMode="EventTime",
                )
            )
        checkpoint = str(self.workdir / q.name / "checkpoint")
        w = out.writeStream.option("checkpointLocation", checkpoint).outputMode("append")
        if q.sink == "memory":
            # any query name is a label: Spark's table name takes only word characters
            q.table = f"sluice_{re.sub(r'[^0-9A-Za-z_]', '_', q.name)}_{uuid.uuid4().hex[:8]}"
            q.stream = w.format("memory").queryName(q.table).start()
        elif q.sink == "console":
            q.stream = w.format("console").option("truncate", "false").start()
        else:  # files, exactly once through the checkpoint
            assert q.out_path is not None
            q.stream = w.format(q.sink).option("path", str(q.out_path)).start()

    def run(self) -> None:
        """Hand Spark every event pushed so far and wait until each query has processed them."""
        self._push_static()
        for q in self.queries.values():
            if q.stream is None:
                q.native = self._native(q.bound)
            if q.stream is None and q.native is None:  # give every input an event time from the start
                start = self.start if self.start is not None else self._min_ts
                self._seq += 1
                self._markers.append((self._seq, "s", (start or 0) - 1))
        self._flush()
        for q in self.queries.values():
            if q.stream is None:
                self._start(q)
            q.stream.processAllAvailable()
            self._count_dropped(q)

    def _count_dropped(self, q: SparkQuery) -> None:
        """Elements Spark dropped behind its watermark (possible for attached sources only: pushed
        elements are checked by the driver first) are counted, never lost silently.
        """
        for p in q.stream.recentProgress:
            if p["batchId"] in q.seen_batches:
                continue
            q.seen_batches.add(p["batchId"])
            q.dropped += sum(int(op.get("numRowsDroppedByWatermark", 0)) for op in p.get("stateOperators", []))

    def stop(self) -> None:
        """Stop the streaming queries (their checkpoints stay; a new engine on the same workdir resumes)."""
        for q in self.queries.values():
            if q.stream is not None:
                q.stream.stop()
                q.stream = None

    # -- output --------------------------------------------------------------------------
    def _output(self, q: SparkQuery) -> pa.Table | None:

        if q.sink == "console":
            raise SluiceError(f"query {q.name} writes to the console; use sink='memory', 'parquet' or 'json'")
        if q.sink == "memory":
            return self.spark.sql(f"select * from {q.table}").toArrow() if q.table else None
        assert q.out_path is not None
        if not list(q.out_path.glob(f"*.{q.sink}")):
            return None
        schema = output_schema(q.bound.plan.schema.types)
        if q.sink == "json":
            return self.spark.read.schema(schema).json(str(q.out_path)).toArrow()
        return read_committed(self.spark, str(q.out_path), schema, to_arrow_schema(schema))

    def arrow(self, query: str | SparkQuery) -> pa.Table:
        """The query's output elements so far as one Arrow table: ``ts``, ``sign`` (+1/−1), then
        the columns by name — as ``Query.arrow()`` on the embedded engine, in Spark's order.
        """
        q = query if isinstance(query, SparkQuery) else self.queries[query]
        b = self._elements(q)
        return b.rename_columns(["ts", "sign", *q.bound.plan.schema.names])

    def _elements(self, q: SparkQuery) -> pa.Table:
        """Output rows as an engine batch (``__ts``, ``__sign``, ``c0…``); notes go to ``q.notes``."""
        types = list(q.bound.plan.schema.types)
        t = self._output(q)
        if t is None or t.num_rows == 0:
            return arrow_schema(types).empty_table()
        signs = t.column("sign")
        q.notes = notes(t)
        t = t.filter(pc.not_equal(signs, 0))
        return pa.Table.from_arrays(
            [t.column("ts"), t.column("sign").cast(pa.int8())] + [t.column(f"c{j}") for j in range(len(types))],
            schema=arrow_schema(types),
        )

    def results(self, query: str | SparkQuery) -> list[Element]:
        """The query's output so far, netted per instant (deletions before insertions)."""
        q = query if isinstance(query, SparkQuery) else self.queries[query]
        b = self._elements(q)
        if b.num_rows == 0:
            return []
        out = []
        counts = signed_counts(b)  # one Arrow group-by: net sign per (instant, tuple)
        for ts, row, n in sorted(counts, key=lambda c: (c[0], c[2] > 0, sort_key(c[1]))):
            if n:
                out += [Element(ts, "+" if n > 0 else "-", row)] * abs(n)
        return out

    def statistics(self) -> dict[str, Any]:
        """Rejections (the driver's and each query's processors'), per query; per source, rows
        accepted and rejected by the admission check (``SourceStats``, as the embedded engine's).
        """
        return {
            "rejected": self.rejected(),
            "sources": tuple(src.source_statistics() for src in self._admit.values()),
            "queries": {
                n: {"rejected": list(q.notes) + ([_late(q)] if q.dropped else [])} for n, q in self.queries.items()
            },
        }

    def explain(self, query: str | SparkQuery) -> str:
        q = query if isinstance(query, SparkQuery) else self.queries[query]
        if q.stream is None:
            q.native = self._native(q.bound)
        lines = [f"query {q.name} on Spark: {q.partition_note(self.catalog, self._buckets(q))}"]
        pre = self._preagg(q) if q.stream is None else q.preagg
        if pre is not None:
            lines.append("  " + pre.describe(self._source(pre.source).schema.names))
        for src, preds in pushdown(q.bound.plan).items():
            done = [p for p in preds if to_column(p, source_column) is not None]
            if done:
                names = self.catalog.lookup(src).schema.names
                lines.append(f"  selection run by Spark on {src}: " + " AND ".join(render(p, names) for p in done))
        lines.append(explain_plan(q.bound.plan))
        return "\n".join(lines)
