"""Binder: AST + catalog → typed logical plan, applying CQL's defaults (seed §2.2).

* A stream in FROM without a window gets ``[Range Unbounded]``.
* A query block that does not aggregate, whose FROM holds streams, none of them with an
  explicit window, is wrapped in ``Istream`` (the result is then a stream).  The seed
  states the rule for "a non-aggregation query whose outer From list contains streams";
  STREAM 0.6.0's own tests (test7, test8, test10) show that a query over an explicitly
  windowed stream yields a relation, so explicit windows opt out.  See
  ``docs/design/001-default-istream.md``.

>>> from sluice.catalog import Catalog
>>> cat = Catalog(); _ = cat.register_stream("S", [("A", "integer")])
>>> bq = bind_query(cat, "select A from S where A > 1")
>>> bq.kind.value, bq.schema.names
('stream', ('A',))
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

from sluice import windows as W
from sluice.catalog import Catalog, Kind, Schema, SourceDef, ViewDef
from sluice.catalog.schema import Column
from sluice.cql import ast
from sluice.cql.errors import BindError, CQLError, Span
from sluice.cql.parser import parse_query
from sluice.cql.printer import to_cql
from sluice.plan import functions as F
from sluice.plan import logical as L
from sluice.plan.bind_expr import AggContext, ExprBinder
from sluice.plan.expr import BExpr, ColRef
from sluice.plan.scope import Scope, ScopeColumn


@dataclass(frozen=True, slots=True)
class BoundQuery:
    """A bound continuous query: its plan, whether it yields a stream or relation, its schema."""

    plan: L.LogicalNode
    text: str

    @property
    def kind(self) -> Kind:
        return self.plan.kind

    @property
    def schema(self) -> Schema:
        return self.plan.schema


@dataclass(frozen=True, slots=True)
class _Bound:
    node: L.LogicalNode
    monotone: bool  # would CQL's default Istream apply to this block?


@dataclass(frozen=True, slots=True)
class _FromBinding:
    node: L.LogicalNode  # a relation
    qualifier: str | None
    from_stream: bool
    explicit_window: bool


def bind_query(catalog: Catalog, query: str | ast.Query, *, source: str | None = None) -> BoundQuery:
    """Parse (if needed) and bind a query against ``catalog``."""
    if isinstance(query, str):
        source = query
        query = parse_query(query)
    text = source if source is not None else to_cql(query)
    plan = Binder(catalog, text).bind_top(query)
    return BoundQuery(plan, text)


class Binder:
    def __init__(self, catalog: Catalog, source: str, context: str = "") -> None:
        self.catalog = catalog
        self.source = source
        self.context = context  # view name when binding a view body (for sample salts)
        self.exprs = ExprBinder(self)

    def error(self, msg: str, span: Span, hint: str | None = None, note: str | None = None) -> BindError:
        return BindError(msg, span, self.source, hint=hint, note=note)

    # -- query levels --------------------------------------------------------------------
    def bind_top(self, q: ast.Query) -> L.LogicalNode:
        """A whole query (or a view body, or a FROM subquery): CQL's default Istream applies."""
        b = self._query(q, None)
        if b.monotone and b.node.kind is Kind.RELATION:
            return L.StreamOp(L.StreamOpKind.ISTREAM, b.node, implicit=True)
        return b.node

    def bind_subquery_expr(self, q: ast.Query, outer: Scope) -> L.LogicalNode:
        """A subquery inside an expression (IN, EXISTS, ALL/ANY, scalar): always a relation."""
        b = self._query(q, outer)
        return _as_relation(b.node)

    def _query(self, q: ast.Query, outer: Scope | None) -> _Bound:
        if isinstance(q, ast.Select):
            return self._select(q, outer)
        if isinstance(q, ast.SetOp):
            return self._set_op(q, outer)
        if isinstance(q, ast.StreamOp):
            inner = self._query(q.query, outer)
            return _Bound(L.StreamOp(L.StreamOpKind(q.op), _as_relation(inner.node)), False)
        if isinstance(q, ast.TableQuery):
            node = self._named_input(q.name, q.span)
            return _Bound(node, False)
        raise self.error(f"unexpected {type(q).__name__}", getattr(q, "span", Span(0, 0, 1, 1)))

    def _set_op(self, q: ast.SetOp, outer: Scope | None) -> _Bound:
        left = self._branch(q.left, outer)
        right = self._branch(q.right, outer)
        ls, rs = left.node.schema, right.node.schema
        if len(ls) != len(rs):
            raise self.error(
                f"{q.op} needs the same number of columns on both sides, not {len(ls)} and {len(rs)}",
                q.span,
            )
        cols = []
        for i, (a, b) in enumerate(zip(ls.columns, rs.columns, strict=True)):
            t = F.unify(a.type, b.type)
            if t is None:
                raise self.error(
                    f"{q.op}: column {i + 1} is {a.type} on the left and {b.type} on the right",
                    q.span,
                )
            cols.append(Column(a.name, t))
        node = L.SetOp(L.SetOpKind(q.op), q.all, left.node, right.node, Schema(tuple(cols)))
        # Union and intersection of growing relations grow; a difference need not.
        monotone = left.monotone and right.monotone and q.op != "EXCEPT"
        return _Bound(node, monotone)

    def _branch(self, q: ast.Query, outer: Scope | None) -> _Bound:
        b = self._query(q, outer)
        if b.node.kind is Kind.STREAM:
            # A stream operand is read through the default unbounded window.
            return _Bound(_as_relation(b.node), True)
        return b

    # -- SELECT blocks -------------------------------------------------------------------
    def _select(self, q: ast.Select, outer: Scope | None) -> _Bound:
        if q.window is not None and q.window.amount < 0:
            raise self.error("WINDOW must not be negative", q.window.span)
        items = [self._from_item(f, q.window) for f in q.from_]
        seen: dict[str, ast.FromItem] = {}
        for fi, b in zip(q.from_, items, strict=True):
            if b.qualifier is None:
                continue
            key = b.qualifier.lower()
            if key in seen:
                raise self.error(
                    f"FROM names {b.qualifier!r} twice",
                    fi.span,
                    hint=f"give one of them an alias, e.g. {b.qualifier} AS {b.qualifier}2",
                )
            seen[key] = fi
        node = items[0].node
        for b in items[1:]:
            node = L.Join(node, b.node)
        scope_cols: list[ScopeColumn] = []
        for b in items:
            for c in b.node.schema.columns:
                scope_cols.append(ScopeColumn(b.qualifier, c.name, c.type, len(scope_cols)))
        scope = Scope(scope_cols, outer)

        if q.where is not None:
            node = L.Filter(node, self.exprs.predicate(q.where, scope, None, "WHERE"))

        aggregating = bool(q.group_by) or any(_has_aggregate(i.expr) for i in q.items) or (q.having is not None)
        if aggregating:
            node, out_exprs, names = self._aggregate(q, node, scope)
        else:
            out_exprs, names = self._select_list(q, scope, None)
        schema = Schema(tuple(Column(n, e.type) for n, e in zip(names, out_exprs, strict=True)))
        if not _is_identity(out_exprs, node.schema, names):
            node = L.Project(node, tuple(out_exprs), schema)
        if q.distinct:
            node = L.Distinct(node)
        if q.stream_op is not None:
            return _Bound(L.StreamOp(L.StreamOpKind(q.stream_op), node), False)
        stream_items = [b for b in items if b.from_stream]
        monotone = not aggregating and bool(stream_items) and not any(b.explicit_window for b in stream_items)
        return _Bound(node, monotone)

    def _select_list(self, q: ast.Select, scope: Scope, agg: AggContext | None) -> tuple[list[BExpr], list[str]]:
        exprs: list[BExpr] = []
        names: list[str] = []
        for item in q.items:
            if isinstance(item.expr, ast.Star):
                if agg is not None:
                    raise self.error("'*' cannot be used in an aggregate query", item.span)
                cols = scope.columns
                if item.expr.qualifier is not None:
                    cols = [c for c in cols if c.qualifier and c.qualifier.lower() == item.expr.qualifier.lower()]
                    if not cols:
                        raise self.error(f"unknown name {item.expr.qualifier!r} in {item.expr.qualifier}.*", item.span)
                for c in cols:
                    exprs.append(ColRef(c.index, c.type, c.name))
                    names.append(c.name)
                continue
            e = self.exprs.bind(item.expr, scope, agg, "the select list")
            exprs.append(e)
            names.append(item.alias or _default_name(item.expr, len(names)))
        return exprs, names

    def _aggregate(
        self, q: ast.Select, node: L.LogicalNode, scope: Scope
    ) -> tuple[L.LogicalNode, list[BExpr], list[str]]:
        keys = [self.exprs.bind(g, scope, None, "GROUP BY") for g in q.group_by]
        key_cols: list[ScopeColumn] = []
        for g, k in zip(q.group_by, keys, strict=True):
            if isinstance(g, ast.ColumnName) and isinstance(k, ColRef):
                src = scope.columns[k.index]
                key_cols.append(ScopeColumn(src.qualifier, src.name, k.type, len(key_cols)))
        ctx = AggContext(keys, post_scope=Scope(key_cols, scope.parent))
        out_exprs, names = self._select_list(q, scope, ctx)
        having = None
        if q.having is not None:
            having = self.exprs.predicate(q.having, scope, ctx, "HAVING")
        key_names = tuple(g.name if isinstance(g, ast.ColumnName) else f"key{i}" for i, g in enumerate(q.group_by))
        schema = Schema(
            tuple(Column(n, k.type) for n, k in zip(key_names, keys, strict=True))
            + tuple(Column(a.render(), a.type) for a in ctx.aggs)
        )
        out: L.LogicalNode = L.Aggregate(node, tuple(keys), tuple(ctx.aggs), schema)
        if having is not None:
            out = L.Filter(out, having)
        return out, out_exprs, names

    # -- FROM items ----------------------------------------------------------------------
    def _named_input(self, name: str, span: Span) -> L.LogicalNode:
        try:
            d = self.catalog.lookup(name)
        except KeyError:
            sug = self.catalog.suggest(name)
            hint = f"did you mean {sug!r}?" if sug else None
            known = ", ".join(sorted(self.catalog.names())) or "none registered"
            raise self.error(f"unknown stream, relation or view {name!r}", span, hint, note=f"known: {known}") from None
        if isinstance(d, SourceDef):
            return L.Scan(d.name, d.kind, d.schema)
        return self._view(d)

    def _view(self, v: ViewDef) -> L.LogicalNode:
        try:
            node = Binder(self.catalog, v.text, context=v.name).bind_top(v.query)
        except CQLError as e:  # the catalog changed under the view: say which view
            raise e.with_source(v.text) from None
        if node.schema.names != v.schema.names:
            cols = tuple(ColRef(i, c.type, c.name) for i, c in enumerate(node.schema.columns))
            node = L.Project(
                node,
                cols,
                Schema(tuple(Column(n, c.type) for n, c in zip(v.schema.names, node.schema.columns, strict=True))),
            )
        return node

    def _from_item(self, item: ast.FromItem, window_clause: ast.Duration | None) -> _FromBinding:
        if isinstance(item, ast.TableRef):
            node = self._named_input(item.name, item.span)
            qualifier: str | None = item.alias or item.name
            what = repr(item.name)
        else:
            assert isinstance(item, ast.SubqueryRef)
            node = Binder(self.catalog, self.source, self.context).bind_top(item.query)
            qualifier = item.alias
            what = "this subquery"
        assert isinstance(item, ast.TableRef | ast.SubqueryRef)
        if node.kind is Kind.RELATION:
            if item.window is not None:
                raise self.error(
                    f"a window applies to a stream, but {what} is a relation",
                    item.window.span,
                    hint="drop the window: a relation is used as it is at each instant",
                )
            if item.sample is not None:
                raise self.error(f"Sample applies to a stream, but {what} is a relation", item.sample.span)
            return _FromBinding(node, qualifier, False, False)
        if item.sample is not None:
            salt = zlib.crc32(f"{self.context}:{item.sample.span.start}".encode())
            s = item.sample
            most = s.percent / 100.0
            least = None if s.least is None else s.least / 100.0
            node = L.Sample(node, most, salt, least, None if least is None else most)
        if item.window is not None and window_clause is not None:
            raise self.error(
                f"{what} has its own window and the query has a WINDOW clause",
                item.window.span,
                hint="WINDOW applies to streams without a window; use one or the other",
            )
        spec: W.WindowDef = W.Unbounded()
        scale = 1  # ticks per unit of this input's own timestamps (a registered stream may count coarser)
        if isinstance(item, ast.TableRef):
            d = self.catalog.lookup(item.name)
            scale = self.catalog.scale(d) if isinstance(d, SourceDef) else 1
        if item.window is not None:
            w = item.window
            if w.where is not None:
                own = Scope([ScopeColumn(qualifier, c.name, c.type, i) for i, c in enumerate(node.schema.columns)])
                node = L.Filter(node, self.exprs.predicate(w.where, own, None, "a window's Where"))
            spec = w.bind(_WindowBinding(self, node.schema, qualifier, isinstance(item, ast.SubqueryRef), scale))
        elif window_clause is not None:
            spec = W.Range(self._ticks(window_clause, scale))
        explicit = item.window is not None or window_clause is not None
        return _FromBinding(L.Window(node, spec), qualifier, True, explicit)

    def _ticks(self, d: ast.Duration, own_scale: int = 1) -> int:
        """``d`` in ticks; a unitless ``d`` counts units of the stream's own time (``own_scale`` ticks each)."""
        if d.millis is None:
            return d.amount * own_scale
        t = self.catalog.ticks(d.millis)
        if t is None:
            unit = self.catalog.time_unit.name.lower()
            raise self.error(
                f"{d.sql()} is not a whole number of ticks (one tick is a {unit})",
                d.span,
                hint="use a multiple of the time unit, or a catalog with a finer time_unit",
            )
        return t


