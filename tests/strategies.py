"""Hypothesis strategies for CQL ASTs (round-trip tests) and for CQL-ish text (fuzzing)."""

from __future__ import annotations

from hypothesis import HealthCheck
from hypothesis import strategies as st
from sluice import windows as W
from sluice.cql import ast
from sluice.cql.tokens import RESERVED

# settings for property tests whose examples each run an engine (slow to the health check)
SLOW_OK = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow]}

# Legal identifiers; a few non-reserved CQL words are avoided only to keep examples readable.
_AVOID = RESERVED | {"ROWS", "RANGE", "NOW", "PARTITION", "SLIDE", "PRECEDING", "UNBOUNDED", "SAMPLE"}
idents = st.from_regex(r"[A-Za-z][A-Za-z0-9_]{0,5}", fullmatch=True).filter(lambda s: s.upper() not in _AVOID)
func_names = idents.map(str.upper)

literals = st.one_of(
    st.integers(min_value=0, max_value=10**12),
    st.floats(min_value=0, max_value=1e12, allow_nan=False, allow_infinity=False),
    st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=8),
    st.booleans(),
    st.none(),
).map(ast.Literal)

columns = st.builds(ast.ColumnName, st.none() | idents, idents)
durations = st.builds(ast.Duration, st.integers(0, 1000), st.sampled_from(list(ast.TimeUnit)))
BINOPS = ["+", "-", "*", "/", "%", "||", "=", "<>", "<", "<=", ">", ">=", "AND", "OR"]


def _exprs(children: st.SearchStrategy[ast.Expr]) -> st.SearchStrategy[ast.Expr]:
    small = st.lists(children, min_size=1, max_size=3).map(tuple)
    return st.one_of(
        st.builds(ast.Unary, st.sampled_from(["-", "+", "NOT"]), children),
        st.builds(ast.Binary, st.sampled_from(BINOPS), children, children),
        st.builds(ast.FuncCall, func_names, small, st.booleans()),
        st.just(ast.FuncCall("COUNT", (), star=True)),
        st.builds(ast.IsNull, children, st.booleans()),
        st.builds(ast.Like, children, children, st.booleans()),
        st.builds(ast.Between, children, children, children, st.booleans()),
        st.builds(ast.InList, children, small, st.booleans()),
        st.builds(
            ast.Case,
            st.none() | children,
            st.lists(st.tuples(children, children), min_size=1, max_size=2).map(tuple),
            st.none() | children,
        ),
    )


exprs = st.recursive(st.one_of(literals, columns, st.just(ast.CurrentTime())), _exprs, max_leaves=8)


@st.composite
def windows(draw: st.DrawFn) -> ast.Window:
    kind = draw(st.sampled_from(W.WINDOWS))
    where = draw(st.none() | exprs)
    if kind is W.NowSyntax:
        return W.NowSyntax(where=where)
    if kind is W.RowsSyntax:
        return W.RowsSyntax(draw(st.none() | st.integers(1, 10**6)), where=where)
    if kind is W.RangeSyntax:
        rng = draw(st.none() | durations)
        slide = None
        if rng is not None:
            slide = draw(st.none() | st.builds(ast.Duration, st.integers(1, 100), st.sampled_from(list(ast.TimeUnit))))
        return W.RangeSyntax(rng, slide, where=where)
    assert kind is W.PartitionSyntax, f"no strategy for the window kind {kind.__name__}"
    keys = tuple(draw(st.lists(columns, min_size=1, max_size=2)))
    return W.PartitionSyntax(keys, draw(st.integers(1, 100)), where=where)


_percents = st.sampled_from([1.0, 2.0, 10.0, 12.5, 50.0, 100.0])
samples = _percents.map(ast.Sample) | st.builds(
    lambda a, b: ast.Sample(max(a, b), least=min(a, b)), _percents, _percents
)  # ``Sample(p)`` and ``Sample(a To b)``


