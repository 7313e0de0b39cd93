"""Data types of stream and relation attributes.

The types are those of STREAM's DDL plus the SQL types users expect: integer/int,
bigint, float/real/double, char(n), varchar(n), byte, boolean, timestamp.  A value of
type ``timestamp`` is an integer number of ticks (the catalog's time unit).

>>> parse_type_name("varchar", 12)
DataType(kind=<TypeKind.VARCHAR: 'varchar'>, length=12)
>>> INTEGER.is_numeric and not VARCHAR.is_numeric
True
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import pyarrow as pa


class TypeKind(enum.Enum):
    INTEGER = "integer"
    BIGINT = "bigint"
    FLOAT = "float"
    CHAR = "char"
    VARCHAR = "varchar"
    BYTE = "byte"
    BOOLEAN = "boolean"
    TIMESTAMP = "timestamp"
    NULL = "null"  # the type of the NULL literal; compatible with everything


@dataclass(frozen=True, slots=True)
class DataType:
    kind: TypeKind
    length: int | None = None

    def __post_init__(self) -> None:
        if self.kind in (TypeKind.CHAR, TypeKind.VARCHAR):
            if self.length is None or self.length <= 0:
                raise ValueError(f"{self.kind.value} needs a positive length")
        elif self.length is not None:
            raise ValueError(f"{self.kind.value} takes no length")

    @property
    def is_integer(self) -> bool:
        return self.kind in (TypeKind.INTEGER, TypeKind.BIGINT)

    @property
    def is_numeric(self) -> bool:
        return self.kind in (TypeKind.INTEGER, TypeKind.BIGINT, TypeKind.FLOAT)

    @property
    def is_string(self) -> bool:
        return self.kind in (TypeKind.CHAR, TypeKind.VARCHAR, TypeKind.BYTE)

    @property
    def is_null(self) -> bool:
        return self.kind is TypeKind.NULL

    def sql(self) -> str:
        """The type as written in CQL DDL."""
        if self.length is not None:
            return f"{self.kind.value}({self.length})"
        return self.kind.value

    def __str__(self) -> str:
        return self.sql()


INTEGER = DataType(TypeKind.INTEGER)
BIGINT = DataType(TypeKind.BIGINT)
FLOAT = DataType(TypeKind.FLOAT)
BYTE = DataType(TypeKind.BYTE)
BOOLEAN = DataType(TypeKind.BOOLEAN)
TIMESTAMP = DataType(TypeKind.TIMESTAMP)
NULLTYPE = DataType(TypeKind.NULL)
VARCHAR = DataType(TypeKind.VARCHAR, 65535)  # type of a string literal / string function result

# Spellings accepted in DDL, mapped to a kind.  ``real`` and ``double`` are both 64-bit here.
TYPE_NAMES: dict[str, TypeKind] = {
    "integer": TypeKind.INTEGER,
    "int": TypeKind.INTEGER,
    "bigint": TypeKind.BIGINT,
    "float": TypeKind.FLOAT,
    "real": TypeKind.FLOAT,
    "double": TypeKind.FLOAT,
    "char": TypeKind.CHAR,
    "varchar": TypeKind.VARCHAR,
    "byte": TypeKind.BYTE,
    "boolean": TypeKind.BOOLEAN,
    "bool": TypeKind.BOOLEAN,
    "timestamp": TypeKind.TIMESTAMP,
}


def parse_type_name(name: str, length: int | None = None) -> DataType:
    """Build a type from its DDL spelling; raises ``KeyError`` for an unknown name."""
    return DataType(TYPE_NAMES[name.lower()], length)


def common_numeric(a: DataType, b: DataType) -> DataType:
    """Result type of arithmetic on two numeric (or NULL) operands."""
    if a.is_null:
        return b if not b.is_null else INTEGER
    if b.is_null:
        return a
    if a.kind is TypeKind.FLOAT or b.kind is TypeKind.FLOAT:
        return FLOAT
    if a.kind is TypeKind.BIGINT or b.kind is TypeKind.BIGINT:
        return BIGINT
    return INTEGER


def comparable(a: DataType, b: DataType) -> bool:
    """Whether values of the two types may be compared with =, <, ... ."""
    if a.is_null or b.is_null:
        return True
    if a.is_numeric and b.is_numeric:
        return True
    if a.is_string and b.is_string:
        return True
    if a.kind is TypeKind.TIMESTAMP:
        return b.kind is TypeKind.TIMESTAMP or b.is_integer
    if b.kind is TypeKind.TIMESTAMP:
        return a.is_integer
    return a.kind is b.kind


def unify(a: DataType, b: DataType) -> DataType | None:
    """The type that holds values of both (for UNION branches, CASE arms, IN lists)."""
    if a.is_null:
        return b
    if b.is_null:
        return a
    if a == b:
        return a
    if a.is_numeric and b.is_numeric:
        return common_numeric(a, b)
    if a.is_string and b.is_string:
        la = 1 if a.kind is TypeKind.BYTE else (a.length or 1)
        lb = 1 if b.kind is TypeKind.BYTE else (b.length or 1)
        return DataType(TypeKind.VARCHAR, max(la, lb))
    if {a.kind, b.kind} <= {TypeKind.TIMESTAMP, TypeKind.INTEGER, TypeKind.BIGINT}:
        return TIMESTAMP
    return None


_ARROW = {
    TypeKind.INTEGER: pa.int64(),
    TypeKind.BIGINT: pa.int64(),
    TypeKind.TIMESTAMP: pa.int64(),
    TypeKind.FLOAT: pa.float64(),
    TypeKind.CHAR: pa.string(),
    TypeKind.VARCHAR: pa.string(),
    TypeKind.BYTE: pa.string(),
    TypeKind.BOOLEAN: pa.bool_(),
    TypeKind.NULL: pa.null(),
}


def arrow_type(t: DataType) -> pa.DataType:
    """The Arrow type that holds values of ``t`` (batches, vectorised UDFs' arguments)."""
    return _ARROW[t.kind]