@dataclass(frozen=True, slots=True)
class _WindowBinding:
    """The binder as a window kind sees it (``sluice.windows.WindowBinding``): one stream's columns and time."""

    binder: Binder
    schema: Schema
    qualifier: str | None
    subquery: bool
    scale: int  # ticks per unit of the stream's own timestamps

    def ticks(self, d: ast.Duration) -> int:
        return self.binder._ticks(d, self.scale)

    def column(self, c: ast.ColumnName, clause: str) -> int:
        names = self.schema.names
        inner_name = self.subquery and sum(1 for n in names if n.lower() == c.name.lower()) == 1
        # NEXMark Q6 writes "(SELECT ... A.seller ...) [Partition By A.seller Rows 10] Q": over a
        # subquery, a key qualified by one of its inner tables names that output column.
        q = self.qualifier
        if c.qualifier is not None and not inner_name and (q is None or c.qualifier.lower() != q.lower()):
            raise self.error(
                f"{clause} refers to {c.qualifier!r}, not to this stream",
                c.span,
                hint=f"write {q}.{c.name}" if q else f"write {c.name}",
            )
        try:
            return self.schema.index(c.name)
        except KeyError:
            raise self.error(
                f"unknown column {c.sql()!r} in {clause}", c.span, hint="columns of this stream: " + ", ".join(names)
            ) from None

    def error(self, msg: str, span: Span, hint: str | None = None) -> BindError:
        return self.binder.error(msg, span, hint)


def _as_relation(node: L.LogicalNode) -> L.LogicalNode:
    return L.Window(node, W.Unbounded()) if node.kind is Kind.STREAM else node


def _has_aggregate(e: ast.Expr) -> bool:
    """Whether ``e`` calls an aggregate at this query level (not inside a subquery)."""
    if isinstance(e, ast.FuncCall) and e.name in F.AGGREGATES:
        return True
    if isinstance(e, ast.InSubquery | ast.Exists | ast.Quantified | ast.ScalarSubquery):
        return isinstance(e, ast.InSubquery | ast.Quantified) and _has_aggregate(e.operand)
    return any(_has_aggregate(c) for c in e.children() if isinstance(c, ast.Expr))


def _default_name(e: ast.Expr, i: int) -> str:
    if isinstance(e, ast.ColumnName):
        return e.name
    if isinstance(e, ast.FuncCall):
        return e.name.lower()
    return f"col{i + 1}"


def _is_identity(exprs: list[BExpr], schema: Schema, names: list[str]) -> bool:
    return (
        len(exprs) == len(schema)
        and all(isinstance(e, ColRef) and e.index == i for i, e in enumerate(exprs))
        and tuple(names) == schema.names
    )
