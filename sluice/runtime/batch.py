"""Columnar batches of elements ``(ts, sign, attrs…)`` as Arrow tables.

A batch is a ``pyarrow.Table`` whose first two columns are ``__ts`` (int64, non-decreasing) and
``__sign`` (int8, +1 insert / −1 delete), followed by the attributes, named by position
(``c0, c1, …``) so that duplicate output names (``S1.A, S2.A``) never clash.

>>> from sluice.datatypes import INTEGER, VARCHAR
>>> b = from_rows([(1, (5, "x")), (2, (6, None))], [INTEGER, VARCHAR])
>>> b.num_rows, b.column_names
(2, ['__ts', '__sign', 'c0', 'c1'])
>>> to_elements(b)
[(1, '+', (5, 'x')), (2, '+', (6, None))]
"""

from __future__ import annotations

import functools
import io
import pickle
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sluice.datatypes import DataType, arrow_type

TS = "__ts"
SIGN = "__sign"
META = 2  # columns before the attributes
NEG_INF = -(2**62)
POS_INF = 2**62


def names(n: int) -> list[str]:
    return [TS, SIGN] + [f"c{i}" for i in range(n)]


def arrow_schema(types: Sequence[DataType]) -> pa.Schema:
    return _schema(tuple(types))


@functools.lru_cache(maxsize=4096)
def _schema(types: tuple[DataType, ...]) -> pa.Schema:  # building one costs ~0.1 ms: once per plan
    fields = [pa.field(TS, pa.int64()), pa.field(SIGN, pa.int8())]
    fields += [pa.field(f"c{i}", arrow_type(t)) for i, t in enumerate(types)]
    return pa.schema(fields)


def empty(types: Sequence[DataType]) -> pa.Table:
    return _empty(tuple(types))


@functools.lru_cache(maxsize=4096)
def _empty(types: tuple[DataType, ...]) -> pa.Table:  # tables are immutable: one per schema
    return arrow_schema(types).empty_table()


def make(ts: Any, sign: Any, cols: Sequence[Any], types: Sequence[DataType]) -> pa.Table:
    """A batch from a timestamp array, a sign array (or scalar ±1) and attribute arrays."""
    ts_arr = pa.array(np.asarray(ts, dtype=np.int64))
    n = len(ts_arr)
    if isinstance(sign, int):
        sign_arr = pa.array(np.full(n, sign, dtype=np.int8))
    else:
        sign_arr = pa.array(np.asarray(sign, dtype=np.int8))
    arrays = [ts_arr, sign_arr]
    for c, t in zip(cols, types, strict=True):
        arrays.append(column(c, t, n))
    return pa.Table.from_arrays(arrays, schema=arrow_schema(types))


def column(c: Any, t: DataType, n: int) -> pa.Array | pa.ChunkedArray:
    """``c`` (array, chunked array, scalar or Python value) as an Arrow column of length n."""
    at = arrow_type(t)
    if isinstance(c, pa.ChunkedArray | pa.Array):
        return c if c.type == at else c.cast(at)
    if isinstance(c, np.ndarray):
        return pa.array(c, at)
    if isinstance(c, pa.Scalar):
        c = c.as_py()
    if c is None:
        return pa.nulls(n, at)
    return pa.array(np.full(n, c, dtype=object) if isinstance(c, str) else [c] * n, at)


def from_rows(rows: Iterable[tuple[int, Sequence[Any]]], types: Sequence[DataType], sign: int = 1) -> pa.Table:
    rows = list(rows)
    ts = [t for t, _ in rows]
    cols = [pa.array([r[i] for _, r in rows], arrow_type(t)) for i, t in enumerate(types)]
    return make(ts, sign, cols, types)


def from_signed_rows(rows: Iterable[tuple[int, int, Sequence[Any]]], types: Sequence[DataType]) -> pa.Table:
    rows = list(rows)
    cols = [pa.array([r[i] for _, _, r in rows], arrow_type(t)) for i, t in enumerate(types)]
    return make([t for t, _, _ in rows], [s for _, s, _ in rows], cols, types)


def attrs(b: pa.Table) -> list[pa.ChunkedArray]:
    return b.columns[META:]


def with_attrs(b: pa.Table, cols: Sequence[Any], types: Sequence[DataType]) -> pa.Table:
    n = b.num_rows
    arrays = [b.column(0), b.column(1)] + [column(c, t, n) for c, t in zip(cols, types, strict=True)]
    return pa.Table.from_arrays(arrays, schema=arrow_schema(types))


