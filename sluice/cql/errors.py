"""CQL errors that point at the text: line, column and a caret under the bad span.

>>> src = "SELECT a FROM S WHERE"
>>> err = ParseError("expected an expression", Span.at(src, 21, 21), src)
>>> print(err)
1:22: expected an expression
  |
1 | SELECT a FROM S WHERE
  |                      ^
"""

from __future__ import annotations

from dataclasses import dataclass

from sluice.errors import SluiceError


@dataclass(frozen=True, slots=True)
class Span:
    """A region of the source text: offsets ``[start, end)`` and 1-based line/column of start."""

    start: int
    end: int
    line: int
    col: int

    @staticmethod
    def at(source: str, start: int, end: int) -> Span:
        """The span of ``source[start:end]``, computing line and column."""
        start = max(0, min(start, len(source)))
        end = max(start, min(end, len(source)))
        line = source.count("\n", 0, start) + 1
        col = start - (source.rfind("\n", 0, start) + 1) + 1
        return Span(start, end, line, col)

    def to(self, other: Span) -> Span:
        """The span covering ``self`` through ``other``."""
        if other.end < self.start:
            return self
        return Span(self.start, max(self.end, other.end), self.line, self.col)


NO_SPAN = Span(0, 0, 1, 1)


class CQLError(SluiceError):
    """An error in CQL text; always carries a span so users see line:column and a caret."""

    def __init__(
        self,
        message: str,
        span: Span,
        source: str = "",
        *,
        hint: str | None = None,
        note: str | None = None,
    ) -> None:
        self.message = message
        self.span = span
        self.source = source
        self.hint = hint
        self.note = note
        super().__init__(self.render())

    @property
    def line(self) -> int:
        return self.span.line

    @property
    def col(self) -> int:
        return self.span.col

    def with_source(self, source: str) -> CQLError:
        """The same error rendered against ``source`` (used when text is bound later)."""
        if self.source:
            return self
        return type(self)(self.message, self.span, source, hint=self.hint, note=self.note)

    def render(self) -> str:
        head = f"{self.span.line}:{self.span.col}: {self.message}"
        parts = [head]
        if self.source:
            lines = self.source.split("\n")
            idx = self.span.line - 1
            if 0 <= idx < len(lines):
                text = lines[idx].expandtabs(1)
                gutter = str(self.span.line)
                pad = " " * len(gutter)
                # The caret covers the span on its first line (at least one column).
                line_start = self.span.start - (self.span.col - 1)
                line_end = line_start + len(lines[idx])
                width = max(1, min(self.span.end, line_end) - self.span.start)
                parts.append(f"{pad} |")
                parts.append(f"{gutter} | {text}")
                parts.append(f"{pad} | {' ' * (self.span.col - 1)}{'^' * width}")
        if self.note:
            parts.append(f"note: {self.note}")
        if self.hint:
            parts.append(f"hint: {self.hint}")
        return "\n".join(parts)

    def __str__(self) -> str:
        return self.render()


class ParseError(CQLError):
    """The text is not CQL: a bad token or a construct in the wrong place."""


class BindError(CQLError):
    """The text is CQL but does not make sense against the catalog (names, types, kinds)."""
