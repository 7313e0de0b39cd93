"""Numbers at their limits: one rule for every backend and the reference evaluator
(design note ``docs/design/011-numbers-at-the-limits.md``).

* **No NaN.**  NaN is not a SQL value: a NaN in input is NULL (pandas' and pyarrow's convention
  for a missing float), and an operation whose IEEE result is NaN (``inf - inf``, ``0 * inf``,
  ``SUM`` over both infinities) gives NULL.  ±infinity are values: they compare, sort, add and
  aggregate as IEEE 754 says; a float sum beyond the largest double is ±infinity.
* **One zero.**  ``-0.0`` equals ``0.0``, so grouping, DISTINCT, set operations and Istream keep
  one of the two for both — and a user function could tell which.  Sluice has one float zero:
  every float entering the system or computed (``-0.0``, ``0.0 * -1``, ``ROUND(-0.4)``) holds
  ``0.0``, so every backend, the reference evaluator and a UDF see the same value.
* **Integers are 64-bit.**  An integer expression whose exact result lies outside
  [−2^63, 2^63 − 1] is an error *of the row* (:class:`RowError`): that row is dropped by the
  operator that evaluates it and counted as rejected for its query, with the reason; the other
  rows and the other queries go on.  Evaluation is deterministic, so a stream element and its
  later deletion are both dropped — the relation stays consistent.  The same holds for any other
  per-row failure (a UDF raising, ``ROUND`` of infinity).
* **Aggregates are exact.**  Integer sums are kept exactly; a group whose ``SUM`` lies outside
  the 64-bit range has no row while it does (counted).  Float sums are exact sums of the doubles,
  rounded once (order-independent, like ``math.fsum``), with the infinities as above.

>>> float_sum([(1e308, 1), (1e308, 1)]), float_sum([(float("inf"), 1), (float("-inf"), 2)])
(inf, None)
>>> float_sum([(0.1, 3)]), float_sum([(1.0, 1), (2.0, 1)], divisor=2)
(0.30000000000000004, 1.5)
>>> canonical(-0.0), canonical(float("nan")), canonical(-2.5), canonical(7)
(0.0, None, -2.5, 7)
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from fractions import Fraction
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from sluice.errors import SluiceError

INT_MIN, INT_MAX = -(2**63), 2**63 - 1
SCALE = 1074  # every finite double is an integer multiple of 2^-1074


class RowError(SluiceError):
    """Evaluating an expression on one row failed (integer overflow, a UDF raising, ...): the row
    is dropped by that operator and counted; nothing else stops.
    """


def fits(v: Any) -> bool:
    """Whether a value can be stored (an integer within 64 bits; anything else is fine)."""
    return not (isinstance(v, int) and not isinstance(v, bool) and not INT_MIN <= v <= INT_MAX)


def row_fits(row: tuple[Any, ...]) -> bool:
    return all(fits(v) for v in row)


def canonical(v: Any) -> Any:
    """A value as Sluice holds it: a float NaN is NULL and ``-0.0`` is ``0.0``; anything else as it is."""
    if isinstance(v, float):
        return None if v != v else v + 0.0  # IEEE: -0.0 + 0.0 is +0.0, every other value unchanged
    return v


def canonical_floats(v: Any) -> Any:
    """Float Arrow values (array, chunked array or scalar) as Sluice holds them, vectorised:
    ``-0.0`` → ``0.0`` (adding ``0.0``), NaN → NULL (the ``if_else`` only where there is a NaN).
    """
    v = pc.add(v, pa.scalar(0.0, v.type))
    if isinstance(v, pa.Scalar) or (v.null_count < len(v) and pc.any(pc.is_nan(v)).as_py()):
        v = pc.if_else(pc.is_nan(v), pa.scalar(None, v.type), v)
    return v


def checked(v: Any) -> Any:
    """An arithmetic result as SQL has it: NaN → NULL, ``-0.0`` → ``0.0``, an integer beyond 64
    bits a :class:`RowError`.
    """
    if isinstance(v, float):
        return None if v != v else v + 0.0
    if not fits(v):
        raise RowError(f"integer overflow: {v} is outside BIGINT's range")
    return v


def exact(v: float) -> int:
    """A finite double as an integer multiple of 2^-1074 (exact)."""
    n, d = v.as_integer_ratio()
    return n * ((1 << SCALE) // d)


def to_float(q: Fraction) -> float:
    """The double nearest ``q`` (±inf beyond the largest double, as IEEE rounding gives)."""
    try:
        return float(q)
    except OverflowError:
        return math.inf if q > 0 else -math.inf


def float_sum(items: Iterable[tuple[float, int]], divisor: int = 1) -> float | None:
    """The sum of values taken ``count`` times each (÷ ``divisor`` for AVG), rounded once;
    ``None`` (NULL) when it would be NaN.
    """
    total, pos, neg = 0, False, False
    for v, c in items:
        if not c:
            continue
        if v == math.inf:
            pos = True
        elif v == -math.inf:
            neg = True
        elif v == v:
            total += exact(v) * c
        else:
            return None
    if pos or neg:
        return None if pos and neg else (math.inf if pos else -math.inf)
    return to_float(Fraction(total, (1 << SCALE) * divisor))


__all__ = [
    "INT_MAX",
    "INT_MIN",
    "RowError",
    "canonical",
    "canonical_floats",
    "checked",
    "exact",
    "fits",
    "float_sum",
    "row_fits",
    "to_float",
]
