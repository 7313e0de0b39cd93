"""Join keys of different numeric types compared exactly (SQL: ``2^53 + 1 = 9007199254740992.0``
is false), the way every join operator matches them.

Casting both sides to double, as a hash join must for one key type, rounds integers beyond 2^53
(and Arrow refuses the cast); instead a double key becomes the integer it equals — when it is
finite, integral and in BIGINT's range — and matches nothing otherwise.

>>> import pyarrow as pa
>>> a, b = comparable(pa.array([2**53 + 1, 3]), pa.array([9007199254740992.0, 3.0]))
>>> b.to_pylist()
[9007199254740992, 3]
>>> comparable(pa.array([1]), pa.array([1.5, float("inf"), None]))[1].to_pylist()
[None, None, None]
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa


def comparable(a: Any, b: Any) -> tuple[Any, Any]:
    """``a`` and ``b`` (Arrow arrays of two key columns) of one type, equal exactly where the
    values are equal; NULL (which matches nothing) where a value has no equal on the other side.
    """
    if a.type == b.type:
        return a, b
    if pa.types.is_integer(a.type) and pa.types.is_floating(b.type):
        return a.cast(pa.int64()), as_integer(b)
    if pa.types.is_floating(a.type) and pa.types.is_integer(b.type):
        return as_integer(a), b.cast(pa.int64())
    return a.cast(pa.float64()), b.cast(pa.float64())


def as_integer(f: Any) -> pa.Array:
    """A double column as the BIGINTs its values equal; NULL where none (fractions, ±inf, NaN,
    beyond BIGINT's range).
    """
    v = np.asarray(f.to_numpy(zero_copy_only=False), dtype=np.float64)  # NULL → NaN
    with np.errstate(invalid="ignore"):
        ok = np.isfinite(v) & (np.floor(v) == v) & (v >= -(2.0**63)) & (v < 2.0**63)
    return pa.array(np.where(ok, v, 0).astype(np.int64), mask=~ok)
