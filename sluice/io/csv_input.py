"""Typed CSV input for streams (``ts,v1,v2,...``) and relations (``ts,sign,v1,...``).

Each physical line is one row, parsed on its own: a bad line (too few fields, a value of the
wrong type, an unterminated quote, bytes that are not UTF-8) is reported with file and line and
skipped, and every other line is kept — nothing is lost silently.  An empty field is NULL.  A
first line is a header only if it names the columns (``ts[,sign],A,B…``, any case); any other
first line is data, and reported if bad.  Values then pass the one admission check
(``sluice.backends.rows``).

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

import csv
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from sluice.catalog import Schema
from sluice.datatypes import DataType, TypeKind
from sluice.plan.numeric import INT_MAX, INT_MIN


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


def _is_header(fields: list[str], schema: Schema, relation: bool) -> bool:
    want = ["ts"] + (["sign"] if relation else []) + [c.name.lower() for c in schema.columns]
    return [f.strip().lower() for f in fields] == want


def _fields(line: str) -> list[str]:
    """One line's fields; ``ValueError`` for an unterminated quote."""
    try:
        return next(csv.reader([line], strict=True), [])
    except csv.Error as e:
        raise ValueError("unterminated quote" if "end of data" in str(e) or "EOF" in str(e) else str(e)) from None


def parse_csv_lines(
    lines: Iterable[str | bytes], schema: Schema, relation: bool, name: str, first_line: int = 1
) -> tuple[list[Any], list[str]]:
    """Rows ``(ts, row)`` (relations ``(ts, sign, row)``) and ``file:line: reason`` messages;
    ``first_line`` numbers the first of ``lines`` (a chunk of a file).
    """
    out: list[Any] = []
    errors: list[str] = []
    lead = 2 if relation else 1
    for lineno, raw in enumerate(lines, first_line):
        where = f"{name}:{lineno}"
        if isinstance(raw, bytes):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                errors.append(f"{where}: not UTF-8 (byte {raw[e.start]:#04x} at column {e.start + 1})")
                continue
        else:
            line = raw
        line = line.rstrip("\r\n")
        if not line.strip():
            continue
        try:
            fields = _fields(line)
        except ValueError as e:
            errors.append(f"{where}: {e}")
            continue
        if lineno == 1 and _is_header(fields, schema, relation):
            continue
        try:
            ts = int(fields[0])
        except ValueError:
            errors.append(f"{where}: timestamp {fields[0]!r} is not an integer")
            continue
        if len(fields) != len(schema) + lead:
            errors.append(f"{where}: {len(fields)} fields, expected {len(schema) + lead}")
            continue
        try:
            row = tuple(parse_value(f, c.type) for f, c in zip(fields[lead:], schema.columns, strict=True))
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
    return out, errors


def read_csv(path: str | Path, schema: Schema, relation: bool) -> tuple[list[Any], list[str]]:
    """A CSV file's rows and messages (lines read as bytes: a non-UTF-8 line is reported alone)."""
    p = Path(path)
    with p.open("rb") as f:
        return parse_csv_lines(f, schema, relation, str(p))
