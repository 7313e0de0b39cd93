"""Scalar SQL semantics, one plain function per operator: the definition every backend shares.
``sluice.plan.function_defs.FUNCTIONS`` names each (its ``row``); the reference evaluator calls
them, the engine where no vectorised kernel is exact.

Three-valued logic: ``None`` is NULL/UNKNOWN.  Integer ``/`` truncates toward zero and
``%`` takes the dividend's sign (C semantics, as in STREAM).  Division or modulo by zero
yields NULL.  ``ROUND`` rounds half away from zero.  Arithmetic follows
:mod:`sluice.plan.numeric`: a NaN result is NULL, ``-0.0`` is ``0.0``, an integer beyond 64 bits a
``RowError``.

>>> div(7, -2), mod(-7, 2), div(7.0, 2)
(-3, -1, 3.5)
>>> and_(None, False), or_(None, False)
(False, None)
>>> like("http://cs.stanford.edu/x", "http://cs.stanford.edu/%")
True
"""

from __future__ import annotations

import functools
import math
import operator
import re
from collections.abc import Callable, Iterable, Sequence
from decimal import ROUND_HALF_UP, Context, Decimal
from typing import Any

import pyarrow as pa

from sluice.datatypes import DataType, arrow_type
from sluice.plan.expr import UdfCall
from sluice.plan.numeric import RowError, checked


def _strict(fn: Callable[..., Any]) -> Callable[..., Any]:
    """NULL in, NULL out."""

    @functools.wraps(fn)
    def wrapped(*args: Any) -> Any:
        if any(a is None for a in args):
            return None
        return fn(*args)

    return wrapped


def _arith(fn: Callable[..., Any]) -> Callable[..., Any]:
    """NULL in, NULL out; the result :func:`~sluice.plan.numeric.checked` (NaN → NULL, -0.0 → 0.0,
    overflow → row error).
    """

    @functools.wraps(fn)
    def wrapped(*args: Any) -> Any:
        if any(a is None for a in args):
            return None
        try:
            return checked(fn(*args))
        except ValueError:  # math domain (fmod of infinity): NaN in IEEE terms
            return None

    return wrapped


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


@_arith
def div(a: Any, b: Any) -> Any:
    if b == 0:
        return None
    if _is_int(a) and _is_int(b):
        q = abs(a) // abs(b)
        return q if (a >= 0) == (b >= 0) else -q
    return a / b


@_arith
def mod(a: Any, b: Any) -> Any:
    if b == 0:
        return None
    if _is_int(a) and _is_int(b):
        r = abs(a) % abs(b)
        return r if a >= 0 else -r
    return math.fmod(a, b)


def and_(a: Any, b: Any) -> Any:
    if a is False or b is False:
        return False
    if a is None or b is None:
        return None
    return True


def or_(a: Any, b: Any) -> Any:
    if a is True or b is True:
        return True
    if a is None or b is None:
        return None
    return False


@functools.lru_cache(maxsize=1024)
def like_regex(pattern: str) -> re.Pattern[str]:
    """SQL LIKE pattern → compiled regex: ``%`` any run, ``_`` one character."""
    out = []
    for ch in pattern:
        if ch == "%":
            out.append(".*")
        elif ch == "_":
            out.append(".")
        else:
            out.append(re.escape(ch))
    return re.compile("".join(out), re.DOTALL)


@_strict
def like(s: str, pattern: str) -> bool:
    return like_regex(pattern).fullmatch(s) is not None


_ROUNDING = Context(prec=1000, rounding=ROUND_HALF_UP)  # digits enough for any float or int64 at any scale


