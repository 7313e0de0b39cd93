"""File sources for the CLI: CSV, JSON lines and Parquet, typed against a registered schema.

CSV rows are ``ts,v1,…`` (relations ``ts,+|-,v1,…``); JSON lines are objects with ``ts`` (and
``sign``) and the attributes by name; Parquet has a ``ts`` column (and ``sign``).  Bad rows are
reported as ``file:line: reason`` and skipped; the rest are used.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sluice.backends.rows import check_row
from sluice.catalog import Schema
from sluice.io.csv_input import read_csv


def merge_sources(parts: list[tuple[Any, list[str]]]) -> list[tuple[Any, list[str]]]:
    """Several files of one source: rows of CSV/JSON files merged into one push in timestamp
    order (stable); a Parquet table is pushed as it is, after them.  Every file's errors are kept.
    """
    if len(parts) == 1:
        return parts
    rows: list[Any] = []
    errors: list[str] = []
    tables: list[tuple[Any, list[str]]] = []
    for data, errs in parts:
        errors += errs
        if isinstance(data, list):
            rows += data
        else:
            tables.append((data, []))
    rows.sort(key=lambda r: _ts(r))
    return [(rows, errors), *tables]


def _ts(r: Any) -> int:
    t = r.get("ts") if isinstance(r, dict) else r[0]
    return t if isinstance(t, int) else 0  # a bad timestamp is rejected when pushed


def read_source(path: str | Path, schema: Schema, relation: bool) -> tuple[Any, list[str]]:
    """(rows or Arrow table, errors) for a file, by its extension."""
    p = Path(path)
    suffix = p.suffix.lower()
    if suffix in (".csv", ".txt", ".dat"):
        rows, errors = read_csv(p, schema, relation)
        if relation:
            return [(t, sign, *r) for t, sign, r in rows], errors
        return [(t, *r) for t, r in rows], errors
    if suffix in (".jsonl", ".json", ".ndjson"):
        out, errors = [], []
        with p.open() as f:
            for lineno, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                    if not isinstance(obj, dict):
                        raise ValueError("not an object")
                    check_row(obj, schema, relation)  # the admission check, here to name the line
                except (ValueError, KeyError, TypeError) as e:
                    errors.append(f"{p}:{lineno}: {e}")
                    continue
                out.append(obj)
        return out, errors
    if suffix == ".parquet":
        import pyarrow.parquet as pq

        return pq.read_table(p), []
    raise ValueError(f"{p}: unknown file type {suffix!r} (use .csv, .jsonl or .parquet)")
