"""``[Partition By k Rows N]``: the last ``N`` elements of each value of ``k`` (CQL §5.1)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar, Self

from sluice.cql import ast
from sluice.errors import InternalError
from sluice.windows.base import Row, WindowBinding, WindowDef, WindowParser
from sluice.windows.rows import row_count


@dataclass(frozen=True, slots=True)
class PartitionedRows(WindowDef):
    """``[Partition By k Rows N]``: the last ``N`` elements of each distinct value of ``k``."""

    keys: tuple[int, ...]
    rows: int

    def __post_init__(self) -> None:
        if self.rows <= 0 or not self.keys:
            raise InternalError(f"malformed window {self!r}")

    @property
    def partition(self) -> tuple[int, ...]:
        return self.keys

    def contents(self, upto: Sequence[tuple[int, Row]], tau: int) -> list[Row]:
        parts: dict[Row, list[Row]] = {}
        for _, r in upto:
            parts.setdefault(tuple(r[i] for i in self.keys), []).append(r)
        return [r for rows in parts.values() for r in rows[-self.rows :]]

    def describe(self, names: tuple[str, ...] = ()) -> str:
        keys = ", ".join(names[i] if i < len(names) else f"#{i}" for i in self.keys)
        return f"Partition By {keys} Rows {self.rows}"


@dataclass(frozen=True, slots=True)
class PartitionSyntax(ast.Window):
    """``[Partition By k, … Rows N]`` as written (STREAM's trailing ``Preceding`` dropped)."""

    keyword: ClassVar[str] = "PARTITION"
    title: ClassVar[str] = "Partition By"
    binds_to: ClassVar[tuple[type[WindowDef], ...]] = (PartitionedRows,)

    keys: tuple[ast.ColumnName, ...]
    rows: int

    @classmethod
    def parse(cls, p: WindowParser) -> Self:
        p.expect_kw("BY")
        keys = tuple(p.comma_list(p.column_name))
        p.expect_kw("ROWS")
        n = row_count(p)
        p.accept_kw("PRECEDING")
        return cls(keys, n)

    def body(self) -> str:
        return f"Partition By {', '.join(k.sql() for k in self.keys)} Rows {self.rows}"

    def bind(self, ctx: WindowBinding) -> WindowDef:
        return PartitionedRows(tuple(ctx.column(k, "Partition By") for k in self.keys), self.rows)
