"""The one admission check.  Every way input enters — tuples, dicts, CSV/JSONL rows, Arrow
tables, pandas frames, typed batches (``push_batch``), on either backend — ends in
:func:`admit`, which checks each value against its declared type:

* integers within 64 bits; a NaN float is NULL, ``-0.0`` is ``0.0`` (one zero), ±infinity a value
  (``sluice.plan.numeric``);
* CHAR/VARCHAR(n) at most n characters, BYTE one;
* a timestamp present and within ±2^62 (the engine's ±infinity lie beyond);
* a relation's sign ``+``/``-`` (or ±1); anything else is rejected, never read as a deletion.

A value that does not fit rejects its row alone, with a reason naming the stream and row (or the
file and line); the other rows of the same push or file are kept.  Tables are checked
vectorised; Python rows are checked value by value only while being turned into columns.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sluice.catalog import Kind, Schema, SourceDef
from sluice.datatypes import BIGINT, VARCHAR, DataType, TypeKind
from sluice.errors import SluiceError
from sluice.plan.numeric import INT_MAX, INT_MIN, canonical, canonical_floats
from sluice.runtime.batch import META, NEG_INF, POS_INF, arrow_schema, arrow_type, make

TS_MIN, TS_MAX = NEG_INF + 1, POS_INF - 1  # admissible timestamps


def _limit(t: DataType) -> int | None:
    if t.kind is TypeKind.BYTE:
        return 1
    return t.length if t.kind in (TypeKind.CHAR, TypeKind.VARCHAR) else None


def check_value(v: Any, t: DataType) -> Any:
    """``v`` as a value of type ``t``, or ``ValueError`` saying why not."""
    if v is None:
        return None
    k = t.kind
    if t.is_integer or k is TypeKind.TIMESTAMP:
        if isinstance(v, bool) or not isinstance(v, int | np.integer):
            raise ValueError(f"{v!r} is not an integer")
        if not INT_MIN <= int(v) <= INT_MAX:
            raise ValueError(f"{v} is outside {t.sql()}'s range (64 bits)")
        return int(v)
    if k is TypeKind.FLOAT:
        if isinstance(v, bool) or not isinstance(v, int | float | np.integer | np.floating):
            raise ValueError(f"{v!r} is not a number")
        return canonical(float(v))  # NaN is NULL, -0.0 is 0.0
    if k is TypeKind.BOOLEAN:
        if not isinstance(v, bool | np.bool_):
            raise ValueError(f"{v!r} is not a boolean")
        return bool(v)
    if not isinstance(v, str):
        raise ValueError(f"{v!r} is not a string")
    limit = _limit(t)
    if limit is not None and len(v) > limit:
        raise ValueError(f"{v!r} is longer than {t.sql()}")
    return v


def punctuation_values(d: SourceDef, column: str, values: Any, upto: Any) -> tuple[np.ndarray | None, Any]:
    """A punctuation's ``values`` (sorted array) or ``upto`` (a value), each checked as a pushed
    value of ``column`` is (``check_value``), or ``SluiceError`` saying why not.
    """
    if not any(c.kind == "PUNCTUATED" and c.column.lower() == column.lower() for c in d.constraints):
        declared = ", ".join(c.sql() for c in d.constraints) or "none"
        raise SluiceError(
            f"{d.name}: punctuations on {column} need the stream to declare PUNCTUATED BY {column} "
            f"(its constraints: {declared})"
        )
    if (values is None) == (upto is None):
        raise SluiceError(f"{d.name}: a punctuation on {column} gives values=[…] or upto=…, one of them")
    if values is not None and (isinstance(values, str | bytes | Mapping) or not isinstance(values, Iterable)):
        raise SluiceError(f"{d.name}: a punctuation's values=… is a list of values of {column}, not {values!r}")
    col = d.schema.columns[d.schema.index(column)]
    raw = list(values) if values is not None else [upto]
    if not raw:
        raise SluiceError(f"{d.name}: a punctuation's values=[] names nothing")
    try:
        checked = [check_value(v, col.type) for v in raw]
    except ValueError as e:
        raise SluiceError(f"{d.name}: a punctuation's value does not fit {col.name} ({col.type.sql()}): {e}") from None
    if any(v is None for v in checked):  # (NaN is NULL too)
        raise SluiceError(f"{d.name}: a punctuation cannot name NULL (a NULL {col.name} is never closed)")
    arr = np.asarray(pa.array(checked, arrow_type(col.type)).to_numpy(zero_copy_only=False))
    return (arr, None) if values is not None else (None, arr[0])


def _too_long(c: Any, t: DataType) -> Callable[[int], str]:
    return lambda i: f"{c[i].as_py()!r} is longer than {t.sql()}"


def _longest_bytes(c: pa.ChunkedArray) -> int:
    """The most bytes any value of a string column takes, from its offsets (no pass over the
    characters); a bound on its characters, so a column within its length needs no per-row check.
    """
    most = 0
    for ch in c.chunks:
        if not pa.types.is_string(ch.type):
            return 2**62  # (another layout: the per-row check decides)
        if len(ch):
            offs = np.frombuffer(ch.buffers()[1], dtype=np.int32, count=len(ch) + 1, offset=4 * ch.offset)
            most = max(most, int(np.diff(offs).max()))
    return most


def _min_max(c: pa.ChunkedArray) -> tuple[Any, Any]:
    """A column's least and greatest values (None, None when it has none)."""
    if c.num_chunks == 1 and c.null_count == 0 and len(c):
        a = c.chunk(0).to_numpy()  # (zero-copy: a fifth of an Arrow min_max call's cost)
        return a.min().item(), a.max().item()
    mm = pc.min_max(c)
    return mm["min"].as_py(), mm["max"].as_py()