def concat(batches: Sequence[pa.Table], types: Sequence[DataType]) -> pa.Table:
    bs = [b for b in batches if b.num_rows]
    if not bs:
        return empty(types)
    if len(bs) == 1:
        return bs[0]
    return pa.concat_tables(bs)


@functools.lru_cache(maxsize=4096)
def _row_width(schema: pa.Schema) -> int | None:
    """Bytes per row when every column is fixed-width (None if any is not)."""
    width = 0
    for f in schema:
        if not pa.types.is_primitive(f.type) or pa.types.is_boolean(f.type):
            return None
        width += f.type.bit_width // 8
    return width


def nbytes(b: pa.Table) -> int:
    """The bytes a batch's values take (``Table.nbytes`` costs ~15 µs a call: computed from the
    row width when every column is fixed-width; validity bitmaps are not counted).
    """
    w = _row_width(b.schema)
    return b.num_rows * w if w is not None else b.nbytes


MERGE_RUNS = 16  # up to this many alternations a merge is zero-copy slices, beyond it one take


def merge_in_time(first: tuple[np.ndarray, pa.Table], then: tuple[np.ndarray, pa.Table]) -> pa.Table:
    """Two batches, each in order of its times, as one in time order with the times as its
    timestamps; within an instant ``first``'s elements come before ``then``'s (a stable merge —
    a window's deletions before its insertions).  When they alternate in few runs (a tumbling
    window's boundaries) the result is slices of the two, copying nothing; otherwise one take.
    """
    (ta, a), (tb, b) = first, then
    ta, tb = np.asarray(ta, dtype=np.int64), np.asarray(tb, dtype=np.int64)
    a = a.set_column(0, TS, pa.array(ta))
    b = b.set_column(0, TS, pa.array(tb))
    if not len(tb) or not len(ta):
        return b if len(tb) else a
    ia = np.searchsorted(ta, tb, side="right")  # each of b's elements follows this many of a's
    starts = np.flatnonzero(ia[1:] != ia[:-1]) + 1
    if len(starts) >= MERGE_RUNS:
        both = pa.concat_tables([a, b])
        return both.take(pa.array(np.argsort(np.concatenate([ta, tb]), kind="stable")))
    pieces, done = [], 0
    for lo, hi in zip([0, *starts.tolist()], [*starts.tolist(), len(tb)], strict=True):
        k = int(ia[lo])
        if k > done:
            pieces.append(a.slice(done, k - done))
        pieces.append(b.slice(lo, hi - lo))
        done = k
    if done < len(ta):
        pieces.append(a.slice(done))
    return pa.concat_tables(pieces)


def merge_newest_chunks(t: pa.Table) -> pa.Table:
    """``t`` with its newest chunks merged while the last holds at least half as many rows as the
    one before it: an appended-to table keeps O(log n) chunks and each row is copied O(log n)
    times (combining all of it at every append copies the whole table each time: issue #11, Q3).
    """
    if not t.num_columns or t.column(0).num_chunks < 2:
        return t
    lens = [len(c) for c in t.column(0).chunks]
    k = len(lens)
    while k >= 2 and 2 * lens[k - 1] >= lens[k - 2]:
        lens[k - 2] += lens[k - 1]
        k -= 1
    if k == len(lens):
        return t
    start = sum(lens[: k - 1])
    tail = t.slice(start).combine_chunks()
    return pa.concat_tables([t.slice(0, start), tail]) if start else tail


def ts_of(b: pa.Table) -> np.ndarray:
    return b.column(0).to_numpy()


def sign_of(b: pa.Table) -> np.ndarray:
    return b.column(1).to_numpy()


def sort_by_ts(b: pa.Table) -> pa.Table:
    """Stable sort on the timestamp (elements of one instant keep their order)."""
    if b.num_rows < 2:
        return b
    ts = ts_of(b)
    if np.all(ts[1:] >= ts[:-1]):
        return b
    return b.take(pa.array(np.argsort(ts, kind="stable")))


def canonical(b: pa.Table) -> pa.Table:
    """Sort by (ts, attributes) with NULLs last: the canonical order of a derived stream."""
    if b.num_rows < 2:
        return b
    keys = [(TS, "ascending", "at_end")] + [(n, "ascending", "at_end") for n in b.column_names[META:]]
    return b.sort_by(keys)


def to_elements(b: pa.Table) -> list[tuple[int, str, tuple[Any, ...]]]:
    ts = b.column(0).to_pylist()
    sg = b.column(1).to_pylist()
    cols = [c.to_pylist() for c in attrs(b)]
    rows = list(zip(*cols, strict=True)) if cols else [()] * len(ts)
    return [(t, "+" if s > 0 else "-", tuple(r)) for t, s, r in zip(ts, sg, rows, strict=True)]


