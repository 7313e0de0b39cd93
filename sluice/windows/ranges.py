"""``[Range T]`` and ``[Range T Slide U]``: the elements of the last ``T`` time (CQL §5.1;
Slide: STREAM 0.6.0); ``[Range Unbounded]``: all of them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar, Self

from sluice.cql import ast
from sluice.cql.errors import ParseError
from sluice.errors import InternalError
from sluice.windows.base import Row, Unbounded, WindowBinding, WindowDef, WindowParser


@dataclass(frozen=True, slots=True)
class Range(WindowDef):
    """``[Range T]``: elements with timestamp in ``[tau − T, tau]``; with ``Slide U`` the window
    as of ``⌊tau/U⌋·U``.
    """

    range: int
    slide: int | None = None
    time_based: ClassVar[bool] = True

    def __post_init__(self) -> None:
        if self.range < 0 or (self.slide is not None and self.slide <= 0):
            raise InternalError(f"malformed window {self!r}")

    def as_of(self, tau: int) -> int:
        return (tau // self.slide) * self.slide if self.slide else tau

    @property
    def lifetime(self) -> tuple[int, int] | None:
        return (self.range, self.slide or 1)

    def contents(self, upto: Sequence[tuple[int, Row]], tau: int) -> list[Row]:
        return [r for t, r in upto if t >= tau - self.range]

    def describe(self, names: tuple[str, ...] = ()) -> str:
        s = f"Range {self.range} ticks"
        return s + (f" Slide {self.slide} ticks" if self.slide else "")


@dataclass(frozen=True, slots=True)
class RangeSyntax(ast.Window):
    """``[Range T [Slide U]]`` or ``[Range Unbounded]`` (``range`` None) as written; a duration
    may have no unit (STREAM's ``[Range 4]``: the stream's own time) and STREAM's ``Preceding``
    is accepted and dropped.
    """

    keyword: ClassVar[str] = "RANGE"
    title: ClassVar[str] = "Range"
    binds_to: ClassVar[tuple[type[WindowDef], ...]] = (Range, Unbounded)

    range: ast.Duration | None = None
    slide: ast.Duration | None = None

    @classmethod
    def parse(cls, p: WindowParser) -> Self:
        if p.accept_kw("UNBOUNDED"):
            p.accept_kw("PRECEDING")
            return cls()
        rng = p.duration()
        p.accept_kw("PRECEDING")
        slide = p.duration() if p.accept_kw("SLIDE") else None
        if slide is not None and slide.amount <= 0:
            raise ParseError("Slide must be positive", slide.span, p.source)
        return cls(rng, slide)

    def body(self) -> str:
        if self.range is None:
            return "Range Unbounded"
        return f"Range {self.range.sql()}" + (f" Slide {self.slide.sql()}" if self.slide is not None else "")

    def bind(self, ctx: WindowBinding) -> WindowDef:
        if self.range is None:
            return Unbounded()
        slide = ctx.ticks(self.slide) if self.slide is not None else None
        if slide == 0:
            assert self.slide is not None
            raise ctx.error("Slide must be at least one tick", self.slide.span)
        return Range(ctx.ticks(self.range), slide=slide)

    @property
    def unbounded(self) -> bool:
        return self.range is None