def admit(
    batch: pa.Table, types: Sequence[DataType], name: str, locate: Callable[[int], str] | None = None
) -> tuple[pa.Table, list[str]]:
    """The value checks every batch passes (vectorised): the rows that fit, and one message per
    row that does not.  ``locate(i)`` says where row ``i`` came from (default ``NAME, row i+1``;
    a file's reader gives ``file:line``).
    """
    n = batch.num_rows
    if n == 0:
        return batch, []
    bad = np.zeros(n, dtype=bool)
    why: dict[int, str] = {}

    def flag(mask: Any, reason: Callable[[int], str]) -> None:
        m = np.asarray(pc.fill_null(mask, False).to_numpy(zero_copy_only=False), dtype=bool)
        for i in np.flatnonzero(m & ~bad).tolist():
            why[i] = reason(i)
        bad[m] = True

    ts, sign = batch.column(0), batch.column(1)
    # each check runs row by row only when a batch-wide look says some row fails it (a clean
    # batch — the usual one — costs two min/max passes, not a dozen Arrow calls: issue #11)
    if ts.null_count:
        flag(pc.is_null(ts), lambda i: "timestamp missing")
    lo, hi = _min_max(ts)
    if lo is not None and (lo < TS_MIN or hi > TS_MAX):
        flag(
            pc.or_(pc.less(ts, TS_MIN), pc.greater(ts, TS_MAX)),
            lambda i: f"timestamp {ts[i].as_py()} is outside ±2^62",
        )
    if sign.null_count or _min_max(sign) != (1, 1):  # (all insertions: nothing to look at)
        flag(
            pc.invert(pc.is_in(pc.fill_null(sign, 0), pa.array([1, -1], sign.type))),
            lambda i: f"sign {sign[i].as_py()!r} is not + or -",
        )
    for j, t in enumerate(types):
        if t.kind is TypeKind.FLOAT:
            c = batch.column(META + j)
            if c.null_count < len(c):  # NaN is NULL, -0.0 is 0.0
                batch = batch.set_column(META + j, batch.schema.field(META + j), canonical_floats(c))
        limit = _limit(t)
        if limit is not None and _longest_bytes(batch.column(META + j)) > limit:  # (characters ≤ bytes)
            c = batch.column(META + j)
            flag(pc.greater(pc.utf8_length(c), limit), _too_long(c, t))
    if not bad.any():
        return batch, []
    where = locate or (lambda i: f"{name}, row {i + 1}")
    return batch.filter(pa.array(~bad)), [f"{where(i)}: {why[i]}" for i in sorted(why)]