def signed_counts(b: pa.Table) -> list[tuple[int, tuple[Any, ...], int]]:
    """``(instant, tuple, net sign)`` for every distinct (instant, tuple) of a batch, by instant:
    one Arrow group-by, for operators that keep per-tuple counts.
    """
    if b.num_rows == 0:
        return []
    names = b.column_names[META:]
    t = pa.table({TS: b.column(0), "s": pc.cast(b.column(1), pa.int64()), **{k: b.column(k) for k in names}})
    g = t.group_by([TS] + names, use_threads=False).aggregate([("s", "sum")])
    cols = [g.column(k).to_pylist() for k in names]
    rows = list(zip(*cols, strict=True)) if cols else [()] * g.num_rows
    out = list(zip(g.column(TS).to_pylist(), rows, g.column("s_sum").to_pylist(), strict=True))
    out.sort(key=lambda r: r[0])
    return out


def net(b: pa.Table, types: Sequence[DataType], keep_ts: bool = True) -> pa.Table:
    """Sum the signs of equal (ts, tuple) elements and expand the net counts back into elements.

    Transient pairs (an insertion and a deletion of one tuple at one instant) vanish.
    """
    if b.num_rows == 0:
        return b
    keys = ([TS] if keep_ts else []) + b.column_names[META:]
    if not keys:
        total = int(pc.sum(b.column(1)).as_py() or 0)
        return b.slice(0, 0) if total == 0 else b
    g = b.group_by(keys, use_threads=False).aggregate([(SIGN, "sum")])
    w = g.column(f"{SIGN}_sum").to_numpy().astype(np.int64)
    nz = w != 0
    if not nz.any():
        return b.slice(0, 0)
    g = g.filter(pa.array(nz))
    w = w[nz]
    reps = np.abs(w)
    idx = np.repeat(np.arange(len(w)), reps)
    out_sign = np.repeat(np.sign(w).astype(np.int8), reps)
    cols = [g.column(k).take(pa.array(idx)) for k in b.column_names[META:]]
    ts = g.column(TS).take(pa.array(idx)) if keep_ts else pa.array(np.zeros(len(idx), np.int64))
    return make(ts.to_numpy() if keep_ts else ts, out_sign, cols, types)


_ARROW_DATA = (pa.Table, pa.RecordBatch, pa.Array, pa.ChunkedArray)


class _Compacting(pickle.Pickler):
    """Pickles Arrow data by what it holds: pyarrow pickles a slice with the whole buffers it
    views (measured with pyarrow 26: one row of a 1,000,000-row table is 8 MB), and operator
    state is mostly slices of the batches that passed through.
    """

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, _ARROW_DATA) and obj.get_total_buffer_size() > 2 * obj.nbytes + 4096:
            copy = obj.take(pa.array(np.arange(len(obj), dtype=np.int64))) if len(obj) else _no_rows(obj)
            if copy.get_total_buffer_size() < obj.get_total_buffer_size():
                return copy.__reduce_ex__(pickle.HIGHEST_PROTOCOL)
        return NotImplemented


def _no_rows(obj: Any) -> Any:
    """Arrow data of ``obj``'s type with no rows and no buffers of its own (a zero-length slice
    still views the whole buffers).
    """
    if isinstance(obj, pa.Table):
        return obj.schema.empty_table()
    if isinstance(obj, pa.RecordBatch):
        return pa.RecordBatch.from_pylist([], schema=obj.schema)
    if isinstance(obj, pa.ChunkedArray):
        return pa.chunked_array([], type=obj.type)
    return pa.array([], type=obj.type)


def dumps(obj: Any) -> bytes:
    """``pickle.dumps`` for engine state: Arrow slices keep only their own rows (``_Compacting``).

    >>> t = pa.table({"a": np.arange(100_000)})
    >>> len(dumps(t.slice(5, 1))) < 1_000 < len(pickle.dumps(t.slice(5, 1)))
    True
    >>> pickle.loads(dumps(t.slice(5, 2))).column("a").to_pylist()
    [5, 6]
    >>> len(dumps(t.slice(100_000, 0))) < 1_000, len(dumps(t.column("a").slice(9, 0))) < 1_000
    (True, True)
    """
    out = io.BytesIO()
    _Compacting(out, protocol=pickle.HIGHEST_PROTOCOL).dump(obj)
    return out.getvalue()
