"""The CQL abstract syntax tree: small frozen, slotted records.

Children are discovered from the fields (a field holding a :class:`Node` or a tuple of
them), so one generic :func:`walk` and :meth:`Node.transform` serve every node
(sqlglot ``Expr.arg_types``; Ibis ``Concrete``).  Spans do not take part in equality,
so a printed-and-reparsed query compares equal to the original.

>>> from sluice.cql.parser import parse_query
>>> q = parse_query("SELECT a + 1 FROM S [Rows 2]")
>>> sorted({type(n).__name__ for n in walk(q)})
['Binary', 'ColumnName', 'Literal', 'RowsSyntax', 'Select', 'SelectItem', 'TableRef']
"""

from __future__ import annotations

import dataclasses
import enum
from abc import ABCMeta, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Self, TypeVar

from sluice.cql.errors import NO_SPAN, Span
from sluice.datatypes import DataType

if TYPE_CHECKING:  # the window kinds' interfaces, same layer (design 018)
    from sluice.windows.base import WindowBinding, WindowDef, WindowParser

N = TypeVar("N", bound="Node")


@dataclass(frozen=True, slots=True)
class Node:
    """Base of all AST nodes."""

    def children(self) -> Iterator[Node]:
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if isinstance(v, Node):
                yield v
            elif isinstance(v, tuple):
                for x in v:
                    if isinstance(x, Node):
                        yield x
                    elif isinstance(x, tuple):  # CASE arms are (cond, result) pairs
                        yield from (y for y in x if isinstance(y, Node))

    def transform(self: N, fn: Callable[[Node], Node]) -> N:
        """Rebuild bottom-up, applying ``fn`` to every node (children first)."""

        def rec(v: Any) -> Any:
            if isinstance(v, Node):
                return v.transform(fn)
            if isinstance(v, tuple):
                return tuple(rec(x) for x in v)
            return v

        changes = {}
        for f in dataclasses.fields(self):
            old = getattr(self, f.name)
            new = rec(old)
            if new is not old:
                changes[f.name] = new
        node = dataclasses.replace(self, **changes) if changes else self
        return fn(node)  # type: ignore[return-value]


def walk(node: Node) -> Iterator[Node]:
    """Every node of the tree, pre-order."""
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(reversed(list(n.children())))


def _span() -> Any:
    return field(default=NO_SPAN, compare=False, repr=False)


# ----------------------------------------------------------------------------------------
# Expressions


class Expr(Node):
    __slots__ = ()
    if TYPE_CHECKING:
        span: Span


@dataclass(frozen=True, slots=True)
class Literal(Expr):
    """A constant: int, float, str, bool or None (NULL)."""

    value: int | float | str | bool | None
    span: Span = _span()


@dataclass(frozen=True, slots=True)
class ColumnName(Expr):
    qualifier: str | None
    name: str
    span: Span = _span()

    def sql(self) -> str:
        return f"{self.qualifier}.{self.name}" if self.qualifier else self.name


@dataclass(frozen=True, slots=True)
class Star(Expr):
    """``*`` or ``X.*`` in a select list."""

    qualifier: str | None = None
    span: Span = _span()


@dataclass(frozen=True, slots=True)
class Unary(Expr):
    op: str  # '-', '+', 'NOT'
    operand: Expr
    span: Span = _span()


@dataclass(frozen=True, slots=True)
class Binary(Expr):
    op: str  # + - * / % || = <> < <= > >= AND OR
    left: Expr
    right: Expr
    span: Span = _span()


@dataclass(frozen=True, slots=True)
class FuncCall(Expr):
    """A function or aggregate call; ``star`` for COUNT(*)."""

    name: str  # upper-cased
    args: tuple[Expr, ...]
    distinct: bool = False
    star: bool = False
    span: Span = _span()


@dataclass(frozen=True, slots=True)
class IsNull(Expr):
    operand: Expr
    negated: bool = False
    span: Span = _span()


@dataclass(frozen=True, slots=True)
class Like(Expr):
    operand: Expr
    pattern: Expr
    negated: bool = False
    span: Span = _span()


@dataclass(frozen=True, slots=True)
class Between(Expr):
    operand: Expr
    low: Expr
    high: Expr
    negated: bool = False
    span: Span = _span()


@dataclass(frozen=True, slots=True)
class InList(Expr):
    operand: Expr
    items: tuple[Expr, ...]
    negated: bool = False
    span: Span = _span()


@dataclass(frozen=True, slots=True)
class InSubquery(Expr):
    operand: Expr
    query: Query
    negated: bool = False
    span: Span = _span()


@dataclass(frozen=True, slots=True)
class Exists(Expr):
    query: Query
    negated: bool = False
    span: Span = _span()


