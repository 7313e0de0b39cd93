"""Introspection in CQL (STREAM §6.1): the engine's statistics as system streams in the catalog,
queried with ordinary CQL like any stream —
``Select queue, Max(held) From SysQueues [Range 1 Minute] Group By queue``.

* ``SysQueues(queue, held, bytes)``: each queue's elements held and their bytes;
* ``SysOperators(operator, kind, tuples_in, tuples_out, cost, selectivity)``: each operator's
  counts so far, seconds per input tuple and output/input ratio;
* ``SysSynopses(operator, synopsis, kind, tuples, bytes, budget)``: each synopsis's size and
  memory limit (NULL: none; set through the control tables);
* ``SysQueries(query, latency, max_latency, fn, shed, delivered)``: each query's mean and worst
  output latency (seconds), estimated false-negative rate (0 exact; NULL when the precision
  model does not cover the query), its streams' elements dropped to hold the memory limit, and its
  output elements so far.

A sample is taken each time the engine's time advances (by at least ``every`` ticks: one second
of them by default in ``sluice serve``, ``--sample-every``) — the latest instant complete on any
user stream or relation — and stamped with that instant, so windows over system streams count
the same time as the data's; only while some query reads a system stream (no reader: nobody
could see the sample, and taking one costs a pass over every operator).  The system streams are
the server's own: registered at start (never stored: a restart registers them again), heartbeated
with each sample, and refused as targets of pushes.  Embedded engine only (the Spark backend keeps
its state in Spark's state store).

>>> from sluice.backends.embedded import EmbeddedEngine
>>> from sluice.server.session import ServerSession
>>> s = ServerSession(EmbeddedEngine()); _ = SystemStreams(s)
>>> _ = s.execute("register stream S (A integer); register query m as "
...               "select queue, Max(held) from SysQueues [Range 10] where queue = 'S' group by queue")
>>> _ = s.push("S", "jsonl", b'{"ts": 1, "A": 1}', heartbeat=1)
>>> s.results("m")["elements"]
[{'ts': 1, 'sign': '+', 'row': {'queue': 'S', 'max': 0}}]
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from sluice.backends.rows import rows_to_batch
from sluice.errors import InternalError
from sluice.runtime.batch import NEG_INF
from sluice.server.journal import Record

if TYPE_CHECKING:
    from sluice.server.session import ServerSession

NAME = "varchar(256)"

SYSTEM_STREAMS: dict[str, list[tuple[str, str]]] = {
    "SysQueues": [("queue", NAME), ("held", "integer"), ("bytes", "integer")],
    "SysOperators": [
        ("operator", NAME),
        ("kind", NAME),
        ("tuples_in", "integer"),
        ("tuples_out", "integer"),
        ("cost", "float"),
        ("selectivity", "float"),
    ],
    "SysSynopses": [
        ("operator", NAME),
        ("synopsis", "integer"),
        ("kind", NAME),
        ("tuples", "integer"),
        ("bytes", "integer"),
        ("budget", "integer"),
    ],
    "SysQueries": [
        ("query", NAME),
        ("latency", "float"),
        ("max_latency", "float"),
        ("fn", "float"),
        ("shed", "integer"),
        ("delivered", "integer"),
    ],
}


class SystemStreams:
    """Registers the system streams in ``session``'s engine and samples the engine into them."""

    def __init__(self, session: ServerSession, every: int = 1) -> None:
        self.session = session
        self.every = max(1, every)  # ticks between samples
        eng: Any = session.engine
        self.engine = eng
        self.last = NEG_INF  # the instant of the last sample
        self.names = {n.lower() for n in SYSTEM_STREAMS}
        with session.lock:
            for name, cols in SYSTEM_STREAMS.items():
                if name.lower() in eng.sources:  # an engine from a checkpoint has them
                    self.last = max(self.last, eng.sources[name.lower()].complete_upto())
                else:
                    eng.register_stream(name, cols)
        session.system = self.names
        session.after_run.append(self.sample)

    def now(self) -> int:
        """The latest instant complete on a user stream or relation."""
        done = [s.complete_upto() for n, s in self.engine.sources.items() if n not in self.names]
        return max(done, default=NEG_INF)

    def rows(self, ts: int) -> dict[str, list[tuple[Any, ...]]]:
        """One sample of every system stream, stamped ``ts``."""
        eng = self.engine
        reg = eng.registry
        st = eng.statistics()
        out: dict[str, list[tuple[Any, ...]]] = {n: [] for n in SYSTEM_STREAMS}
        out["SysQueues"] = [(ts, q.name, q.length, q.nbytes) for q in st.queues]
        out["SysOperators"] = [
            (ts, o.name, o.kind, o.tuples_in, o.tuples_out, o.seconds_per_tuple, o.selectivity) for o in st.operators
        ]
        for op in reg.all_operators():
            for i, syn in enumerate(op.synopses()):
                s = syn.statistics()
                out["SysSynopses"].append((ts, op.name, i, s.kind, s.tuples, s.nbytes, s.budget))
        for name, q in reg.queries.items():
            lat = q.latency
            appr = q.approximation
            fn = None if appr.precision is None else appr.precision.fn
            mean = lat.mean if lat.count else None
            out["SysQueries"].append((ts, name, mean, lat.max if lat.count else None, fn, appr.dropped, q.delivered))
        return out

    def read(self) -> bool:
        """Whether a query reads a system stream now (no reader: a sample could not be seen)."""
        return any(self.engine.sources[n].output.readers for n in self.names)

    def sample(self) -> None:
        """After the engine ran: a sample at the new instant if time advanced by ``every`` ticks
        and a query reads a system stream (called under the lock).  With ``--state`` the sample
        is journaled before it enters the engine, as a push is: a restart replays the same
        samples (their costs and latencies were measured once) — its queries over system streams
        go on as if the server had not stopped.
        """
        if self.engine.ctx.start is None:
            # no sample before the first instant is fixed: pushed, it could fix it — from the
            # server's own clock, not the data's (design 004, "The first instant")
            return
        ts = self.now()
        # (after a restart, the journal's replay may have completed later samples than the checkpoint's)
        last = max(self.last, *(self.engine.sources[n].complete_upto() for n in self.names))
        if ts < last + self.every or not self.read():
            return
        self.last = ts
        records = []
        for name, rows in self.rows(ts).items():
            d = self.engine.catalog.lookup(name)
            batch, errors = rows_to_batch([tuple(_finite(v) for v in r) for r in rows], d.schema, False, d.name)
            if errors:
                raise InternalError(f"a sample of {name} does not fit its schema: {errors[:3]}")
            if batch.num_rows:
                records.append(Record("push", d.name, batch))
            records.append(Record("heartbeat", d.name, heartbeat=ts))
        if self.session.journal is not None:
            self.session.journal.append(records)
        for r in records:
            r.apply(self.engine)
        self.engine.run()  # the queries over system streams see the sample now


def _finite(v: Any) -> Any:
    return None if isinstance(v, float) and not math.isfinite(v) else v
