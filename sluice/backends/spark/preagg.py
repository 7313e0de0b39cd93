"""Pre-aggregation: Spark sums a sliding window's elements per (group, slide) before Python sees them.

A group-by over ``[Range T Slide U]`` of one stream answers only at multiples of ``U``, and an
element with timestamp ``ts`` is in the window from ``a = ⌈ts/U⌉·U`` until just before
``d = ⌊(ts+T)/U⌋·U + U`` (``sluice.windows.visible``).  All elements of a group with the same
``(a, d)`` enter and leave the window together, so for COUNT, integer SUM, MIN and MAX the window's
aggregate at every instant is the same aggregate over per-``(group, a, d)`` partial aggregates
(COUNT → SUM of counts, SUM → SUM of sums, MIN → MIN of minima; exact: Sluice sums integers
exactly, and a group is present exactly when one of its partials is, each partial counting ≥ 1
element).  Spark's Python workers compute the partials per micro-batch partition before the
shuffle (``sluice.backends.spark.partials``, no Spark state), and the stateful processor runs the
rewritten query over ~one row per group and slide instead of one per element (design 015).

For ``ts ∈ (a − U, a]`` there are only two values of ``d``: ``a + ⌊T/U⌋·U + U`` (the *upper*
class, which includes ``ts = a``) and ``U`` less (the *lower* class).  Every partial is stamped
``a`` — a partial is only complete once the window ending at ``a`` is, and stamping it earlier
would make it late for the processor — and the two classes become two streams whose windows give
exactly their lifetimes: the upper one ``[Range T Slide U]`` (``visible(a) = (a, a + ⌊T/U⌋·U +
U)``), the lower one ``[Range ⌊T/U⌋·U − 1 Slide U]`` (never visible when ``T < U``: Spark drops
those rows).  The rewritten query reads their bag union, aliased as the original FROM item, so the
SELECT list, HAVING and Istream/Dstream/Rstream above the aggregate are untouched.

Taken only when the analysis proves it: one FROM item, a stream with ``[Range T Slide U]`` (no
Partition By, no sample), GROUP BY plain columns, aggregates COUNT(*), COUNT(c), and SUM/MIN/MAX of
integer columns (no DISTINCT), every WHERE conjunct translatable to Spark without overflow, no
subqueries; otherwise the processor sees every element (no different answer, only slower).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from sluice import windows as W
from sluice.catalog import Catalog, Kind, SourceDef
from sluice.cql import ast
from sluice.cql.parser import parse_query
from sluice.cql.printer import to_cql
from sluice.datatypes import DataType, TypeKind
from sluice.plan import logical as L
from sluice.plan.analysis import plan_has_subquery
from sluice.plan.expr import AggKind, BExpr

_AGGREGATES = {k.value for k in AggKind}
_INTEGERS = {TypeKind.INTEGER, TypeKind.BIGINT}
_BIGINT = DataType(TypeKind.BIGINT)
UPPER, LOWER = "sluice_upper", "sluice_lower"  # the processor's two streams of partials


@dataclass(frozen=True)
class Partial:
    """One partial aggregate column: ``fn`` over source column ``column`` (None: COUNT(*))."""

    fn: AggKind
    column: int | None
    name: str
    type: DataType


@dataclass(frozen=True)
class PreAggregate:
    """How Spark pre-aggregates a query's source, and the query the processor then runs."""

    source: str  # the stream's catalog name
    keys: tuple[int, ...]  # its GROUP BY columns
    partials: tuple[Partial, ...]
    filters: tuple[BExpr, ...]  # WHERE / window Where conjuncts over the source's columns
    range: int  # T, ticks
    slide: int  # U, ticks
    ddl: str  # the processor's streams of partials
    query: str  # the rewritten query over them

    @property
    def lower_range(self) -> int | None:
        """The lower class's window range (None: those elements are never in the window)."""
        return lower_range(self.range, self.slide)

    def types(self, d: SourceDef) -> list[DataType]:
        """The columns of the processor's streams of partials: the group's, then the partials."""
        return [d.schema.types[k] for k in self.keys] + [p.type for p in self.partials]

    def describe(self, names: tuple[str, ...]) -> str:
        parts = ", ".join(f"{p.fn}({names[p.column]})" for p in self.partials if p.column is not None)
        keys = ", ".join(names[k] for k in self.keys)
        return (
            f"pre-aggregated by Spark: COUNT(*){', ' + parts if parts else ''} per ({keys}) and slide of "
            f"{self.source}, per micro-batch partition, in its Python workers before the shuffle (about one "
            "row per group and slide reaches the processor: design 015)"
        )


