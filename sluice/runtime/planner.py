"""Physical planning: logical plan → a DAG of operators joined by shared queues.

Sharing (seed §3.2) is exact common-subexpression elimination: logical nodes are frozen
records with structural equality, so a second query whose subplan *equals* an existing one
reuses that operator and reads its output queue through a cursor of its own.  ``sharing=False``
builds private operators for every query (sources are always shared: they are where data enters).

Plans arrive rewritten (``sluice.plan.rules``: selections pushed into join inputs and below time
windows).  Fusion: a Filter over a Join becomes one join operator whose equality conjuncts are
hash keys.

Each operator is built in one step from a frozen spec of its kind (``Planner._new``): the
planner decides the spec, the constructor derives everything else.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from sluice.catalog import Kind
from sluice.cql.ast import StreamConstraint
from sluice.datatypes import arrow_type
from sluice.errors import InternalError
from sluice.plan import logical as L
from sluice.plan import rules
from sluice.plan.analysis import (
    conjoin,
    conjuncts,
    equi_key,
    has_outer_ref,
    has_subquery,
    reads_row_alone,
    stream_order,
    uses_current_time,
)
from sluice.plan.dataflow import Intermediate, keep_intermediate
from sluice.plan.expr import BExpr, Call, ColRef, walk_expr
from sluice.plan.rules import Rule, rules_sparing
from sluice.runtime.join_tree import join_tree, labels, leaf_key, left_spine
from sluice.runtime.operators.aggregate import Aggregate, AggregateSpec, Distinct, DistinctSpec, GroupGuard
from sluice.runtime.operators.base import ExecContext, Operator, OperatorSpec, PortHandle
from sluice.runtime.operators.dataflow_join import DataflowJoin, DataflowJoinSpec
from sluice.runtime.operators.join import Join, JoinSpec, KeyGuard
from sluice.runtime.operators.join_buffer import Family, family
from sluice.runtime.operators.relational import SetOp, SetOpSpec
from sluice.runtime.operators.shared_join import SharedWindowJoin
from sluice.runtime.operators.shared_join_spec import (
    PortDef,
    SharedJoinOptions,
    SharedWindowJoinSpec,
    SideView,
    variant_for,
)
from sluice.runtime.operators.shared_window import SharedWindow, SharedWindowSpec
from sluice.runtime.operators.sources import Since, SinceSpec, Source
from sluice.runtime.operators.stateless import Project, ProjectSpec, Sample, SampleSpec, Select, SelectSpec
from sluice.runtime.operators.streams import IDstream, IDstreamSpec, Rstream, RstreamSpec
from sluice.runtime.operators.windows import WINDOW_OPERATORS, RowsWindow, TimeWindow, WindowSpec
from sluice.runtime.queue import Queue, Reader
from sluice.runtime.vexpr import UnsupportedError

SpecT = TypeVar("SpecT", bound=OperatorSpec)
OpT = TypeVar("OpT", bound=Operator)


class Planner:
    def __init__(
        self,
        sources: dict[str, Source],
        ctx: ExecContext,
        sharing: bool = True,
        shared_join: SharedJoinOptions | None = None,
        intermediates: str = "auto",
    ) -> None:
        self.sources = sources
        # a join of three or more inputs: "keep" its intermediate results (a tree of binary joins),
        # "drop" them (one dataflow join, Getta & Vossough §2.3), or "auto": decided by eq. 1–2
        self.intermediates = intermediates
        self.ctx = ctx
        self.sharing = sharing
        self.shared_join = shared_join  # None: each query's window join is its own
        # shared window joins by signature (inputs, keys, residual, window family, options): kept
        # across epochs, so a query registered while running joins a running one (Hammad §4)
        self._shared: dict[Any, SharedWindowJoin] = {}
        self._shared_windows: dict[Any, SharedWindow] = {}  # by (input, window family), likewise
        self.since: int | None = None  # the first instant of queries planned now, if the engine runs
        self.operators: list[Operator] = []  # in creation order = a topological order
        self._memo: dict[Any, Operator] = {}
        self._count = 0
        self._producers: dict[int, Operator] = {}  # id(queue) → the operator writing it
        self._query = ""
        self._dispatch: dict[type, Callable[[Any], Operator]] = {
            L.Scan: self._scan,
            L.Window: self._window,
            L.Sample: self._sample,
            L.Filter: self._filter,
            L.Project: self._project,
            L.Join: self._bare_join,
            L.Aggregate: self._aggregate,
            L.Distinct: self._distinct,
            L.SetOp: self._set_op,
            L.StreamOp: self._stream_op,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Unpickled (a checkpoint restored): queues are new objects, so the producers are keyed
        by their new ids (stale keys made a query sharing a restored operator fail to plan).
        """
        self.__dict__.update(state)
        self._producers = {id(q): op for op in self._producers.values() for q in op.outputs}

    def _bare_join(self, n: L.Join) -> Operator:
        return self._join(n, [])

    def build(self, plan: L.LogicalNode, query: str) -> Operator:
        self._query = query
        self._ordered = _order_sensitive_streams(plan)
        return self._op(plan)

    def _op(self, node: L.LogicalNode, insertions: bool = False) -> Operator:
        """``node``'s operator (shared when an equal subplan has one); ``insertions``: built to
        emit only its insertions (``_stream_op``), a different operator from the relation's.
        """
        key: Any = node if self.sharing else (self._query, id(node))
        if isinstance(node, L.StreamOp):  # a canonical-order Istream is a different operator
            key = (key, node in self._ordered)
        if insertions:
            key = (key, "insertions")
        memo = self._memo
        if key in memo:
            op = memo[key]
            self._claim(op)
            return op
        fn = self._dispatch.get(type(node))
        if fn is None:
            raise InternalError(f"no physical operator for {type(node).__name__}")
        op = self._insertions_of(node) if insertions else fn(node)
        if not isinstance(op, Source):  # built now: its capabilities, from its kind and its inputs'
            op.declare([self._producer(r.queue) for r in op.readers])
            for q in op.outputs:
                self._producers[id(q)] = op
            memo[key] = op
        op.queries.add(self._query)
        return op

    def _claim(self, op: Operator) -> None:
        """The query being planned reuses ``op``'s subplan: every operator in it serves the query
        (so removing another query that shares it removes none of them).
        """
        todo = [op]
        while todo:
            o = todo.pop()
            if isinstance(o, PortHandle):  # the port's owner serves the query too (its own record decides)
                o.queries.add(self._query)
                if o.owner.serves(o.port, self._query):
                    continue
                o.owner.add_query(o.port, self._query)
                o = o.owner
            elif self._query in o.queries:
                continue
            o.queries.add(self._query)
            todo += [self._producer(r.queue) for r in o.readers]

    def _producer(self, q: Queue) -> Operator:
        op = self._producers.get(id(q))
        if op is None:
            op = next((s for s in self.sources.values() if q in s.outputs), None)
        if op is None:
            raise InternalError(f"no operator writes {q.name}")
        return op

    def _new(
        self,
        kind: Callable[[SpecT, str, list[Reader], Queue, ExecContext], OpT],
        spec: SpecT,
        inputs: Sequence[Operator],
        at_end: bool = False,
    ) -> OpT:
        """An operator of ``kind`` built from ``spec`` (mypy checks they match), reading ``inputs``."""
        self._count += 1
        name = f"{kind.__name__.lower()}#{self._count}"
        readers = [i.output.reader(at_end) for i in inputs]
        op = kind(spec, name, readers, Queue(f"q:{name}", spec.schema.types), self.ctx)
        self.operators.append(op)
        return op

    # -- nodes ---------------------------------------------------------------------------
    def _scan(self, n: L.Scan) -> Operator:
        src = self.sources.get(n.name.lower())
        if src is None:
            raise InternalError(f"no source for {n.name}")
        if self.since is None:
            return src
        # only what the source releases from now on
        prime = src.contents() if src.relation else ()
        spec = SinceSpec(n.schema, self.since, src.relation, prime, detail=f"from instant {self.since}")
        return self._new(Since, spec, [src], at_end=True)

    def begin_epoch(self, ctx: ExecContext, since: int) -> None:
        """Queries planned from now on start at instant ``since``: their operators share state with
        no operator built before (it holds older input), only with each other.
        """
        self.ctx, self.since = ctx, since
        self._memo = {}

    def forget(self, ops: set[int]) -> None:
        """Drop removed operators (by id) from the sharing memo and the operator list (and the
        ports of shared joins that serve no query any more).
        """
        self._shared = {k: v for k, v in self._shared.items() if id(v) not in ops}
        self._shared_windows = {k: v for k, v in self._shared_windows.items() if id(v) not in ops}

        def gone(v: Operator) -> bool:
            if isinstance(v, PortHandle):
                return id(v.owner) in ops or not v.owner.port_active(v.port)
            return id(v) in ops

        self._memo = {k: v for k, v in self._memo.items() if not gone(v)}
        self._producers = {k: v for k, v in self._producers.items() if id(v) not in ops}
        self.operators = [o for o in self.operators if id(o) not in ops]

    def _window(self, n: L.Window) -> Operator:
        fam = family(n.spec)
        if self.sharing and fam is not None:
            return self._shared_window(n, fam)
        child = self._op(n.input)
        cls = WINDOW_OPERATORS.get(type(n.spec))
        if cls is None:
            raise InternalError(f"no operator runs the window [{n.spec.describe()}] ({type(n.spec).__qualname__})")
        return self._new(cls, WindowSpec(n.schema, n.spec, detail=n.spec.describe(n.input.schema.names)), [child])

    def _shared_window(self, n: L.Window, fam: Family) -> PortHandle:
        """A port of the one window operator over this stream (STREAM §3.2's synopsis sharing:
        every size reads one buffer); kept across epochs like a shared join.
        """
        op, start = self._stream_input(n.input)
        key = (id(op), fam)
        sw = self._shared_windows.get(key)
        if sw is None:
            sw = self._new(SharedWindow, SharedWindowSpec(n.schema, fam), [op], at_end=self.since is not None)
            sw.declare([op])
            self._shared_windows[key] = sw
        sw.queries.add(self._query)
        return sw.add_port(n.spec, self.since, start, self._query)

    def _stream_input(self, base: L.LogicalNode) -> tuple[Operator, int]:
        """(the operator a shared operator reads for stream ``base``, the queue position a query
        planned now starts at): a source itself whatever the epoch (a late query starts at the
        queue's end, as ``Since`` would), any other stream's operator from this epoch.
        """
        src = self.sources.get(base.name.lower()) if isinstance(base, L.Scan) else None
        if src is not None and not src.relation:
            if self.since is None:
                return src, 0
            src.output.pin(src.output._end)  # (a port remembers it: ``Queue.drop_unread`` never cuts before it)
            return src, src.output._end
        return self._op(base), 0

    def _sample(self, n: L.Sample) -> Operator:
        child = self._op(n.input)
        detail = f"{n.fraction * 100:g}%" + (
            "" if n.least is None or n.most is None else f" of {n.least * 100:g}–{n.most * 100:g}%"
        )
        return self._new(Sample, SampleSpec(n.schema, n.fraction, n.salt, detail=detail), [child])

    def _filter(self, n: L.Filter) -> Operator:
        conj = conjuncts(n.predicate)
        # Conjuncts with subqueries, and (over a relation) conjuncts reading CURRENT_TIME, need a
        # row-at-a-time operator; the rest — join keys included — are planned underneath as usual.
        if any(has_subquery(c) for c in conj):
            base, special = self._split_filter(n, conj, has_subquery)
            return self._subquery_map(n, base, (special,), True)
        if n.input.kind is Kind.RELATION and any(uses_current_time(c) for c in conj):
            base, special = self._split_filter(n, conj, uses_current_time)
            return self._ticking(n, (special,), True, base)
        if isinstance(n.input, L.Join):
            return self._join(n.input, conj)
        child = self._op(n.input)
        return self._new(Select, SelectSpec(n.schema, n.predicate, detail=_render(n.predicate, n.input)), [child])

    def _split_filter(self, n: L.Filter, conj: list[BExpr], special: Callable[[BExpr], bool]) -> tuple[Operator, BExpr]:
        """(the operator for the ordinary conjuncts over the input, the AND of the special ones)."""
        plain = conjoin([c for c in conj if not special(c)])
        rest = conjoin([c for c in conj if special(c)])
        assert rest is not None
        return self._op(L.Filter(n.input, plain) if plain is not None else n.input), rest

    def _project(self, n: L.Project, insertions: bool = False) -> Operator:
        if any(has_subquery(c) for c in n.columns):
            return self._subquery_map(n, self._op(n.input), n.columns, False)
        if n.input.kind is Kind.RELATION and any(uses_current_time(c) for c in n.columns):
            return self._ticking(n, n.columns, False)
        child = self._op(n.input, insertions)
        from sluice.plan.expr import render

        detail = ", ".join(render(c, n.input.schema.names) for c in n.columns)
        return self._new(Project, ProjectSpec(n.schema, n.columns, detail=detail), [child])

    def _ticking(
        self, n: L.LogicalNode, exprs: tuple[BExpr, ...], is_filter: bool, child: Operator | None = None
    ) -> Operator:
        from sluice.plan.expr import render
        from sluice.runtime.operators.ticking import TickingMap, TickingMapSpec

        child = child or self._op(n.inputs()[0])
        names = n.inputs()[0].schema.names
        detail = ("filter " if is_filter else "") + ", ".join(render(e, names) for e in exprs) + "; every tick"
        return self._new(TickingMap, TickingMapSpec(n.schema, exprs, is_filter, detail=detail), [child])

    def _subquery_map(self, n: L.LogicalNode, child: Operator, exprs: tuple[BExpr, ...], is_filter: bool) -> Operator:
        from sluice.plan.expr import Subquery, render
        from sluice.runtime.operators.subquery import SubqueryMap, SubqueryMapSpec, SubquerySpec

        for e in exprs:
            _no_current_time(e)
        specs: list[SubquerySpec] = []
        inputs = [child]
        for sub in (x for e in exprs for x in walk_expr(e) if isinstance(x, Subquery)):
            chain, base = _split_correlated(sub.plan)
            keys: tuple[tuple[int, int], ...] = ()
            if chain and isinstance(chain[0], L.Filter):
                keys = tuple(k for k in (_corr_key(c) for c in conjuncts(chain[0].predicate)) if k is not None)
            inputs.append(self._op(base))  # (rewritten with the query: sluice.plan.rules)
            specs.append(SubquerySpec(sub, tuple(chain), keys, not keys and not has_outer_ref(sub.plan)))
        names = n.inputs()[0].schema.names
        detail = ("filter " if is_filter else "") + ", ".join(render(e, names) for e in exprs)
        return self._new(SubqueryMap, SubqueryMapSpec(n.schema, exprs, is_filter, tuple(specs), detail=detail), inputs)

    def _join(self, n: L.Join, conjuncts: list[BExpr]) -> Operator:
        """One join operator: equality conjuncts across the inputs are its hash keys, the rest a
        residual filter.  (Conjuncts reading one input were pushed into it by the rewrite rules,
        ``sluice.plan.rules``.)
        """
        flat = self._dataflow_join(n, conjuncts)
        if flat is not None:
            return flat
        lw = len(n.left.schema)
        keys: list[tuple[int, int]] = []
        here: list[BExpr] = []
        for c in conjuncts:
            key = equi_key(c, lw)
            if key is not None and key not in keys:
                keys.append(key)
            else:
                here.append(c)
        residual = conjoin(here)
        for c in here:
            _no_current_time(c)
        found = self._key_guards(n, keys)
        # (a join its inputs' k-constraints let forget rows is its own: the shared window join
        # keeps every row its largest window holds)
        if self.shared_join is not None and self.sharing and not found:
            port = self._shared_join(n, tuple(keys), residual)
            if port is not None:
                return port
        left, right = self._op(n.left), self._op(n.right)
        detail = ", ".join(f"{n.schema.names[a]} = {n.schema.names[lw + b]}" for a, b in keys) or "nested loop"
        if residual is not None:
            detail += f"; filter {_render(residual, n)}"
        for side, other in ((n.right, "left"), (n.left, "right")):
            static = self._static_source(side)
            if static is not None:
                detail += f"; {static} static: {other} input not kept (STREAM §2.2)"
        for said in dict.fromkeys(
            f"; {stream} {g.constraint.sql()}: {('right', 'left')[g.side]} rows whose key it closed not kept "
            "(STREAM §4.1)"
            for g, stream in found
        ):
            detail += said
        guards = tuple(g for g, _ in found)
        fifo = (self._fifo(left), self._fifo(right))
        spec = JoinSpec(
            n.schema, left.schema.types, right.schema.types, tuple(keys), residual, guards, fifo, detail=detail
        )
        return self._new(Join, spec, [left, right])

    def _dataflow_join(self, n: L.Join, conjuncts: list[BExpr]) -> Operator | None:
        """A tree of three or more joins as one dataflow join without intermediate synopses
        (Getta & Vossough §2.3; ``sluice.runtime.operators.dataflow_join``) when eq. 1–2 say
        they do not pay (``intermediates``); None: a tree of binary joins.  It declines where an
        input's join key adheres to a k-constraint (a binary join forgets rows by it).
        """
        if self.intermediates == "keep":
            return None
        leaves, stages = join_tree(n, conjuncts)
        if len(leaves) < 3:
            return None
        kept = self._kept_prefix(leaves) if self.intermediates == "auto" else 1
        whole = left_spine(n, kept) if kept > 1 else None
        if whole is not None:  # the first `kept` inputs' join is kept: one input of the dataflow join
            if len(leaves) - kept + 1 < 3:
                return None
            leaves, stages = join_tree(n, conjuncts, whole)
        owner = [(i, c) for i, leaf in enumerate(leaves) for c in range(len(leaf.schema))]
        keys: list[tuple[int, int, int, int]] = []
        rest: list[BExpr] = []
        for stage in stages:
            here = []
            for c in stage:
                pair = leaf_key(c, owner)
                if pair is not None and pair not in keys:
                    keys.append(pair)
                elif pair is None:
                    here.append(c)
            for c in here:
                _no_current_time(c)
            both = conjoin(here)
            if both is not None:
                rest.append(both)
        if any(self._adhering(leaves[a], ca) or self._adhering(leaves[b], cb) for a, ca, b, cb in keys):
            return None
        ops = [self._op(leaf) for leaf in leaves]
        names = n.schema.names
        at = [sum(len(x.schema) for x in leaves[:i]) for i in range(len(leaves))]
        label = labels(leaves)
        detail = (
            ", ".join(f"{label[a]}.{names[at[a] + ca]} = {label[b]}.{names[at[b] + cb]}" for a, ca, b, cb in keys)
            or "no keys"
        )
        if rest:
            detail += "; filter " + " then ".join(_render(c, n) for c in rest)
        detail += f"; {len(leaves)} inputs, no intermediate synopses (Getta & Vossough §2.3)"
        spec = DataflowJoinSpec(
            n.schema,
            tuple(o.schema.types for o in ops),
            tuple(keys),
            tuple(rest),
            tuple(self._fifo(o) for o in ops),
            detail=detail,
        )
        return self._new(DataflowJoin, spec, ops)

    def _kept_prefix(self, leaves: list[L.LogicalNode]) -> int:
        """How many of the first inputs to join into a kept intermediate result, by eq. 1–2
        (``sluice.plan.dataflow``): the result of inputs 0…k−1 is kept while input k arrives more
        often than they write into it — their rates summed, each item taken to make one result and
        to find one partner (no selectivities are known at registration), so static relations
        written before a stream keep their join (Getta & Vossough §3.1's extreme case).  Rates:
        what registration knows — a static relation changes never, any other input once per
        instant.  (Not the rates measured so far: a plan must not depend on when its query was
        registered — a snapshot restores into an engine that registered the same queries.)
        """
        rates = [self._rate(leaf) for leaf in leaves]
        kept = 1
        for k in range(2, len(leaves)):
            x = Intermediate((sum(rates[:k]), 0.0, rates[k]), f_rs=1.0, f_sr=0.0, f_ts=1.0)
            if not keep_intermediate(x):
                break
            kept = k
        return kept

    def _rate(self, node: L.LogicalNode) -> float:
        """0 if the input ``node`` reads (through selections and projections) is a
        static relation, which never changes; 1 otherwise.
        """
        return 0.0 if self._static_source(node) is not None else 1.0

    def _key_guards(self, n: L.Join, keys: list[tuple[int, int]]) -> list[tuple[KeyGuard, str]]:
        """The k-constraints (STREAM §4.1) an input's join keys adhere to, with their streams: the
        input inserts a stream's elements in its order (``stream_order``) and the stream declares
        one on the key — the same type on both sides, so the other side's keys compare as they are.
        """
        out: list[tuple[KeyGuard, str]] = []
        for side, node in ((0, n.left), (1, n.right)):
            for j, key in enumerate(keys):
                if arrow_type(n.left.schema.types[key[0]]) != arrow_type(n.right.schema.types[key[1]]):
                    continue  # (the other side's keys are compared with this side's values as they are)
                out += [(KeyGuard(side, j, c, stream), stream) for c, stream in self._adhering(node, key[side])]
        return out

    def _adhering(self, node: L.LogicalNode, col: int) -> list[tuple[StreamConstraint, str]]:
        """The k-constraints column ``col`` of what ``node`` inserts adheres to, with their
        stream (``stream_order``: ``CLUSTERED BY`` only where no element of a value is dropped).
        """
        found = stream_order(node, col)
        src = self.sources.get(found[0]) if found is not None else None
        if found is None or src is None:
            return []
        column, whole = src.schema.names[found[1]].lower(), found[2]
        return [
            (c, src.name) for c in src.constraints if c.column.lower() == column and (whole or c.kind != "CLUSTERED")
        ]

    def _static_source(self, node: L.LogicalNode) -> str | None:
        """The static relation ``node`` selects and projects, if it is one (``Source.static``):
        its rows enter once, so a join with it need not keep the other input (``Queue.ended``).
        """
        while isinstance(node, L.Filter | L.Project) and all(reads_row_alone(e) for e in node.exprs()):
            node = node.input  # (otherwise it is another operator — ticking, subquery — which never ends)
        src = self.sources.get(node.name.lower()) if isinstance(node, L.Scan) else None
        return src.name if src is not None and src.static else None

    def _shared_join(self, n: L.Join, keys: tuple[tuple[int, int], ...], residual: BExpr | None) -> PortHandle | None:
        """A port of the shared window join of every query joining these two streams on this
        predicate (Hammad et al. §2.2), or None if the join is not a window join it serves.
        Selections on one input are pulled up into the port (§2.1) — below a time-based window
        they commute with it; above any window they are a selection of the window's contents.
        """
        sides = [window_side(n.left), window_side(n.right)]
        if sides[0] is None or sides[1] is None:
            return None
        fam = (family(sides[0].window), family(sides[1].window))
        assert fam[0] is not None and fam[1] is not None and self.shared_join is not None
        ops: list[Operator] = []
        starts: list[int] = []
        views: list[SideView] = []
        for sd in sides:
            assert sd is not None
            base = sd.base
            stream, start = self._stream_input(base)
            ops.append(stream)
            starts.append(start)
            pred = conjoin(list(sd.filters))
            text = _render(pred, base) if pred is not None else ""
            views.append(SideView(sd.window, pred, text))
        options = self.shared_join
        key = (id(ops[0]), id(ops[1]), keys, residual, fam, options)
        sj = self._shared.get(key)
        if sj is None:
            lw = len(n.left.schema)
            detail = ", ".join(f"{n.schema.names[a]} = {n.schema.names[lw + b]}" for a, b in keys) or "no keys"
            if residual is not None:
                detail += f"; filter {_render(residual, n)}"
            spec = SharedWindowJoinSpec(
                n.schema,
                ops[0].schema.types,
                ops[1].schema.types,
                keys,
                residual,
                (fam[0], fam[1]),
                options,
                detail=f"{detail}; {options.policy.value}, {variant_for(keys, options).value}",
            )
            sj = self._new(SharedWindowJoin, spec, ops, at_end=self.since is not None)
            sj.declare(ops)
            self._shared[key] = sj
        sj.queries.add(self._query)
        return sj.add_port(PortDef(views[0], views[1], self.since), self._query, (starts[0], starts[1]))

    def _insertions_of(self, n: L.LogicalNode) -> Operator:
        """An ``_insertions_chain`` node, built to emit its insertions alone."""
        if isinstance(n, L.Aggregate):
            return self._aggregate(n, insertions=True)
        assert isinstance(n, L.Project)
        return self._project(n, insertions=True)

    def _aggregate(self, n: L.Aggregate, insertions: bool = False) -> Operator:
        child = self._op(n.input)
        for e in n.exprs():
            _no_current_time(e)
        from sluice.plan.expr import render

        names = n.input.schema.names
        detail = ", ".join(a.render(names) for a in n.aggs)
        if n.keys:
            detail = "by " + ", ".join(render(k, names) for k in n.keys) + ": " + detail
        fifo = self._fifo(child)
        if fifo:
            detail += "; input deletes in insertion order"
        if insertions:
            detail += "; insertions only (read by Istream)"
        guards: list[GroupGuard] = []
        for j, k in enumerate(n.keys):
            if isinstance(k, ColRef):
                for c, stream in self._adhering(n.input, k.index):
                    guards.append(GroupGuard(j, k.index, c, stream))
                    detail += f"; {stream} {c.sql()}: groups it closed forgotten (STREAM §4.1)"
        spec = AggregateSpec(n.schema, n.keys, n.aggs, fifo, insertions, tuple(guards), detail=detail)
        return self._new(Aggregate, spec, [child])

    def _fifo(self, op: Operator) -> bool:
        """Whether ``op``'s output deletes elements in the order it inserted them: a window over a
        stream (time-based windows: both an element's insert and delete time grow with its
        timestamp; ``[Rows N]``: the oldest goes), through selections and projections (which treat
        an element's insertion and deletion alike).
        """
        while isinstance(op, Select | Project):
            op = self._producer(op.readers[0].queue)
        if isinstance(op, PortHandle) and isinstance(op.owner, SharedWindow):
            return op.owner.fifo()
        if not isinstance(op, TimeWindow | RowsWindow):
            return False
        return self._producer(op.readers[0].queue).insert_only

    def _distinct(self, n: L.Distinct) -> Operator:
        child = self._op(n.input)
        return self._new(Distinct, DistinctSpec(n.schema), [child])

    def _set_op(self, n: L.SetOp) -> Operator:
        left, right = self._op(n.left), self._op(n.right)
        spec = SetOpSpec(n.schema, n.op, n.all, detail=f"{n.op}{' ALL' if n.all else ''}")
        return self._new(SetOp, spec, [left, right])

    def _stream_op(self, n: L.StreamOp) -> Operator:
        if n.op is L.StreamOpKind.RSTREAM:
            return self._new(Rstream, RstreamSpec(n.schema), [self._op(n.input)])
        # Over an insert-only input Istream is the identity — unless a [Rows N] / Partition By
        # window reads this stream: then each instant must come out in canonical order (the
        # definition of a derived stream), which needs the instant complete.
        child = self._op(n.input, insertions=n.op is L.StreamOpKind.ISTREAM and _insertions_chain(n.input))
        passthrough = n.op is L.StreamOpKind.ISTREAM and child.insert_only and n not in self._ordered
        pure = not passthrough and child.pure and n not in self._ordered
        detail = "insert-only input: pass-through" if passthrough else "pure input: no netting" if pure else ""
        return self._new(IDstream, IDstreamSpec(n.schema, n.op, passthrough, pure, detail=detail), [child])


