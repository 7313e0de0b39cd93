"""Recursive-descent parser for CQL (seed §2; STREAM 0.6.0's grammar; Hammad §2.1 WINDOW).

>>> q = parse_query("Select Count(*) From Requests S [Range 1 Day Preceding] Where S.domain = 'stanford.edu'")
>>> q.from_[0].window.range.sql()
'1 day'
>>> parse_query("SELECT FROM S")
Traceback (most recent call last):
  ...
sluice.cql.errors.ParseError: 1:8: expected an expression, found 'FROM'
  |
1 | SELECT FROM S
  |        ^^^^
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import NoReturn, TypeVar

from sluice import windows  # the window kinds (same layer): windows.WINDOWS is read at parse time
from sluice.cql import ast
from sluice.cql.errors import ParseError, Span
from sluice.cql.tokens import RESERVED, T, Token, tokenize
from sluice.datatypes import TYPE_NAMES, DataType, TypeKind

_NodeT = TypeVar("_NodeT")

STREAM_OPS = ("ISTREAM", "DSTREAM", "RSTREAM")
_COMPARE = {T.EQ: "=", T.NE: "<>", T.LT: "<", T.LE: "<=", T.GT: ">", T.GE: ">="}
_UNITS = ast.UNIT_WORDS
# words that may follow a unitless duration inside a window (``[Range 4 Slide 2]``, ``[Range 4 At Least 2]``)
_AFTER_DURATION = frozenset({"SLIDE", "AT", "PRECEDING"})
_UNSUPPORTED = {
    "ORDER": "a continuous query has no ORDER BY: its answer is a stream or a time-varying relation",
    "LIMIT": "a continuous query has no LIMIT; use a [Rows N] window to bound a stream",
    "JOIN": "write joins as a FROM list with the condition in WHERE: FROM A, B WHERE A.k = B.k",
    "ON": "write joins as a FROM list with the condition in WHERE: FROM A, B WHERE A.k = B.k",
}


def _named(q: ast.Query) -> bool:
    return isinstance(q, ast.TableQuery)


def parse_script(source: str) -> list[ast.Statement]:
    """Parse ``;``-separated statements (DDL, views, queries, EXPLAIN)."""
    return Parser(source).script()


def parse_statement(source: str) -> ast.Statement:
    """Parse exactly one statement (a trailing ``;`` is optional)."""
    p = Parser(source)
    stmt = p.statement()
    p.accept(T.SEMI)
    p.expect_eof()
    return stmt


def parse_query(source: str) -> ast.Query:
    """Parse exactly one query (a trailing ``;`` is optional)."""
    p = Parser(source)
    q = p.query()
    p.accept(T.SEMI)
    p.expect_eof()
    return q


def parse_expression(source: str) -> ast.Expr:
    p = Parser(source)
    e = p.expr()
    p.expect_eof()
    return e


class Parser:
    def __init__(self, source: str) -> None:
        self.source = source
        self.toks = tokenize(source)
        self.i = 0

    # -- token plumbing ------------------------------------------------------------------
    @property
    def tok(self) -> Token:
        return self.toks[self.i]

    def peek(self, k: int = 1) -> Token:
        return self.toks[min(self.i + k, len(self.toks) - 1)]

    @property
    def prev(self) -> Token:
        return self.toks[self.i - 1] if self.i else self.toks[0]

    def advance(self) -> Token:
        t = self.toks[self.i]
        if t.type is not T.EOF:
            self.i += 1
        return t

    def is_kw(self, *words: str, tok: Token | None = None) -> bool:
        t = tok or self.tok
        return t.type is T.IDENT and t.upper in words

    def accept(self, ttype: T) -> Token | None:
        if self.tok.type is ttype:
            return self.advance()
        return None

    def accept_kw(self, *words: str) -> Token | None:
        if self.is_kw(*words):
            return self.advance()
        return None

    def expect(self, ttype: T, what: str | None = None) -> Token:
        if self.tok.type is ttype:
            return self.advance()
        self.fail(f"expected {what or ttype.value}")

    def expect_kw(self, word: str) -> Token:
        if self.is_kw(word):
            return self.advance()
        self.fail(f"expected {word}")

    def expect_eof(self) -> None:
        if self.tok.type is not T.EOF:
            self.fail("expected end of statement")

    def fail(self, expected: str, tok: Token | None = None, hint: str | None = None) -> NoReturn:
        t = tok or self.tok
        if hint is None and t.type is T.IDENT and t.upper in _UNSUPPORTED:
            hint = _UNSUPPORTED[t.upper]
        raise ParseError(f"{expected}, found {t.describe()}", t.span, self.source, hint=hint)

    def span_from(self, start: Token) -> Span:
        return start.span.to(self.prev.span)

    def ident(self, what: str = "a name") -> Token:
        t = self.tok
        if t.type is T.IDENT and t.upper not in RESERVED:
            return self.advance()
        hint = None
        if t.type is T.IDENT:
            hint = f"{t.text.upper()} is a reserved word"
        self.fail(f"expected {what}", hint=hint)

    def comma_list(self, item: Callable[[], _NodeT]) -> list[_NodeT]:
        out = [item()]
        while self.accept(T.COMMA):
            out.append(item())
        return out

    # -- statements ----------------------------------------------------------------------
    def script(self) -> list[ast.Statement]:
        out: list[ast.Statement] = []
        while True:
            while self.accept(T.SEMI):
                pass
            if self.tok.type is T.EOF:
                return out
            out.append(self.statement())
            if self.tok.type is not T.EOF:
                self.expect(T.SEMI, "';' between statements")

    def statement(self) -> ast.Statement:
        start = self.tok
        if self.is_kw("REGISTER", "CREATE"):
            self.advance()
            if self.accept_kw("STREAM"):
                return self.register_source("STREAM", start)
            if self.accept_kw("RELATION", "TABLE"):
                return self.register_source("RELATION", start)
            if self.accept_kw("VIEW"):
                return self.register_view(start)
            if self.accept_kw("QUERY"):
                return self.register_query(start)
            self.fail("expected STREAM, RELATION, VIEW or QUERY")
        if self.accept_kw("EXPLAIN"):
            q = self.query()
            return ast.Explain(q, span=self.span_from(start))
        q = self.query()
        return ast.QueryStatement(q, span=self.span_from(start))

    def register_source(self, kind: str, start: Token) -> ast.RegisterSource:
        name = self.ident("a stream or relation name").text
        self.expect(T.LPAREN, "'(' before the attribute list")
        cols = tuple(self.comma_list(self.column_def))
        self.expect(T.RPAREN, "')' or ',' in the attribute list")
        unit = None
        if self.accept_kw("UNIT"):
            t = self.tok
            if t.type is not T.IDENT or t.upper not in _UNITS:
                self.fail("expected a time unit", hint="units: millisecond, second, minute, hour, day")
            self.advance()
            unit = _UNITS[t.upper]
        constraints: list[ast.StreamConstraint] = []
        while self.is_kw("ORDERED", "CLUSTERED", "UNIQUE", "PUNCTUATED", "FOREIGN"):
            constraints.append(self.foreign_key() if self.is_kw("FOREIGN") else self.arrival_constraint())
        return ast.RegisterSource(kind, name, cols, unit, tuple(constraints), span=self.span_from(start))

    def arrival_constraint(self) -> ast.StreamConstraint:
        """``ORDERED|CLUSTERED BY a [WITHIN k]`` (STREAM §4.1's k-constraints; k defaults to 0),
        ``UNIQUE BY a``, ``PUNCTUATED BY a`` (the stream's punctuations on ``a``).
        """
        word = self.advance()
        self.expect_kw("BY")
        column = self.ident("an attribute name").text
        k = 0
        if word.upper == "UNIQUE" and self.is_kw("WITHIN"):
            self.fail("UNIQUE BY takes no WITHIN", hint="each value appears in at most one element")
        if word.upper == "PUNCTUATED" and self.is_kw("WITHIN"):
            self.fail("PUNCTUATED BY takes no WITHIN", hint="a punctuation excludes its values from later elements")
        if self.accept_kw("WITHIN"):
            k = self._within("elements", f"e.g. {word.upper} BY {column} WITHIN 3 (the adherence k: 0 is strict)")
        return ast.StreamConstraint(word.upper, column, k)

    def _within(self, what: str, hint: str) -> int:
        """The whole number after ``WITHIN`` (an adherence parameter: ``what`` it counts)."""
        n = self.tok
        if n.type is not T.INTEGER:
            self.fail(f"expected a whole number of {what} after WITHIN", hint=hint)
        self.advance()
        return int(n.text)

    def foreign_key(self) -> ast.StreamConstraint:
        """``FOREIGN KEY (a) REFERENCES R[(b)] [WITHIN k]`` — STREAM §4.1's referential integrity,
        its delay bounded by ``k`` units of this stream's time (default 0; ``b`` defaults to ``a``).
        """
        self.advance()
        self.expect_kw("KEY")
        self.expect(T.LPAREN, "'(' before the referencing attribute")
        column = self.ident("an attribute name").text
        self.expect(T.RPAREN, "')' after the referencing attribute")
        self.expect_kw("REFERENCES")
        ref = self.ident("the referenced stream's name").text
        ref_column = column
        if self.accept(T.LPAREN):
            ref_column = self.ident("the referenced attribute").text
            self.expect(T.RPAREN, "')' after the referenced attribute")
        k = 0
        if self.accept_kw("WITHIN"):
            k = self._within(
                "time units",
                f"e.g. FOREIGN KEY ({column}) REFERENCES {ref}({ref_column}) WITHIN 5 (the most a "
                f"{ref} element may come after its reference, in this stream's time units)",
            )
            if self.tok.type is T.IDENT and self.tok.upper in _UNITS:
                self.fail(
                    "WITHIN counts units of this stream's own time, without a unit",
                    hint="declare the stream's UNIT (e.g. UNIT second) and give k in it",
                )
        return ast.StreamConstraint("REFERENCES", column, k, ref, ref_column)

    def column_def(self) -> ast.ColumnDef:
        name_tok = self.ident("an attribute name")
        type_tok = self.tok
        if type_tok.type is not T.IDENT or type_tok.text.lower() not in TYPE_NAMES:
            self.fail(
                "expected a type",
                hint="types: integer, bigint, float, char(n), varchar(n), byte, boolean, timestamp",
            )
        self.advance()
        kind = TYPE_NAMES[type_tok.text.lower()]
        length = None
        if self.accept(T.LPAREN):
            n = self.expect(T.INTEGER, "a length")
            length = int(n.text)
            self.expect(T.RPAREN)
        if kind in (TypeKind.CHAR, TypeKind.VARCHAR) and (length is None or length <= 0):
            raise ParseError(
                f"{kind.value} needs a positive length, e.g. {kind.value}(10)",
                self.span_from(type_tok),
                self.source,
            )
        if kind not in (TypeKind.CHAR, TypeKind.VARCHAR) and length is not None:
            raise ParseError(f"{kind.value} takes no length", self.span_from(type_tok), self.source)
        return ast.ColumnDef(name_tok.text, DataType(kind, length), span=self.span_from(name_tok))

    def register_view(self, start: Token) -> ast.RegisterView:
        name = self.ident("a view name").text
        cols: tuple[str, ...] = ()
        if self.accept(T.LPAREN):
            cols = tuple(t.text for t in self.comma_list(lambda: self.ident("a column name")))
            self.expect(T.RPAREN)
        self.expect_kw("AS")
        q = self.query()
        return ast.RegisterView(name, q, cols, span=self.span_from(start))

    def register_query(self, start: Token) -> ast.RegisterQuery:
        name = self.ident("a query name").text
        opts: dict[str, float] = {}
        while self.is_kw("WEIGHT", "PRECISION", "LATENCY"):
            word = self.advance()
            key = word.upper
            if key in opts:
                raise ParseError(f"{key} given twice", self.span_from(word), self.source)
            num = self.tok
            if num.type not in (T.INTEGER, T.FLOAT):
                self.fail(
                    f"expected a number after {key}",
                    hint="e.g. WEIGHT 2, PRECISION 0.9 (1: exact only), LATENCY 200 ms",
                )
            self.advance()
            value = float(num.text)
            if key == "LATENCY":
                unit = self.tok
                # (the windows' unit words: ``2 mins``, ``2 hrs`` and ``2 msec`` as in ``[Range 2 mins]``)
                known = unit.type is T.IDENT and unit.upper in _UNITS
                value = value * _UNITS[unit.upper].millis / 1000 if known else -1.0
                if value < 0:
                    self.fail(
                        "expected a time unit after the LATENCY number", hint="e.g. LATENCY 200 ms, LATENCY 2 seconds"
                    )
                self.advance()
                if value <= 0:
                    raise ParseError("LATENCY must be positive", self.span_from(num), self.source)
            if key == "PRECISION" and not 0.0 <= value <= 1.0:
                raise ParseError(
                    f"PRECISION is the least recall (1 − FN) the query accepts: between 0 and 1, not {num.text}",
                    self.span_from(num),
                    self.source,
                )
            opts[key] = value
        self.expect_kw("AS")
        q = self.query()
        return ast.RegisterQuery(
            name, q, opts.get("WEIGHT"), opts.get("PRECISION"), opts.get("LATENCY"), span=self.span_from(start)
        )

    # -- queries -------------------------------------------------------------------------
    def query(self) -> ast.Query:
        start = self.tok
        left = self.set_term(bare_ok=False)
        while self.is_kw("UNION", "EXCEPT"):
            op = self.advance().upper
            all_ = self.accept_kw("ALL") is not None
            right = self.set_term(bare_ok=True)
            # STREAM's named form "A Union B" is a bag operation (its union/except operators
            # work on counts), so a bare-name operand implies ALL.
            all_ = all_ or _named(left) or _named(right)
            left = ast.SetOp(op, left, right, all_, span=self.span_from(start))
        return left

    def set_term(self, bare_ok: bool) -> ast.Query:
        start = self.tok
        left = self.set_primary(bare_ok)
        while self.is_kw("INTERSECT"):
            self.advance()
            all_ = self.accept_kw("ALL") is not None
            right = self.set_primary(bare_ok=True)
            all_ = all_ or _named(left) or _named(right)
            left = ast.SetOp("INTERSECT", left, right, all_, span=self.span_from(start))
        return left

    def set_primary(self, bare_ok: bool) -> ast.Query:
        t = self.tok
        if self.is_kw("SELECT"):
            return self.select()
        if self.is_kw(*STREAM_OPS):
            return self.stream_op()
        if t.type is T.LPAREN:
            self.advance()
            q = self.query()
            self.expect(T.RPAREN, "')' to close the subquery")
            return q
        if t.type is T.IDENT and t.upper not in RESERVED:
            nxt = self.peek()
            if bare_ok or self.is_kw("UNION", "EXCEPT", "INTERSECT", tok=nxt):
                self.advance()
                return ast.TableQuery(t.text, span=t.span)
        self.fail("expected SELECT, Istream/Dstream/Rstream or '('")

    def stream_op(self) -> ast.StreamOp:
        start = self.advance()
        self.expect(T.LPAREN, f"'(' after {start.text}")
        q = self.query()
        self.expect(T.RPAREN, f"')' to close {start.text}(")
        return ast.StreamOp(start.upper, q, span=self.span_from(start))

    def select(self) -> ast.Select:
        start = self.expect_kw("SELECT")
        distinct = False
        if self.accept_kw("DISTINCT"):
            distinct = True
        else:
            self.accept_kw("ALL")
        stream_op = None
        if self.is_kw(*STREAM_OPS) and self.peek().type is T.LPAREN:
            # NEXMark's form: SELECT Istream(a, b) FROM ...
            stream_op = self.advance().upper
            self.advance()
            if not distinct and self.accept_kw("DISTINCT"):
                distinct = True
            items = tuple(self.comma_list(self.select_item))
            self.expect(T.RPAREN, f"')' to close {stream_op.title()}(")
            if not self.is_kw("FROM"):
                self.fail("expected FROM", hint=f"{stream_op.title()}(...) must wrap the whole select list")
        else:
            items = tuple(self.comma_list(self.select_item))
        self.expect_kw("FROM")
        from_ = tuple(self.comma_list(self.from_item))
        where = self.expr() if self.accept_kw("WHERE") else None
        group_by: tuple[ast.Expr, ...] = ()
        if self.accept_kw("GROUP"):
            self.expect_kw("BY")
            group_by = tuple(self.comma_list(self.expr))
        having = self.expr() if self.accept_kw("HAVING") else None
        window = None
        if self.accept_kw("WINDOW"):
            window = self.duration()
        return ast.Select(
            items,
            from_,
            where,
            group_by,
            having,
            distinct,
            window,
            stream_op,
            span=self.span_from(start),
        )

    def select_item(self) -> ast.SelectItem:
        start = self.tok
        if self.accept(T.STAR):
            return ast.SelectItem(ast.Star(None, span=start.span), span=start.span)
        if (
            start.type is T.IDENT
            and self.peek().type is T.DOT
            and self.peek(2).type is T.STAR
            and start.upper not in RESERVED
        ):
            self.i += 3
            sp = self.span_from(start)
            return ast.SelectItem(ast.Star(start.text, span=sp), span=sp)
        e = self.expr()
        alias = None
        if self.accept_kw("AS"):
            alias = self.ident("an alias").text
        elif self.tok.type is T.IDENT and self.tok.upper not in RESERVED:
            alias = self.advance().text
        return ast.SelectItem(e, alias, span=self.span_from(start))

    def from_item(self) -> ast.FromItem:
        start = self.tok
        query: ast.Query | None = None
        name = None
        if self.tok.type is T.LPAREN:
            self.advance()
            query = self.query()
            self.expect(T.RPAREN, "')' to close the subquery")
        elif self.is_kw(*STREAM_OPS):
            query = self.stream_op()
        else:
            name = self.ident("a stream, relation or view name").text
        alias: str | None = None
        window: ast.Window | None = None
        sample: ast.Sample | None = None
        # Alias, window and sample may come in any order (STREAM writes both
        # "S [Now] as S1" and "Requests S [Range 1 Day]" and "T Sample(10)").
        while True:
            if self.tok.type is T.LBRACKET and window is None:
                window = self.window()
            elif self.is_kw("SAMPLE") and self.peek().type is T.LPAREN and sample is None:
                sample = self.sample()
            elif alias is None and self.accept_kw("AS"):
                alias = self.ident("an alias").text
            elif (
                alias is None
                and self.tok.type is T.IDENT
                and self.tok.upper not in RESERVED
                and not (self.is_kw("SAMPLE") and self.peek().type is T.LPAREN)
            ):
                alias = self.advance().text
            else:
                break
        sp = self.span_from(start)
        if query is not None:
            return ast.SubqueryRef(query, alias, window, sample, span=sp)
        assert name is not None
        return ast.TableRef(name, alias, window, sample, span=sp)

    def sample(self) -> ast.Sample:
        start = self.advance()
        self.expect(T.LPAREN)
        t, pct = self._percentage("expected a sampling percentage")
        if not 0 < pct <= 100:
            raise ParseError("sampling percentage must be in (0, 100]", t.span, self.source)
        least = None
        if self.accept_kw("TO"):
            u, high = self._percentage("expected the highest sampling percentage after TO", "e.g. Sample(10 To 50)")
            least, pct = pct, high
            if not least <= pct <= 100:
                raise ParseError(
                    f"a sampling range runs from the lowest percentage to the highest, at most 100: "
                    f"{least:g} To {pct:g}",
                    u.span,
                    self.source,
                )
        more = "" if least is not None else " (or To and the highest)"
        self.expect(T.RPAREN, f"')' after the sampling percentage{more}")
        return ast.Sample(pct, span=self.span_from(start), least=least)

    def _percentage(self, expected: str, hint: str | None = None) -> tuple[Token, float]:
        t = self.tok
        if t.type not in (T.INTEGER, T.FLOAT):
            self.fail(expected, hint=hint)
        self.advance()
        return t, float(t.text)

    # -- windows -------------------------------------------------------------------------
    def window(self) -> ast.Window:
        """``[ kind … [Where e] ]``: the kind (``sluice.windows.WINDOWS``) parses what follows its keyword."""
        start = self.expect(T.LBRACKET)
        kinds = {k.keyword: k for k in windows.WINDOWS}
        kind = kinds.get(self.tok.upper)
        if kind is None:
            titles = [k.title for k in windows.WINDOWS]
            self.fail(f"expected {', '.join(titles[:-1])} or {titles[-1]}")
        self.advance()
        w = kind.parse(self)
        where = self.expr() if self.accept_kw("WHERE") else None
        self.expect(T.RBRACKET, "']' to close the window")
        return dataclasses.replace(w, where=where, span=self.span_from(start))

    def duration(self) -> ast.Duration:
        """``4 seconds``, or a bare ``4`` (the stream's own time unit)."""
        start = self.tok
        t = self.expect(T.INTEGER, "a whole number of time units")
        unit_tok = self.tok
        if unit_tok.type is not T.IDENT or unit_tok.upper in _AFTER_DURATION or unit_tok.upper in RESERVED:
            # STREAM 0.6.0's grammar (parser.y, ``time_spec: T_INT``): the stream's own time unit
            return ast.Duration(int(t.text), None, span=self.span_from(start))
        if unit_tok.upper not in _UNITS:
            self.fail(
                "expected a time unit",
                hint="units: millisecond(s), second(s), minute(s), hour(s), day(s), or none (the stream's own unit)",
            )
        self.advance()
        return ast.Duration(int(t.text), _UNITS[unit_tok.upper], span=self.span_from(start))

    def column_name(self) -> ast.ColumnName:
        first = self.ident("an attribute name")
        if self.accept(T.DOT):
            second = self.ident("an attribute name")
            return ast.ColumnName(first.text, second.text, span=self.span_from(first))
        return ast.ColumnName(None, first.text, span=first.span)

    # -- expressions ---------------------------------------------------------------------
    def expr(self) -> ast.Expr:
        start = self.tok
        left = self.and_expr()
        while self.accept_kw("OR"):
            right = self.and_expr()
            left = ast.Binary("OR", left, right, span=self.span_from(start))
        return left

    def and_expr(self) -> ast.Expr:
        start = self.tok
        left = self.not_expr()
        while self.accept_kw("AND"):
            right = self.not_expr()
            left = ast.Binary("AND", left, right, span=self.span_from(start))
        return left

    def not_expr(self) -> ast.Expr:
        start = self.tok
        if self.is_kw("NOT") and self.is_kw("EXISTS", tok=self.peek()) and self.peek(2).type is T.LPAREN:
            self.advance()
            self.advance()
            self.advance()
            q = self.query()
            self.expect(T.RPAREN, "')' to close the subquery")
            return ast.Exists(q, True, span=self.span_from(start))
        if self.accept_kw("NOT"):
            operand = self.not_expr()
            return ast.Unary("NOT", operand, span=self.span_from(start))
        return self.predicate()

    def predicate(self) -> ast.Expr:
        start = self.tok
        left = self.concat()
        t = self.tok
        if t.type in _COMPARE:
            op = _COMPARE[self.advance().type]
            if self.is_kw("ALL", "ANY", "SOME"):
                quant = "ALL" if self.advance().upper == "ALL" else "ANY"
                self.expect(T.LPAREN, f"'(' and a subquery after {quant}")
                q = self.query()
                self.expect(T.RPAREN, "')' to close the subquery")
                return ast.Quantified(op, left, quant, q, span=self.span_from(start))
            right = self.concat()
            return ast.Binary(op, left, right, span=self.span_from(start))
        if self.accept_kw("IS"):
            neg = self.accept_kw("NOT") is not None
            self.expect_kw("NULL")
            return ast.IsNull(left, neg, span=self.span_from(start))
        neg = False
        if self.is_kw("NOT") and self.is_kw("LIKE", "BETWEEN", "IN", tok=self.peek()):
            self.advance()
            neg = True
        if self.accept_kw("LIKE"):
            pat = self.concat()
            return ast.Like(left, pat, neg, span=self.span_from(start))
        if self.accept_kw("BETWEEN"):
            low = self.concat()
            self.expect_kw("AND")
            high = self.concat()
            return ast.Between(left, low, high, neg, span=self.span_from(start))
        if self.accept_kw("IN"):
            self.expect(T.LPAREN, "'(' after IN")
            if self.is_kw("SELECT", *STREAM_OPS):
                q = self.query()
                self.expect(T.RPAREN, "')' to close the subquery")
                return ast.InSubquery(left, q, neg, span=self.span_from(start))
            items = tuple(self.comma_list(self.expr))
            self.expect(T.RPAREN, "')' or ',' in the IN list")
            return ast.InList(left, items, neg, span=self.span_from(start))
        return left

    def concat(self) -> ast.Expr:
        start = self.tok
        left = self.additive()
        while self.accept(T.CONCAT):
            right = self.additive()
            left = ast.Binary("||", left, right, span=self.span_from(start))
        return left

    def additive(self) -> ast.Expr:
        start = self.tok
        left = self.multiplicative()
        while self.tok.type in (T.PLUS, T.MINUS):
            op = self.advance().text
            right = self.multiplicative()
            left = ast.Binary(op, left, right, span=self.span_from(start))
        return left

    def multiplicative(self) -> ast.Expr:
        start = self.tok
        left = self.unary()
        while self.tok.type in (T.STAR, T.SLASH, T.PERCENT):
            op = self.advance().text
            right = self.unary()
            left = ast.Binary(op, left, right, span=self.span_from(start))
        return left

    def unary(self) -> ast.Expr:
        start = self.tok
        if self.tok.type in (T.MINUS, T.PLUS):
            op = self.advance().text
            operand = self.unary()
            return ast.Unary(op, operand, span=self.span_from(start))
        return self.primary()

    def primary(self) -> ast.Expr:
        t = self.tok
        if t.type is T.INTEGER:
            self.advance()
            return ast.Literal(int(t.text), span=t.span)
        if t.type is T.FLOAT:
            self.advance()
            return ast.Literal(float(t.text), span=t.span)
        if t.type is T.STRING:
            self.advance()
            return ast.Literal(t.text, span=t.span)
        if t.type is T.LPAREN:
            self.advance()
            if self.is_kw("SELECT", *STREAM_OPS):
                q = self.query()
                self.expect(T.RPAREN, "')' to close the subquery")
                return ast.ScalarSubquery(q, span=self.span_from(t))
            e = self.expr()
            self.expect(T.RPAREN, "')'")
            return e
        if t.type is not T.IDENT:
            self.fail("expected an expression")
        up = t.upper
        if up in ("TRUE", "FALSE"):
            self.advance()
            return ast.Literal(up == "TRUE", span=t.span)
        if up == "NULL":
            self.advance()
            return ast.Literal(None, span=t.span)
        if up == "CURRENT_TIME":
            self.advance()
            return ast.CurrentTime(span=t.span)
        if up == "EXISTS":
            self.advance()
            self.expect(T.LPAREN, "'(' after EXISTS")
            q = self.query()
            self.expect(T.RPAREN, "')' to close the subquery")
            return ast.Exists(q, span=self.span_from(t))
        if up == "CASE":
            return self.case()
        if up in RESERVED:
            if up in STREAM_OPS:
                self.fail(
                    "expected an expression",
                    hint=f"{t.text}(...) must wrap the whole select list or a whole query",
                )
            self.fail("expected an expression")
        self.advance()
        if self.tok.type is T.LPAREN:
            return self.call(t)
        if self.accept(T.DOT):
            col = self.ident("an attribute name")
            return ast.ColumnName(t.text, col.text, span=self.span_from(t))
        return ast.ColumnName(None, t.text, span=t.span)

    def call(self, name: Token) -> ast.FuncCall:
        self.expect(T.LPAREN)
        if self.tok.type is T.STAR:
            self.advance()
            self.expect(T.RPAREN, "')' after *")
            return ast.FuncCall(name.upper, (), star=True, span=self.span_from(name))
        distinct = False
        if self.accept_kw("DISTINCT"):
            distinct = True
        elif self.is_kw("ALL") and self.peek().type is not T.RPAREN:
            self.advance()  # COUNT(ALL x) is COUNT(x)
        args: tuple[ast.Expr, ...] = ()
        if self.tok.type is not T.RPAREN:
            args = tuple(self.comma_list(self.expr))
        self.expect(T.RPAREN, "')' or ',' in the argument list")
        return ast.FuncCall(name.upper, args, distinct, span=self.span_from(name))

    def case(self) -> ast.Case:
        start = self.advance()
        operand = None if self.is_kw("WHEN") else self.expr()
        whens: list[tuple[ast.Expr, ast.Expr]] = []
        while self.accept_kw("WHEN"):
            cond = self.expr()
            self.expect_kw("THEN")
            whens.append((cond, self.expr()))
        if not whens:
            self.fail("expected WHEN")
        else_ = self.expr() if self.accept_kw("ELSE") else None
        self.expect_kw("END")
        return ast.Case(operand, tuple(whens), else_, span=self.span_from(start))
