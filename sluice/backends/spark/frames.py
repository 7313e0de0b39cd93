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

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import functions as F
from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

from sluice.backends.spark.compile import NativePlan, overflow, pushdown, to_column
from sluice.backends.spark.processor import EVENT_TIME_OFFSET
from sluice.backends.spark.types import spark_type
from sluice.catalog import Kind, SourceDef
from sluice.datatypes import DataType, TypeKind

if TYPE_CHECKING:
    from sluice.backends.spark.engine import SparkEngine, SparkQuery


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


def query_rows(frame: Any, q: SparkQuery) -> Any:
    """A source's rows that are the query's input: pushed events from its registration on, an
    attached source's rows (``seq`` −1) all.
    """
    return frame.where((F.col("seq") > q.seq_from) | (F.col("seq") < 0))


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
    cols += [v.cast(t).alias(f"c{j}") for j, (v, t) in enumerate(zip(values, types, strict=True))]
    return raw.select(*cols)


def input_frame(eng: SparkEngine, q: SparkQuery) -> Any:
    """The query's events, keyed: ``ekey, seq, kind, src, ts, sign`` and per source ``i`` its
    columns ``s{i}c{j}`` (with ``s{i}n{j}`` is-null flags).
    """
    defs = [eng._source(s) for s in q.sources]
    pushed = pushdown(q.bound.plan)

    def values(active: int | None) -> list[Any]:
        out = []
        for i, d in enumerate(defs):
            for j, t in enumerate(d.schema.types):
                st = spark_type(t)
                v = F.col(f"c{j}") if i == active else F.lit(None).cast(st)
                if needs_flag(t):
                    out.append(F.coalesce(v, F.lit(zero(t)).cast(st)).alias(f"s{i}c{j}"))
                    out.append((v.isNull() if i == active else F.lit(True)).alias(f"s{i}n{j}"))
                else:
                    out.append(v.alias(f"s{i}c{j}"))
        return out

    mdir = eng.workdir / "markers"
    mdir.mkdir(parents=True, exist_ok=True)
    mschema = StructType(
        [StructField("seq", LongType()), StructField("kind", StringType()), StructField("ts", LongType())]
    )

    def marker_frame() -> Any:
        return eng.spark.readStream.schema(mschema).parquet(str(mdir)).where(F.col("seq") > q.seq_from)

    buckets = eng._buckets(q)
    keys = F.array(*[F.lit(str(b)) for b in range(buckets)])
    slack, off = F.lit(eng.slack), F.lit(EVENT_TIME_OFFSET)
    frames = []
    for i, d in enumerate(defs):
        scale = F.lit(eng.catalog.scale(d))
        names = [f"c{j}" for j in range(len(d.schema))]
        data = query_rows(source_frame(eng, d.name), q)
        data = data.select("seq", F.lit("d").alias("kind"), "ts", "sign", *names, (F.col("ts") * scale).alias("et"))
        # Markers raise this input's event time as a heartbeat raises a source's completion:
        # with Spark's delay of slack + 1, h(τ) completes ticks < (τ+1)·scale and e(u) ticks ≤ u.
        et = (
            F.when(F.col("kind") == "h", (F.col("ts") + 1) * scale + slack)
            .when(F.col("kind") == "e", F.col("ts") + 1 + slack)
            .otherwise(F.col("ts"))
        )
        marks = marker_frame().select(
            "seq",
            F.lit("w").alias("kind"),
            "ts",
            F.lit(0).cast(IntegerType()).alias("sign"),
            *[F.lit(None).cast(spark_type(t)).alias(n) for n, t in zip(names, d.schema.types, strict=True)],
            et.alias("et"),
        )
        frame = data.unionByName(marks).withColumn("etime", F.timestamp_millis(F.col("et") + off))
        # Spark's watermark for this input: max event time − slack − 1, so exactly the elements
        # the embedded engine would call late are behind it; the marker rows only move it
        frame = frame.withWatermark("etime", f"{eng.slack + 1} milliseconds").where(F.col("kind") == "d")
        for p in pushed.get(d.name.lower(), []):
            col = to_column(p, lambda j: F.col(f"c{j}"))
            if col is not None:  # a row whose predicate overflows goes on: the processor counts it
                bad = overflow(p, lambda j: F.col(f"c{j}"))
                frame = frame.where(col if bad is None else col | bad)
        if q.part is None:
            ekey = F.lit("0")
        elif d.name.lower() in q.part.keys:
            cols = [F.col(f"c{j}") for j in q.part.keys[d.name.lower()]]
            ekey = F.pmod(F.hash(*cols), F.lit(buckets)).cast("string")
        else:
            ekey = F.explode(keys)
        frames.append(
            frame.select(
                ekey.alias("ekey"), "seq", "kind", F.lit(d.name).alias("src"), "ts", "sign", "etime", *values(i)
            )
        )
    # the markers themselves reach every key in-band (no event time: never late)
    frames.append(
        marker_frame()
        .where(F.col("kind") != "s")
        .select(
            (F.lit("0") if q.part is None else F.explode(keys)).alias("ekey"),
            "seq",
            "kind",
            F.lit("").alias("src"),
            "ts",
            F.lit(0).cast(IntegerType()).alias("sign"),
            F.lit(None).cast("timestamp").alias("etime"),
            *values(None),
        )
    )
    return union_all(frames)


def native_frame(eng: SparkEngine, q: SparkQuery) -> Any:
    """A native query's output rows ``ts, sign, c0…, note``: one frame per Union All branch."""
    assert q.native is not None
    return union_all([native_branch(eng, q, plan) for plan in q.native])


def native_branch(eng: SparkEngine, q: SparkQuery, plan: NativePlan) -> Any:
    d = eng._source(plan.source)
    frame = query_rows(source_frame(eng, d.name), q)
    if plan.static is not None:  # a stream–static join: Spark joins each element with the rows
        r = eng._source(plan.static)
        rows = eng.static[r.name.lower()]
        schema = ", ".join(f"r{j} {spark_type(t).simpleString()}" for j, t in enumerate(r.schema.types))
        frame = frame.crossJoin(F.broadcast(eng.spark.createDataFrame(rows, schema)))
    column = native_columns(eng, plan)
    # A row whose evaluation overflows 64 bits is dropped and counted, as in the embedded
    # engine (sluice.plan.numeric): it becomes a note row (sign 0) naming the query and instant.
    # Each predicate is a Select in turn: a row that fails one is not evaluated further.
    bad = F.lit(False)
    for p in plan.predicates:
        pbad = overflow(p, column)
        keep = to_column(p, column)
        assert keep is not None  # checked when planned
        if pbad is not None:
            keep = keep | pbad
        frame = frame.where(bad | keep)
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
    # an attached source's row whose ts Spark could not read (NULL): rejected with a note
    no_ts = F.col("ts").isNull()
    untimed = F.lit(f"{d.name}: a row without a valid ts was rejected (query {q.name})")
    return frame.select(
        F.when(no_ts, F.lit(0)).otherwise(ts).alias("ts"),
        F.when(bad | no_ts, F.lit(0)).otherwise(F.lit(1)).cast("int").alias("sign"),
        *cols,
        F.when(no_ts, untimed).when(bad, note).otherwise(F.lit(None)).cast("string").alias("note"),
    )
