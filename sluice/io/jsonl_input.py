"""Typed JSON Lines input: one object per line, ``{"ts": …, ["sign": "+"|"-",] "A": …}``.

A block of whole lines is parsed by pyarrow's vectorised JSON reader against the schema when every
line fits it; a block holding any line it cannot take (not JSON, not an object, a value of the
wrong type, an unknown key, a blank line, ``NaN``/``Infinity`` tokens) is parsed line by line
with Python's ``json`` and the one admission check (``sluice.backends.rows.check_row``), which
names the line — the same rules and messages either way.
"""

from __future__ import annotations

import codecs
import json
from typing import Any

import pyarrow as pa
import pyarrow.json as pajson

from sluice.backends.rows import rows_to_batch
from sluice.catalog import Schema
from sluice.io.csv_input import admit_parsed
from sluice.runtime.batch import arrow_type


def _vectorised(
    data: bytes, schema: Schema, relation: bool, path: str, first_line: int
) -> tuple[pa.Table, list[str]] | None:
    fields = [pa.field("ts", pa.int64())] + ([pa.field("sign", pa.string())] if relation else [])
    fields += [pa.field(c.name, arrow_type(c.type)) for c in schema.columns]
    lines = data.count(b"\n") + (0 if data.endswith(b"\n") else 1)
    try:
        t = pajson.read_json(
            pa.py_buffer(data),
            parse_options=pajson.ParseOptions(explicit_schema=pa.schema(fields), unexpected_field_behavior="error"),
        )
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        return None
    if t.num_rows != lines:  # a blank line: rows are no longer lines
        return None
    return admit_parsed(t, [c.name for c in schema.columns], schema, relation, path, first_line)


def jsonl_block(
    data: bytes, schema: Schema, relation: bool, path: str, first_line: int = 1
) -> tuple[pa.Table, list[str]]:
    """A block of whole lines of a JSONL file (``first_line`` the number of its first) as a typed
    batch of its rows that fit and ``file:line: reason`` for each line that does not.
    """
    if first_line == 1:
        data = data.removeprefix(codecs.BOM_UTF8)  # (a byte-order mark is not data)
    fast = _vectorised(data, schema, relation, path, first_line) if data.strip() else None
    if fast is not None:
        return fast
    objs: list[Any] = []
    errors: list[str] = []
    numbers: list[int] = []
    for k, raw in enumerate(data.split(b"\n")):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except ValueError as e:  # also a line that is not UTF-8
            errors.append(f"{path}:{first_line + k}: {e}")
            continue
        if not isinstance(obj, dict):
            errors.append(f"{path}:{first_line + k}: not an object")
            continue
        objs.append(obj)
        numbers.append(first_line + k)
    batch, more = rows_to_batch(objs, schema, relation, path, locate=lambda i: f"{path}:{numbers[i]}")
    return batch, errors + more
