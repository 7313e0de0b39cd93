"""Schemas and definitions of the things a catalog holds.

Names are case-insensitive (as in SQL) and keep the spelling they were registered with.

>>> s = Schema.of(("A", INTEGER), ("b", FLOAT))
>>> s.index("a"), s.names
(0, ('A', 'b'))
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sluice.cql import ast
from sluice.datatypes import FLOAT, INTEGER, DataType  # noqa: F401  (doctest names)


class Kind(enum.Enum):
    """Whether something is a stream (append-only, timestamped) or a time-varying relation."""

    STREAM = "stream"
    RELATION = "relation"


@dataclass(frozen=True, slots=True)
class Column:
    name: str
    type: DataType


@dataclass(frozen=True, slots=True)
class Schema:
    columns: tuple[Column, ...]

    @staticmethod
    def of(*cols: tuple[str, DataType]) -> Schema:
        return Schema(tuple(Column(n, t) for n, t in cols))

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)

    @property
    def types(self) -> tuple[DataType, ...]:
        return tuple(c.type for c in self.columns)

    def index(self, name: str) -> int:
        key = name.lower()
        for i, c in enumerate(self.columns):
            if c.name.lower() == key:
                return i
        raise KeyError(name)

    def __len__(self) -> int:
        return len(self.columns)

    def sql(self) -> str:
        return ", ".join(f"{c.name} {c.type.sql()}" for c in self.columns)


@dataclass(frozen=True, slots=True)
class SourceDef:
    """A registered base stream or relation."""

    name: str
    kind: Kind
    schema: Schema
    unit: ast.TimeUnit | None = None  # what its timestamps count, if not the catalog's tick
    # k-constraints on a stream's order (STREAM §4.1), each naming one of its attributes
    constraints: tuple[ast.StreamConstraint, ...] = ()


@dataclass(frozen=True, slots=True)
class ViewDef:
    """A named query.  ``schema``/``kind`` are what the query yields (checked when registered)."""

    name: str
    query: ast.Query
    text: str
    schema: Schema
    kind: Kind
    columns: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class FunctionDef:
    """A scalar UDF registered from Python.

    ``strict`` functions return NULL when any argument is NULL without being called.
    ``arg_types`` of ``None`` accepts any argument types.  A ``vectorized`` function takes one
    Arrow array per argument (a batch's values) and returns an array of as many results: the
    same answers as calling it on each row, at array speed (``sluice.runtime.vexpr``).
    """

    name: str
    fn: Callable[..., Any] = field(compare=False)
    return_type: DataType
    arg_types: tuple[DataType, ...] | None = None
    strict: bool = True
    vectorized: bool = False
