r"""What clients push, decoded: JSON lines, CSV or Arrow IPC bodies as a typed batch of the rows
that fit and, for each row that does not, its number and the reason.

Every format ends in the engine's one admission check (``sluice.backends.rows``, through the
file readers ``sluice.io.csv_input.csv_block`` / ``sluice.io.jsonl_input.jsonl_block`` and
``rows.table_to_batch``): a bad row is rejected alone, the rest of the body is kept.  Rows are
numbered from 1 as lines of the body (CSV and JSON lines, a CSV header being line 1) or as rows of
the Arrow stream.

>>> from sluice.catalog import Schema
>>> from sluice.datatypes import INTEGER
>>> batch, bad = decode("jsonl", b'{"ts": 1, "A": 2}\n{"ts": 2, "A": "x"}\n', Schema.of(("A", INTEGER)), False, "S")
>>> batch.num_rows, bad
(1, [Rejection(row=2, reason="'x' is not an integer")])
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pyarrow as pa

from sluice.backends.rows import table_to_batch
from sluice.catalog import Schema
from sluice.errors import SluiceError
from sluice.io.csv_input import csv_block
from sluice.io.jsonl_input import jsonl_block

FORMATS = {
    "jsonl": ("application/x-ndjson", "application/jsonl", "application/json-lines"),
    "csv": ("text/csv",),
    "arrow": ("application/vnd.apache.arrow.stream",),
}


@dataclass(frozen=True, slots=True)
class Rejection:
    """One pushed row the admission check refused: its number in the body and why."""

    row: int
    reason: str


class BadBody(SluiceError):
    """The body as a whole cannot be read (not an Arrow stream, a missing column): nothing of it is taken."""


ARROW_MAX = 256 * 1024 * 1024  # decoded bytes of one Arrow push (its body may be compressed)


def format_of(content_type: str | None, explicit: str | None) -> str:
    """The push format from ``?format=`` or the Content-Type header (JSON lines by default)."""
    if explicit:
        if explicit not in FORMATS:
            raise BadBody(f"unknown format {explicit!r}; known: {', '.join(FORMATS)}")
        return explicit
    mime = (content_type or "").split(";")[0].strip().lower()
    for name, mimes in FORMATS.items():
        if mime in mimes:
            return name
    # no type, or one a plain client sends by default (curl's --data-binary: form-urlencoded)
    if mime in ("", "application/octet-stream", "text/plain", "application/x-www-form-urlencoded"):
        return "jsonl"
    raise BadBody(f"unsupported Content-Type {mime!r}; use {', '.join(m for ms in FORMATS.values() for m in ms)}")


def _numbered(messages: list[str], prefix: str) -> list[Rejection]:
    """The readers' messages (``PREFIX:LINE: reason`` / ``PREFIX, row N: reason``) as records: the
    prefix is ours, so the number after it is the row's.
    """
    pat = re.compile(re.escape(prefix) + r"(?::|, row )(\d+): (.*)", re.S)
    out = []
    for m in messages:
        hit = pat.fullmatch(m)
        if hit is None:  # cannot happen while the readers keep their formats; kept, never dropped
            out.append(Rejection(0, m))
        else:
            out.append(Rejection(int(hit.group(1)), hit.group(2)))
    return out


def decode(fmt: str, body: bytes, schema: Schema, relation: bool, name: str) -> tuple[pa.Table, list[Rejection]]:
    """A pushed body as (the typed batch of the rows that fit, the rows that do not)."""
    if fmt == "jsonl":
        batch, msgs = jsonl_block(body, schema, relation, name)
    elif fmt == "csv":
        batch, msgs = csv_block(body, schema, relation, name)
    elif fmt == "arrow":
        try:
            reader = pa.ipc.open_stream(pa.py_buffer(body))
            batches, size = [], 0
            for rb in reader:  # batch by batch: a compressed body may decode to far more than it is
                size += rb.nbytes
                if size > ARROW_MAX:
                    raise BadBody(f"the Arrow body decodes to over {ARROW_MAX} bytes; push it in parts")
                rb.validate(full=True)
                batches.append(rb)
            table = pa.Table.from_batches(batches, schema=reader.schema)
        except (pa.ArrowInvalid, OSError) as e:
            raise BadBody(f"the body is not an Arrow IPC stream: {e}") from None
        try:
            batch, msgs = table_to_batch(table, schema, relation, "ts", "sign", name)
        except (ValueError, pa.ArrowInvalid, pa.ArrowTypeError) as e:
            raise BadBody(f"{name}: {e}") from None
    else:
        raise BadBody(f"unknown format {fmt!r}; known: {', '.join(FORMATS)}")
    return batch, sorted(_numbered(msgs, name), key=lambda r: r.row)