def preaggregate(text: str, catalog: Catalog, plan: L.LogicalNode) -> PreAggregate | None:
    """The pre-aggregation of a bound query, or None when it is not provably exact."""
    try:
        top = parse_query(text)
    except Exception:  # noqa: BLE001 - the text was bound already; anything odd: no pre-aggregation
        return None
    inner = top.query if isinstance(top, ast.StreamOp) else top
    if not isinstance(inner, ast.Select) or inner.window is not None or len(inner.from_) != 1 or not inner.group_by:
        return None
    item = inner.from_[0]
    if not isinstance(item, ast.TableRef) or item.sample is not None or item.window is None:
        return None
    shape = _shape(plan)
    if shape is None:
        return None
    scan, spec, filters = shape
    if scan.source_kind is not Kind.STREAM or spec.slide is None or spec.slide <= 1:
        return None
    span, step = spec.range, spec.slide
    d = catalog.lookup(scan.name)
    names = tuple(n.lower() for n in d.schema.names)
    types = d.schema.types
    alias = (item.alias or item.name).lower()

    def column(e: ast.Expr) -> int | None:
        if not isinstance(e, ast.ColumnName) or (e.qualifier is not None and e.qualifier.lower() != alias):
            return None
        return names.index(e.name.lower()) if e.name.lower() in names else None

    found = [column(g) for g in inner.group_by]
    keys = tuple(k for k in found if k is not None)
    if len(keys) < len(found) or any(types[k].kind is TypeKind.FLOAT for k in keys):  # Spark folds -0.0 into 0.0
        return None
    if len(set(keys)) != len(keys):  # GROUP BY K, K: one column of the partial streams each
        return None
    taken = set(names)
    partials: dict[tuple[AggKind, int | None], Partial] = {}

    def name_for(stem: str) -> str:
        n, i = f"sluice_{stem}", 0
        while n in taken:
            i += 1
            n = f"sluice_{stem}{i}"
        taken.add(n)
        return n

    count_all = partials[(AggKind.COUNT, None)] = Partial(AggKind.COUNT, None, name_for("n"), _BIGINT)

    def over_partials(e: ast.Node) -> ast.Node:
        """An aggregate over the partials (``Node.transform`` step); ``_No`` where not exact."""
        if isinstance(e, ast.InSubquery | ast.Exists | ast.Quantified | ast.ScalarSubquery | ast.CurrentTime):
            raise _No
        if not (isinstance(e, ast.FuncCall) and e.name.upper() in _AGGREGATES):
            return e
        fn = AggKind(e.name.upper())
        if e.distinct or fn is AggKind.AVG:
            raise _No
        if e.star:
            return ast.FuncCall("SUM", (ast.ColumnName(None, count_all.name),))
        if len(e.args) != 1 or (c := column(e.args[0])) is None:
            raise _No
        if fn is not AggKind.COUNT and types[c].kind not in _INTEGERS:
            raise _No
        p = partials.get((fn, c))
        if p is None:
            ptype = types[c] if fn in (AggKind.MIN, AggKind.MAX) else _BIGINT
            p = partials[(fn, c)] = Partial(fn, c, name_for(f"{fn.value.lower()}_{names[c]}"), ptype)
        outer = "SUM" if fn in (AggKind.COUNT, AggKind.SUM) else fn.value
        return ast.FuncCall(outer, (ast.ColumnName(None, p.name),))

    try:
        items = tuple(i.transform(over_partials) for i in inner.items)
        having = inner.having.transform(over_partials) if inner.having is not None else None
    except _No:
        return None
    ordered = (count_all, *[p for p in partials.values() if p is not count_all])
    cols = [(d.schema.names[k], types[k]) for k in keys] + [(p.name, p.type) for p in ordered]
    ddl = "\n".join(f"REGISTER STREAM {s} ({', '.join(f'{n} {t.sql()}' for n, t in cols)});" for s in (UPPER, LOWER))

    def windowed(stream: str, span: int) -> ast.Select:
        w = W.RangeSyntax(ast.Duration(span, None), ast.Duration(step, None))
        return ast.Select(items=(ast.SelectItem(ast.Star()),), from_=(ast.TableRef(stream, window=w),))

    low = lower_range(span, step)
    body: ast.Query = windowed(UPPER, span)
    if low is not None:
        body = ast.SetOp("UNION", body, windowed(LOWER, low), all=True)
    source = ast.SubqueryRef(body, alias=item.alias or item.name)
    new: ast.Query = dataclasses.replace(inner, items=items, from_=(source,), where=None, having=having)
    if isinstance(top, ast.StreamOp):
        new = dataclasses.replace(top, query=new)
    return PreAggregate(d.name, keys, ordered, filters, span, step, ddl, to_cql(new))


def lower_range(span: int, step: int) -> int | None:
    """The lower class's window range for ``[Range span Slide step]`` (None: never in the window)."""
    n = span // step
    return n * step - 1 if n else None


class _No(Exception):
    pass


def _shape(plan: L.LogicalNode) -> tuple[L.Scan, W.Range, tuple[BExpr, ...]] | None:
    """``Aggregate(σ…(Window Range(σ…(Scan))))`` somewhere under the top, the only Scan, no subquery."""
    aggs = [n for n in L.walk_plan(plan) if isinstance(n, L.Aggregate)]
    scans = [n for n in L.walk_plan(plan) if isinstance(n, L.Scan)]
    if len(aggs) != 1 or len(scans) != 1 or not aggs[0].keys or plan_has_subquery(plan):
        return None
    node, filters, spec = aggs[0].input, [], None
    while not isinstance(node, L.Scan):
        if isinstance(node, L.Filter):
            filters.append(node.predicate)
        elif isinstance(node, L.Window) and spec is None and isinstance(node.spec, W.Range) and not node.spec.partition:
            spec = node.spec
        else:
            return None
        node = node.inputs()[0]
    if spec is None:
        return None
    return node, spec, tuple(filters)
