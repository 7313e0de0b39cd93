"""Parser: round-trips, positions, and the whole language of the issue."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from sluice.cql import ParseError, ast, parse_expression, parse_query, parse_script, parse_statement
from sluice.cql.printer import to_cql
from sluice.cql.tokens import T, tokenize

import golden
import strategies as S


def _roundtrip(node: ast.Node, parse) -> None:
    text = to_cql(node)
    again = parse(text)
    assert again == node, text
    assert to_cql(again) == text


@settings(max_examples=400)
@given(S.exprs)
def test_expression_roundtrip(e: ast.Expr) -> None:
    _roundtrip(e, parse_expression)


@settings(max_examples=300)
@given(S.subquery_exprs)
def test_subquery_expression_roundtrip(e: ast.Expr) -> None:
    _roundtrip(e, parse_expression)


@settings(max_examples=400)
@given(S.queries)
def test_query_roundtrip(q: ast.Query) -> None:
    _roundtrip(q, parse_query)


def _golden_queries() -> list[str]:
    out = []
    for path in golden.all_files():
        out += [c.query for c in golden.load(path).cases if c.kind != "error"]
    return out


@pytest.mark.parametrize("text", _golden_queries())
def test_golden_queries_roundtrip(text: str) -> None:
    q = parse_query(text)
    assert parse_query(to_cql(q)) == q


def test_tokens_carry_line_and_column() -> None:
    toks = tokenize("select A\n  from S  -- c\n# x\nwhere A ≠ 'it''s'")
    where = [t for t in toks if t.text == "where"][0]
    assert (where.span.line, where.span.col) == (4, 1)
    s = [t for t in toks if t.type is T.STRING][0]
    assert s.text == "it's" and (s.span.line, s.span.col) == (4, 11)
    assert [t for t in toks if t.type is T.NE]


def test_script_of_every_statement_kind() -> None:
    stmts = parse_script(
        """
        REGISTER STREAM S (A int, B char(4));
        register relation R (A integer);
        REGISTER VIEW V (x) AS select A from S;
        CREATE VIEW W AS select * from R;
        EXPLAIN select * from S;
        select * from S;
        """
    )
    kinds = [type(s).__name__ for s in stmts]
    assert kinds == ["RegisterSource", "RegisterSource", "RegisterView", "RegisterView", "Explain", "QueryStatement"]
    assert stmts[2].columns == ("x",)


@pytest.mark.parametrize(
    ("text", "check"),
    [
        ("select * from S [Range 15 Minutes Preceding]", lambda q: q.from_[0].window.range.millis == 900_000),
        ("select * from S [Range 2 hrs]", lambda q: q.from_[0].window.range.millis == 7_200_000),
        ("select * from S [Range 500 ms]", lambda q: q.from_[0].window.range.millis == 500),
        ("select * from S [Rows Unbounded]", lambda q: q.from_[0].window.unbounded),
        ("select * from S [Range 1 Day Slide 1 hour]", lambda q: q.from_[0].window.slide.millis == 3_600_000),
        ("select * from S Sample(2) [Now] X", lambda q: q.from_[0].sample.percent == 2.0 and q.from_[0].alias == "X"),
        ("select Rstream(a, b as c) from S", lambda q: q.stream_op == "RSTREAM" and q.items[1].alias == "c"),
        ("A Union B", lambda q: isinstance(q, ast.SetOp) and q.all),
        (
            "select count(distinct a), count(all b) from S",
            lambda q: q.items[0].expr.distinct and not q.items[1].expr.distinct,
        ),
        ("select a from S WINDOW 30 min", lambda q: q.window.millis == 1_800_000),
        ("select * from S where a = any (select b from R)", lambda q: q.where.quantifier == "ANY"),
        ("select * from S where a > some (select b from R)", lambda q: q.where.quantifier == "ANY"),
    ],
)
def test_constructs(text: str, check) -> None:
    assert check(parse_query(text))


def test_register_requires_lengths() -> None:
    with pytest.raises(ParseError, match="char needs a positive length"):
        parse_statement("register stream S (a char)")
    with pytest.raises(ParseError, match="integer takes no length"):
        parse_statement("register stream S (a integer(3))")


def test_a_number_run_into_its_unit_is_refused_with_the_two_words() -> None:
    """``LATENCY 200ms`` (as ``max_latency="200ms"`` is written in Python) is not CQL: the error
    says to write the number and its unit apart; other run-ons get no such hint.
    """
    with pytest.raises(ParseError, match=r"malformed number '200ms' \(a number and its unit are two words: 200 ms\)"):
        parse_script("REGISTER QUERY f LATENCY 200ms AS select * from A")
    with pytest.raises(ParseError, match=r"malformed number '12abc'\n"):
        parse_script("select * from A [Range 12abc]")
    with pytest.raises(ParseError, match=r"malformed number '1.5s'\n"):  # (no unit after a fraction)
        parse_script("select * from A [Range 1.5s]")
    # LATENCY takes the windows' unit words
    latency = [
        parse_script(f"REGISTER QUERY f LATENCY {d} AS select * from A")[0].latency for d in ("2 mins", "2 msec")
    ]
    assert latency == [120.0, 0.002]
