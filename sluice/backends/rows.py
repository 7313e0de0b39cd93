"""Turning user input (tuples, dicts, Arrow tables, pandas frames) into typed batches.

Rows that do not fit the schema are rejected one by one with a reason naming the stream and
the row; the others are kept.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from sluice.catalog import Schema
from sluice.datatypes import DataType, TypeKind
from sluice.errors import SluiceError
from sluice.runtime.batch import arrow_type, make


def check_value(v: Any, t: DataType) -> Any:
    """``v`` as a value of type ``t``, or ``ValueError`` saying why not."""
    if v is None:
        return None
    k = t.kind
    if t.is_integer or k is TypeKind.TIMESTAMP:
        if isinstance(v, bool) or not isinstance(v, int | np.integer):
            raise ValueError(f"{v!r} is not an integer")
        return int(v)
    if k is TypeKind.FLOAT:
        if isinstance(v, bool) or not isinstance(v, int | float | np.integer | np.floating):
            raise ValueError(f"{v!r} is not a number")
        return float(v)
    if k is TypeKind.BOOLEAN:
        if not isinstance(v, bool | np.bool_):
            raise ValueError(f"{v!r} is not a boolean")
        return bool(v)
    if not isinstance(v, str):
        raise ValueError(f"{v!r} is not a string")
    limit = 1 if k is TypeKind.BYTE else t.length
    if limit is not None and len(v) > limit:
        raise ValueError(f"{v!r} is longer than {t.sql()}")
    return v


def rows_to_batch(
    rows: Iterable[Any], schema: Schema, relation: bool, name: str, ts_key: str = "ts", sign_key: str = "sign"
) -> tuple[pa.Table, list[str]]:
    """Tuples ``(ts, [sign,] v1, …)`` or dicts ``{ts, [sign], attr: value}`` → (batch, errors)."""
    types = schema.types
    lead = 2 if relation else 1
    ts_out: list[int] = []
    signs: list[int] = []
    cols: list[list[Any]] = [[] for _ in types]
    errors: list[str] = []
    for i, r in enumerate(rows):
        try:
            if isinstance(r, Mapping):
                ts = r[ts_key]
                sign = r.get(sign_key, "+")
                vals = [r.get(c.name, r.get(c.name.lower())) for c in schema.columns]
                extra = (
                    set(r)
                    - {ts_key, sign_key}
                    - {c.name for c in schema.columns}
                    - {c.name.lower() for c in schema.columns}
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
            if sign in ("+", 1):
                s = 1
            elif sign in ("-", -1):
                s = -1
            else:
                raise ValueError(f"sign {sign!r} is not + or -")
            checked = [check_value(v, t) for v, t in zip(vals, types, strict=True)]
        except (ValueError, KeyError, TypeError) as e:
            errors.append(f"{name}, row {i + 1}: {e}")
            continue
        ts_out.append(int(ts))
        signs.append(s)
        for c, v in zip(cols, checked, strict=True):
            c.append(v)
    arrays = [pa.array(c, arrow_type(t)) for c, t in zip(cols, types, strict=True)]
    return make(ts_out, signs, arrays, types), errors


def table_to_batch(table: Any, schema: Schema, relation: bool, ts_column: str, sign_column: str) -> pa.Table:
    """An Arrow table or pandas frame with a timestamp column (and a sign column for relations)."""
    if not isinstance(table, pa.Table):
        table = pa.Table.from_pandas(table, preserve_index=False)
    names = {n.lower(): n for n in table.column_names}
    cols = []
    for c in schema.columns:
        if c.name.lower() not in names:
            raise ValueError(f"column {c.name!r} is missing (have: {', '.join(table.column_names)})")
        cols.append(table.column(names[c.name.lower()]))
    if ts_column.lower() not in names:
        raise ValueError(f"timestamp column {ts_column!r} is missing")
    ts = table.column(names[ts_column.lower()]).to_numpy()
    sign: Any = 1
    if relation:
        if sign_column.lower() not in names:
            raise ValueError(f"sign column {sign_column!r} is missing")
        raw = table.column(names[sign_column.lower()]).to_pylist()
        sign = np.array([1 if s in ("+", 1) else -1 for s in raw], dtype=np.int8)
    return make(ts, sign, cols, list(schema.types))


def to_batch(
    rows: Any, schema: Schema, relation: bool, name: str, ts_column: str = "ts", sign_column: str = "sign"
) -> tuple[pa.Table, list[str]]:
    """What a user pushes — tuples, dicts, an Arrow table or a pandas frame — as a typed batch and
    the messages for the rows that did not fit.  A table that does not fit as a whole is an error.
    """
    if isinstance(rows, pa.Table) or type(rows).__name__ == "DataFrame":
        try:
            return table_to_batch(rows, schema, relation, ts_column, sign_column), []
        except (ValueError, pa.ArrowInvalid, pa.ArrowTypeError) as e:
            raise SluiceError(f"{name}: {e}") from None
    return rows_to_batch(rows, schema, relation, name, ts_column, sign_column)


__all__ = ["Sequence", "rows_to_batch", "table_to_batch", "to_batch"]
