"""What the Spark backend tells about its queries: their output read back from Spark (memory
table or committed files), results netted per instant as the embedded engine gives them,
rejections and late elements, and EXPLAIN of how Spark runs each query.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.pandas.types import to_arrow_schema

from sluice.approx.report import Approximation
from sluice.backends.spark.budget import Tally, tally
from sluice.backends.spark.compile import pushdown, to_column
from sluice.backends.spark.frames import read_committed, source_column
from sluice.backends.spark.processor import output_schema
from sluice.backends.spark.query import SparkQuery, late_note, notes
from sluice.errors import SluiceError
from sluice.plan.element import Element
from sluice.plan.explain import explain as explain_plan
from sluice.plan.expr import render
from sluice.plan.semantics import sort_key
from sluice.runtime.batch import arrow_schema, signed_counts

if TYPE_CHECKING:
    from sluice.backends.spark.engine import SparkEngine


class Inspector:
    def __init__(self, engine: SparkEngine) -> None:
        self.engine = engine

    def output(self, q: SparkQuery) -> pa.Table | None:
        """Everything the query wrote so far, notes (sign 0) included; None before its first output."""
        spark = self.engine.spark
        if q.sink == "console":
            raise SluiceError(f"query {q.name} writes to the console; use sink='memory', 'parquet' or 'json'")
        if q.sink == "memory":
            t = q.collected.table() if q.collected is not None else None
            if t is None:
                return None
            return self._member(q, t) if len(q.group) > 1 else t
        assert q.out_path is not None
        if not list(q.out_path.glob(f"*.{q.sink}")):
            return None
        schema = output_schema(q.bound.plan.schema.types)
        if q.sink == "json":
            return spark.read.schema(schema).json(str(q.out_path)).toArrow()
        return read_committed(spark, str(q.out_path), schema, to_arrow_schema(schema))

    @staticmethod
    def _member(q: SparkQuery, t: pa.Table) -> pa.Table:
        """A group's output as one member's: its rows and the notes on the shared input, its
        columns named as a query of its own writes them.
        """
        i = q.group.index(q.name)
        mine = pc.or_kleene(pc.equal(t.column("query"), q.name), pc.is_null(t.column("query")))
        t = t.filter(pc.fill_null(mine, False))
        width = len(q.bound.plan.schema.types)
        cols = [t.column("ts"), t.column("sign")] + [t.column(f"m{i}c{j}") for j in range(width)] + [t.column("note")]
        return pa.Table.from_arrays(cols, names=["ts", "sign"] + [f"c{j}" for j in range(width)] + ["note"])

    def elements(self, q: SparkQuery) -> pa.Table:
        """Output rows as an engine batch (``__ts``, ``__sign``, ``c0…``); notes go to ``q.notes``."""
        types = list(q.bound.plan.schema.types)
        t = self.output(q)
        if t is None or t.num_rows == 0:
            return arrow_schema(types).empty_table()
        signs = t.column("sign")
        q.notes = notes(t)
        t = t.filter(pc.not_equal(signs, 0))
        return pa.Table.from_arrays(
            [t.column("ts"), t.column("sign").cast(pa.int8())] + [t.column(f"c{j}") for j in range(len(types))],
            schema=arrow_schema(types),
        )

    def results(self, q: SparkQuery) -> list[Element]:
        b = self.elements(q)
        if b.num_rows == 0:
            return []
        out = []
        counts = signed_counts(b)  # one Arrow group-by: net sign per (instant, tuple)
        for ts, row, n in sorted(counts, key=lambda c: (c[0], c[2] > 0, sort_key(c[1]))):
            if n:
                out += [Element(ts, "+" if n > 0 else "-", row)] * abs(n)
        return out

    def rejected(self) -> list[str]:
        out = self.engine.inbox.messages()
        for q in self.engine.queries.values():
            if q.stream is not None and q.sink != "console":
                t = self.output(q)
                if t is not None:
                    q.notes = notes(t)
            out += q.notes
        return out

    def budget(self, q: SparkQuery) -> Tally:
        """What its keys' memory limit dropped, from their reports (``budget``)."""
        t = self.output(q) if q.sink != "console" else None  # (also once stopped: its output stays)
        return tally(notes(t, reports=True) if t is not None else ())

    def approximation(self, q: SparkQuery) -> Approximation:
        if self.engine.key_memory_limit is None:
            return Approximation.none(q.limits)
        return self.budget(q).approximation(q.bound.plan, q.limits, self._in_processor(q))

    @staticmethod
    def _in_processor(q: SparkQuery) -> str:
        return q.name if len(q.group) > 1 else "q"

    def statistics(self) -> dict[str, Any]:
        eng = self.engine
        limited = eng.key_memory_limit is not None
        return {
            "rejected": self.rejected(),
            "sources": tuple(adm.statistics(eng.inbox.held(n)) for n, adm in eng.inbox.admission.items()),
            "first_instant": eng.inbox.first,  # None: not fixed yet (design 004), no query started
            "queries": {
                n: {"rejected": list(q.notes) + ([late_note(q)] if q.dropped else [])}
                | (self._limited(q) if limited else {})
                for n, q in eng.queries.items()
            },
            "key_memory_limit": eng.key_memory_limit,
            # each query's output latency (as the embedded engine's), and its targets missed
            "latency": tuple((n, replace(st)) for n, st in eng.qos.queries.items()),
            "latency_events": tuple(eng.qos.events),
        }

    def _limited(self, q: SparkQuery) -> dict[str, Any]:
        """Under a key memory limit: per stream what the query's keys were offered and dropped,
        the most memory one key held, how many keys reported, and the approximation.
        """
        b = self.budget(q)
        return {
            "shedding": tuple(b.streams.values()),
            "peak_key_memory": b.peak,
            "peak_key_memory_in_runs": b.peak_in_runs,
            "keys": b.keys,
            "approx_events": tuple(b.events) + tuple(self.engine.deliveries.failures.get(q.label, ())),
            "approximation": b.approximation(q.bound.plan, q.limits, self._in_processor(q)),
        }

    def explain(self, q: SparkQuery) -> str:
        eng = self.engine
        if q.stream is None:
            q.native = eng.native_of(q)
        lines = [f"query {q.name} on Spark: {q.partition_note(eng.catalog, eng.runner.buckets(q))}"]
        pre = eng.preagg_of(q) if q.stream is None else q.preagg
        if pre is not None:
            lines.append("  " + pre.describe(eng._source(pre.source).schema.names))
        for src, preds in pushdown(q.plan).items() if len(q.group) < 2 else ():  # (a group reads every element)
            done = [p for p in preds if to_column(p, source_column) is not None]
            if done:
                names = eng.catalog.lookup(src).schema.names
                lines.append(f"  selection run by Spark on {src}: " + " AND ".join(render(p, names) for p in done))
        if q.rewrites:
            lines.append(f"  rewritten by: {', '.join(q.rewrites)}")
        if len(q.group) > 1:
            others = ", ".join(n for n in q.group if n != q.name)
            lines.append(
                f"  runs in one processor per key with {others}: they join the same streams through windows "
                "(one shared window join serves those joining on the same predicate); Spark selects nothing "
                "for a group before its processor"
            )
        if q.limits.max_latency is not None:
            lines.append("  " + q.latency.describe())
        lines.append(explain_plan(q.plan))
        return "\n".join(lines)