def rules_for(sharing: bool) -> tuple[Rule, ...]:
    """The rewrite rules for a planner that shares (or not): with sharing, a window the shared
    operators serve by stream (``family``) keeps every column (``sluice.plan.pruning``).
    """
    return rules_sparing(lambda w: family(w) is not None) if sharing else rules.RULES


@dataclass(frozen=True, slots=True)
class WindowSide:
    base: L.LogicalNode  # the stream the shared join reads
    window: Any  # sluice.windows.WindowDef
    filters: tuple[BExpr, ...]  # the selections the query applies to it, as one port's mask


def window_side(node: L.LogicalNode) -> WindowSide | None:
    """``σ…(Window(σ…(stream)))`` as (stream, window, selections), when a shared join can serve it:
    a window it knows, selections without subqueries (above the window, where they select from a
    relation, without CURRENT_TIME either).  Selections below a time-based window move up with it
    (they commute); below ``[Rows N]`` they are part of the stream it counts.
    """
    above: list[BExpr] = []
    while isinstance(node, L.Filter):
        above.append(node.predicate)
        node = node.input
    if not isinstance(node, L.Window):
        return None
    fam = family(node.spec)
    if fam is None:
        return None
    if any(has_subquery(c) or uses_current_time(c) for c in above):
        return None
    below: list[BExpr] = []
    base = node.input
    if fam is Family.TIME:
        while isinstance(base, L.Filter):
            below.append(base.predicate)
            base = base.input
    if base.kind is not Kind.STREAM or any(has_subquery(c) for c in below):
        return None
    return WindowSide(base, node.spec, tuple(below + above))


