"""``[Rows N]``: the last ``N`` elements; ``[Rows Unbounded]``: all of them (CQL §5.1)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar, Self

from sluice.cql import ast
from sluice.cql.errors import ParseError
from sluice.cql.tokens import T
from sluice.errors import InternalError
from sluice.windows.base import Row, Unbounded, WindowBinding, WindowDef, WindowParser


@dataclass(frozen=True, slots=True)
class Rows(WindowDef):
    """``[Rows N]``: the last ``N`` elements (by timestamp, then arrival order)."""

    rows: int

    def __post_init__(self) -> None:
        if self.rows <= 0:
            raise InternalError(f"malformed window {self!r}")

    def contents(self, upto: Sequence[tuple[int, Row]], tau: int) -> list[Row]:
        return [r for _, r in upto[-self.rows :]] if upto else []

    def describe(self, names: tuple[str, ...] = ()) -> str:
        return f"Rows {self.rows}"


def row_count(p: WindowParser) -> int:
    """``N`` of ``Rows N`` (at least 1)."""
    t = p.expect(T.INTEGER, "a row count")
    n = int(t.text)
    if n <= 0:
        raise ParseError("a Rows window needs at least 1 row", t.span, p.source)
    return n


@dataclass(frozen=True, slots=True)
class RowsSyntax(ast.Window):
    """``[Rows N]`` or ``[Rows Unbounded]`` (``rows`` None) as written; STREAM's trailing
    ``Preceding`` is accepted and dropped.
    """

    keyword: ClassVar[str] = "ROWS"
    title: ClassVar[str] = "Rows"
    binds_to: ClassVar[tuple[type[WindowDef], ...]] = (Rows, Unbounded)

    rows: int | None = None

    @classmethod
    def parse(cls, p: WindowParser) -> Self:
        n = None if p.accept_kw("UNBOUNDED") else row_count(p)
        p.accept_kw("PRECEDING")
        return cls(n)

    def body(self) -> str:
        return f"Rows {'Unbounded' if self.rows is None else self.rows}"

    def bind(self, ctx: WindowBinding) -> WindowDef:
        return Unbounded() if self.rows is None else Rows(self.rows)

    @property
    def unbounded(self) -> bool:
        return self.rows is None