def check_row(
    r: Any, schema: Schema, relation: bool, ts_key: str = "ts", sign_key: str = "sign"
) -> tuple[int, int, list[Any]]:
    """A tuple ``(ts, [sign,] v1, …)`` or dict ``{ts, [sign], attr: value}`` as (ts, ±1, values);
    ``ValueError`` (or ``KeyError``/``TypeError``) saying why it does not fit.
    """
    types = schema.types
    lead = 2 if relation else 1
    if isinstance(r, Mapping):
        ts = r[ts_key]
        sign = r.get(sign_key, "+")
        vals = [r.get(c.name, r.get(c.name.lower())) for c in schema.columns]
        extra = (
            set(r) - {ts_key, sign_key} - {c.name for c in schema.columns} - {c.name.lower() for c in schema.columns}
        )
        if extra:
            raise ValueError(f"unknown attribute(s) {', '.join(sorted(map(str, extra)))}")
    else:
        r = tuple(r)
        if len(r) != len(types) + lead:
            raise ValueError(
                f"{len(r)} values, expected {len(types) + lead} (ts{', sign' if relation else ''}, attributes)"
            )
        ts, sign, vals = r[0], (r[1] if relation else "+"), list(r[lead:])
    if isinstance(ts, bool) or not isinstance(ts, int | np.integer):
        raise ValueError(f"timestamp {ts!r} is not an integer")
    if not TS_MIN <= int(ts) <= TS_MAX:
        raise ValueError(f"timestamp {ts} is outside ±2^62")
    if sign in ("+", 1):
        s = 1
    elif sign in ("-", -1):
        s = -1
    else:
        raise ValueError(f"sign {sign!r} is not + or -")
    return int(ts), s, [check_value(v, t) for v, t in zip(vals, types, strict=True)]


def rows_to_batch(
    rows: Iterable[Any],
    schema: Schema,
    relation: bool,
    name: str,
    ts_key: str = "ts",
    sign_key: str = "sign",
    locate: Callable[[int], str] | None = None,
) -> tuple[pa.Table, list[str]]:
    """Tuples ``(ts, [sign,] v1, …)`` or dicts ``{ts, [sign], attr: value}`` → (batch, errors);
    ``locate(i)`` names row ``i`` in messages (default ``NAME, row i+1``).
    """
    where = locate or (lambda i: f"{name}, row {i + 1}")
    types = schema.types
    ts_out: list[int] = []
    signs: list[int] = []
    cols: list[list[Any]] = [[] for _ in types]
    errors: list[str] = []
    index: list[int] = []
    for i, r in enumerate(rows):
        try:
            ts, s, checked = check_row(r, schema, relation, ts_key, sign_key)
        except (ValueError, KeyError, TypeError) as e:
            errors.append(f"{where(i)}: {e}")
            continue
        index.append(i)
        ts_out.append(ts)
        signs.append(s)
        for c, v in zip(cols, checked, strict=True):
            c.append(v)
    arrays = [pa.array(c, arrow_type(t)) for c, t in zip(cols, types, strict=True)]
    batch, more = admit(make(ts_out, signs, arrays, types), types, name, lambda k: where(index[k]))
    return batch, errors + more


def _table_value(v: Any, t: DataType) -> Any:
    """A table's value as the checks see it: a float NaN is a missing value (NULL), and a whole
    float fits an integer column (pandas keeps integers with missing values as floats).
    """
    if isinstance(v, float | np.floating):
        if v != v:
            return None
        if (t.is_integer or t.kind is TypeKind.TIMESTAMP) and float(v).is_integer():
            return int(v)
    return v


def _castable(have: pa.DataType, t: DataType) -> bool:
    """Whether Arrow may cast a whole column of ``have`` to ``t`` — only where ``check_value``
    would take every value (numbers to numbers, strings to strings, booleans to booleans).
    """
    if pa.types.is_null(have):
        return True
    if t.is_integer or t.kind in (TypeKind.TIMESTAMP, TypeKind.FLOAT):
        return pa.types.is_integer(have) or pa.types.is_floating(have)
    if t.kind is TypeKind.BOOLEAN:
        return pa.types.is_boolean(have)
    return pa.types.is_string(have) or pa.types.is_large_string(have)


def _cast(col: Any, t: DataType, what: str) -> tuple[Any, np.ndarray, list[str]]:
    """A user's column as type ``t``: (column, bad-row mask, reason per bad row).  Vectorised when
    every value casts; value by value (to find the bad ones) when some do not.
    """
    at = arrow_type(t)
    n = len(col)
    if pa.types.is_floating(col.type) and t.kind is not TypeKind.FLOAT:  # pandas: integers with NaN
        col = pc.if_else(pc.is_nan(col), pa.scalar(None, col.type), col)
    if _castable(col.type, t):
        try:
            return pc.cast(col, at, safe=True), np.zeros(n, dtype=bool), []
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
            pass
    vals: list[Any] = []
    bad = np.zeros(n, dtype=bool)
    reasons: list[str] = []
    for i, v in enumerate(col.to_pylist()):
        try:
            vals.append(check_value(_table_value(v, t), t))
        except (ValueError, TypeError) as e:
            vals.append(None)
            bad[i] = True
            reasons.append(f"{what}: {e}")
    return pa.array(vals, at), bad, reasons