def _insertions_chain(node: L.LogicalNode) -> bool:
    """Whether ``node`` is an aggregate under injective projections (each keeps every input column
    as it is), so that Istream of it is exactly its insertions: the aggregate's output is pure
    (an instant changes a group by one deletion and one insertion of different rows, and rows
    of different groups differ in their keys), and so is a projection that keeps every column.
    The aggregate then need not build the deletions at all (issue #11: half of the sliding
    count's output).  Nodes with subqueries, CURRENT_TIME or outer references are built by other
    operators and are left alone.
    """
    while isinstance(node, L.Project):
        if any(has_subquery(c) or uses_current_time(c) for c in node.columns) or has_outer_ref(node):
            return False
        kept = {c.index for c in node.columns if isinstance(c, ColRef)}
        if not kept >= set(range(len(node.input.schema))):
            return False
        node = node.input
    # (with GROUP BY: a keyless aggregate's one row per change is cheap as it is, and its first
    # instant's row would need the deletion this mode drops to know whether it merged)
    return isinstance(node, L.Aggregate) and bool(node.keys) and not has_outer_ref(node)


def _order_sensitive_streams(plan: L.LogicalNode) -> set[L.LogicalNode]:
    """StreamOp nodes whose output order within an instant a Rows / Partition By window reads."""
    out: set[L.LogicalNode] = set()
    for n in L.walk_plan(plan):
        if isinstance(n, L.Window) and n.spec.order_sensitive:
            m = n.input
            while isinstance(m, L.Filter | L.Sample | L.Project) and m.kind is Kind.STREAM:
                m = m.inputs()[0]
            if isinstance(m, L.StreamOp):
                out.add(m)
    return out


