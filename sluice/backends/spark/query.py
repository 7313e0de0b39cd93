"""A query registered on the Spark backend: its bound and rewritten plans, how Spark runs it (native, split over
keys, pre-aggregated) and its streaming query once started.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from sluice.approx.limits import QueryLimits
from sluice.approx.qos import LatencyStats
from sluice.approx.report import Approximation
from sluice.backends.spark.budget import is_report
from sluice.backends.spark.compile import NativePlan, Partitioning, unsplittable
from sluice.backends.spark.preagg import PreAggregate
from sluice.backends.spark.shed import is_shed, take
from sluice.catalog import Catalog, Kind
from sluice.plan import BoundQuery
from sluice.plan import logical as L
from sluice.plan.element import Element


def late_note(q: SparkQuery) -> str:
    # (a pre-aggregated query's processor counts the elements of late partials itself: a note)
    return f"{q.dropped} element(s) arrived behind Spark's watermark (late)"


def notes(t: pa.Table, reports: bool = False) -> list[str]:
    """The notes of an output table's sign-0 rows: inputs a query rejected, rows it could not
    evaluate — or, with ``reports``, what its keys' memory limit dropped (``budget``).
    """
    out = t.filter(pc.equal(t.column("sign"), 0)).column("note").to_pylist()
    return [n for n in out if n and is_report(n) == reports and not is_shed(n)]


class Collected:
    """The memory sink: each micro-batch's rows as Arrow, kept in this process by batch id (a batch
    Spark replays replaces itself).  Spark's own memory sink cannot resume a checkpoint — a new
    engine on the same workdir could not restart the query — while ``foreachBatch`` can: the state
    resumes, and this engine's output is what its queries wrote since it started them.
    """

    def __init__(self) -> None:
        self.parts: dict[int, pa.Table] = {}
        # what a key memory limit dropped (``shed``), taken out of the rows: delivered once per
        # batch; Spark calls this on its own thread while the driver delivers (the lock)
        self.shed: dict[int, list[str]] = {}
        self.delivered: set[int] = set()
        self._lock = threading.Lock()

    def __call__(self, frame: Any, batch_id: int) -> None:
        t, shed = take(frame.toArrow())
        with self._lock:
            if batch_id not in self.delivered:  # (a replayed batch replaces its first attempt)
                if shed:
                    self.shed[batch_id] = shed
                else:
                    self.shed.pop(batch_id, None)
        with self._lock:  # (the driver reads the parts meanwhile: ``after``)
            if t.num_rows:
                self.parts[batch_id] = t
            else:
                self.parts.pop(batch_id, None)

    def after(self, done: int) -> list[tuple[int, pa.Table]]:
        """The batches numbered above ``done`` held now, in order (Spark's thread may be adding one)."""
        with self._lock:
            return sorted((b, t) for b, t in self.parts.items() if b > done)

    def undelivered(self) -> list[str]:
        """The shed notes not delivered yet, in batch order; from now on, delivered."""
        with self._lock:
            taken, self.shed = self.shed, {}
            self.delivered.update(taken)
        return [n for b in sorted(taken) for n in taken[b]]

    def table(self) -> pa.Table | None:
        """Everything collected, in batch order; None before the first row."""
        parts = [self.parts[b] for b in sorted(self.parts)]
        return pa.concat_tables(parts) if parts else None


@dataclass
class SparkQuery:
    name: str
    bound: BoundQuery
    plan: L.LogicalNode  # the bound plan rewritten (sluice.plan.rules): what Spark and the processors run
    rewrites: tuple[str, ...]  # the rules that changed it
    part: Partitioning | None
    sources: list[str]  # catalog names of the sources the plan reads, in event-column order
    seq_from: int  # events handed to Spark before the query was registered are not its input
    sink: str
    out_path: Path | None
    stream: Any = None
    table: str = ""  # the streaming query's name in Spark (memory sink)
    collected: Collected | None = None  # the memory sink's rows
    notes: list[str] = field(default_factory=list)
    native: list[NativePlan] | None = None  # one per branch of a Union All
    preagg: PreAggregate | None = None  # what Spark aggregates before the processor (design 015)
    dropped: int = 0  # elements Spark dropped behind its watermark
    seen_batches: set[int] = field(default_factory=set)
    # registered while running: its first instant (ticks), after the latest any source released —
    # a stream's element stamped before it is not its input (``frames.query_rows``; as ``Since``)
    since: int | None = None
    buckets: int = 0  # partition keys, fixed when the query first starts (SparkEngine._buckets)
    engine: Any = field(default=None, repr=False, compare=False)  # the SparkEngine that runs it
    processor: Any = field(default=None, repr=False, compare=False)  # the driver's copy of its processor
    # queries run by one processor per key — they share a window join (Hammad et al.; issue #12
    # item 5): their names, this one's among them; () when it runs alone
    group: tuple[str, ...] = ()
    limits: QueryLimits = field(default_factory=QueryLimits)  # its weight and least precision

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

    @property
    def latency(self) -> LatencyStats:
        """Its output latency so far against its ``max_latency`` (seconds; as on an embedded ``Query``)."""
        st = self.engine.qos.queries.get(self.name)
        return replace(st) if st is not None else LatencyStats(self.limits.max_latency)

    @property
    def approximation(self) -> Approximation:
        """What its keys' memory limit dropped, over all keys (the same call as on an embedded
        ``Query``); exact without a ``key_memory_limit``.
        """
        out: Approximation = self.engine.inspector.approximation(self)
        return out

    @property
    def label(self) -> str:
        """What its checkpoint directory and output table are named after: its group's members, or itself."""
        return "+".join(self.group) if len(self.group) > 1 else self.name

    def partition_note(self, catalog: Catalog, buckets: int) -> str:
        if self.native is not None:
            statics = sorted({b.static for b in self.native if b.static})
            what = f" joined with the static relation {', '.join(statics)}" if statics else ""
            union = f" of {', '.join(b.source for b in self.native)} (Union All)" if len(self.native) > 1 else ""
            return (
                f"runs as native Spark expressions (no state): a selection and projection of each element{union}{what}"
            )
        if self.part is None:
            return f"runs on one key: {unsplittable(self.plan)}, so no split of its input keeps the answer exact"
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
