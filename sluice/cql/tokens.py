"""Tokens of CQL, each with its span (line, column, offsets).

Keywords are case-insensitive.  ``--`` and ``#`` start line comments.  Strings are
single- or double-quoted (STREAM writes ``"test"``); a quote is doubled to escape it.
Typographic quotes (‘…’, ’…’, “…”) as printed in the papers are accepted too.

>>> [t.text for t in tokenize("select A from S [Rows 2]; -- done")]
['select', 'A', 'from', 'S', '[', 'Rows', '2', ']', ';', '']
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from sluice.cql.ast import UNIT_WORDS
from sluice.cql.errors import ParseError, Span


class T(enum.Enum):
    """Token types."""

    IDENT = "identifier"
    INTEGER = "integer"
    FLOAT = "number"
    STRING = "string"
    LPAREN = "'('"
    RPAREN = "')'"
    LBRACKET = "'['"
    RBRACKET = "']'"
    COMMA = "','"
    DOT = "'.'"
    SEMI = "';'"
    STAR = "'*'"
    PLUS = "'+'"
    MINUS = "'-'"
    SLASH = "'/'"
    PERCENT = "'%'"
    CONCAT = "'||'"
    EQ = "'='"
    NE = "'<>'"
    LT = "'<'"
    LE = "'<='"
    GT = "'>'"
    GE = "'>='"
    COLON = "':'"
    EOF = "end of input"


@dataclass(frozen=True, slots=True)
class Token:
    type: T
    text: str  # the source text (for STRING: the decoded value)
    span: Span

    @property
    def upper(self) -> str:
        return self.text.upper() if self.type is T.IDENT else ""

    def describe(self) -> str:
        if self.type is T.EOF:
            return "end of input"
        if self.type is T.STRING:
            return f"string {self.text!r}"
        return f"'{self.text}'"


# Words that can never be identifiers (column, stream or alias names).  Window words
# (ROWS, RANGE, NOW, SLIDE, ...) are *not* reserved: they only mean something inside [ ].
RESERVED = frozenset(
    """
    SELECT FROM WHERE GROUP BY HAVING AND OR NOT AS DISTINCT ALL ANY SOME UNION EXCEPT
    INTERSECT IN IS NULL LIKE BETWEEN EXISTS CASE WHEN THEN ELSE END TRUE FALSE WINDOW
    ISTREAM DSTREAM RSTREAM REGISTER CREATE ORDER LIMIT JOIN ON EXPLAIN CURRENT_TIME
    """.split()
)

_SINGLE = {
    "(": T.LPAREN,
    ")": T.RPAREN,
    "[": T.LBRACKET,
    "]": T.RBRACKET,
    ",": T.COMMA,
    ";": T.SEMI,
    "*": T.STAR,
    "+": T.PLUS,
    "-": T.MINUS,
    "/": T.SLASH,
    "%": T.PERCENT,
    "=": T.EQ,
    "<": T.LT,
    ">": T.GT,
    ":": T.COLON,
    "≠": T.NE,
    "≤": T.LE,
    "≥": T.GE,
}
_DOUBLE = {"<=": T.LE, ">=": T.GE, "<>": T.NE, "!=": T.NE, "||": T.CONCAT, "==": T.EQ}
# Opening quote -> accepted closing quotes.
_QUOTES = {"'": "'", '"': '"', "‘": "’‘", "’": "’", "“": "”"}


def tokenize(source: str) -> list[Token]:
    """Split ``source`` into tokens, ending with one ``EOF`` token."""
    toks: list[Token] = []
    i, n = 0, len(source)
    while i < n:
        c = source[i]
        if c in " \t\r\n\f\v" or c == "\ufeff" or c == "\u00a0":
            i += 1
            continue
        if c == "#" or source.startswith("--", i):
            j = source.find("\n", i)
            i = n if j < 0 else j + 1
            continue
        start = i
        if c.isalpha() or c == "_":
            while i < n and (source[i].isalnum() or source[i] == "_"):
                i += 1
            toks.append(Token(T.IDENT, source[start:i], Span.at(source, start, i)))
            continue
        if c.isdigit() or (c == "." and i + 1 < n and source[i + 1].isdigit()):
            i = _scan_number(source, i, toks)
            continue
        if c in _QUOTES:
            i = _scan_string(source, i, toks)
            continue
        two = source[i : i + 2]
        if two in _DOUBLE:
            toks.append(Token(_DOUBLE[two], two, Span.at(source, i, i + 2)))
            i += 2
            continue
        if c in _SINGLE:
            toks.append(Token(_SINGLE[c], c, Span.at(source, i, i + 1)))
            i += 1
            continue
        if c == ".":
            toks.append(Token(T.DOT, c, Span.at(source, i, i + 1)))
            i += 1
            continue
        raise ParseError(f"unexpected character {c!r}", Span.at(source, i, i + 1), source)
    toks.append(Token(T.EOF, "", Span.at(source, n, n)))
    return toks


def _scan_number(source: str, i: int, toks: list[Token]) -> int:
    n, start = len(source), i
    while i < n and source[i].isdigit():
        i += 1
    is_float = False
    if i < n and source[i] == "." and not (i + 1 < n and source[i + 1] == "."):
        is_float = True
        i += 1
        while i < n and source[i].isdigit():
            i += 1
    if i < n and source[i] in "eE":
        j = i + 1
        if j < n and source[j] in "+-":
            j += 1
        if j < n and source[j].isdigit():
            is_float = True
            i = j
            while i < n and source[i].isdigit():
                i += 1
    if i < n and (source[i].isalpha() or source[i] == "_"):
        # "12abc" is neither a number nor an identifier.
        end = i
        while end < n and (source[end].isalnum() or source[end] == "_"):
            end += 1
        text = source[start:end]
        unit = source[i:end]
        apart = not is_float and unit.upper() in UNIT_WORDS  # (a fraction takes no unit: no hint to that error)
        hint = f" (a number and its unit are two words: {source[start:i]} {unit})" if apart else ""
        raise ParseError(f"malformed number {text!r}{hint}", Span.at(source, start, end), source)
    kind = T.FLOAT if is_float else T.INTEGER
    toks.append(Token(kind, source[start:i], Span.at(source, start, i)))
    return i


def _scan_string(source: str, i: int, toks: list[Token]) -> int:
    n, start = len(source), i
    closers = _QUOTES[source[i]]
    i += 1
    out: list[str] = []
    while True:
        if i >= n:
            raise ParseError(
                "unterminated string literal",
                Span.at(source, start, start + 1),
                source,
                hint=f"close it with {closers[0]}",
            )
        c = source[i]
        if c in closers:
            if i + 1 < n and source[i + 1] == c:  # doubled quote = literal quote
                out.append(c)
                i += 2
                continue
            i += 1
            break
        out.append(c)
        i += 1
    toks.append(Token(T.STRING, "".join(out), Span.at(source, start, i)))
    return i
