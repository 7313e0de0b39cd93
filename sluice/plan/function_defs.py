"""The scalar functions and operators, each defined once (design 017).

``FUNCTIONS`` maps an internal name — a bound :class:`~sluice.plan.expr.Call`'s ``fn`` — to its
:class:`FunctionDef`: how CQL spells it, its typing rule (``sluice.plan.functions``), its value
on one row (``sluice.plan.scalar``: run by the reference evaluator and the engine's row
evaluators) and its Arrow kernel, or the reason it has none (the engine then runs ``row`` on each
row).  The binder, the reference evaluator, the engine's evaluators (``sluice.runtime.vexpr``,
``sluice.runtime.rowexpr``) and EXPLAIN read it; the Spark compiler keeps its translations keyed
by these names (``sluice.backends.spark.compile.SPARK_FUNCTIONS``).  ``tests/test_functions.py``
fails if a function is missing from either, or answers differently on any path.

>>> d = FUNCTIONS["div"]
>>> d.symbol, d.row(7, -2), str(d.typing([INTEGER, INTEGER]))
('/', -3, 'integer')
>>> BUILTINS["ROUND"].arity, INFIX["<>"].name, isinstance(FUNCTIONS["upper"].vector, RowOnly)
((1, 2), 'ne', True)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType
from typing import Any, NamedTuple

import pyarrow as pa
import pyarrow.compute as pc

from sluice.datatypes import BOOLEAN, INTEGER, DataType, TypeKind
from sluice.errors import InternalError
from sluice.plan import functions as T
from sluice.plan import scalar as S
from sluice.plan.numeric import canonical_floats


class Syntax(StrEnum):
    """How CQL writes a call: ``a op b``, ``op a``, ``a op`` or ``NAME(a, …)``."""

    INFIX = "infix"
    PREFIX = "prefix"
    POSTFIX = "postfix"
    CALL = "call"


class Out(NamedTuple):
    """What a kernel knows of its call besides the argument values."""

    type: DataType  # the call's result type
    arrow: pa.DataType  # its Arrow type
    rows: int  # the batch's row count (an argument may be a scalar: a constant)


Kernel = Callable[[Sequence[Any], Out], Any]
"""The arguments' Arrow values (arrays of ``Out.rows`` values, or scalars) → the result's (array
or scalar).  It may raise (an integer overflow): the engine then evaluates the batch row by row
by the definition and drops the rows that fail (``sluice.plan.numeric``)."""


@dataclass(frozen=True, slots=True)
class RowOnly:
    """No Arrow kernel: the engine runs the definition (``FunctionDef.row``) on each row — slower,
    never different; ``reason`` says why no kernel is used.
    """

    reason: str


@dataclass(frozen=True, slots=True)
class FunctionDef:
    """One scalar function or operator.

    ``symbol`` is the operator as written (``+``, ``AND``, ``IS NULL``) or the function's SQL name
    (``ROUND``); ``arity`` its (least, most) arguments; ``typing`` its result type from the
    argument types (a ``TypeError`` is the user's); ``row`` its value on one row's values (NULL
    as None); ``vector`` an Arrow kernel equal to ``row``, or :class:`RowOnly`.
    """

    name: str
    syntax: Syntax
    symbol: str
    arity: tuple[int, int]
    typing: T.TypingRule
    row: Callable[..., Any]
    vector: Kernel | RowOnly

    def __post_init__(self) -> None:
        fixed = {Syntax.INFIX: (2, 2), Syntax.PREFIX: (1, 1), Syntax.POSTFIX: (1, 1)}.get(self.syntax)
        if fixed is not None and self.arity != fixed:
            raise InternalError(f"{self.name}: a {self.syntax} operator takes {fixed[0]} argument(s)")

    def render(self, args: Sequence[str]) -> str:
        """The call as CQL text, from its arguments' text (EXPLAIN, error messages)."""
        match self.syntax:
            case Syntax.INFIX:
                return f"({args[0]} {self.symbol} {args[1]})"
            case Syntax.PREFIX:
                return f"({self.symbol}{args[0]})" if self.symbol == "-" else f"({self.symbol} {args[0]})"
            case Syntax.POSTFIX:
                return f"({args[0]} {self.symbol})"
            case Syntax.CALL:
                return f"{self.symbol}({', '.join(args)})"


# -- Arrow kernels: only where Arrow's semantics equal the definition exactly -------------------


def full(v: Any, n: int, at: pa.DataType) -> Any:
    """An Arrow value as an array of ``n`` values of type ``at`` (a scalar repeated)."""
    if v.type != at:  # an integer beyond 2^53 as a float rounds to the nearest, as Python's float()
        v = v.cast(at, safe=not (pa.types.is_integer(v.type) and pa.types.is_floating(at)))
    if isinstance(v, pa.Scalar):
        return pa.repeat(v, n)
    return v


def by_rows(fn: Callable[..., Any], args: Sequence[Any], out: Out) -> Any:
    """``fn`` (a definition on one row's values) on each row of the arguments' Arrow values."""
    n = out.rows
    cols = [[v.as_py()] * n if isinstance(v, pa.Scalar) else v.to_pylist() for v in args]
    vals = [fn(*row) for row in zip(*cols, strict=True)] if cols else [fn() for _ in range(n)]
    return values_array(vals, out.type, out.arrow)


def values_array(vals: list[Any], t: DataType, at: pa.DataType) -> pa.Array:
    """Python values of type ``t`` as an Arrow array (an integer where a float is due becomes one;
    floats as Sluice holds them: ``sluice.plan.numeric.canonical_floats``).
    """
    if t.kind is TypeKind.FLOAT:
        return canonical_floats(pa.array([float(v) if v is not None else None for v in vals], at))
    return pa.array(vals, at)


def _plain(k: Callable[..., Any]) -> Kernel:
    """An Arrow function equal to the definition as it is."""
    return lambda args, out: k(*args)


def _checked(k: Callable[..., Any]) -> Kernel:
    """A checked arithmetic kernel (an int64 overflow raises instead of wrapping round); a float
    result as Sluice holds it: NaN (``inf − inf``, ``0 × inf``) is NULL, ``-0.0`` (``-x``,
    ``0.0 × -1``) is ``0.0`` (``sluice.plan.numeric``).
    """

    def kernel(args: Sequence[Any], out: Out) -> Any:
        v = k(*args)
        return canonical_floats(v) if out.type.kind is TypeKind.FLOAT else v

    return kernel


def _div(args: Sequence[Any], out: Out) -> Any:
    x, d = args
    if out.type.is_integer:
        d = pc.if_else(pc.equal(d, 0), pa.scalar(None, d.type), d)  # x / 0 is NULL
        return pc.divide_checked(x, d)  # truncates toward zero, as CQL does
    x, d = pc.cast(x, pa.float64()), pc.cast(d, pa.float64())
    d = pc.if_else(pc.equal(d, 0), pa.scalar(None, pa.float64()), d)
    return canonical_floats(pc.divide(x, d))  # 0.0 / -2 is 0.0, as 1e-300 / -1e300


def _concat(args: Sequence[Any], out: Out) -> Any:
    return pc.binary_join_element_wise(args[0], args[1], "")


def _like(args: Sequence[Any], out: Out) -> Any:
    s, pattern = args
    if isinstance(pattern, pa.Scalar) and pattern.is_valid:  # one pattern (a constant): Arrow's LIKE
        return pc.match_like(s, pattern.as_py().replace("\\", "\\\\"))  # its '\' escapes; CQL's does not
    return by_rows(S.like, args, out)  # a pattern per row: the definition on each


def _coalesce(args: Sequence[Any], out: Out) -> Any:
    return pc.coalesce(*[full(a, out.rows, out.arrow) for a in args])


# -- the registry -------------------------------------------------------------------------------


def _infix(
    name: str, symbol: str, typing: T.TypingRule, row: Callable[..., Any], vector: Kernel | RowOnly
) -> FunctionDef:
    return FunctionDef(name, Syntax.INFIX, symbol, (2, 2), typing, row, vector)


def _arith(op: str) -> T.TypingRule:
    return lambda ts: T.arith(op, ts[0], ts[1])


def _boolean(what: str) -> T.TypingRule:
    return lambda ts: T.boolean(what, *ts)


def _compare(ts: Sequence[DataType]) -> DataType:
    return T.compare(ts[0], ts[1])


_DEFS = (
    _infix("add", "+", _arith("+"), S.add, _checked(pc.add_checked)),
    _infix("sub", "-", _arith("-"), S.sub, _checked(pc.subtract_checked)),
    _infix("mul", "*", _arith("*"), S.mul, _checked(pc.multiply_checked)),
    _infix("div", "/", _arith("/"), S.div, _div),
    _infix(
        "mod",
        "%",
        _arith("%"),
        S.mod,
        RowOnly("Arrow's remainder raises on a zero divisor, where the definition is NULL (not masked yet, as '/' is)"),
    ),
    _infix("concat", "||", lambda ts: T.concat(ts[0], ts[1]), S.concat, _concat),
    _infix("eq", "=", _compare, S.eq, _plain(pc.equal)),
    _infix("ne", "<>", _compare, S.ne, _plain(pc.not_equal)),
    _infix("lt", "<", _compare, S.lt, _plain(pc.less)),
    _infix("le", "<=", _compare, S.le, _plain(pc.less_equal)),
    _infix("gt", ">", _compare, S.gt, _plain(pc.greater)),
    _infix("ge", ">=", _compare, S.ge, _plain(pc.greater_equal)),
    _infix("and", "AND", _boolean("AND"), S.and_, _plain(pc.and_kleene)),
    _infix("or", "OR", _boolean("OR"), S.or_, _plain(pc.or_kleene)),
    _infix("like", "LIKE", lambda ts: T.like(ts[0], ts[1]), S.like, _like),
    FunctionDef("not", Syntax.PREFIX, "NOT", (1, 1), _boolean("NOT"), S.not_, _plain(pc.invert)),
    FunctionDef("neg", Syntax.PREFIX, "-", (1, 1), lambda ts: T.negate(ts[0]), S.neg, _checked(pc.negate_checked)),
    FunctionDef("is_null", Syntax.POSTFIX, "IS NULL", (1, 1), lambda ts: BOOLEAN, S.is_null, _plain(pc.is_null)),
    FunctionDef(
        "is_not_null", Syntax.POSTFIX, "IS NOT NULL", (1, 1), lambda ts: BOOLEAN, S.is_not_null, _plain(pc.is_valid)
    ),
    FunctionDef("abs", Syntax.CALL, "ABS", (1, 1), T.numeric1("ABS"), S.abs_, _plain(pc.abs_checked)),
    FunctionDef(
        "floor",
        Syntax.CALL,
        "FLOOR",
        (1, 1),
        T.numeric1("FLOOR"),
        S.floor,
        RowOnly("Arrow's floor turns an integer into a float; the definition keeps it"),
    ),
    FunctionDef(
        "ceil",
        Syntax.CALL,
        "CEIL",
        (1, 1),
        T.numeric1("CEIL"),
        S.ceil,
        RowOnly("Arrow's ceil turns an integer into a float; the definition keeps it"),
    ),
    FunctionDef(
        "round",
        Syntax.CALL,
        "ROUND",
        (1, 2),
        T.round_type,
        S.round_,
        RowOnly("Arrow rounds the binary value (ROUND(-71.975, 2) = -71.97); the definition its decimal (-71.98)"),
    ),
    FunctionDef(
        "lower",
        Syntax.CALL,
        "LOWER",
        (1, 1),
        T.string1("LOWER", None),
        S.lower,
        RowOnly("Arrow maps one code point to one ('İ' → 'i'); Python's str.lower gives two ('i̇')"),
    ),
    FunctionDef(
        "upper",
        Syntax.CALL,
        "UPPER",
        (1, 1),
        T.string1("UPPER", None),
        S.upper,
        RowOnly("Arrow maps one code point to one ('ß' → 'ẞ'); Python's str.upper gives 'SS'"),
    ),
    FunctionDef(
        "length", Syntax.CALL, "LENGTH", (1, 1), T.string1("LENGTH", INTEGER), S.length, _plain(pc.utf8_length)
    ),  # code points, as Python's len
    FunctionDef("coalesce", Syntax.CALL, "COALESCE", (1, 64), T.coalesce_type, S.coalesce, _coalesce),
    FunctionDef(
        "nullif",
        Syntax.CALL,
        "NULLIF",
        (2, 2),
        T.nullif_type,
        S.nullif,
        RowOnly("no single Arrow kernel (an if_else over equal would do; not written yet)"),
    ),
)

FUNCTIONS: Mapping[str, FunctionDef] = MappingProxyType({d.name: d for d in _DEFS})
"""Every scalar function and operator by internal name (``Call.fn``)."""

INFIX: Mapping[str, FunctionDef] = MappingProxyType({d.symbol: d for d in _DEFS if d.syntax is Syntax.INFIX})
"""Binary operators by symbol (``+``, ``=``, ``AND``, ``||``, ``LIKE``), for the binder."""

PREFIX: Mapping[str, FunctionDef] = MappingProxyType({d.symbol: d for d in _DEFS if d.syntax is Syntax.PREFIX})
"""Unary operators by symbol (``NOT``, ``-``)."""

BUILTINS: Mapping[str, FunctionDef] = MappingProxyType({d.symbol: d for d in _DEFS if d.syntax is Syntax.CALL})
"""Functions callable by name (``ROUND``, ``COALESCE``, …), by their SQL name."""

if len(FUNCTIONS) != len(_DEFS) or len(INFIX) + len(PREFIX) + len(BUILTINS) != sum(
    d.syntax is not Syntax.POSTFIX for d in _DEFS
):
    raise InternalError("two scalar functions share a name, or two of one syntax a symbol")


def function(name: str) -> FunctionDef:
    """The definition of the function a ``Call`` names (an unknown name is a bug, and says so)."""
    d = FUNCTIONS.get(name)
    if d is None:
        raise InternalError(f"no scalar function {name!r} (sluice.plan.function_defs.FUNCTIONS)")
    return d
