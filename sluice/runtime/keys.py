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

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

INT64_SAFE = float(2**62)  # integers whose magnitude stays below this cannot overflow int64


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


def dense_integers(c: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray] | None:
    """An integer column without NULLs whose values span a narrow range, coded by a lookup table
    (a counting pass, no hashing): each row's code and the values in code order.  None otherwise.
    """
    if not pa.types.is_integer(c.type) or c.null_count or not len(c):
        return None
    x = c.to_numpy()
    lo, hi = int(x.min()), int(x.max())
    if hi - lo >= 4 * len(x) + 1024:
        return None
    off = (x - lo).astype(np.intp)
    values = np.flatnonzero(np.bincount(off, minlength=hi - lo + 1))
    lut = np.empty(hi - lo + 1, dtype=np.int64)
    lut[values] = np.arange(len(values))
    return lut[off], values + lo


def column_codes(c: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, Any]:
    """Each row's dense code (NULL a value of its own; equal where Arrow's group-by sees equal
    values: NaNs alike, ``-0.0`` apart from ``0.0``) and the values in code order (an Arrow or
    NumPy array).
    """
    dense = dense_integers(c)
    if dense is not None:
        return dense
    if isinstance(c, pa.ChunkedArray):
        c = c.combine_chunks()
    d = pc.dictionary_encode(c, null_encoding="encode")  # hash-based (Arrow)
    return d.indices.to_numpy(zero_copy_only=False).astype(np.int64), d.dictionary


def least(codes: np.ndarray, ncodes: int, values: np.ndarray, empty: int) -> np.ndarray:
    """Each code's least value among the rows holding it (``empty`` for a code no row has)."""
    out = np.full(ncodes, empty, dtype=np.int64)
    np.minimum.at(out, codes, values)
    return out


def first_rows(codes: np.ndarray, ncodes: int) -> np.ndarray:
    """Each code's first row among ``codes`` (``len(codes)`` for a code no row has)."""
    return least(codes, ncodes, np.arange(len(codes), dtype=np.int64), len(codes))


def row_codes(cols: Sequence[pa.Array | pa.ChunkedArray], n: int) -> tuple[np.ndarray, np.ndarray | None, list[Any]]:
    """Each row's group over several columns (equal rows, one id; dense), each group's first row
    (None with one column: its codes are the groups) and each column's values in code order.
    """
    if not cols:
        return np.zeros(n, np.int64), np.zeros(min(n, 1), np.int64), []
    coded = [column_codes(c) for c in cols]
    codes, dicts = [c for c, _ in coded], [d for _, d in coded]
    if len(codes) == 1:
        return codes[0], None, dicts
    if float(np.prod([float(len(d)) for d in dicts])) < INT64_SAFE:
        combined = codes[0]
        for c, d in zip(codes[1:], dicts[1:], strict=True):
            combined = combined * len(d) + c
        _, first, inv = np.unique(combined, return_index=True, return_inverse=True)
    else:
        _, first, inv = np.unique(np.stack(codes, axis=1), axis=0, return_index=True, return_inverse=True)
    return inv.reshape(-1), first, dicts


def key_pairs(
    lkeys: Sequence[pa.Array | pa.ChunkedArray], rkeys: Sequence[pa.Array | pa.ChunkedArray], nl: int, nr: int
) -> tuple[np.ndarray, np.ndarray]:
    """Row index pairs (i, j) of ``nl`` left and ``nr`` right rows whose key columns are equal
    (Arrow's hash join, keys made ``comparable``; NULL matches nothing); every pair without keys.
    """
    if not nl or not nr:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    if not lkeys:
        return np.repeat(np.arange(nl), nr), np.tile(np.arange(nr), nl)
    left, right = {}, {}
    for k, (a, b) in enumerate(zip(lkeys, rkeys, strict=True)):
        left[f"k{k}"], right[f"k{k}"] = comparable(a, b)
    lt = pa.table(left | {"__i": pa.array(np.arange(nl))})
    rt = pa.table(right | {"__j": pa.array(np.arange(nr))})
    j = lt.join(rt, list(left), join_type="inner", use_threads=False)
    return j.column("__i").to_numpy().astype(np.int64), j.column("__j").to_numpy().astype(np.int64)


def rows_equal(a: Sequence[pa.Array | pa.ChunkedArray], b: Sequence[pa.Array | pa.ChunkedArray]) -> bool:
    """Whether two lists of equally long columns hold the same rows in the same order (NULL equal
    to NULL, as a group-by sees them).
    """
    for x, y in zip(a, b, strict=True):
        if pa.types.is_null(x.type) or pa.types.is_null(y.type):  # (a column of NULLs alone)
            if x.null_count != len(x) or y.null_count != len(y):
                return False
            continue
        nx, ny = pc.is_null(x), pc.is_null(y)
        if not pc.all(pc.equal(nx, ny)).as_py():
            return False
        if not pc.all(pc.fill_null(pc.or_kleene(nx, pc.equal(x, y)), False)).as_py():
            return False
    return True
