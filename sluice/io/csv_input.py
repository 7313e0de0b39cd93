"""Typed CSV input for streams (``ts,v1,v2,...``) and relations (``ts,sign,v1,...``).

Each physical line is one row, parsed on its own: a bad line (too few fields, a value of the
wrong type, an unterminated quote, bytes that are not UTF-8) is reported with file and line and
skipped, and every other line is kept — nothing is lost silently.  An empty field is NULL.  A
first line is a header only if it names the columns (``ts[,sign],A,B…``, any case); any other
first line is data, and reported if bad.  Values then pass the one admission check
(``sluice.backends.rows``).

A file is read in blocks of whole lines (:func:`csv_block`): pyarrow's vectorised reader parses
a block when every line of it is well formed under these rules; a block holding any line it
cannot take (a bad value, a wrong field count, a quote, a blank line, a byte that is not UTF-8)
is parsed line by line instead, so the rules and the messages are the same either way.

>>> from sluice.catalog import Schema
>>> from sluice.datatypes import INTEGER, FLOAT
>>> lines = ["ts,A,B", "1,2,2.5", "x,1,1", "3,4", '4,"5,1']
>>> rows, errs = parse_csv_lines(lines, Schema.of(("A", INTEGER), ("B", FLOAT)), False, "d.csv")
>>> rows
[(1, (2, 2.5))]
>>> errs
["d.csv:3: timestamp 'x' is not an integer", 'd.csv:4: 2 fields, expected 3', 'd.csv:5: unterminated quote']
"""

from __future__ import annotations

import codecs
import csv
import itertools
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from sluice.backends.rows import TS_MAX, TS_MIN, admit, rows_to_batch
from sluice.catalog import Schema
from sluice.datatypes import DataType, TypeKind
from sluice.plan.numeric import INT_MAX, INT_MIN
from sluice.runtime.batch import arrow_type, make


def parse_value(text: str, t: DataType) -> Any:
    """One CSV field as a value of type ``t``; raises ``ValueError`` with a reason."""
    if text == "" or text.upper() == "NULL":
        return None
    if t.is_integer or t.kind is TypeKind.TIMESTAMP:
        try:
            v = int(text)
        except ValueError:
            raise ValueError(f"{text!r} is not an integer") from None
        if not INT_MIN <= v <= INT_MAX:
            raise ValueError(f"{v} is outside {t.sql()}'s range (64 bits)")
        return v
    if t.kind is TypeKind.FLOAT:
        try:
            return float(text)
        except ValueError:
            raise ValueError(f"{text!r} is not a number") from None
    if t.kind is TypeKind.BOOLEAN:
        low = text.strip().lower()
        if low in ("true", "t", "1", "yes"):
            return True
        if low in ("false", "f", "0", "no"):
            return False
        raise ValueError(f"{text!r} is not a boolean")
    limit = 1 if t.kind is TypeKind.BYTE else t.length
    if limit is not None and len(text) > limit:
        raise ValueError(f"{text!r} is longer than {t.sql()}")
    return text


BOM = codecs.BOM_UTF8  # a UTF-8 byte-order mark, which spreadsheets write first


def _is_header(fields: list[str], schema: Schema, relation: bool = False, lead: tuple[str, ...] | None = None) -> bool:
    """Whether a first line names the columns: ``ts`` (``sign``) then the attributes, or ``lead``."""
    first = list(lead) if lead is not None else ["ts"] + (["sign"] if relation else [])
    return [f.strip().lower() for f in fields] == first + [c.name.lower() for c in schema.columns]


def _fields(line: str) -> list[str]:
    """One line's fields; ``ValueError`` for an unterminated quote."""
    try:
        return next(csv.reader([line], strict=True), [])
    except csv.Error as e:
        raise ValueError("unterminated quote" if "end of data" in str(e) or "EOF" in str(e) else str(e)) from None


