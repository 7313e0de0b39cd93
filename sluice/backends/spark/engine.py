"""The Spark backend (``Sluice(backend="spark", master="local[2]")``).

Each registered query becomes one Structured Streaming query:

    Parquet event files ──readStream──> groupBy(ekey).transformWithStateInPandas(SluiceProcessor)
                        ──writeStream──> memory table ("back into Python") or Parquet (exactly once)

``push`` writes the rows as *events* (``d`` data, ``h`` heartbeat, ``e`` end of input) into the
query's input directory; ``run`` hands Spark what is there.  The partition key comes from the plan
(``partitioning``): a GROUP BY or Partition By column of a single stream when every stateful
operator is keyed by it; otherwise the query runs on one key and EXPLAIN says so.  Heartbeats and
end of input are delivered to every key, so instants complete exactly as in the embedded engine.
The processor runs the embedded engine's own operators, snapshotted in the RocksDB state store.
"""

from __future__ import annotations

import json
import tempfile
import time
import uuid
import zlib
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from sluice.backends.rows import rows_to_batch
from sluice.catalog import Catalog, Kind, SourceDef
from sluice.cql import ast
from sluice.cql.ast import TimeUnit
from sluice.cql.parser import parse_script
from sluice.cql.printer import to_cql
from sluice.errors import SluiceError
from sluice.plan import BoundQuery, bind_query
from sluice.plan import logical as L
from sluice.plan.ddl import execute_statement
from sluice.plan.explain import explain as explain_plan
from sluice.plan.expr import ColRef, Subquery, walk_expr
from sluice.reference.evaluator import Element
from sluice.runtime.batch import to_elements

EVENT_COLUMNS = ["ekey", "seq", "kind", "src", "ts", "sign", "row"]
SINKS = ("memory", "parquet", "json", "console")


BUCKETS = 8  # partition keys are hash buckets: equal key values always share one


def bucket(values: list[Any]) -> str:
    """The partition key of an element: a stable hash bucket of its key values."""
    return str(zlib.crc32(json.dumps(values).encode()) % BUCKETS)


def _row_partitionable(plan: L.LogicalNode) -> bool:
    """Every operator distributes over a disjoint union of input elements: per-element windows,
    σ, π, Sample, Rstream, and Istream over an insert-only input (where it is the identity).
    """
    for n in L.walk_plan(plan):
        if isinstance(n, L.Window) and n.spec.kind not in ("UNBOUNDED", "NOW", "RANGE"):
            return False
        if isinstance(n, L.Aggregate | L.Join | L.SetOp | L.Distinct):
            return False
        if isinstance(n, L.StreamOp):
            if n.op == "DSTREAM":
                return False
            if n.op == "ISTREAM" and any(
                isinstance(m, L.Window) and m.spec.kind != "UNBOUNDED" for m in L.walk_plan(n.input)
            ):
                return False
        if any(isinstance(x, Subquery) for e in n.exprs() for x in walk_expr(e)):
            return False
    return True


def partitioning(plan: L.LogicalNode) -> tuple[str, tuple[int, ...]] | None:
    """(stream, attribute positions) to partition by, or None (run on one key).

    Partitionable: one stream, no relation, no join, no [Rows N] (a global order), no aggregate
    without GROUP BY, no subquery; and a GROUP BY of stream columns or a Partition By to key on —
    or, for a plan of per-element operators only, the whole element.
    """
    scans = [n for n in L.walk_plan(plan) if isinstance(n, L.Scan)]
    if len({s.name for s in scans}) != 1 or scans[0].kind is not Kind.STREAM:
        return None
    if _row_partitionable(plan):
        return (scans[0].name, tuple(range(len(scans[0].schema))))
    keys: tuple[int, ...] | None = None
    for n in L.walk_plan(plan):
        if isinstance(n, L.Join | L.SetOp):
            return None
        if any(isinstance(x, Subquery) for e in n.exprs() for x in walk_expr(e)):
            return None
        if isinstance(n, L.Window) and n.spec.kind == "ROWS":
            return None
        if isinstance(n, L.Window) and n.spec.kind == "PARTITION":
            k = _trace(n.input, n.spec.partition)
            if k is None:
                return None
            keys = k if keys is None else tuple(sorted(set(keys) & set(k))) or None
            if keys is None:
                return None
        if isinstance(n, L.Aggregate):
            if not n.keys or not all(isinstance(k, ColRef) for k in n.keys):
                return None
            k = _trace(n.input, tuple(k.index for k in n.keys if isinstance(k, ColRef)))
            if k is None:
                return None
            keys = k if keys is None else tuple(sorted(set(keys) & set(k))) or None
            if keys is None:
                return None
    return (scans[0].name, keys) if keys else None


