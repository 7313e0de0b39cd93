"""The embedded engine's query registry: its sources, the operator DAG the planner built for the
registered queries (shared subplans: seed §3.2), and the queries themselves — adding a query
(also while running: from the first instant not yet released), removing one with the operators
that served only it, and stopping the queries of an operator that failed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from sluice.backends.embedded.query import Query
from sluice.catalog import Kind, SourceDef
from sluice.errors import SluiceError
from sluice.plan import BoundQuery
from sluice.plan.rules import rewrite
from sluice.runtime.admission import first_instant
from sluice.runtime.batch import NEG_INF
from sluice.runtime.operators.base import ExecContext, Operator, OperatorFailure
from sluice.runtime.operators.shared_join_spec import SharedJoinOptions
from sluice.runtime.operators.sources import Source
from sluice.runtime.operators.streams import Output, OutputSpec
from sluice.runtime.planner import Planner, rules_for
from sluice.runtime.queue import Queue


class UnknownNameError(SluiceError):
    """Data was pushed to, or a heartbeat given for, a name that is not a registered stream/relation."""


class QueryRegistry:
    """Sources, operators (in creation order: a topological order) and queries, kept consistent."""

    def __init__(
        self,
        ctx: ExecContext,
        slack: int,
        sharing: bool,
        shared_join: SharedJoinOptions | None = None,
        join_intermediates: str = "auto",
    ) -> None:
        self.ctx = ctx
        self.slack = slack
        self.pushing_from: int | None = None  # the earliest element (ticks) of a push admitted in slices
        self.sources: dict[str, Source] = {}
        self.planner = Planner(
            self.sources, ctx, sharing=sharing, shared_join=shared_join, intermediates=join_intermediates
        )
        self.queries: dict[str, Query] = {}
        self.failures: dict[str, str] = {}  # query name → why it stopped
        self.inactive: dict[str, Query] = {}  # deactivated queries (STREAM §2.4): not maintained
        self.operators: list[Operator] = []  # every operator but the sources, outputs included
        self.version = 0  # changes whenever the DAG does (the scheduler rebuilds its units then)
        self._epoch: int | None = None  # first instant of the queries planned last while running
        self._epoch_first = 0  # the planner's first operator of that epoch
        self.on_remove: list[Callable[[str], None]] = []  # told the name of every query removed

    # -- sources -------------------------------------------------------------------------
    def add_source(self, d: SourceDef, scale: int) -> None:
        src = Source(d.name, d.schema, self.ctx, self.slack, d.kind is Kind.RELATION, d.constraints)
        src.admission.scale = scale
        for c in d.constraints:
            if c.kind == "REFERENCES":  # (the catalog checked it names a stream registered before)
                src.reference(self.source(c.ref), c.column, d.schema.index(c.column), c.ref_column, c.k * scale)
        self.sources[d.name.lower()] = src

    def source(self, name: str) -> Source:
        src = self.sources.get(name.lower())
        if src is None:
            known = ", ".join(sorted(s.name for s in self.sources.values())) or "none"
            raise UnknownNameError(f"no stream or relation named {name!r} (registered: {known})")
        return src

    def others_complete(self) -> int:
        """How far the sources that are not static have completed (a static relation's clock)."""
        return max((s.admission.complete_upto() for s in self.sources.values() if not s.static), default=NEG_INF)

    def running(self) -> bool:
        """Whether any source has released anything (input or progress) into the plans."""
        return any(s._wm_out > NEG_INF or s.output.enqueued for s in self.sources.values())

    # -- queries -------------------------------------------------------------------------
    def start(self, bq: BoundQuery, name: str | None, retain: int | None = None, handle: Query | None = None) -> Query:
        """Plan a bound query (rewritten first: ``sluice.plan.rules``) and start it (``handle``:
        an inactive query's, activated again — it keeps its output so far).
        """
        name = handle.name if handle is not None else name or f"q{len(self.queries) + len(self.inactive) + 1}"
        if name in self.queries or (name in self.inactive and handle is None):
            raise SluiceError(f"a query named {name!r} is already registered")
        q = handle if handle is not None else Query(name, bq, retain=retain)
        q._close = self.unregister
        released = max((s._wm_out for s in self.sources.values()), default=NEG_INF)
        if self.ctx.start is not None and self.running():
            # Registered while running: the query starts at the first instant not yet released
            # (STREAM §3 assumes queries exist before their streams produce; here from that instant).
            since = max(self.ctx.start, released + 1)
            # a new epoch also when an operator of this one already sent output: a query sharing it
            # now would read its queue from the end, missing what the earlier queries took (a
            # relation's changes a Since primed them with, say)
            used = any(op.output.enqueued for op in self.planner.operators[self._epoch_first :])
            if since != self._epoch or used:
                # (the engine's seed, clock and streams' punctuations: only the start is the epoch's)
                self.planner.begin_epoch(dataclasses.replace(self.ctx, start=since), since)
                self._epoch = since
                self._epoch_first = len(self.planner.operators)
            q.start = since
        n_before = len(self.planner.operators)
        rw = rewrite(bq.plan, rules_for(self.planner.sharing))
        q.rewrites = rw.applied
        top = self.planner.build(rw.plan, name)
        out = Output(
            OutputSpec(bq.schema, bq.kind is Kind.STREAM, top.pure),
            name=f"output:{name}",
            readers=[top.output.reader()],
            output=Queue(f"q:output:{name}", bq.schema.types),
            ctx=self.planner.ctx,
            deliver=q._deliver,
        )
        out.queries.add(name)
        q.output = out
        self.operators.extend(self.planner.operators[n_before:])
        self.operators.append(out)
        self.queries[name] = q
        self.version += 1
        return q

    def unregister(self, name: str) -> None:
        """Remove a query, also while running: its output stops, and every operator that served
        only it is removed (shared operators keep serving the other queries).
        """
        if self.inactive.pop(name, None) is not None:
            return
        q = self.queries.pop(name, None)
        if q is None:
            raise UnknownNameError(f"no query named {name!r} (registered: {', '.join(self.queries) or 'none'})")
        q._close = None
        gone: set[int] = set()
        for op in reversed(self.operators):  # consumers before producers
            if op is q.output or (name in op.queries and op.queries == {name}):
                gone.add(id(op))
                for r in op.readers:
                    r.queue.detach(r)
            elif name in op.queries:
                op.forget_query(name)  # a shared operator: what served only this query stops
            op.queries.discard(name)
        for s in self.sources.values():
            s.queries.discard(name)
        self.operators = [u for u in self.operators if id(u) not in gone]
        self.planner.forget(gone)
        self.version += 1
        for fn in self.on_remove:
            fn(name)

    def deactivate(self, name: str) -> None:
        """Stop maintaining a query (STREAM §2.4): its operators not shared are removed as on
        ``unregister``; its handle and output so far stay, under the same name.
        """
        q = self.queries.get(name)
        if q is None:
            if name in self.inactive:
                return
            raise UnknownNameError(f"no query named {name!r} (registered: {', '.join(self.queries) or 'none'})")
        self.unregister(name)
        q.active = False
        q._close = self.unregister  # closing an inactive query forgets it
        self.inactive[name] = q

    def activate(self, name: str) -> Query:
        """Maintain an inactive query again, from the first instant not yet released (as a query
        registered now): its answer resumes there, its windows filling from then on.
        """
        q = self.inactive.pop(name, None)
        if q is None:
            if name in self.queries:
                return self.queries[name]
            raise UnknownNameError(f"no inactive query named {name!r} (inactive: {', '.join(self.inactive) or 'none'})")
        q.active = True
        try:
            return self.start(q.bound, name, q.retain, handle=q)
        except BaseException:
            q.active = False
            self.inactive[name] = q
            raise

    def fail(self, failure: OperatorFailure) -> None:
        """An operator raised: every query it serves stops (its output so far stays readable,
        ``Query.error`` says why); the engine and the other queries go on.
        """
        for name in sorted(failure.op.queries):
            if name in self.queries:
                self.stop(name, str(failure))

    def stop(self, name: str, why: str) -> None:
        """Stop a query for a reason (it failed): it is unregistered, its output kept."""
        self.queries[name].error = why
        self.failures[name] = why
        self.unregister(name)

    # -- the DAG -------------------------------------------------------------------------
    def all_operators(self) -> list[Operator]:
        """Sources first, then every other operator in creation order."""
        return [*self.sources.values(), *self.operators]

    def outputs(self) -> list[Operator]:
        return [u for u in self.operators if u.kind == "Output"]

    def queues(self) -> list[Queue]:
        return [q for u in self.all_operators() for q in u.outputs]

    def producer(self, queue: Queue) -> Operator:
        for u in self.all_operators():
            if queue in u.outputs:
                return u
        raise KeyError(queue.name)

    def fix_start(self) -> None:
        """The first instant, if not given, fixed lazily (``admission.first_instant``, design 004):
        once an element can be released, at the earliest element waiting on any source, so none
        pushed so far is before it.  Until then nothing is released.
        """
        if self.ctx.start is None:
            srcs = self.sources.values()
            waiting = [(lo, s.complete_upto(False)) for s in srcs if (lo := s.pending_from()) is not None]
            if self.pushing_from is not None and waiting:  # (the rest of a push in slices: waiting too)
                waiting.append((self.pushing_from, NEG_INF))
            self.ctx.start = first_instant(waiting, (s.complete_upto(False) for s in srcs))
