"""Workload generators: bursty arrivals, trace replay, the seed papers' streams, NEXMark."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa


def to_table(names: Sequence[str], rows: Sequence[tuple[Any, ...]]) -> pa.Table:
    """Generated rows as an Arrow table with these column names (``ts`` as int64, the rest inferred).

    >>> to_table(["ts", "a"], [(1, "x"), (2, "y")]).to_pylist()
    [{'ts': 1, 'a': 'x'}, {'ts': 2, 'a': 'y'}]
    """
    cols: list[Any] = list(zip(*rows, strict=True)) if rows else [() for _ in names]
    return pa.table(
        {n: pa.array(list(c), pa.int64()) if n == "ts" else list(c) for n, c in zip(names, cols, strict=True)}
    )
