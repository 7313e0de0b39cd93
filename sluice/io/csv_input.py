"""Typed CSV input for streams (``ts,v1,v2,...``) and relations (``ts,sign,v1,...``).

Bad rows are reported with file and line and skipped; good rows are kept — nothing is lost
silently.  An empty field is NULL.  A header line is skipped if its first field is not an integer.

>>> from sluice.catalog import Schema
>>> from sluice.datatypes import INTEGER, FLOAT
>>> rows, errs = parse_csv_lines(["1,2,2.5", "x,1,1", "3,4"], Schema.of(("A", INTEGER), ("B", FLOAT)), False, "d.csv")
>>> rows, errs
([(1, (2, 2.5))], ["d.csv:2: timestamp 'x' is not an integer", 'd.csv:3: 2 fields, expected 3'])
"""

from __future__ import annotations

import csv
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from sluice.catalog import Schema
from sluice.datatypes import DataType, TypeKind


def parse_value(text: str, t: DataType) -> Any:
    """One CSV field as a value of type ``t``; raises ``ValueError`` with a reason."""
    if text == "" or text.upper() == "NULL":
        return None
    if t.is_integer or t.kind is TypeKind.TIMESTAMP:
        try:
            return int(text)
        except ValueError:
            raise ValueError(f"{text!r} is not an integer") from None
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


def parse_csv_lines(lines: Iterable[str], schema: Schema, relation: bool, name: str) -> tuple[list[Any], list[str]]:
    out: list[Any] = []
    errors: list[str] = []
    lead = 2 if relation else 1
    for lineno, fields in enumerate(csv.reader(lines), 1):
        if not fields or (len(fields) == 1 and not fields[0].strip()):
            continue
        where = f"{name}:{lineno}"
        try:
            ts = int(fields[0])
        except ValueError:
            if lineno == 1:
                continue  # header
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
    p = Path(path)
    with p.open(newline="") as f:
        return parse_csv_lines(f, schema, relation, str(p))
