"""The unit of every query output, shared by the reference evaluator and every backend."""

from __future__ import annotations

from typing import Any, NamedTuple

Row = tuple[Any, ...]


class Element(NamedTuple):
    """One output element: timestamp, sign ('+' insert, '-' delete) and the tuple."""

    ts: int
    sign: str
    row: Row