def _split_correlated(plan: L.LogicalNode) -> tuple[list[L.LogicalNode], L.LogicalNode]:
    """(Filter/Project/Aggregate/Distinct chain reading the outer row, lowest first; the
    uncorrelated input under it).
    """
    from sluice.plan.expr import OuterRef

    chain: list[L.LogicalNode] = []
    node = plan
    while has_outer_ref(node):
        if not isinstance(node, L.Filter | L.Project | L.Aggregate | L.Distinct):
            raise UnsupportedError(
                "the embedded engine runs a correlated subquery only when the outer columns are read above "
                f"its windows, joins and set operations, not under {type(node).__name__.lower()}; "
                "rewrite it as a join, or use the reference evaluator"
            )
        for e in node.exprs():
            for x in walk_expr(e):
                if has_subquery(x) or (isinstance(x, OuterRef) and x.depth != 1):
                    raise UnsupportedError(
                        "the embedded engine does not run subqueries nested inside subqueries yet; "
                        "use the reference evaluator"
                    )
        chain.append(node)
        node = node.inputs()[0]
    chain.reverse()
    return chain, node


def _corr_key(c: BExpr) -> tuple[int, int] | None:
    """(inner column, outer column) for a conjunct ``inner = outer`` of a correlated WHERE."""
    from sluice.plan.expr import OuterRef

    if isinstance(c, Call) and c.fn == "eq":
        a, b = c.args
        if isinstance(a, ColRef) and isinstance(b, OuterRef) and b.depth == 1:
            return a.index, b.index
        if isinstance(b, ColRef) and isinstance(a, OuterRef) and a.depth == 1:
            return b.index, a.index
    return None


def _no_current_time(e: BExpr) -> None:
    if uses_current_time(e):
        raise UnsupportedError(
            "the embedded engine runs CURRENT_TIME in a window's Where, a WHERE or a select list, but not "
            "in join conditions, grouping, aggregates or together with a subquery; use the reference evaluator"
        )


def _render(e: BExpr, node: L.LogicalNode) -> str:
    from sluice.plan.expr import render

    return render(e, node.schema.names)
