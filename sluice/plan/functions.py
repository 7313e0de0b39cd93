"""Typing rules for CQL operators, built-in scalar functions and aggregates.

Each rule takes argument types and returns the result type or raises ``TypeError`` with a
message for the user; the binder turns that into a :class:`~sluice.cql.BindError` at the span.
Which rule types which scalar function: ``sluice.plan.function_defs.FUNCTIONS``.

>>> arith("/", INTEGER, INTEGER)   # integer '/' stays integer, as in STREAM
DataType(kind=<TypeKind.INTEGER: 'integer'>, length=None)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import assert_never

from sluice.datatypes import (
    BIGINT,
    BOOLEAN,
    FLOAT,
    INTEGER,
    TIMESTAMP,
    VARCHAR,
    DataType,
    TypeKind,
    common_numeric,
    comparable,
    unify,
)
from sluice.plan.expr import AggKind

TypingRule = Callable[[Sequence[DataType]], DataType]
AGGREGATES = frozenset(k.value for k in AggKind)


def arith(op: str, a: DataType, b: DataType) -> DataType:
    """``a op b`` for ``op`` one of ``+ - * / %``: numbers, and timestamps ± integers."""
    ts = TypeKind.TIMESTAMP
    if op in ("+", "-") and a.kind is ts and (b.is_integer or b.is_null):
        return TIMESTAMP
    if op == "+" and b.kind is ts and (a.is_integer or a.is_null):
        return TIMESTAMP
    if op == "-" and a.kind is ts and b.kind is ts:
        return BIGINT
    if not ((a.is_numeric or a.is_null) and (b.is_numeric or b.is_null)):
        raise TypeError(f"cannot apply '{op}' to {a} and {b}")
    return common_numeric(a, b)


def compare(a: DataType, b: DataType) -> DataType:
    if not comparable(a, b):
        raise TypeError(f"cannot compare {a} with {b}")
    return BOOLEAN


def boolean(what: str, *types: DataType) -> DataType:
    for t in types:
        if not (t.kind is TypeKind.BOOLEAN or t.is_null):
            raise TypeError(f"{what} needs a boolean, not {t}")
    return BOOLEAN


def concat(a: DataType, b: DataType) -> DataType:
    if not ((a.is_string or a.is_null) and (b.is_string or b.is_null)):
        raise TypeError(f"'||' joins strings, not {a} and {b}")
    return VARCHAR


def like(a: DataType, b: DataType) -> DataType:
    if not ((a.is_string or a.is_null) and (b.is_string or b.is_null)):
        raise TypeError(f"LIKE matches strings, not {a} against {b}")
    return BOOLEAN


def negate(a: DataType) -> DataType:
    if not (a.is_numeric or a.is_null):
        raise TypeError(f"cannot negate {a}")
    return a if not a.is_null else INTEGER


def unify_all(what: str, types: Sequence[DataType]) -> DataType:
    out = types[0]
    for t in types[1:]:
        u = unify(out, t)
        if u is None:
            raise TypeError(f"{what}: {out} and {t} do not mix")
        out = u
    return out


def numeric1(name: str) -> TypingRule:
    def rule(ts: Sequence[DataType]) -> DataType:
        if not (ts[0].is_numeric or ts[0].is_null):
            raise TypeError(f"{name} needs a number, not {ts[0]}")
        return ts[0] if not ts[0].is_null else INTEGER

    return rule


def string1(name: str, result: DataType | None) -> TypingRule:
    def rule(ts: Sequence[DataType]) -> DataType:
        if not (ts[0].is_string or ts[0].is_null):
            raise TypeError(f"{name} needs a string, not {ts[0]}")
        return result or VARCHAR

    return rule


def round_type(ts: Sequence[DataType]) -> DataType:
    if not (ts[0].is_numeric or ts[0].is_null):
        raise TypeError(f"ROUND needs a number, not {ts[0]}")
    if len(ts) == 2 and not (ts[1].is_integer or ts[1].is_null):
        raise TypeError(f"ROUND's digits must be an integer, not {ts[1]}")
    return FLOAT if ts[0].kind is TypeKind.FLOAT else ts[0]


def coalesce_type(ts: Sequence[DataType]) -> DataType:
    return unify_all("COALESCE", ts)


def nullif_type(ts: Sequence[DataType]) -> DataType:
    compare(ts[0], ts[1])
    return ts[0]


def aggregate(name: str, arg: DataType | None) -> DataType:
    """Result type of an aggregate; ``arg`` None is COUNT(*)."""
    kind = AggKind(name)
    if kind is AggKind.COUNT:
        return BIGINT
    assert arg is not None
    match kind:
        case AggKind.SUM | AggKind.AVG:
            if not (arg.is_numeric or arg.is_null):
                raise TypeError(f"{name} needs a number, not {arg}")
            if kind is AggKind.AVG:
                return FLOAT
            return FLOAT if arg.kind is TypeKind.FLOAT else BIGINT
        case AggKind.MIN | AggKind.MAX:
            return arg if not arg.is_null else INTEGER
        case _:  # pragma: no cover - exhaustive (mypy checks it)
            assert_never(kind)