def _sign(raw: Any, n: int) -> Any:
    """A relation's sign column as int8 ±1, and 0 for anything that is not + or − (rejected)."""
    if pa.types.is_string(raw.type) or pa.types.is_large_string(raw.type):
        s = pc.if_else(pc.equal(raw, "+"), 1, pc.if_else(pc.equal(raw, "-"), -1, 0))
    elif pa.types.is_integer(raw.type):
        s = pc.if_else(pc.is_in(raw, pa.array([1, -1], raw.type)), raw, 0)
    else:
        return pa.array(np.zeros(n, dtype=np.int8))
    return pc.cast(pc.fill_null(s, 0), pa.int8())


def table_to_batch(
    table: Any,
    schema: Schema,
    relation: bool,
    ts_column: str,
    sign_column: str,
    name: str = "",
    tick_ns: int | None = None,
) -> tuple[pa.Table, list[str]]:
    """An Arrow table or pandas frame with a timestamp column (and a sign column for relations)
    → (the rows that fit as a typed batch, one message per row that does not).  A missing column
    is an error of the whole table.  A datetime timestamp column becomes ticks of ``tick_ns``
    nanoseconds (the engine's time unit; truncated).
    """
    columns = [str(c) for c in table.column_names] if isinstance(table, pa.Table) else [str(c) for c in table.columns]
    names = {n.lower(): n for n in columns}
    for c in schema.columns:
        if c.name.lower() not in names:
            raise ValueError(f"column {c.name!r} is missing (have: {', '.join(columns)})")
    if ts_column.lower() not in names:
        raise ValueError(f"timestamp column {ts_column!r} is missing")
    if relation and sign_column.lower() not in names:
        raise ValueError(f"sign column {sign_column!r} is missing")
    if not isinstance(table, pa.Table):
        try:
            table = pa.Table.from_pandas(table, preserve_index=False)
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OverflowError, ValueError):
            return _frame_rows(table, schema, relation, names[ts_column.lower()], names.get(sign_column.lower()), name)
    n = table.num_rows
    bad = np.zeros(n, dtype=bool)
    why: dict[int, str] = {}

    def note(mask: np.ndarray, reasons: list[str]) -> None:
        for i, r in zip(np.flatnonzero(mask).tolist(), reasons, strict=True):
            why.setdefault(i, r)
        bad[mask] = True

    ts = table.column(names[ts_column.lower()]).combine_chunks()
    if pa.types.is_timestamp(ts.type) or pa.types.is_date(ts.type):
        if tick_ns is None:
            raise ValueError(f"timestamp column {ts_column!r} holds datetimes; give integer ticks")
        ns = pc.cast(pc.cast(ts, pa.timestamp("ns")), pa.int64())
        ts = pc.divide(ns, pa.scalar(tick_ns, pa.int64()))
    elif ts.type != pa.int64():
        ts, tbad, treasons = _cast(ts, BIGINT, "timestamp")
        note(tbad, treasons)
    null_ts = np.asarray(pc.is_null(ts).to_numpy(zero_copy_only=False), dtype=bool)
    note(null_ts & ~bad, ["timestamp missing"] * int((null_ts & ~bad).sum()))
    sign = _sign(table.column(names[sign_column.lower()]).combine_chunks(), n) if relation else 1
    cols = []
    for c in schema.columns:
        col, cbad, reasons = _cast(table.column(names[c.name.lower()]).combine_chunks(), c.type, c.name)
        note(cbad, reasons)
        cols.append(col)
    batch = make(pc.fill_null(ts, 0).to_numpy(zero_copy_only=False), sign, cols, list(schema.types))
    msgs = [f"{name}, row {i + 1}: {why[i]}" for i in sorted(why)]
    keep = np.flatnonzero(~bad)
    if len(keep) < n:
        batch = batch.take(pa.array(keep))
    checked, more = admit(batch, list(schema.types), name, lambda k: f"{name}, row {int(keep[k]) + 1}")
    return checked, msgs + more


