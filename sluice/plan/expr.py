"""Bound (typed, name-resolved) scalar expressions.

Column references are positions in the input row, so evaluators never look up names.
``IN (list)`` and ``BETWEEN`` are normalised at binding into OR / AND of comparisons (identical
under three-valued logic), and a simple ``CASE x WHEN v`` into a searched CASE.

>>> from sluice.datatypes import INTEGER, BOOLEAN
>>> e = Call("gt", (ColRef(0, INTEGER, "a"), Const(1, INTEGER)), BOOLEAN)
>>> render(e)
'(a > 1)'
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from sluice.datatypes import DataType

if TYPE_CHECKING:
    from sluice.plan.logical import LogicalNode


class BExpr:
    """Base of bound expressions; every one has a ``type``."""

    __slots__ = ()
    if TYPE_CHECKING:
        type: DataType

    def children(self) -> tuple[BExpr, ...]:
        return ()


@dataclass(frozen=True, slots=True)
class ColRef(BExpr):
    index: int
    type: DataType
    name: str = field(default="", compare=False)


@dataclass(frozen=True, slots=True)
class OuterRef(BExpr):
    """A column of an enclosing query's current row (correlated subquery); depth 1 = nearest."""

    depth: int
    index: int
    type: DataType
    name: str = field(default="", compare=False)


@dataclass(frozen=True, slots=True)
class Const(BExpr):
    value: Any
    type: DataType


@dataclass(frozen=True, slots=True)
class Call(BExpr):
    """A built-in operator or function, by internal name (``sluice.plan.function_defs.FUNCTIONS``)."""

    fn: str
    args: tuple[BExpr, ...]
    type: DataType

    def children(self) -> tuple[BExpr, ...]:
        return self.args


@dataclass(frozen=True, slots=True)
class UdfCall(BExpr):
    name: str
    args: tuple[BExpr, ...]
    type: DataType
    fn: Callable[..., Any] = field(compare=False, repr=False)
    strict: bool = True
    vectorized: bool = False  # fn takes and returns Arrow arrays (FunctionDef)
    arg_types: tuple[DataType, ...] | None = None  # as registered (None: any)

    def array_types(self) -> tuple[DataType, ...]:
        """The types of the arrays a vectorized function is given: as registered, else the arguments'."""
        return self.arg_types if self.arg_types is not None else tuple(a.type for a in self.args)

    def children(self) -> tuple[BExpr, ...]:
        return self.args


@dataclass(frozen=True, slots=True)
class CaseWhen(BExpr):
    whens: tuple[tuple[BExpr, BExpr], ...]
    else_: BExpr
    type: DataType

    def children(self) -> tuple[BExpr, ...]:
        return tuple(x for w in self.whens for x in w) + (self.else_,)


@dataclass(frozen=True, slots=True)
class CurrentTime(BExpr):
    type: DataType


@dataclass(frozen=True, slots=True)
class Subquery(BExpr):
    """EXISTS / IN / quantified comparison / scalar subquery over a logical (relation) plan.

    ``kind``: 'EXISTS' (operand None), 'IN' (= ANY), 'QUANT' (``op`` with ``quantifier``
    'ALL'|'ANY'), 'SCALAR'.  ``negated`` applies to EXISTS and IN.
    """

    kind: str
    plan: LogicalNode
    type: DataType
    operand: BExpr | None = None
    op: str = "="
    quantifier: str = "ANY"
    negated: bool = False

    def children(self) -> tuple[BExpr, ...]:
        return (self.operand,) if self.operand is not None else ()


class AggKind(StrEnum):
    """The aggregate functions (their definitions: ``sluice.plan.accumulators.AGGREGATES``)."""

    COUNT = "COUNT"
    SUM = "SUM"
    AVG = "AVG"
    MIN = "MIN"
    MAX = "MAX"


@dataclass(frozen=True, slots=True)
class AggCall:
    """An aggregate computed by an ``Aggregate`` node; ``arg`` None for COUNT(*)."""

    fn: AggKind
    arg: BExpr | None
    distinct: bool
    type: DataType

    def __post_init__(self) -> None:
        if not isinstance(self.fn, AggKind):  # a name: "count" / "COUNT"; unknown names raise
            object.__setattr__(self, "fn", AggKind(self.fn.upper()))

    def render(self, names: tuple[str, ...] = ()) -> str:
        if self.arg is None:
            return f"{self.fn}(*)"
        return f"{self.fn}({'DISTINCT ' if self.distinct else ''}{render(self.arg, names)})"


def walk_expr(e: BExpr) -> Iterator[BExpr]:
    yield e
    for c in e.children():
        yield from walk_expr(c)


def render(e: BExpr, names: tuple[str, ...] = ()) -> str:
    """Readable text of a bound expression (for EXPLAIN and error messages)."""
    if isinstance(e, ColRef):
        return e.name or (names[e.index] if e.index < len(names) else f"#{e.index}")
    if isinstance(e, OuterRef):
        return f"outer{e.depth}.{e.name or e.index}"
    if isinstance(e, Const):
        if e.value is None:
            return "NULL"
        return repr(e.value) if isinstance(e.value, str) else str(e.value)
    if isinstance(e, Call):
        from sluice.plan.function_defs import function  # it imports this module (via the typing rules)

        return function(e.fn).render([render(a, names) for a in e.args])
    if isinstance(e, UdfCall):
        return f"{e.name}({', '.join(render(a, names) for a in e.args)})"
    if isinstance(e, CaseWhen):
        arms = " ".join(f"WHEN {render(c, names)} THEN {render(r, names)}" for c, r in e.whens)
        return f"CASE {arms} ELSE {render(e.else_, names)} END"
    if isinstance(e, CurrentTime):
        return "CURRENT_TIME"
    if isinstance(e, Subquery):
        neg = "NOT " if e.negated else ""
        if e.kind == "EXISTS":
            return f"{neg}EXISTS(<subquery>)"
        assert e.operand is not None or e.kind == "SCALAR"
        if e.kind == "IN":
            return f"({render(e.operand, names)} {neg}IN <subquery>)"  # type: ignore[arg-type]
        if e.kind == "QUANT":
            return f"({render(e.operand, names)} {e.op} {e.quantifier} <subquery>)"  # type: ignore[arg-type]
        return "(<scalar subquery>)"
    raise TypeError(type(e).__name__)