@_strict
def round_(x: Any, digits: int = 0) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return x
    d = Decimal(repr(x))
    if digits >= -int(d.as_tuple().exponent):
        return x  # no digit to round away
    digits = max(digits, -(d.adjusted() + 2))  # to any unit above 10·|x|, x rounds to 0
    q = d.quantize(Decimal(1).scaleb(-digits), context=_ROUNDING)
    # ROUND(-0.4) is 0.0, never -0.0 (one zero); ROUND(-2^63, -19) is beyond 64 bits
    return checked(float(q) if isinstance(x, float) else int(q))


@_strict
def floor(x: Any) -> Any:
    return float(math.floor(x)) if isinstance(x, float) and math.isfinite(x) else x


@_strict
def ceil(x: Any) -> Any:
    return float(math.ceil(x)) if isinstance(x, float) and math.isfinite(x) else x


def coalesce(*args: Any) -> Any:
    return next((a for a in args if a is not None), None)


def nullif(a: Any, b: Any) -> Any:
    return None if a is not None and b is not None and a == b else a


add = _arith(operator.add)
sub = _arith(operator.sub)
mul = _arith(operator.mul)
neg = _arith(operator.neg)
abs_ = _arith(abs)
concat = _strict(operator.add)
eq = _strict(operator.eq)
ne = _strict(operator.ne)
lt = _strict(operator.lt)
le = _strict(operator.le)
gt = _strict(operator.gt)
ge = _strict(operator.ge)
not_ = _strict(operator.not_)
lower = _strict(str.lower)
upper = _strict(str.upper)
length = _strict(len)


def is_null(a: Any) -> bool:
    return a is None


def is_not_null(a: Any) -> bool:
    return a is not None


def call_udf(name: str, fn: Callable[..., Any], strict: bool, args: list[Any]) -> Any:
    """A user's function on one row's values: NULL in, NULL out when ``strict``; its failure (or
    a result that cannot be stored) is the row's :class:`~sluice.plan.numeric.RowError`.
    """
    if strict and any(a is None for a in args):
        return None
    try:
        return checked(fn(*args))
    except RowError:
        raise
    except Exception as ex:  # any failure of user code is that row's error, never the engine's
        raise RowError(f"{name}: {type(ex).__name__}: {ex}") from None


def call_vectorized_udf(
    name: str,
    fn: Callable[..., Any],
    strict: bool,
    args: list[Any],
    types: Sequence[DataType],
    result: DataType,
) -> Any:
    """A vectorized user function on one row: each value as an array of one of its registered
    type (``types``), the one result cast to ``result`` as the batch path casts it — so a row gives
    what the batch gives.  NULL in, NULL out when ``strict``; a failure is the row's ``RowError``.
    """

    def on_one_row(*values: Any) -> Any:
        out = fn(*(pa.array([v], arrow_type(t)) for v, t in zip(values, types, strict=True)))
        out = out if isinstance(out, pa.Array | pa.ChunkedArray) else pa.array(out)
        if len(out) != 1:
            raise ValueError(f"returned {len(out)} values for 1 row")
        return out.cast(arrow_type(result))[0].as_py()

    return call_udf(name, on_one_row, strict, args)


def udf_value(e: UdfCall, args: list[Any]) -> Any:
    """A user function call's value on one row's argument values, either kind of function."""
    if e.vectorized:
        return call_vectorized_udf(e.name, e.fn, e.strict, args, e.array_types(), e.type)
    return call_udf(e.name, e.fn, e.strict, args)


def quantified(results: Iterable[Any], every: bool) -> Any:
    """SQL's ``x op ALL (…)`` (``every``) / ``ANY``/``IN`` from the comparisons' 3VL results:
    ALL is FALSE if one is FALSE, else NULL if one is NULL, else TRUE (TRUE over no rows);
    ANY is TRUE if one is TRUE, else NULL if one is NULL, else FALSE.

    >>> quantified([True, None], every=True), quantified([True, None], every=False), quantified([], every=True)
    (None, True, True)
    """
    rs = set(results)
    if every:
        return False if False in rs else (None if None in rs else True)
    return True if True in rs else (None if None in rs else False)
