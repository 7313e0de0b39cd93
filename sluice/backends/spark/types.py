"""CQL types → Spark SQL types (for reading user files)."""

from __future__ import annotations

from typing import Any

from sluice.datatypes import DataType, TypeKind


def spark_type(t: DataType) -> Any:
    from pyspark.sql import types as T

    return {
        TypeKind.INTEGER: T.LongType(),
        TypeKind.BIGINT: T.LongType(),
        TypeKind.TIMESTAMP: T.LongType(),
        TypeKind.FLOAT: T.DoubleType(),
        TypeKind.BOOLEAN: T.BooleanType(),
    }.get(t.kind, T.StringType())
