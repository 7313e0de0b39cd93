"""``[Now]``: the elements whose timestamp is the current instant (CQL §5.1)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar, Self

from sluice.cql import ast
from sluice.windows.base import Row, WindowBinding, WindowDef, WindowParser


@dataclass(frozen=True, slots=True)
class Now(WindowDef):
    """``[Now]``: the elements with timestamp ``tau``."""

    time_based: ClassVar[bool] = True

    @property
    def lifetime(self) -> tuple[int, int] | None:
        return (0, 1)

    def contents(self, upto: Sequence[tuple[int, Row]], tau: int) -> list[Row]:
        return [r for t, r in upto if t == tau]

    def describe(self, names: tuple[str, ...] = ()) -> str:
        return "Now"


@dataclass(frozen=True, slots=True)
class NowSyntax(ast.Window):
    """``[Now]`` as written."""

    keyword: ClassVar[str] = "NOW"
    title: ClassVar[str] = "Now"
    binds_to: ClassVar[tuple[type[WindowDef], ...]] = (Now,)

    @classmethod
    def parse(cls, p: WindowParser) -> Self:
        return cls()

    def body(self) -> str:
        return "Now"

    def bind(self, ctx: WindowBinding) -> WindowDef:
        return Now()
