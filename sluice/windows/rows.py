"""``[Rows N]``: the last ``N`` elements; ``[Rows Unbounded]``: all of them (CQL §5.1).

``[Rows N At Least m]`` states a tolerable imprecision, as ``[Range T At Least t]`` does (STREAM
§5.2: "ranges of acceptable window sizes"): the answer is ``[Rows N]``'s, but under a memory limit
the engine may keep only the last ``m`` or more (synopsis compression, §5.2.1; design 021).
"""

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
    least: int | None = None  # ``At Least m``: the fewest rows the query tolerates (None: exact)

    def __post_init__(self) -> None:
        if self.rows <= 0 or (self.least is not None and not 1 <= self.least <= self.rows):
            raise InternalError(f"malformed window {self!r}")

    @property
    def shrinkable(self) -> bool:
        """The engine may keep fewer than ``rows`` (``At Least``, below ``rows``)."""
        return self.least is not None and self.least < self.rows

    def contents(self, upto: Sequence[tuple[int, Row]], tau: int) -> list[Row]:
        return [r for _, r in upto[-self.rows :]] if upto else []

    def describe(self, names: tuple[str, ...] = ()) -> str:
        return f"Rows {self.rows}" + (f" At Least {self.least}" if self.least is not None else "")


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
    least: int | None = None  # ``At Least m``

    @classmethod
    def parse(cls, p: WindowParser) -> Self:
        n = None if p.accept_kw("UNBOUNDED") else row_count(p)
        p.accept_kw("PRECEDING")
        least = None
        if n is not None and p.accept_kw("AT"):
            p.expect_kw("LEAST")
            t = p.expect(T.INTEGER, "the fewest rows tolerated")
            least = int(t.text)
            if not 1 <= least <= n:
                raise ParseError(
                    f"At Least {least} must be from 1 to the window's {n} rows",
                    t.span,
                    p.source,
                    hint="At Least states the fewest rows the query tolerates: at most Rows N",
                )
        return cls(n, least)

    def body(self) -> str:
        return f"Rows {'Unbounded' if self.rows is None else self.rows}" + (
            f" At Least {self.least}" if self.least is not None else ""
        )

    def bind(self, ctx: WindowBinding) -> WindowDef:
        return Unbounded() if self.rows is None else Rows(self.rows, self.least)

    @property
    def unbounded(self) -> bool:
        return self.rows is None