def _line_fields(raw: str | bytes, lineno: int) -> list[str] | None:
    """One line's fields (None for a blank line; a first line's byte-order mark dropped);
    ``ValueError`` saying why it cannot be read (not UTF-8, an unterminated quote).
    """
    if isinstance(raw, bytes):
        if lineno == 1:
            raw = raw.removeprefix(BOM)
        try:
            raw = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise ValueError(f"not UTF-8 (byte {raw[e.start]:#04x} at column {e.start + 1})") from None
    line = raw.rstrip("\r\n")
    return _fields(line) if line.strip() else None


def _values(fields: list[str], schema: Schema) -> tuple[Any, ...]:
    """A row's attribute values from its fields; ``ValueError`` for one that does not fit."""
    return tuple(parse_value(f, c.type) for f, c in zip(fields, schema.columns, strict=True))


def parse_csv_lines(
    lines: Iterable[str | bytes],
    schema: Schema,
    relation: bool,
    name: str,
    first_line: int = 1,
    line_numbers: list[int] | None = None,
) -> tuple[list[Any], list[str]]:
    """Rows ``(ts, row)`` (relations ``(ts, sign, row)``) and ``file:line: reason`` messages;
    ``first_line`` numbers the first of ``lines`` (a chunk of a file); ``line_numbers``, if
    given, receives each row's line number.
    """
    out: list[Any] = []
    errors: list[str] = []
    lead = 2 if relation else 1
    for lineno, raw in enumerate(lines, first_line):
        where = f"{name}:{lineno}"
        try:
            fields = _line_fields(raw, lineno)
        except ValueError as e:
            errors.append(f"{where}: {e}")
            continue
        if fields is None:
            continue
        if lineno == 1 and _is_header(fields, schema, relation):
            continue
        try:
            ts = int(fields[0])
        except ValueError:
            errors.append(f"{where}: timestamp {fields[0]!r} is not an integer")
            continue
        if not TS_MIN <= ts <= TS_MAX:  # checked first, as the admission check does
            errors.append(f"{where}: timestamp {ts} is outside ±2^62")
            continue
        if len(fields) != len(schema) + lead:
            errors.append(f"{where}: {len(fields)} fields, expected {len(schema) + lead}")
            continue
        try:
            row = _values(fields[lead:], schema)
        except ValueError as e:
            errors.append(f"{where}: {e}")
            continue
        if relation:
            sign = fields[1].strip()
            if sign not in ("+", "-"):
                errors.append(f"{where}: sign {sign!r} is not + or -")
                continue
            out.append((ts, sign, row))
        else:
            out.append((ts, row))
        if line_numbers is not None:
            line_numbers.append(lineno)
    return out, errors


def read_static_csv(path: str | Path, schema: Schema) -> tuple[list[tuple[Any, ...]], list[str]]:
    """A static relation's rows (``v1,v2,…`` per line, no timestamp or sign; a first line naming
    the columns is a header) and ``file:line: reason`` messages, one per line that does not fit.
    """
    p = Path(path)
    rows: list[tuple[Any, ...]] = []
    errors: list[str] = []
    with p.open("rb") as f:
        for lineno, raw in enumerate(f, 1):
            try:
                fields = _line_fields(raw, lineno)
                if fields is None or lineno == 1 and _is_header(fields, schema, lead=()):
                    continue
                if len(fields) != len(schema):
                    raise ValueError(f"{len(fields)} fields, expected {len(schema)}")
                rows.append(_values(fields, schema))
            except ValueError as e:
                errors.append(f"{p}:{lineno}: {e}")
    return rows, errors


def read_csv(path: str | Path, schema: Schema, relation: bool) -> tuple[list[Any], list[str]]:
    """A CSV file's rows and messages (lines read as bytes: a non-UTF-8 line is reported alone)."""
    p = Path(path)
    with p.open("rb") as f:
        return parse_csv_lines(f, schema, relation, str(p))


def _cases(*words: str) -> list[str]:
    """Every upper/lower-case spelling of each word (what ``.lower()`` compares equal)."""
    out: list[str] = []
    for w in words:
        out += ["".join(c) for c in itertools.product(*({ch.lower(), ch.upper()} for ch in w))]
    return sorted(set(out))