def _trace(node: L.LogicalNode, cols: tuple[int, ...]) -> tuple[int, ...] | None:
    """Positions of ``cols`` in the scanned stream, through layout-preserving nodes only."""
    while not isinstance(node, L.Scan):
        if isinstance(node, L.Filter | L.Window | L.Sample):
            node = node.inputs()[0]
        else:
            return None
    return tuple(sorted(set(cols)))


@dataclass
class SparkQuery:
    name: str
    bound: BoundQuery
    key: tuple[str, tuple[int, ...]] | None
    dir: Path
    sink: str
    out_path: Path | None
    stream: Any = None
    table: str = ""

    @property
    def kind(self) -> Kind:
        return self.bound.kind

    def partition_note(self, catalog: Catalog) -> str:
        if self.key is None:
            return "runs on one key: the plan is not partitionable (see sluice.backends.spark.engine.partitioning)"
        stream, cols = self.key
        d = catalog.lookup(stream)
        names = [d.schema.names[c] for c in cols]
        what = "whole elements" if len(names) == len(d.schema.names) else f"{stream}.{', '.join(names)}"
        return f"partitioned by {what} into {BUCKETS} hash buckets"


class SparkEngine:
    """Register, push, run and read results like the embedded engine; executed by Spark."""

    def __init__(
        self,
        master: str = "local[2]",
        *,
        workdir: str | Path | None = None,
        time_unit: TimeUnit = TimeUnit.SECOND,
        seed: int = 0,
        start: int | None = None,
        spark: Any = None,
    ) -> None:
        from sluice.backends.spark.session import get_session

        self.spark = spark or get_session(master)
        self.catalog = Catalog(time_unit=time_unit)
        self.seed = seed
        self.start = start
        self.workdir = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="sluice-spark-"))
        self.ddl: list[str] = []
        self.queries: dict[str, SparkQuery] = {}
        self._events: dict[str, list[tuple[Any, ...]]] = {}
        self._seq = 0
        self._min_ts: int | None = None
        self._files = 0
        self.rejected: list[str] = []
        self.directories: dict[str, tuple[str, str, dict[str, str]]] = {}  # source -> (path, format, options)

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

    def register_query(
        self, query: str, name: str | None = None, *, sink: str = "memory", path: str | Path | None = None
    ) -> SparkQuery:
        bq = bind_query(self.catalog, query)
        name = name or f"q{len(self.queries) + 1}"
        if name in self.queries:
            raise SluiceError(f"a query named {name!r} is already registered")
        d = self.workdir / name / "events"
        d.mkdir(parents=True, exist_ok=True)
        if sink not in SINKS:
            raise SluiceError(f"sink must be one of {', '.join(SINKS)}")
        out_path = Path(path) if path else (self.workdir / name / "out" if sink in ("parquet", "json") else None)
        q = SparkQuery(name, bq, partitioning(bq.plan), d, sink, out_path)
        self.queries[name] = q
        return q

    # -- input ---------------------------------------------------------------------------
    def attach_directory(self, name: str, path: str | Path, fmt: str = "csv", **options: str) -> None:
        """Read a stream or relation from files appearing in ``path`` (``csv``, ``json`` or
        ``parquet``), picked up by Spark as they arrive.  Files have a ``ts`` column (and ``sign``,
        ``+``/``-``, for a relation) and the attributes by name; CSV files have a header.
        """
        d = self._source(name)
        if fmt not in ("csv", "json", "parquet"):
            raise SluiceError(f"format must be csv, json or parquet, not {fmt!r}")
        if any(q.stream is not None for q in self.queries.values()):
            raise SluiceError("attach directories before the first run()")
        self.directories[d.name] = (str(path), fmt, {k: str(v) for k, v in options.items()})

    def _source(self, name: str) -> SourceDef:
        try:
            d = self.catalog.lookup(name)
        except KeyError:
            raise SluiceError(f"no stream or relation named {name!r}") from None
        if not isinstance(d, SourceDef):
            raise SluiceError(f"{name} is a view; push to its streams")
        return d

    def _event(self, q: SparkQuery, key: str, kind: str, src: str, ts: int, sign: int, row: str) -> None:
        self._seq += 1
        self._events.setdefault(q.name, []).append((key, self._seq, kind, src, ts, sign, row))

    def push(self, name: str, rows: Any) -> None:
        d = self._source(name)
        batch, errors = rows_to_batch(rows, d.schema, d.kind is Kind.RELATION, d.name)
        self.rejected += errors
        scale = self.catalog.scale(d)
        for ts, sign, row in to_elements(batch):
            t = ts * scale
            self._min_ts = t if self._min_ts is None else min(self._min_ts, t)
            for q in self.queries.values():
                if q.key is None:
                    key = "0"
                elif q.key[0].lower() == d.name.lower():
                    key = bucket([row[i] for i in q.key[1]])
                else:
                    continue
                self._event(q, key, "d", d.name, t, 1 if sign == "+" else -1, json.dumps(list(row)))

    def _marker(self, kind: str, ts: int) -> None:
        # keys are hash buckets, so every key a query can have is known: tell them all
        for q in self.queries.values():
            for key in ["0"] if q.key is None else [str(b) for b in range(BUCKETS)]:
                self._event(q, key, kind, "", ts, 0, "")

    def heartbeat(self, ts: int) -> None:
        """No element stamped ≤ ts will still arrive (every source)."""
        self._marker("h", ts)

    def close(self, until: int | None = None) -> None:
        """End of input: complete every instant up to ``until`` (default: the last timestamp pushed)."""
        last = max((e[4] for evs in self._events.values() for e in evs if e[2] == "d"), default=None)
        self._marker("e", until if until is not None else (last if last is not None else 0))
        self.run()

    # -- running -------------------------------------------------------------------------
    def _flush(self) -> None:
        for name, evs in self._events.items():
            if not evs:
                continue
            q = self.queries[name]
            df = pd.DataFrame(evs, columns=EVENT_COLUMNS)
            df["ts"] = df["ts"].astype("int64")
            df["sign"] = df["sign"].astype("int32")
            self._files += 1
            # unique across engines on one workdir (a restarted engine keeps adding files)
            stem = f"part-{time.time_ns():020d}-{uuid.uuid4().hex[:8]}"
            tmp = q.dir / f".{stem}.parquet"
            df.to_parquet(tmp, index=False)
            tmp.rename(q.dir / f"{stem}.parquet")  # appear atomically
            evs.clear()

    def _start(self, q: SparkQuery) -> None:
        from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

        from sluice.backends.spark.processor import SluiceProcessor, output_schema

        schema = StructType(
            [
                StructField("ekey", StringType()),
                StructField("seq", LongType()),
                StructField("kind", StringType()),
                StructField("src", StringType()),
                StructField("ts", LongType()),
                StructField("sign", IntegerType()),
                StructField("row", StringType()),
            ]
        )
        start = self.start if self.start is not None else (self._min_ts or 0)
        proc = SluiceProcessor("\n".join(self.ddl), q.bound.text, start, self.catalog.time_unit.name, self.seed)
        events = self.spark.readStream.schema(schema).parquet(str(q.dir))
        for src, (path, fmt, options) in self.directories.items():
            if src.lower() not in {n.name.lower() for n in L.walk_plan(q.bound.plan) if isinstance(n, L.Scan)}:
                continue
            events = events.unionByName(self._file_events(q, src, path, fmt, options, schema))
        out = events.groupBy("ekey").transformWithStateInPandas(
            statefulProcessor=proc, outputStructType=output_schema(), outputMode="Append", timeMode="None"
        )
        checkpoint = str(self.workdir / q.name / "checkpoint")
        w = out.writeStream.option("checkpointLocation", checkpoint).outputMode("append")
        if q.sink == "memory":
            q.table = f"sluice_{q.name}_{uuid.uuid4().hex[:8]}"
            q.stream = w.format("memory").queryName(q.table).start()
        elif q.sink == "console":
            q.stream = w.format("console").option("truncate", "false").start()
        else:  # files, exactly once through the checkpoint
            assert q.out_path is not None
            q.stream = w.format(q.sink).option("path", str(q.out_path)).start()

    def _file_events(self, q: SparkQuery, src: str, path: str, fmt: str, options: dict[str, str], schema: Any) -> Any:
        """Rows of files in ``path`` as events for ``q`` (the same keys as pushed rows)."""
        from pyspark.sql.types import StructField, StructType

        from sluice.backends.spark.types import spark_type

        d = self._source(src)
        relation = d.kind is Kind.RELATION
        from pyspark.sql.types import LongType, StringType

        fields = [StructField("ts", LongType())]
        if relation:
            fields.append(StructField("sign", StringType()))
        fields += [StructField(c.name, spark_type(c.type)) for c in d.schema.columns]
        reader = self.spark.readStream.schema(StructType(fields))
        if fmt == "csv":
            reader = reader.option("header", "true")
        for k, v in options.items():
            reader = reader.option(k, v)
        raw = reader.format(fmt).load(path)
        names = list(d.schema.names)
        key_cols = None if q.key is None else [names[i] for i in q.key[1]] if q.key[0].lower() == src.lower() else None
        scale = self.catalog.scale(d)

        def to_events(frames: Any) -> Any:
            import json as _json

            for pdf in frames:
                rows = pdf[names].astype(object).where(pdf[names].notna(), None).values.tolist()
                yield pd.DataFrame(
                    {
                        "ekey": [
                            "0" if key_cols is None else bucket([r[names.index(c)] for c in key_cols]) for r in rows
                        ],
                        # before the pushed events and markers of the same micro-batch, in file order
                        "seq": [-1] * len(rows),
                        "kind": ["d"] * len(rows),
                        "src": [src] * len(rows),
                        "ts": (pdf["ts"].astype("int64") * scale).tolist(),
                        "sign": ([1 if s == "+" else -1 for s in pdf["sign"]] if relation else [1] * len(rows)),
                        "row": [_json.dumps(r) for r in rows],
                    }
                )

        return raw.mapInPandas(to_events, schema)

    def run(self) -> None:
        """Hand Spark every event pushed so far and wait until each query has processed them."""
        self._flush()
        for q in self.queries.values():
            if q.stream is None:
                self._start(q)
            q.stream.processAllAvailable()

    def stop(self) -> None:
        """Stop the streaming queries (their checkpoints stay; a new engine on the same workdir resumes)."""
        for q in self.queries.values():
            if q.stream is not None:
                q.stream.stop()
                q.stream = None

    # -- output --------------------------------------------------------------------------
    def results(self, query: str | SparkQuery) -> list[Element]:
        """The query's output so far, netted per instant (deletions before insertions)."""
        q = query if isinstance(query, SparkQuery) else self.queries[query]
        if q.sink == "console":
            raise SluiceError(f"query {q.name} writes to the console; use sink='memory', 'parquet' or 'json'")
        if q.sink == "memory":
            if not q.table:
                return []
            pdf = self.spark.sql(f"select * from {q.table}").toPandas()
        elif q.sink == "json":
            assert q.out_path is not None
            files = list(q.out_path.glob("*.json"))
            pdf = (
                self.spark.read.schema("ts long, sign int, row string").json(str(q.out_path)).toPandas()
                if files
                else pd.DataFrame(columns=["ts", "sign", "row"])
            )
        else:
            assert q.out_path is not None
            files = list(q.out_path.glob("*.parquet"))
            pdf = (
                self.spark.read.parquet(str(q.out_path)).toPandas()
                if files
                else pd.DataFrame(columns=["ts", "sign", "row"])
            )
        c: Counter[tuple[int, tuple[Any, ...]]] = Counter()
        for ts, sign, row in zip(pdf["ts"], pdf["sign"], pdf["row"], strict=True):
            c[(int(ts), tuple(json.loads(row)))] += int(sign)
        from sluice.plan.semantics import sort_key

        out = []
        for (ts, row), n in sorted(c.items(), key=lambda kv: (kv[0][0], kv[1] > 0, sort_key(kv[0][1]))):
            out += [Element(ts, "+" if n > 0 else "-", row)] * abs(n)
        return out

    def explain(self, query: str | SparkQuery) -> str:
        q = query if isinstance(query, SparkQuery) else self.queries[query]
        lines = [f"query {q.name} on Spark: {q.partition_note(self.catalog)}", explain_plan(q.bound.plan)]
        return "\n".join(lines)
