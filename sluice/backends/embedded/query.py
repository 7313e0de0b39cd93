"""A registered query's handle on the embedded engine (its output so far, its subscribers) and
the engine's statistics record.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sluice.approx.limits import QueryLimits
from sluice.approx.manager import ResourceManager
from sluice.approx.qos import LatencyStats, QoS
from sluice.approx.report import Approximation, Event, windows_only
from sluice.approx.streams import StreamShedding
from sluice.catalog import Kind
from sluice.errors import SluiceError
from sluice.plan import BoundQuery
from sluice.plan.element import Element
from sluice.runtime.batch import concat, to_elements
from sluice.runtime.operators.streams import Output
from sluice.runtime.stats import OperatorStats, QueueStats, SourceStats
from sluice.runtime.synopsis import SynopsisStats


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
    # under a memory limit (``sluice.approx``): the limit, the most memory the manager measured,
    # each stream's input (offered, kept, sampled out, shed), each query's approximation and
    # what the manager did when
    memory_limit: int | None = None
    peak_memory: int = 0
    peak_memory_in_runs: int = 0  # also after every step of a run (design 021, "Memory within a run")
    shedding: tuple[StreamShedding, ...] = ()
    approximations: tuple[tuple[str, Approximation], ...] = ()
    approx_events: tuple[Event, ...] = ()
    latency: tuple[tuple[str, LatencyStats], ...] = ()  # each query's output latency (sluice.approx.qos)
    # the engine's first instant; None while it is not fixed — nothing is released until some
    # source's earliest element is in an instant it completed (design 004, "The first instant")
    first_instant: int | None = None

    @property
    def memory_bytes(self) -> int:
        return self.queue_bytes + self.synopsis_bytes

    @property
    def shed(self) -> int:
        """Stream elements dropped to hold the memory limit (sampled out or shed)."""
        return sum(s.dropped for s in self.shedding)


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
    limits: QueryLimits = field(default_factory=QueryLimits)  # its weight and least precision
    manager: ResourceManager | None = None  # the engine's, under a memory limit
    windows: Callable[[], Any] | None = None  # the engine's windows that may shrink (without a limit)
    inactive_since: int | None = None  # deactivated (STREAM §2.4): not maintained from this instant
    qos: QoS | None = None  # the engine's latency meter
    _held: int = 0
    _close: Callable[[str], None] | None = None

    @property
    def kind(self) -> Kind:
        return self.bound.kind

    @property
    def approximation(self) -> Approximation:
        """What the memory limit does to this query: exact, or its streams' kept fractions, the
        elements dropped and the estimated (FP, FN) (STREAM §5.3; ``sluice.approx``).
        """
        if self.manager is not None and self.name in self.manager.readers:
            return self.manager.approximation(self.name)
        if self.windows is not None:
            return windows_only(self.name, self.bound.plan, self.limits, self.windows())
        return Approximation.none(self.limits)

    @property
    def latency(self) -> LatencyStats:
        """Its output latency so far against its ``max_latency`` (seconds; ``sluice.approx.qos``)."""
        st = self.qos.queries.get(self.name) if self.qos is not None else None
        return replace(st) if st is not None else LatencyStats(self.limits.max_latency)

    @property
    def schema(self) -> Any:
        return self.bound.schema

    def _deliver(self, b: pa.Table) -> None:
        self.delivered += b.num_rows
        if self.qos is not None:
            self.qos.delivered(self.name, b)
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

    def contents(self) -> pa.Table:
        """A relation query's answer now, one row per copy (``__ts``/``__sign`` of the last
        change): its output so far netted, vectorised.  Needs the whole output (``retain=None``).
        """
        if self.retain is not None:
            raise SluiceError(
                f"query {self.name}: its relation's contents are not kept (retain={self.retain}): "
                "register it with retain=None to deactivate it"
            )
        t = concat(self.batches, list(self.bound.schema.types))
        cols = t.column_names[2:]
        w = pc.cast(t.column(1), pa.int64())
        tw = t.append_column("__w", w)
        if not cols:
            n = int(pc.sum(w).as_py() or 0)
            return t.slice(0, 0) if n <= 0 else t.filter(pc.equal(t.column(1), 1)).slice(0, 1).take([0] * n)
        g = tw.group_by(cols, use_threads=False).aggregate([("__w", "sum"), ("__ts", "max")])
        counts = g.column("__w_sum").to_numpy()
        idx = np.repeat(np.arange(g.num_rows), np.maximum(counts, 0))
        g = g.take(pa.array(idx))
        return pa.table(
            [g.column("__ts_max"), pa.array(np.ones(len(idx), np.int8)), *[g.column(c) for c in cols]],
            names=t.column_names,
        )

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