def selects(sub: st.SearchStrategy[ast.Query]) -> st.SearchStrategy[ast.Select]:
    items = st.one_of(
        st.builds(ast.SelectItem, exprs, st.none() | idents),
        st.builds(lambda q: ast.SelectItem(ast.Star(q)), st.none() | idents),
    )
    table_refs = st.builds(ast.TableRef, idents, st.none() | idents, st.none() | windows(), st.none() | samples)
    sub_refs = st.builds(ast.SubqueryRef, sub, st.none() | idents, st.none() | windows(), st.none() | samples)
    return st.builds(
        ast.Select,
        st.lists(items, min_size=1, max_size=3).map(tuple),
        st.lists(st.one_of(table_refs, sub_refs), min_size=1, max_size=2).map(tuple),
        st.none() | exprs,
        st.lists(exprs, max_size=2).map(tuple),
        st.none() | exprs,
        st.booleans(),
        st.none() | durations,
        st.none() | st.sampled_from(["ISTREAM", "DSTREAM", "RSTREAM"]),
    )


@st.composite
def _set_ops(draw: st.DrawFn, sub: st.SearchStrategy[ast.Query]) -> ast.SetOp:
    op = draw(st.sampled_from(["UNION", "EXCEPT", "INTERSECT"]))
    left = draw(sub | st.builds(ast.TableQuery, idents))
    right = draw(sub | st.builds(ast.TableQuery, idents))
    named = isinstance(left, ast.TableQuery) or isinstance(right, ast.TableQuery)
    return ast.SetOp(op, left, right, named or draw(st.booleans()))


def _queries(sub: st.SearchStrategy[ast.Query]) -> st.SearchStrategy[ast.Query]:
    return st.one_of(
        selects(sub),
        _set_ops(sub),
        st.builds(ast.StreamOp, st.sampled_from(["ISTREAM", "DSTREAM", "RSTREAM"]), sub),
    )


_leaf_select = selects(st.nothing())
queries = st.recursive(_leaf_select, _queries, max_leaves=3)

# Expressions that hold subqueries (their query must start with SELECT to print unambiguously).
subquery_exprs = st.one_of(
    st.builds(ast.Exists, _leaf_select, st.booleans()),
    st.builds(ast.InSubquery, exprs, _leaf_select, st.booleans()),
    st.builds(ast.ScalarSubquery, _leaf_select),
    st.builds(
        ast.Quantified, st.sampled_from(["=", "<>", "<", ">"]), exprs, st.sampled_from(["ALL", "ANY"]), _leaf_select
    ),
)

# Text made of CQL's vocabulary, for fuzzing deeper than random characters reach.
VOCAB = (
    "select from where group by having distinct as and or not in is null like between exists "
    "union except intersect all any istream dstream rstream window rows range now slide partition "
    "unbounded preceding sample count sum avg min max case when then else end current_time "
    "S R V A B C K X T 1 2 0 10 1.5 'x' \"y\" ( ) [ ] , . ; * + - / % = <> < <= > >= || seconds minute day"
).split()
token_soup = st.lists(st.sampled_from(VOCAB), min_size=1, max_size=30).map(" ".join)


@st.composite
def relation_updates(draw: st.DrawFn) -> list[tuple[int, str, tuple[int, str]]]:
    """Up to six changes of a relation (K integer, N varchar): insertions of (0–2, 'a'|'b') and
    deletions of rows it holds, at non-decreasing instants."""
    ups: list[tuple[int, str, tuple[int, str]]] = []
    present: list[tuple[int, str]] = []
    t = 0
    for _ in range(draw(st.integers(0, 6))):
        t += draw(st.integers(0, 3))
        if present and draw(st.booleans()):
            row = present.pop(draw(st.integers(0, len(present) - 1)))
            ups.append((t, "-", row))
        else:
            row = (draw(st.integers(0, 2)), draw(st.sampled_from(["a", "b"])))
            present.append(row)
            ups.append((t, "+", row))
    return ups
