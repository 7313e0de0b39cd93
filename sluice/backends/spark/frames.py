"""The Spark DataFrames of a query: what it reads and what it writes.

- ``source_frame`` / ``external_frame``: a source's elements ``seq, ts, sign, c0…`` — pushed
  event files, plus the attached directory, socket or rate source (``seq`` −1);
- ``input_frame``: a stateful query's events keyed for ``transformWithStateInPandas`` (partition
  key, markers fanned out to every key, per-input watermarks, pushed-down selections);
- ``native_frame``: a native query's output rows, one frame per Union All branch;
- ``read_committed``: the rows a Parquet sink committed, read from its files.

Functions of a ``SparkEngine`` (its catalog, session, workdir and sources); the engine decides
which to use (``sluice.backends.spark.engine``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql.types import BooleanType, IntegerType, LongType, StringType, StructField, StructType

from sluice.backends.spark.compile import NativePlan, canonical_float, overflow, pushdown, to_column
from sluice.backends.spark.partials import SlidePartials
from sluice.backends.spark.preagg import LOWER, UPPER
from sluice.backends.spark.processor import EVENT_TIME_OFFSET
from sluice.backends.spark.shed import ships
from sluice.backends.spark.types import spark_type
from sluice.catalog import Kind, SourceDef
from sluice.datatypes import DataType, TypeKind
from sluice.plan.expr import AggKind, BExpr
from sluice.plan.pruning import prune_plan, source_columns_read
from sluice.plan.rules import transform

if TYPE_CHECKING:
    from sluice.backends.spark.engine import SparkEngine
    from sluice.backends.spark.query import SparkQuery


def needs_flag(t: DataType) -> bool:
    """Nullable non-string columns travel as (value, is-null flag): pandas would turn a null into
    NaN and round large integers on the way into the processor.
    """
    return not t.is_string


def zero(t: DataType) -> Any:
    return {TypeKind.FLOAT: 0.0, TypeKind.BOOLEAN: False}.get(t.kind, 0)


def union_all(frames: Sequence[Any]) -> Any:
    out = frames[0]
    for f in frames[1:]:
        out = out.unionByName(f)
    return out


def query_rows(frame: Any, q: SparkQuery, scale: int = 1, relation: bool = False) -> Any:
    """A source's rows that are the query's input: pushed events from its registration on, an
    attached source's rows (``seq`` −1) all — but for a query registered while running (``since``,
    its first instant in ticks; ``scale``: ticks per unit of ``ts``), as the embedded engine's
    ``Since``: of a stream none stamped before it, of a relation every change (its processors
    apply those before ``since`` at it: its contents then).
    """
    if q.since is None:
        return frame.where((F.col("seq") > q.seq_from) | (F.col("seq") < 0))
    if relation:
        return frame
    new = (F.col("seq") > q.seq_from) | (F.col("seq") < 0)
    # (an attached row without a ts is still noted: its comparison is NULL)
    return frame.where(new & ((F.col("ts") * F.lit(scale) >= F.lit(q.since)) | F.col("ts").isNull()))


def local_path(uri: str) -> str | None:
    """A file Spark names by URI (``file:///tmp/a%20b``) as this machine's path; None if remote."""
    from urllib.parse import unquote, urlparse

    u = urlparse(uri)
    return unquote(u.path) if u.scheme in ("", "file") else None


def read_committed(spark: Any, path: str, schema: Any = None, arrow: pa.Schema | None = None) -> pa.Table | None:
    """The rows of the Parquet files a file sink committed in ``path`` (its metadata log names
    them: never a failed attempt's), read here rather than collected through the JVM, whose heap
    a large answer would not fit; through Spark if they are on a cluster's storage.  None if no
    file is committed yet.
    """
    reader = spark.read.schema(schema) if schema is not None else spark.read
    frame = reader.parquet(path)
    files = [local_path(f) for f in frame.inputFiles()]
    if not files:
        return None
    if any(f is None for f in files):
        out: pa.Table = frame.toArrow()
        return out
    return pa.concat_tables([pq.read_table(f, schema=arrow) for f in files if f is not None])


def source_column(j: int) -> Any:
    """Column ``j`` of a source's frame (``source_frame``) as a Spark Column."""
    return F.col(f"c{j}")


def native_columns(eng: SparkEngine, plan: NativePlan) -> Any:
    """A native plan's column ``j`` as a Spark Column (the stream's ``c…``, the relation's ``r…``)."""
    n_static = len(eng._source(plan.static).schema) if plan.static else 0
    where = plan.width(len(eng._source(plan.source).schema), n_static)
    return lambda j: F.col("{}{}".format(*where(j)))


def source_frame(eng: SparkEngine, name: str) -> Any:
    """One source's elements as a streaming frame ``seq, ts, sign, c0…`` (typed)."""
    d = eng._source(name)
    fields = [StructField("seq", LongType()), StructField("ts", LongType()), StructField("sign", IntegerType())]
    fields += [StructField(f"c{j}", spark_type(c.type)) for j, c in enumerate(d.schema.columns)]
    directory = eng.workdir / "sources" / d.name.lower()
    directory.mkdir(parents=True, exist_ok=True)
    frame = eng.spark.readStream.schema(StructType(fields)).parquet(str(directory))
    ext = eng.external.get(d.name.lower())
    if ext is not None:
        frame = frame.unionByName(external_frame(eng, d, *ext))
    return frame


def external_frame(eng: SparkEngine, d: SourceDef, kind: str, opts: dict[str, Any]) -> Any:
    """Rows of an attached source as ``seq, ts, sign, c0…``; ``seq`` -1 puts them before the
    pushed events and markers of the same micro-batch, in the order Spark reads them.
    """
    relation = d.kind is Kind.RELATION
    names = list(d.schema.names)
    types = [spark_type(t) for t in d.schema.types]
    if kind == "directory":
        fields = [StructField("ts", LongType())]
        if relation:
            fields.append(StructField("sign", StringType()))
        fields += [StructField(n, t) for n, t in zip(names, types, strict=True)]
        reader = eng.spark.readStream.schema(StructType(fields))
        if opts["format"] == "csv":
            reader = reader.option("header", "true")
        for k, v in opts["options"].items():
            reader = reader.option(k, v)
        raw = reader.format(opts["format"]).load(opts["path"])
        sign = F.when(F.col("sign") == "-", -1).otherwise(1) if relation else F.lit(1)
        values = [F.col(n) for n in names]
    elif kind == "rate":
        unit_ms = eng.catalog.time_unit.millis
        raw = eng.spark.readStream.format("rate").option("rowsPerSecond", opts["rows_per_second"]).load()
        raw = raw.withColumn("ts", F.floor(F.unix_millis(F.col("timestamp")) / unit_ms).cast("long"))
        sign = F.lit(1)
        values = [F.expr(opts["columns"][n]) if n in opts["columns"] else F.col("value") for n in names]
    else:  # socket: "ts,[sign,]v1,…" per line
        raw = eng.spark.readStream.format("socket").option("host", opts["host"]).option("port", opts["port"]).load()
        parts = F.split(F.col("value"), ",")
        lead = 2 if relation else 1
        raw = raw.withColumn("ts", F.trim(parts.getItem(0)).cast("long"))
        sign = F.when(F.trim(parts.getItem(1)) == "-", -1).otherwise(1) if relation else F.lit(1)
        values = [F.trim(parts.getItem(lead + j)) for j in range(len(names))]
    cols = [F.lit(-1).cast("long").alias("seq"), F.col("ts"), sign.cast("int").alias("sign")]
    # Spark reads these rows itself, not through the driver's admission: a float as Sluice holds
    # it here (NaN is NULL, -0.0 is 0.0), as rows.admit does for pushed rows
    for j, (v, t, ct) in enumerate(zip(values, types, d.schema.types, strict=True)):
        v = v.cast(t)
        cols.append((canonical_float(v) if ct.kind is TypeKind.FLOAT else v).alias(f"c{j}"))
    return raw.select(*cols)


def _values(
    defs: Sequence[Sequence[DataType]],
    value: Callable[[int, int], Any | None],
    flagged: Callable[[int, int], bool] = lambda i, j: True,
    sent: Sequence[frozenset[int]] | None = None,
) -> list[Any]:
    """Per source ``i`` of the processor its columns ``s{i}c{j}`` (with ``s{i}n{j}`` is-null flags
    where ``flagged(i, j)``: False for a column never NULL): ``value(i, j)``, a Column or None for
    NULL.  Only the columns ``j`` in ``sent[i]`` (None: all): the processor fills the others with
    NULL (``_sent``).
    """
    out = []
    for i, types in enumerate(defs):
        for j, t in enumerate(types):
            if sent is not None and j not in sent[i]:
                continue
            st = spark_type(t)
            v = value(i, j)
            v = F.lit(None).cast(st) if v is None else v.cast(st)
            if needs_flag(t) and flagged(i, j):
                out.append(F.coalesce(v, F.lit(zero(t)).cast(st)).alias(f"s{i}c{j}"))
                out.append(v.isNull().alias(f"s{i}n{j}"))
            else:
                out.append(v.alias(f"s{i}c{j}"))
    return out


def _no_values(i: int, j: int) -> None:
    return None


def _own(i: int) -> Callable[[int, int], Any | None]:
    """Source ``i``'s columns from its own frame (another source's are not in it: NULL)."""
    return lambda k, j: source_column(j) if k == i else None


def _processor_rows(frame: Any, *, ekey: Any, seq: Any, kind: Any, src: Any, ts: Any, sign: Any, etime: Any,
                    values: list[Any], note: Any = None, without: frozenset[str] = frozenset()) -> Any:  # fmt: skip
    """``frame`` as the processor's input rows: ``ekey, seq, kind, src, ts, sign, etime, note``
    (what a punctuation marker says) but those in ``without`` (``_unused``), then the sources'
    columns (``_values``).  Each argument a Column or a literal.
    """

    def col(v: Any) -> Any:
        return v if isinstance(v, Column) else F.lit(v)

    lead = [
        col(ekey).alias("ekey"),
        col(seq).cast("long").alias("seq"),
        col(kind).alias("kind"),
        col(src).alias("src"),
        col(ts).cast("long").alias("ts"),
    ]
    if "sign" not in without:
        lead.append(col(sign).cast("int").alias("sign"))
    lead.append(col(etime).cast("timestamp").alias("etime"))
    if "note" not in without:
        lead.append(col(note).cast("string").alias("note"))
    return frame.select(*lead, *values)


def _sent(eng: SparkEngine, q: SparkQuery, defs: Sequence[SourceDef]) -> list[frozenset[int]]:
    """Per input of a processor the columns it is sent (each crosses into Python; the processor
    fills the others with NULL): of a stream, those the query's answer depends on
    (``source_columns_read``: the column-pruning rule's proof) and those a constraint on it or a
    reference to it names (the processor's engine checks and forgets state by them); of a relation
    every column (a deletion matches a whole tuple), and every column of every input of a
    processor serving several queries — and every column once ``on_shed`` has a callback (the
    elements a key drops are handed over whole, as the embedded engine hands them).
    """
    every = [frozenset(range(len(d.schema))) for d in defs]
    if len(q.group) > 1 or ships(eng, q):
        return every
    read = source_columns_read(q.bound.plan, functools.partial(prune_plan, transform=transform))
    out = []
    for d, all_ in zip(defs, every, strict=True):
        if d.kind is Kind.RELATION:
            out.append(all_)
            continue
        names = [n.lower() for n in d.schema.names]
        named = {names.index(c.column.lower()) for c in d.constraints}
        named |= {names.index(c.ref_column.lower()) for _, c in eng.catalog.referencing(d.name)}
        out.append(frozenset(read.get(d.name.lower(), all_)) | named)
    return out


def _unused(defs: Sequence[SourceDef]) -> frozenset[str]:
    """The processor's input columns no row of a query over ``defs`` needs: ``sign`` when every
    input is a stream (each element an insertion), ``note`` when none is punctuated (only a
    punctuation marker says something in it).
    """
    out = set()
    if all(d.kind is Kind.STREAM for d in defs):
        out.add("sign")
    if not any(c.kind == "PUNCTUATED" for d in defs for c in d.constraints):
        out.add("note")
    return frozenset(out)


def _marker_frame(eng: SparkEngine, q: SparkQuery) -> Any:
    """The driver's markers (``seq, kind, ts, src, note``: heartbeats, ends, query starts,
    streams released up to, punctuations) for this query.
    """
    mdir = eng.workdir / "markers"
    mdir.mkdir(parents=True, exist_ok=True)
    mschema = StructType(
        [StructField("seq", LongType()), StructField("kind", StringType()), StructField("ts", LongType())]
        + [StructField("src", StringType()), StructField("note", StringType())]  # (NULL in files written before)
    )
    return eng.spark.readStream.schema(mschema).parquet(str(mdir)).where(F.col("seq") > q.seq_from)


def _timed_rows(eng: SparkEngine, q: SparkQuery, d: SourceDef, delay: int, keep: Sequence[Any] = ()) -> Any:
    """A source's rows for the query, ``seq, kind, ts, sign, c…, et, etime``, behind Spark's
    watermark for this input: max event time − ``delay`` ms, where markers raise the event time
    as a heartbeat raises a source's completion (the marker rows only move it).  ``keep``: Spark
    Columns that select data rows, applied once the watermark has seen every row: a row the query
    filters out still completes instants, as on the embedded engine.
    """
    scale = F.lit(eng.catalog.scale(d))
    slack = F.lit(eng.slack)
    names = [f"c{j}" for j in range(len(d.schema))]
    data = query_rows(source_frame(eng, d.name), q, eng.catalog.scale(d), d.kind is Kind.RELATION)
    et_data = F.col("ts") * scale
    if d.kind is Kind.RELATION and eng.inbox.first is not None:
        # a change before the first instant applies at it (its processors' engines raise its ts
        # there): its event time too, or Spark's watermark — raised to the start by the "s"
        # marker — would drop it (design 004, "The first instant")
        et_data = F.greatest(et_data, F.lit(eng.inbox.first))
    data = data.select("seq", F.lit("d").alias("kind"), "ts", "sign", *names, et_data.alias("et"))
    # With Spark's delay of slack + 1, h(τ) completes ticks < (τ+1)·scale and e(u) ticks ≤ u.
    # An "r" marker (the driver released d up to ts, ticks) as an end: Inbox.release.
    et = (
        F.when(F.col("kind") == "h", (F.col("ts") + 1) * scale + slack)
        .when(F.col("kind").isin("e", "r"), F.col("ts") + 1 + slack)
        .otherwise(F.col("ts"))
    )
    # (a punctuation says nothing of time: it moves no watermark; what a stream released moves
    # only its own input's)
    mine = (F.col("kind") != "r") | (F.col("src") == F.lit(d.name))
    if eng.inbox.holds(d.name):
        # a stream the driver holds takes its event time from what the driver released of it
        # ("r"), never from a heartbeat or an end: those complete each stream in its own unit,
        # while the driver releases a referenced stream only as far as the streams referencing
        # it allow (design 023, "On Spark")
        mine = mine & ~F.col("kind").isin("h", "e")
    marks = (
        _marker_frame(eng, q)
        .where((F.col("kind") != "p") & mine)
        .select(
            "seq",
            F.lit("w").alias("kind"),
            "ts",
            F.lit(0).cast(IntegerType()).alias("sign"),
            *[F.lit(None).cast(spark_type(t)).alias(n) for n, t in zip(names, d.schema.types, strict=True)],
            et.alias("et"),
        )
    )
    frame = data.unionByName(marks).withColumn("etime", F.timestamp_millis(F.col("et") + F.lit(EVENT_TIME_OFFSET)))
    frame = frame.withWatermark("etime", f"{delay} milliseconds").where(after_watermark(F.col("kind") == "d"))
    for cond in keep:
        frame = frame.where(after_watermark(cond))
    return frame


def after_watermark(cond: Any) -> Any:
    """``cond`` as a filter Spark applies after ``withWatermark``: its optimizer pushes a filter
    below it — so the rows removed never move the watermark — unless the filter reads the
    event-time column; this one does (no event time is before year 1).
    """
    return cond | (F.col("etime") < F.lit(datetime(1, 1, 1)))


def _pushed_down(preds: Sequence[BExpr], exempt: Any = None) -> list[Any]:
    """The conjuncts Spark can evaluate, as Columns; a row whose predicate overflows is kept (the
    processor counts it), and so is every row where ``exempt`` holds (``_inadmissible``).
    """
    out = []
    for p in preds:
        col = to_column(p, source_column)
        if col is not None:
            bad = overflow(p, source_column)
            col = col if bad is None else col | bad
            out.append(col if exempt is None else col | exempt)
    return out


def _inadmissible(eng: SparkEngine, d: SourceDef) -> tuple[Any, tuple[Any, Any, Any] | None]:
    """The rows of ``d`` the embedded engine's admission rejects before any selection — without a
    ts (attached: Spark could not read one) or, for a stream, stamped before the first instant —
    each a note whatever the query selects; and ``_before_first`` of ``d`` (None: not checked).
    """
    no_ts = F.col("ts").isNull()
    early = _before_first(eng, d) if d.kind is Kind.STREAM else None
    return (no_ts if early is None else no_ts | early[0]), early


def _untimed_note(d: SourceDef, q: SparkQuery) -> str:
    """The note of an attached row of ``d`` without a ts, for query ``q`` (every path's)."""
    return f"{d.name}: a row without a valid ts was rejected (query {q.name})"


def _ekey(eng: SparkEngine, q: SparkQuery, cols: Sequence[Any] | None, once: Any = None) -> Any:
    """The partition key column: by ``cols`` hashed into the query's buckets; every key (the
    row is replicated) when ``cols`` is None — but key "0" alone for rows where ``once`` holds (a
    note is said once); "0" for an unsplittable query.
    """
    buckets = eng.runner.buckets(q)
    if q.part is None:
        return F.lit("0")
    if cols is None:
        every = F.array(*[F.lit(str(b)) for b in range(buckets)])
        return F.explode(every if once is None else F.when(once, F.array(F.lit("0"))).otherwise(every))
    return F.pmod(F.hash(*cols), F.lit(buckets)).cast("string")


def input_frame(eng: SparkEngine, q: SparkQuery) -> Any:
    """The query's events, keyed: ``ekey, seq, kind, src, ts, sign`` and per source ``i`` its
    columns ``s{i}c{j}`` (with ``s{i}n{j}`` is-null flags).  For queries run in one processor
    (``SparkQuery.group``) every element goes in: each member selects its own.
    """
    if q.preagg is not None:
        return preaggregated_frame(eng, q)
    defs = [eng._source(s) for s in q.sources]
    types = [d.schema.types for d in defs]
    pushed = pushdown(q.plan) if len(q.group) < 2 else {}
    sent = _sent(eng, q, defs)
    without = _unused(defs) if len(q.group) < 2 else frozenset()
    frames = []
    for i, d in enumerate(defs):
        # Spark's watermark for this input: max event time − slack − 1, so exactly the elements
        # the embedded engine would call late are behind it.  A row without a ts (attached: Spark
        # could not read one) or stamped before the first instant is a note row, once per row
        # (one key), whatever the selections Spark runs say of it — the embedded engine's
        # admission comes first — as on the native path.  (``etime`` stays the watermarked column
        # itself: an expression over it would hide it from the processor's late-row filter; so
        # an early row already behind Spark's watermark is dropped and counted as late there.)
        no_ts = F.col("ts").isNull()
        noted, early = _inadmissible(eng, d)
        frame = _timed_rows(eng, q, d, eng.slack + 1, _pushed_down(pushed.get(d.name.lower(), []), noted))
        key = q.part.keys.get(d.name.lower()) if q.part is not None else None
        ekey = _ekey(eng, q, None if key is None else [source_column(j) for j in key], once=noted)
        src = F.when(no_ts, F.lit(_untimed_note(d, q)))
        if early is not None:
            src = src.when(early[0], early[1])
        frames.append(
            _processor_rows(frame, ekey=ekey, seq=F.col("seq"), kind=F.when(noted, F.lit("n")).otherwise(F.col("kind")),
                            src=src.otherwise(F.lit(d.name)), ts=F.when(no_ts, F.lit(0)).otherwise(F.col("ts")),
                            sign=F.col("sign"), etime=F.col("etime"),
                            values=_values(types, _own(i), sent=sent), without=without)
        )  # fmt: skip
    # the markers themselves reach every key in-band (no event time: never late); a punctuation
    # and a stream released up to (what completes a stream the driver holds) only the processors
    # of queries reading that stream
    read = [F.lit(s) for s in q.sources]
    marks = _marker_frame(eng, q).where(
        (F.col("kind") != "s") & (~F.col("kind").isin("p", "r") | F.col("src").isin(*read))
    )
    frames.append(
        _processor_rows(marks, ekey=_ekey(eng, q, None), seq=F.col("seq"), kind=F.col("kind"),
                        src=F.coalesce(F.col("src"), F.lit("")), ts=F.col("ts"), sign=0, etime=None,
                        values=_values(types, _no_values, sent=sent), note=F.col("note"), without=without)
    )  # fmt: skip
    return union_all(frames)


def preaggregated_frame(eng: SparkEngine, q: SparkQuery) -> Any:
    """A pre-aggregated query's input (``sluice.backends.spark.preagg``, design 015): Spark's
    Python workers aggregate each micro-batch partition's rows per (slide instant ``a``, class,
    group) before the shuffle (``SlidePartials``, vectorised), each partial stamped ``a`` and sent
    to the processor's upper or lower stream — both in the columns ``s0…`` (``SluiceProcessor``'s
    ``preagg``).  No Spark state: the processor keeps the partials in its window synopses.

    The watermark (delay: the slack) only completes instants: the processor completes those one
    tick behind it (``SluiceProcessor.lag``) and rejects, counting its elements, a partial of a
    slide already complete.  No markers reach it in-band; the watermark they raise completes the
    same instants.
    """
    pre = q.preagg
    assert pre is not None
    d = eng._source(pre.source)
    # every conjunct runs here (checked when planned): none is left to the processor — but a row
    # without a ts, or before the first instant, is rejected whatever it holds (a note), as on the
    # native path and the embedded engine, whose admission comes before any selection
    noted, early = _inadmissible(eng, d)
    frame = _timed_rows(eng, q, d, eng.slack, _pushed_down(pre.filters, noted))
    types = pre.types(d)
    fn = SlidePartials(pre, types, _untimed_note(d, q), None if early is None else eng.inbox.first)
    keys = [f"c{k}" for k in pre.keys]
    out = [StructField("a", LongType()), StructField("lower", BooleanType()), StructField("note", StringType())]
    out += [StructField(n, spark_type(t)) for n, t in zip(keys + [p.name for p in pre.partials], types, strict=True)]
    g = frame.select("et", *fn.inputs()).mapInArrow(fn, StructType(out))
    cols = keys + [p.name for p in pre.partials]
    assert q.part is not None  # checked when planned: the partition key is among the group's columns
    ekey = _ekey(eng, q, [source_column(j) for j in q.part.keys[d.name.lower()]])
    noted = F.col("note").isNotNull()
    src = F.when(noted, F.col("note")).when(F.col("lower"), F.lit(LOWER)).otherwise(F.lit(UPPER))
    # the processor's input, slimmed (each column crosses into Python): no seq (all Spark's) or
    # sign (all insertions), no is-null flag for a count (never NULL)
    counts = {len(keys) + i for i, p in enumerate(pre.partials) if p.fn is AggKind.COUNT}
    values = _values([types], lambda i, j: F.col(cols[j]), flagged=lambda i, j: j not in counts)
    return g.select(
        ekey.alias("ekey"),
        F.when(noted, F.lit("n")).otherwise(F.lit("d")).alias("kind"),
        src.alias("src"),
        F.col("a").alias("ts"),
        *values,
    )


def native_frame(eng: SparkEngine, q: SparkQuery) -> Any:
    """A native query's output rows ``ts, sign, c0…, note``: one frame per Union All branch; a
    source's rejected rows noted by the first branch reading it (the embedded engine rejects an
    element once, however many branches read its stream).
    """
    assert q.native is not None
    first = [plan.source.lower() not in {p.source.lower() for p in q.native[:k]} for k, plan in enumerate(q.native)]
    return union_all([native_branch(eng, q, plan, notes) for plan, notes in zip(q.native, first, strict=True)])


def native_branch(eng: SparkEngine, q: SparkQuery, plan: NativePlan, noting: bool = True) -> Any:
    """One pass over the source: an element stamped before the first instant, or one whose ts
    Spark could not read, becomes a note row where it stands (it is not filtered or evaluated into
    the answer); only a stream–static join, which would repeat it once per static row (or drop it
    with no match), takes such elements apart first.
    """
    d = eng._source(plan.source)
    frame = query_rows(source_frame(eng, d.name), q, eng.catalog.scale(d), d.kind is Kind.RELATION)
    early = _before_first(eng, d)
    # an attached source's row whose ts Spark could not read (NULL): rejected with a note
    no_ts = F.col("ts").isNull()
    untimed = F.lit(_untimed_note(d, q))
    if not noting:  # another branch notes them
        frame = frame.where(~no_ts if early is None else ~(no_ts | early[0]))
        early = None
    notes = None
    if plan.static is not None:  # each such row once, a note, before the join
        aside = no_ts if early is None else no_ts | early[0]
        text = F.when(no_ts, untimed) if early is None else F.when(no_ts, untimed).otherwise(early[1])
        stamp = F.lit(0).cast("long") if early is None else F.when(no_ts, F.lit(0)).otherwise(early[2])
        notes = frame.where(aside).select(stamp.alias("ts"), text.cast("string").alias("note"))
        frame, early = frame.where(~aside), None
    if plan.static is not None:  # a stream–static join: Spark joins each element with the rows
        r = eng._source(plan.static)
        rows = eng.static[r.name.lower()]
        schema = ", ".join(f"r{j} {spark_type(t).simpleString()}" for j, t in enumerate(r.schema.types))
        frame = frame.crossJoin(F.broadcast(eng.spark.createDataFrame(rows, schema)))
    column = native_columns(eng, plan)
    # A row whose evaluation overflows 64 bits is dropped and counted, as in the embedded
    # engine (sluice.plan.numeric): it becomes a note row (sign 0) naming the query and instant.
    # Each predicate is a Select in turn: a row that fails one is not evaluated further.
    late = no_ts if early is None else early[0] | no_ts  # (neither is filtered: each is a note)
    bad = F.lit(False)
    for p in plan.predicates:
        pbad = overflow(p, column)
        keep = to_column(p, column)
        assert keep is not None  # checked when planned
        if pbad is not None:
            keep = keep | pbad
        frame = frame.where(late | bad | keep)
        if pbad is not None:
            bad = bad | pbad
    types = q.bound.plan.schema.types
    cols = []
    for j, (c, t) in enumerate(zip(plan.columns, types, strict=True)):
        col = to_column(c, column)
        assert col is not None  # checked when planned
        cbad = overflow(c, column)
        if cbad is not None:
            bad = bad | cbad
        cols.append(col.cast(spark_type(t)).alias(f"c{j}"))
    scale = eng.catalog.scale(d)
    ts = (F.col("ts") * F.lit(scale)).cast("long")
    note = F.concat(F.lit(f"{q.name}: row at "), ts.cast("string"), F.lit(": integer overflow (64 bits)"))
    text = F.when(no_ts, untimed)
    if early is not None:
        text = text.when(late, early[1])
    out = frame.select(
        F.when(no_ts, F.lit(0)).otherwise(ts).alias("ts"),
        F.when(late | bad | no_ts, F.lit(0)).otherwise(F.lit(1)).cast("int").alias("sign"),
        *cols,
        text.when(bad, note).otherwise(F.lit(None)).cast("string").alias("note"),
    )
    if notes is None:
        return out
    nulls = [F.lit(None).cast(spark_type(t)).alias(f"c{j}") for j, t in enumerate(types)]
    return out.unionByName(notes.select("ts", F.lit(0).cast("int").alias("sign"), *nulls, "note"))


def _before_first(eng: SparkEngine, d: SourceDef) -> tuple[Any, Any, Any] | None:
    """A source's rows stamped before the first instant — ones Spark read itself (the driver
    never saw them) — are late, as on the embedded engine and in the processors (design 004, "The
    first instant"): (which rows, their note, their ts in the engine's unit).  None when the first
    instant is a guess on a work directory an earlier engine wrote (its queries keep their own).
    """
    inbox = eng.inbox
    if inbox.first is None or (inbox.guessed and not inbox.fresh):
        return None
    ts = (F.col("ts") * F.lit(eng.catalog.scale(d))).cast("long")
    early = F.coalesce(ts < F.lit(inbox.first), F.lit(False))
    text = F.concat(
        F.lit(f"{d.name}: element at ts "), ts.cast("string"), F.lit(f" is before the first instant {inbox.first}")
    )
    return early, text, ts
