"""``[Range T]`` and ``[Range T Slide U]``: the elements of the last ``T`` time (CQL §5.1;
Slide: STREAM 0.6.0); ``[Range Unbounded]``: all of them.

``[Range T At Least t]`` states a tolerable imprecision (STREAM §5.2: "ranges of acceptable window
sizes"): the answer is the ``[Range T]`` one, but under a memory limit the engine may shrink the
window down to ``t`` (synopsis compression, §5.2.1; window reduction at registration, §5.1.1) and
reports when and by how much (``docs/design/021``).
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
    least: int | None = None  # ``At Least t``: the smallest range the query tolerates (None: exact)
    time_based: ClassVar[bool] = True

    def __post_init__(self) -> None:
        if self.range < 0 or (self.slide is not None and self.slide <= 0):
            raise InternalError(f"malformed window {self!r}")
        if self.least is not None and not 0 <= self.least <= self.range:
            raise InternalError(f"malformed window {self!r}")

    @property
    def shrinkable(self) -> bool:
        """The engine may make the window smaller than ``range`` (``At Least``, below ``range``)."""
        return self.least is not None and self.least < self.range

    def as_of(self, tau: int) -> int:
        return (tau // self.slide) * self.slide if self.slide else tau

    @property
    def lifetime(self) -> tuple[int, int] | None:
        return (self.range, self.slide or 1)

    def contents(self, upto: Sequence[tuple[int, Row]], tau: int) -> list[Row]:
        return [r for t, r in upto if t >= tau - self.range]

    def describe(self, names: tuple[str, ...] = ()) -> str:
        s = f"Range {self.range} ticks"
        s += f" At Least {self.least} ticks" if self.least is not None else ""
        return s + (f" Slide {self.slide} ticks" if self.slide else "")


@dataclass(frozen=True, slots=True)
class RangeSyntax(ast.Window):
    """``[Range T [At Least t] [Slide U]]`` or ``[Range Unbounded]`` (``range`` None) as written; a
    duration may have no unit (STREAM's ``[Range 4]``: the stream's own time) and STREAM's
    ``Preceding`` is accepted and dropped.
    """

    keyword: ClassVar[str] = "RANGE"
    title: ClassVar[str] = "Range"
    binds_to: ClassVar[tuple[type[WindowDef], ...]] = (Range, Unbounded)

    range: ast.Duration | None = None
    slide: ast.Duration | None = None
    least: ast.Duration | None = None

    @classmethod
    def parse(cls, p: WindowParser) -> Self:
        if p.accept_kw("UNBOUNDED"):
            p.accept_kw("PRECEDING")
            return cls()
        rng = p.duration()
        p.accept_kw("PRECEDING")
        least = None
        if p.accept_kw("AT"):
            p.expect_kw("LEAST")
            least = p.duration()
        slide = p.duration() if p.accept_kw("SLIDE") else None
        if slide is not None and slide.amount <= 0:
            raise ParseError("Slide must be positive", slide.span, p.source)
        return cls(rng, slide, least)

    def body(self) -> str:
        if self.range is None:
            return "Range Unbounded"
        s = f"Range {self.range.sql()}"
        s += f" At Least {self.least.sql()}" if self.least is not None else ""
        return s + (f" Slide {self.slide.sql()}" if self.slide is not None else "")

    def bind(self, ctx: WindowBinding) -> WindowDef:
        if self.range is None:
            return Unbounded()
        slide = ctx.ticks(self.slide) if self.slide is not None else None
        if slide == 0:
            assert self.slide is not None
            raise ctx.error("Slide must be at least one tick", self.slide.span)
        rng = ctx.ticks(self.range)
        least = ctx.ticks(self.least) if self.least is not None else None
        if least is not None and least > rng:
            assert self.least is not None
            raise ctx.error(
                f"At Least {self.least.sql()} is more than the window's Range {self.range.sql()}",
                self.least.span,
                "At Least states the smallest window the query tolerates: at most the Range",
            )
        return Range(rng, slide=slide, least=least)

    @property
    def unbounded(self) -> bool:
        return self.range is None