_NULLS = ["", *_cases("null")]
_TRUE, _FALSE = _cases("true", "t", "1", "yes"), _cases("false", "f", "0", "no")


def _vectorised(
    data: bytes, schema: Schema, relation: bool, path: str, first_line: int
) -> tuple[pa.Table, list[str]] | None:
    """``data`` (whole lines) parsed by pyarrow under the per-line rules, or None when some line
    needs them spelled out (then :func:`parse_csv_lines` reads it and names the line).
    """
    lead = ["ts", "sign"] if relation else ["ts"]
    names = lead + [f"c{i}" for i in range(len(schema))]
    types = {"ts": pa.int64(), "sign": pa.string()}
    types.update({f"c{i}": arrow_type(c.type) for i, c in enumerate(schema.columns)})
    try:
        t = pacsv.read_csv(
            pa.py_buffer(data),
            read_options=pacsv.ReadOptions(column_names=names),
            parse_options=pacsv.ParseOptions(ignore_empty_lines=False),  # rows are then lines, one to one
            convert_options=pacsv.ConvertOptions(
                column_types=types,
                null_values=_NULLS,
                true_values=_TRUE,
                false_values=_FALSE,
                strings_can_be_null=True,
            ),
        )
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, UnicodeDecodeError):
        return None
    return admit_parsed(t, names[len(lead) :], schema, relation, path, first_line)


def admit_parsed(
    t: pa.Table, columns: list[str], schema: Schema, relation: bool, path: str, first_line: int
) -> tuple[pa.Table, list[str]] | None:
    """A block parsed by pyarrow — ``ts``, ``sign`` (relations) and the attributes as
    ``columns``, one row per line — through the admission check, rows named ``file:line``; None
    when a timestamp is missing or a sign is not ``+``/``-`` (the per-line rules then say which).
    """
    ts = t.column("ts").combine_chunks()
    if ts.null_count:
        return None
    sign: Any = 1
    if relation:
        raw = t.column("sign").combine_chunks()
        if raw.null_count or not pc.all(pc.is_in(raw, pa.array(["+", "-"]))).as_py():
            return None
        sign = np.where(np.asarray(pc.equal(raw, "+")), 1, -1).astype(np.int8)
    types = list(schema.types)
    batch = make(ts.to_numpy(), sign, [t.column(c).combine_chunks() for c in columns], types)
    return admit(batch, types, path, lambda i: f"{path}:{first_line + i}")


def csv_block(
    data: bytes, schema: Schema, relation: bool, path: str, first_line: int = 1
) -> tuple[pa.Table, list[str]]:
    """A block of whole lines of a CSV file (``first_line`` the number of its first) as a typed
    batch of its rows that fit and ``file:line: reason`` for each line that does not.
    """
    if first_line == 1:  # a header only if it names the columns
        data = data.removeprefix(BOM)  # (a spreadsheet's byte-order mark is not data)
        end = data.find(b"\n")
        head = data if end < 0 else data[: end + 1]
        try:
            fields = _fields(head.decode("utf-8").rstrip("\r\n"))
        except (UnicodeDecodeError, ValueError):
            fields = []
        if _is_header(fields, schema, relation):
            data, first_line = data[len(head) :], 2
    if not data:
        return make([], 1, [[] for _ in schema.columns], list(schema.types)), []
    # pyarrow's quoting is laxer than the per-line rules (``"ab"c``, a newline inside quotes):
    # a block with a quote is read line by line
    fast = None if b'"' in data else _vectorised(data, schema, relation, path, first_line)
    if fast is not None:
        return fast
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    numbers: list[int] = []
    rows, errors = parse_csv_lines(lines, schema, relation, path, first_line, numbers)
    flat = [(t, s, *r) for t, s, r in rows] if relation else [(t, *r) for t, r in rows]
    batch, more = rows_to_batch(flat, schema, relation, path, locate=lambda i: f"{path}:{numbers[i]}")
    return batch, errors + more