@dataclass(frozen=True, slots=True)
class Quantified(Expr):
    """``x op ALL (subquery)`` or ``x op ANY/SOME (subquery)``."""

    op: str
    operand: Expr
    quantifier: str  # 'ALL' | 'ANY'
    query: Query
    span: Span = _span()


@dataclass(frozen=True, slots=True)
class ScalarSubquery(Expr):
    query: Query
    span: Span = _span()


@dataclass(frozen=True, slots=True)
class Case(Expr):
    """``CASE [operand] WHEN a THEN b ... [ELSE c] END``."""

    operand: Expr | None
    whens: tuple[tuple[Expr, Expr], ...]
    else_: Expr | None = None
    span: Span = _span()


@dataclass(frozen=True, slots=True)
class CurrentTime(Expr):
    """``CURRENT_TIME``: the instant τ at which the query is evaluated."""

    span: Span = _span()


# ----------------------------------------------------------------------------------------
# Windows and FROM items


class TimeUnit(enum.Enum):
    MILLISECOND = 1
    SECOND = 1000
    MINUTE = 60_000
    HOUR = 3_600_000
    DAY = 86_400_000

    @property
    def millis(self) -> int:
        return self.value

    @classmethod
    def of(cls, unit: TimeUnit | str) -> TimeUnit:
        """A unit or its name: ``"millisecond"``, ``"milliseconds"``, ``"ms"``, ``"second"``, …

        >>> TimeUnit.of("milliseconds"), TimeUnit.of(TimeUnit.HOUR)
        (<TimeUnit.MILLISECOND: 1>, <TimeUnit.HOUR: 3600000>)
        """
        if isinstance(unit, TimeUnit):
            return unit
        if isinstance(unit, str):
            key = unit.strip().upper()
            key = {"MS": "MILLISECOND", "S": "SECOND", "SEC": "SECOND", "MIN": "MINUTE", "H": "HOUR"}.get(key, key)
            key = key[:-1] if key.endswith("S") and key[:-1] in cls.__members__ else key
            if key in cls.__members__:
                return cls[key]
        names = ", ".join(m.name.lower() for m in cls)
        raise ValueError(f"unknown time unit {unit!r}: use one of {names} (or ms, s, min, h)")


# the words CQL takes for a unit after a number (windows, LATENCY), upper case: the parser reads
# them, the tokenizer names them in its error for ``200ms``
UNIT_WORDS = {
    **dict.fromkeys(("MILLISECOND", "MILLISECONDS", "MS", "MSEC", "MSECS"), TimeUnit.MILLISECOND),
    **dict.fromkeys(("SECOND", "SECONDS", "SEC", "SECS", "S"), TimeUnit.SECOND),
    **dict.fromkeys(("MINUTE", "MINUTES", "MIN", "MINS"), TimeUnit.MINUTE),
    **dict.fromkeys(("HOUR", "HOURS", "HR", "HRS", "H"), TimeUnit.HOUR),
    **dict.fromkeys(("DAY", "DAYS"), TimeUnit.DAY),
}


@dataclass(frozen=True, slots=True)
class Duration(Node):
    """``4 seconds``; or, with ``unit`` None, a bare ``4`` — STREAM's ``time_spec: T_INT``: four
    units of the stream's own time (its timestamps' unit).
    """

    amount: int
    unit: TimeUnit | None
    span: Span = _span()

    @property
    def millis(self) -> int | None:
        """The length in milliseconds; None for a unitless duration (its length depends on the stream)."""
        return None if self.unit is None else self.amount * self.unit.millis

    def sql(self) -> str:
        if self.unit is None:
            return str(self.amount)
        name = self.unit.name.lower()
        return f"{self.amount} {name}{'' if self.amount == 1 else 's'}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Window(Node, metaclass=ABCMeta):
    """A window ``[ ... ]`` after a stream (seed §2, CQL §5.1), as written.  Each kind is a
    subclass in its own file of ``sluice.windows`` that parses itself after its keyword, prints
    itself and binds itself to its meaning; ``where`` is Hammad's window Where (§2.1), any kind's.
    """

    #: the word that starts the kind inside ``[ ]`` (upper case) and how the parser's errors name it
    keyword: ClassVar[str]
    title: ClassVar[str]
    #: the meanings ``bind`` gives
    binds_to: ClassVar[tuple[type[WindowDef], ...]]

    where: Expr | None = None
    span: Span = _span()

    @classmethod
    @abstractmethod
    def parse(cls, p: WindowParser) -> Self:
        """The window after its keyword (consumed), up to its Where or ``]``."""

    @abstractmethod
    def body(self) -> str:
        """Its CQL text inside the brackets, without the Where."""

    @abstractmethod
    def bind(self, ctx: WindowBinding) -> WindowDef:
        """Its meaning over the stream ``ctx`` describes (errors point at its spans)."""

    @property
    def unbounded(self) -> bool:
        """It holds every element so far."""
        return False


