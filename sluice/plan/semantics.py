"""Definitions every backend must share bit-for-bit: deterministic sampling and value coercion.

Sampling (seed §2: "each data element ... retained with probability p") must still give
*exact* answers to compare: an element is kept iff a stable hash of
(seed, sample salt, τ, tuple, k) — k = how many equal tuples came before it at τ — falls
below the fraction.  The hash ignores arrival order within an instant, so every backend
keeps the same multiset.

>>> sample_keep(0, 7, 5, (1, "a"), 0, 1.0)
True
"""

from __future__ import annotations

import hashlib
from typing import Any

from sluice.datatypes import DataType, TypeKind


def sample_keep(seed: int, salt: int, ts: int, row: tuple[Any, ...], k: int, fraction: float) -> bool:
    """Whether the k-th copy of ``row`` at instant ``ts`` survives ``Sample(fraction·100)``."""
    if fraction >= 1.0:
        return True
    digest = hashlib.blake2b(repr((seed, salt, ts, row, k)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") < int(fraction * 2**64)


def sort_key(row: tuple[Any, ...]) -> tuple[Any, ...]:
    """The canonical order of rows of one schema (NULLs last): how a derived stream lists one
    instant's elements, and how outputs are printed.
    """
    return tuple((v is None, v if v is not None else 0) for v in row)


def coerce(value: Any, t: DataType) -> Any:
    """A value as its column type holds it (an integer in a float column is a float)."""
    if value is None:
        return None
    if t.kind is TypeKind.FLOAT and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return value
