"""The logical algebra of CQL (seed §2.2, Figure 1): stream→relation windows, relational
operators, relation→stream Istream/Dstream/Rstream.

Each node is a frozen record with its ``kind`` (stream or relation) and output ``schema``;
a stream is turned into a relation only by a :class:`Window`, and a relation into a stream
only by a :class:`StreamOp`.  Relational operators take and give relations.

>>> from sluice.catalog import Schema
>>> from sluice.datatypes import INTEGER
>>> s = Scan("S", Kind.STREAM, Schema.of(("A", INTEGER)))
>>> from sluice.windows import Rows
>>> w = Window(s, Rows(2))
>>> w.kind, w.schema.names
(<Kind.RELATION: 'relation'>, ('A',))
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import StrEnum

from sluice.catalog.schema import Kind, Schema
from sluice.errors import InternalError
from sluice.plan.expr import AggCall, BExpr, walk_expr
from sluice.windows import WindowDef


@dataclass(frozen=True, slots=True)
class LogicalNode:
    @property
    def kind(self) -> Kind:
        raise NotImplementedError

    @property
    def schema(self) -> Schema:
        raise NotImplementedError

    def inputs(self) -> tuple[LogicalNode, ...]:
        return ()

    def exprs(self) -> tuple[BExpr, ...]:
        """The expressions this node evaluates (for analyses such as 'uses CURRENT_TIME')."""
        return ()


def walk_plan(node: LogicalNode, *, into_subqueries: bool = True) -> Iterator[LogicalNode]:
    """Every node, pre-order; with ``into_subqueries`` also the plans inside subquery expressions."""
    from sluice.plan.expr import Subquery

    yield node
    for e in node.exprs():
        if into_subqueries:
            for x in walk_expr(e):
                if isinstance(x, Subquery):
                    yield from walk_plan(x.plan)
    for c in node.inputs():
        yield from walk_plan(c, into_subqueries=into_subqueries)


@dataclass(frozen=True, slots=True)
class Scan(LogicalNode):
    """A registered base stream or relation."""

    name: str
    source_kind: Kind
    source_schema: Schema

    @property
    def kind(self) -> Kind:
        return self.source_kind

    @property
    def schema(self) -> Schema:
        return self.source_schema


@dataclass(frozen=True, slots=True)
class Window(LogicalNode):
    """Stream → relation (seed §2.2)."""

    input: LogicalNode
    spec: WindowDef

    def __post_init__(self) -> None:
        if self.input.kind is not Kind.STREAM:
            raise InternalError("Window over a relation")

    @property
    def kind(self) -> Kind:
        return Kind.RELATION

    @property
    def schema(self) -> Schema:
        return self.input.schema

    def inputs(self) -> tuple[LogicalNode, ...]:
        return (self.input,)


@dataclass(frozen=True, slots=True)
class Sample(LogicalNode):
    """Stream → stream keeping each element with probability ``fraction`` (seed §2).

    The choice is a deterministic hash of (seed, ``salt``, τ, tuple, occurrence) so every
    backend and the reference evaluator keep exactly the same elements.
    """

    input: LogicalNode
    fraction: float
    salt: int
    # ``Sample(a To b)``: the lowest fraction the user tolerates and the highest (what it asked for);
    # ``fraction`` is the one chosen at registration (``sluice.approx.static``).  None: fixed.
    least: float | None = None
    most: float | None = None

    @property
    def kind(self) -> Kind:
        return Kind.STREAM

    @property
    def schema(self) -> Schema:
        return self.input.schema

    def inputs(self) -> tuple[LogicalNode, ...]:
        return (self.input,)


@dataclass(frozen=True, slots=True)
class Filter(LogicalNode):
    """Keeps rows whose predicate is TRUE.  On a stream it is a window's ``Where`` filter."""

    input: LogicalNode
    predicate: BExpr

    @property
    def kind(self) -> Kind:
        return self.input.kind

    @property
    def schema(self) -> Schema:
        return self.input.schema

    def inputs(self) -> tuple[LogicalNode, ...]:
        return (self.input,)

    def exprs(self) -> tuple[BExpr, ...]:
        return (self.predicate,)