@dataclass(frozen=True, slots=True)
class Sample(Node):
    """``Sample(p)``: keep each element with probability p%; ``Sample(a To b)``: the user tolerates
    any rate from a% to b% — the engine keeps b% unless a memory limit calls for less, chosen once
    at registration (STREAM §5.1.2's sampling rate reduction, with §5.2's "ranges of sampling
    rates" as the user's stated tolerance).
    """

    percent: float
    span: Span = _span()
    least: float | None = None  # the lowest percentage tolerated (``Sample(a To b)``); None: fixed


class FromItem(Node):
    __slots__ = ()
    if TYPE_CHECKING:
        span: Span


@dataclass(frozen=True, slots=True)
class TableRef(FromItem):
    """A named stream, relation or view in FROM."""

    name: str
    alias: str | None = None
    window: Window | None = None
    sample: Sample | None = None
    span: Span = _span()


@dataclass(frozen=True, slots=True)
class SubqueryRef(FromItem):
    query: Query
    alias: str | None = None
    window: Window | None = None
    sample: Sample | None = None
    span: Span = _span()


# ----------------------------------------------------------------------------------------
# Queries


class Query(Node):
    __slots__ = ()
    if TYPE_CHECKING:
        span: Span


@dataclass(frozen=True, slots=True)
class SelectItem(Node):
    expr: Expr
    alias: str | None = None
    span: Span = _span()


@dataclass(frozen=True, slots=True)
class Select(Query):
    """A query block.  ``stream_op`` records the select-list form ``SELECT Istream(a, b)``."""

    items: tuple[SelectItem, ...]
    from_: tuple[FromItem, ...]
    where: Expr | None = None
    group_by: tuple[Expr, ...] = ()
    having: Expr | None = None
    distinct: bool = False
    window: Duration | None = None  # trailing ``WINDOW 1 min`` (Hammad §2.1)
    stream_op: str | None = None  # 'ISTREAM' | 'DSTREAM' | 'RSTREAM'
    span: Span = _span()


@dataclass(frozen=True, slots=True)
class SetOp(Query):
    """UNION / EXCEPT / INTERSECT.  ``named`` is STREAM's ``A Union B`` form (bag semantics)."""

    op: str  # 'UNION' | 'EXCEPT' | 'INTERSECT'
    left: Query
    right: Query
    all: bool = False
    span: Span = _span()


@dataclass(frozen=True, slots=True)
class TableQuery(Query):
    """A bare name used as a set-operation operand (STREAM's ``A Union B``)."""

    name: str
    span: Span = _span()


@dataclass(frozen=True, slots=True)
class StreamOp(Query):
    """``Istream(q)``, ``Dstream(q)``, ``Rstream(q)``: relation-to-stream (seed §2.2)."""

    op: str  # 'ISTREAM' | 'DSTREAM' | 'RSTREAM'
    query: Query
    span: Span = _span()


# ----------------------------------------------------------------------------------------
# Statements


class Statement(Node):
    __slots__ = ()
    if TYPE_CHECKING:
        span: Span


@dataclass(frozen=True, slots=True)
class ColumnDef(Node):
    name: str
    type: DataType
    span: Span = _span()


