"""Weighted multisets as Arrow tables: attribute columns plus ``__w`` (a signed count).

A relation's synopsis is the sum of the signed elements seen so far.  Appending deltas and
consolidating lazily (group by all attributes, sum the weights, drop zeros) keeps it exact;
joins over an unconsolidated synopsis are still exact because a join is bilinear in weights.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from sluice.datatypes import DataType
from sluice.runtime.batch import META, arrow_type

W = "__w"


def empty_weighted(types: Sequence[DataType]) -> pa.Table:
    fields = [pa.field(f"c{i}", arrow_type(t)) for i, t in enumerate(types)] + [pa.field(W, pa.int64())]
    return pa.schema(fields).empty_table()


def from_batch(b: pa.Table) -> pa.Table:
    """Signed elements → weighted rows (timestamps dropped)."""
    cols = b.columns[META:]
    w = pa.array(b.column(1).to_numpy().astype(np.int64))
    return pa.Table.from_arrays([*cols, w], names=[f"c{i}" for i in range(len(cols))] + [W])


def consolidate(t: pa.Table) -> pa.Table:
    if t.num_rows == 0:
        return t
    keys = t.column_names[:-1]
    if not keys:
        total = int(np.sum(t.column(W).to_numpy()))
        return t.slice(0, 0) if total == 0 else pa.table({W: [total]})
    g = t.group_by(keys, use_threads=False).aggregate([(W, "sum")])
    g = g.rename_columns(keys + [W])
    w = g.column(W).to_numpy()
    return g.filter(pa.array(w != 0)) if (w == 0).any() else g


class WeightedState:
    """A synopsis of a relation: append deltas, consolidate when half of it is unconsolidated."""

    def __init__(self, types: Sequence[DataType]) -> None:
        self.types = list(types)
        self.table = empty_weighted(types)
        self._fresh = 0

    def add(self, b: pa.Table) -> None:
        if b.num_rows == 0:
            return
        self.table = pa.concat_tables([self.table, from_batch(b)])
        self._fresh += b.num_rows
        if self._fresh * 2 > self.table.num_rows or self._fresh > 1_000_000:
            self.table = consolidate(self.table)
            self._fresh = 0

    def consolidated(self) -> pa.Table:
        if self._fresh:
            self.table = consolidate(self.table)
            self._fresh = 0
        return self.table

    @property
    def nbytes(self) -> int:
        return self.table.nbytes