def _frame_rows(
    frame: Any, schema: Schema, relation: bool, ts: str, sign: str | None, name: str
) -> tuple[pa.Table, list[str]]:
    """A pandas frame Arrow cannot hold (object columns of mixed types, integers beyond 64 bits)
    checked value by value; a float NaN is the frame's missing value, as on the Arrow path.
    """
    by_name = {str(c).lower(): c for c in frame.columns}
    keys = [by_name[ts.lower()]] + ([by_name[sign.lower()]] if relation and sign else [])
    keys += [by_name[c.name.lower()] for c in schema.columns]
    types = [BIGINT] + ([VARCHAR] if relation else []) + list(schema.types)
    rows = (
        tuple(_table_value(v, t) for v, t in zip(r, types, strict=True))
        for r in frame[keys].itertuples(index=False, name=None)
    )
    return rows_to_batch(rows, schema, relation, name)


def to_batch(
    rows: Any,
    schema: Schema,
    relation: bool,
    name: str,
    ts_column: str = "ts",
    sign_column: str = "sign",
    tick_ns: int | None = None,
) -> tuple[pa.Table, list[str]]:
    """What a user pushes — tuples, dicts, an Arrow table or a pandas frame — as a typed batch of
    the rows that fit and one message per row that does not.  A table missing a column is an error.
    """
    if isinstance(rows, pa.Table) or type(rows).__name__ == "DataFrame":
        try:
            return table_to_batch(rows, schema, relation, ts_column, sign_column, name, tick_ns)
        except (ValueError, pa.ArrowInvalid, pa.ArrowTypeError) as e:
            raise SluiceError(f"{name}: {e}") from None
    return rows_to_batch(rows, schema, relation, name, ts_column, sign_column)


def admit_rows(rows: list[Any], schema: Schema, relation: bool, name: str) -> tuple[list[Any], list[str]]:
    """Rows ``(ts, row)`` (relations ``(ts, sign, row)``) as the engine would admit them — for the
    reference evaluator, so both see the same input (NaN as NULL, bad rows rejected).
    """
    flat = [(r[0], r[1], *r[2]) if relation else (r[0], *r[1]) for r in rows]
    batch, errors = rows_to_batch(flat, schema, relation, name)
    ts = batch.column(0).to_pylist()
    sg = batch.column(1).to_pylist()
    cols = [c.to_pylist() for c in batch.columns[META:]]
    vals = list(zip(*cols, strict=True)) if cols else [()] * len(ts)
    if relation:
        return [(t, "+" if s > 0 else "-", tuple(v)) for t, s, v in zip(ts, sg, vals, strict=True)], errors
    return [(t, tuple(v)) for t, v in zip(ts, vals, strict=True)], errors


def admit_batch(batch: pa.Table, schema: Schema, name: str) -> tuple[pa.Table, list[str]]:
    """A typed batch (``push_batch``: ``__ts``, ``__sign``, ``c0…``) through the same checks."""
    want = arrow_schema(list(schema.types))
    if batch.schema != want:
        if batch.num_columns != len(want) or batch.schema.names != want.names:
            raise SluiceError(f"{name}: a typed batch needs the columns {', '.join(want.names)}")
        try:
            batch = batch.cast(want)
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as e:
            raise SluiceError(f"{name}: the batch does not fit the schema: {e}") from None
    return admit(batch, list(schema.types), name)


__all__ = [
    "admit",
    "admit_batch",
    "admit_rows",
    "check_row",
    "check_value",
    "rows_to_batch",
    "static_refusal",
    "static_rows",
    "table_to_batch",
    "to_batch",
]


def static_rows(d: SourceDef, rows: Iterable[Sequence[Any]]) -> pa.Table:
    """A static relation's rows (attribute tuples, ``attach_static`` on either backend) as one
    typed batch of insertions stamped 0, through the admission check: a row that does not fit
    refuses the whole declaration (a static relation is all its rows or nothing).
    """
    if d.kind is not Kind.RELATION:
        raise SluiceError(f"{d.name} is a stream; only a relation can be static")
    batch, errors = rows_to_batch([(0, "+", *r) for r in rows], d.schema, True, d.name)
    if errors:
        raise SluiceError(f"{d.name}: " + "; ".join(errors[:3]))
    return batch


def static_refusal(name: str) -> SluiceError:
    """The one refusal of a push to a static relation (both backends, the server)."""
    return SluiceError(f"{name} is static (attach_static): its contents cannot change")