@dataclass(frozen=True, slots=True)
class StreamConstraint:
    """A constraint on a stream's elements (STREAM §4.1; Babu, Srivastava and Widom's
    k-constraints): ``ORDERED BY a WITHIN k`` — an element is never below the ``a`` of one more
    than ``k`` elements before it; ``CLUSTERED BY a WITHIN k`` — between two elements with the same
    ``a`` come at most ``k`` with another; ``UNIQUE BY a`` — no two elements have the same ``a``
    (a join with it is many-one); ``PUNCTUATED BY a`` — the stream's punctuations on ``a`` (Tucker
    et al.; STREAM §4.1) say which values no later element has.  Positions count the stream's
    admitted elements in its order (timestamps, ties in arrival order).  ``FOREIGN KEY (a)
    REFERENCES R(b) WITHIN k`` — STREAM §4.1's referential integrity with its time delay bounded:
    an element of stream ``R`` with ``b = v`` is never stamped more than ``k`` units of this
    stream's time after one of this stream with ``a = v`` (``ref``, ``ref_column``; checked on
    ``R``).  Design 023.

    >>> StreamConstraint.of(("ordered", "oid", 2))
    StreamConstraint(kind='ORDERED', column='oid', k=2, ref='', ref_column='')
    >>> StreamConstraint.of(("references", "oid", "Orders(id)", 5)).sql()
    'FOREIGN KEY (oid) REFERENCES Orders(id) WITHIN 5'
    """

    kind: str  # 'ORDERED' | 'CLUSTERED' | 'UNIQUE' | 'PUNCTUATED' | 'REFERENCES'
    column: str
    k: int = 0
    ref: str = ""  # REFERENCES: the referenced stream; PUNCTUATED: the stream whose references punctuate this one
    ref_column: str = ""  # REFERENCES: its attribute; PUNCTUATED: the referencing stream's attribute

    KINDS = ("ORDERED", "CLUSTERED", "UNIQUE", "PUNCTUATED", "REFERENCES")
    NO_K = ("UNIQUE", "PUNCTUATED")  # kinds without an adherence parameter

    @classmethod
    def of(
        cls, c: StreamConstraint | tuple[str, str] | tuple[str, str, int] | tuple[str, str, str, int]
    ) -> StreamConstraint:
        """A constraint, or ``(kind, column[, k])``, or ``("references", column, "R(b)" | "R", k)``
        (``R``'s attribute defaults to ``column``).
        """
        if isinstance(c, StreamConstraint):
            return c
        if not isinstance(c, tuple) or len(c) not in (2, 3, 4):
            raise ValueError(
                "a constraint is (kind, column[, k]), e.g. ('ordered', 'oid', 2), or "
                f"('references', column, 'Stream(column)', k), not {c!r}"
            )
        kind, column = c[0], c[1]
        if not isinstance(kind, str) or kind.upper() not in cls.KINDS:
            raise ValueError(
                f"a constraint's kind is 'ordered', 'clustered', 'unique', 'punctuated' or 'references', not {kind!r}"
            )
        ref = ref_column = ""
        if kind.upper() == "REFERENCES":
            if len(c) < 3 or not isinstance(c[2], str) or not c[2].strip():
                raise ValueError(f"a references constraint is ('references', column, 'Stream(column)', k), not {c!r}")
            target = c[2].strip()
            ref, _, rest = target.partition("(")
            ref, ref_column = ref.strip(), (rest.rstrip(")").strip() if rest else str(column))
            if not ref or (rest and not rest.endswith(")")) or not ref_column:
                raise ValueError(f"a referenced stream is 'Stream' or 'Stream(column)', not {target!r}")
            k = c[3] if len(c) == 4 else 0
        elif len(c) == 4:
            raise ValueError(f"only a references constraint names a stream: {c!r}")
        else:
            k = c[2] if len(c) == 3 else 0
        if isinstance(k, bool) or not isinstance(k, int):
            what = "units of the stream's time" if ref else "elements"
            raise ValueError(f"a constraint's adherence k is a whole number of {what}, not {k!r}")
        return cls(kind.upper(), str(column), k, ref, ref_column)

    def sql(self) -> str:
        if self.kind == "REFERENCES":
            return f"FOREIGN KEY ({self.column}) REFERENCES {self.ref}({self.ref_column}) WITHIN {self.k}"
        if self.kind == "PUNCTUATED" and self.ref:  # (implied on the referenced stream: never in DDL)
            return f"{self.column} REFERENCED BY {self.ref}({self.ref_column}) WITHIN {self.k}"
        return f"{self.kind} BY {self.column}" + ("" if self.kind in self.NO_K else f" WITHIN {self.k}")


@dataclass(frozen=True, slots=True)
class RegisterSource(Statement):
    """``REGISTER STREAM|RELATION name (attr type, ...) [UNIT u] [kind BY a [WITHIN k]]…`` (kind: ORDERED,
    CLUSTERED, UNIQUE, PUNCTUATED), ``[FOREIGN KEY (a) REFERENCES R(b) [WITHIN k]]…``.
    """

    kind: str  # 'STREAM' | 'RELATION'
    name: str
    columns: tuple[ColumnDef, ...]
    unit: TimeUnit | None = None  # what one of its timestamps counts (default: the catalog's tick)
    constraints: tuple[StreamConstraint, ...] = ()
    span: Span = _span()


@dataclass(frozen=True, slots=True)
class RegisterView(Statement):
    """``REGISTER VIEW name [(a, b)] AS query`` (also ``CREATE VIEW``)."""

    name: str
    query: Query
    columns: tuple[str, ...] = ()
    span: Span = _span()


@dataclass(frozen=True, slots=True)
class RegisterQuery(Statement):
    """``REGISTER QUERY name [WEIGHT w] [PRECISION p] [LATENCY n unit] AS query``: a named
    continuous query with its importance (STREAM §2.4), tolerable imprecision (§5.2: the least
    recall, 1 − FN, it accepts under a memory limit; ``PRECISION 1`` is exact only) and latency
    target (seconds).  Design 021.
    """

    name: str
    query: Query
    weight: float | None = None
    precision: float | None = None
    latency: float | None = None  # seconds
    span: Span = _span()


@dataclass(frozen=True, slots=True)
class QueryStatement(Statement):
    query: Query
    span: Span = _span()


@dataclass(frozen=True, slots=True)
class Explain(Statement):
    query: Query
    span: Span = _span()