@dataclass(frozen=True, slots=True)
class Project(LogicalNode):
    input: LogicalNode
    columns: tuple[BExpr, ...]
    out_schema: Schema

    @property
    def kind(self) -> Kind:
        return self.input.kind

    @property
    def schema(self) -> Schema:
        return self.out_schema

    def inputs(self) -> tuple[LogicalNode, ...]:
        return (self.input,)

    def exprs(self) -> tuple[BExpr, ...]:
        return self.columns


@dataclass(frozen=True, slots=True)
class Join(LogicalNode):
    """Cross product of two relations; join conditions are a ``Filter`` above it."""

    left: LogicalNode
    right: LogicalNode

    def __post_init__(self) -> None:
        if Kind.STREAM in (self.left.kind, self.right.kind):
            raise InternalError("Join over a stream")

    @property
    def kind(self) -> Kind:
        return Kind.RELATION

    @property
    def schema(self) -> Schema:
        return Schema(self.left.schema.columns + self.right.schema.columns)

    def inputs(self) -> tuple[LogicalNode, ...]:
        return (self.left, self.right)


@dataclass(frozen=True, slots=True)
class Aggregate(LogicalNode):
    """Group by ``keys`` and compute ``aggs``; output = keys then aggregates.

    Without keys the result has exactly one row, even over an empty input (SQL).
    """

    input: LogicalNode
    keys: tuple[BExpr, ...]
    aggs: tuple[AggCall, ...]
    out_schema: Schema

    @property
    def kind(self) -> Kind:
        return Kind.RELATION

    @property
    def schema(self) -> Schema:
        return self.out_schema

    def inputs(self) -> tuple[LogicalNode, ...]:
        return (self.input,)

    def exprs(self) -> tuple[BExpr, ...]:
        return self.keys + tuple(a.arg for a in self.aggs if a.arg is not None)


@dataclass(frozen=True, slots=True)
class Distinct(LogicalNode):
    input: LogicalNode

    @property
    def kind(self) -> Kind:
        return Kind.RELATION

    @property
    def schema(self) -> Schema:
        return self.input.schema

    def inputs(self) -> tuple[LogicalNode, ...]:
        return (self.input,)


class SetOpKind(StrEnum):
    UNION = "UNION"
    EXCEPT = "EXCEPT"
    INTERSECT = "INTERSECT"


class StreamOpKind(StrEnum):
    ISTREAM = "ISTREAM"
    DSTREAM = "DSTREAM"
    RSTREAM = "RSTREAM"


@dataclass(frozen=True, slots=True)
class SetOp(LogicalNode):
    """UNION / EXCEPT / INTERSECT of relations; ``all`` for bag semantics."""

    op: SetOpKind
    all: bool
    left: LogicalNode
    right: LogicalNode
    out_schema: Schema

    def __post_init__(self) -> None:
        if not isinstance(self.op, SetOpKind):  # the parser's word; an unknown one raises
            object.__setattr__(self, "op", SetOpKind(self.op.upper()))

    @property
    def kind(self) -> Kind:
        return Kind.RELATION

    @property
    def schema(self) -> Schema:
        return self.out_schema

    def inputs(self) -> tuple[LogicalNode, ...]:
        return (self.left, self.right)


@dataclass(frozen=True, slots=True)
class StreamOp(LogicalNode):
    """Relation → stream: ISTREAM, DSTREAM or RSTREAM (seed §2.2)."""

    op: StreamOpKind
    input: LogicalNode
    implicit: bool = field(default=False, compare=False)  # added by CQL's default rule

    def __post_init__(self) -> None:
        if not isinstance(self.op, StreamOpKind):  # the parser's word; an unknown one raises
            object.__setattr__(self, "op", StreamOpKind(self.op.upper()))
        if self.input.kind is not Kind.RELATION:
            raise InternalError(f"{self.op} over a stream")

    @property
    def kind(self) -> Kind:
        return Kind.STREAM

    @property
    def schema(self) -> Schema:
        return self.input.schema

    def inputs(self) -> tuple[LogicalNode, ...]:
        return (self.input,)
