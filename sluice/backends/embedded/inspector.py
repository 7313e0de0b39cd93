"""What the embedded engine tells about itself: statistics, rejected input, EXPLAIN of the
operator DAG (operators, queues, synopses, what is shared).  It reads, never changes.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from sluice.approx.manager import ResourceManager
from sluice.approx.qos import QoS
from sluice.backends.embedded.loop import SchedulerLoop
from sluice.backends.embedded.query import EngineStats, Query
from sluice.backends.embedded.registry import QueryRegistry
from sluice.runtime.operators.base import Operator
from sluice.runtime.stats import QueueStats


class Inspector:
    def __init__(
        self,
        registry: QueryRegistry,
        loop: SchedulerLoop,
        limits: ResourceManager | None = None,
        qos: QoS | None = None,
    ) -> None:
        self.registry = registry
        self.loop = loop
        self.limits = limits
        self.qos = qos

    def statistics(self) -> EngineStats:
        reg = self.registry
        ops = reg.all_operators()
        qs = reg.queues()
        return EngineStats(
            queue_bytes=sum(q.nbytes for q in qs),
            synopsis_bytes=sum(o.state_bytes() for o in ops),
            peak_queue_bytes=sum(q.peak_nbytes for q in qs),
            sources=tuple(s.source_statistics() for s in reg.sources.values()),
            operators=tuple(o.statistics() for o in ops),
            queues=tuple(
                QueueStats(q.name, q.length, q.nbytes, q.peak_nbytes, q.enqueued, q.readers, q.watermark) for q in qs
            ),
            scheduler=self.loop.strategy.name,
            steps=self.loop.steps,
            synopses=tuple((o.name, syn.statistics()) for o in ops for syn in o.synopses()),
            first_instant=reg.ctx.start,
            **self._limits(),
        )

    def _limits(self) -> dict[str, Any]:
        m, qos = self.limits, self.qos
        out: dict[str, Any] = {}
        if qos is not None:
            out["latency"] = tuple((n, replace(s)) for n, s in qos.queries.items())
            out["approx_events"] = tuple(qos.events)
        if m is None:
            return out
        return out | {
            "memory_limit": m.limit,
            "peak_memory": m.peak,
            "peak_memory_in_runs": m.peak_in_runs,
            "shedding": tuple(replace(s) for s in m.streams.values()),
            "approximations": tuple((n, m.approximation(n)) for n in self.registry.queries if n in m.readers),
            "approx_events": tuple(sorted([*m.events, *out.get("approx_events", ())], key=lambda e: e.seq)),
        }

    def rejected(self) -> list[str]:
        reg = self.registry
        return [m for s in reg.sources.values() for m in s.messages] + [
            m for u in reg.operators for m in u.reject_messages
        ]

    def explain(self, queries: list[Query]) -> str:
        lines: list[str] = []
        for q in queries:
            lines.append(f"query {q.name}: {' '.join(q.bound.text.split())}  -> {q.kind.value}")
            if not q.active:
                lines.append(f"inactive since instant {q.inactive_since}: not maintained (STREAM §2.4)")
                continue
            if q.rewrites:
                lines.append(f"rewritten by: {', '.join(q.rewrites)}")
            if self.limits is not None:
                lines.append(f"approximation: {q.approximation.describe()} ({q.limits.describe()})")
            if q.limits.max_latency is not None:
                lines.append(q.latency.describe())
            assert q.output is not None
            self._explain_op(q.output, "", "", lines, q.name)
        return "\n".join(lines)

    def _explain_op(self, op: Operator, prefix: str, child_prefix: str, lines: list[str], qname: str) -> None:
        shared = sorted(op.queries - {qname})
        bits = [op.explain_line()]
        if shared:
            bits.append(f"shared with {', '.join(shared)}")
        lines.append(prefix + " ".join(bits))
        ins = [self.registry.producer(q) for q in op.inputs()]
        for i, c in enumerate(ins):
            last = i == len(ins) - 1
            self._explain_op(
                c, child_prefix + ("└─ " if last else "├─ "), child_prefix + ("   " if last else "│  "), lines, qname
            )
