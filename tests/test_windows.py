"""Window kinds are objects (``sluice.windows``): every kind has its syntax (parsing, printing,
binding), its operator, its meaning by definition and its EXPLAIN text, and a kind nobody
registered is an error, never run as another.  A new kind is its own classes plus registration:
the toy kind at the end is defined here and nowhere else."""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar, Self

import pytest
from sluice import EmbeddedEngine
from sluice import windows as W
from sluice.catalog import Catalog
from sluice.cql import BindError, ParseError, ast, parse_query
from sluice.cql.printer import to_cql
from sluice.errors import InternalError
from sluice.plan import bind_query, explain
from sluice.plan import logical as L
from sluice.runtime.operators.windows import WINDOW_OPERATORS

EXAMPLES = [W.Unbounded(), W.Now(), W.Range(3), W.Range(4, slide=2), W.Rows(2), W.PartitionedRows((0,), 1)]


def test_every_window_kind_is_listed_and_has_an_operator() -> None:
    # (names: a slots dataclass leaves its pre-slots class behind among the subclasses)
    assert {k.__qualname__ for k in W.window_kinds()} == {k.__qualname__ for k in W.WindowDef.__subclasses__()}
    assert set(W.window_kinds()) == set(WINDOW_OPERATORS)
    assert {type(w) for w in EXAMPLES} == set(W.window_kinds())


@pytest.mark.parametrize("w", EXAMPLES, ids=lambda w: w.describe(("K",)))
def test_meaning_by_definition(w: W.WindowDef) -> None:
    upto = [(1, (1, "a")), (3, (2, "b")), (3, (1, "c")), (4, (2, "d"))]
    tau = w.as_of(4)
    expected = {
        "Range Unbounded": ["a", "b", "c", "d"],
        "Now": ["d"],
        "Range 3 ticks": ["a", "b", "c", "d"],
        "Range 4 ticks Slide 2 ticks": ["a", "b", "c", "d"],
        "Rows 2": ["c", "d"],
        "Partition By K Rows 1": ["c", "d"],
    }[w.describe(("K",))]
    assert [r[1] for r in w.contents([e for e in upto if e[0] <= tau], tau)] == expected
    assert W.Range(1).contents(upto, 4) == [(2, "b"), (1, "c"), (2, "d")]
    assert W.Range(4, slide=2).as_of(5) == 4 and W.Range(4, slide=2).changes_after(3) == (4, 8)


def test_properties_the_planners_read() -> None:
    assert [w.insert_only for w in EXAMPLES] == [True, False, False, False, False, False]
    assert [w.order_sensitive for w in EXAMPLES] == [False, False, False, False, True, True]
    assert W.PartitionedRows((0, 1), 2).keeps_split((0,)) and not W.PartitionedRows((0,), 2).keeps_split((1,))
    assert W.Range(5).keeps_split((3,)) and not W.Rows(5).keeps_split((0,))


@pytest.mark.parametrize("bad", [lambda: W.Rows(0), lambda: W.Range(-1), lambda: W.Range(2, slide=0)])
def test_malformed_windows_are_internal_errors(bad) -> None:
    with pytest.raises(InternalError, match="malformed window"):
        bad()


def test_a_window_kind_without_an_operator_is_an_error_not_a_fallback() -> None:
    import dataclasses

    from sluice.plan import bind_query

    @dataclass(frozen=True, slots=True)
    class Mystery(W.WindowDef):  # a kind nobody registered
        def contents(self, upto: Sequence[tuple[int, W.Row]], tau: int) -> list[W.Row]:
            return []

        def describe(self, names: tuple[str, ...] = ()) -> str:
            return "Mystery"

    eng = EmbeddedEngine()
    eng.execute("register stream S (A integer)")
    bound = bind_query(eng.catalog, "Istream(select * from S [Now])")
    window = next(n for n in L.walk_plan(bound.plan) if isinstance(n, L.Window))
    broken = _replace(bound.plan, window, dataclasses.replace(window, spec=Mystery()))
    with pytest.raises(InternalError, match=r"no operator runs the window \[Mystery\]"):
        eng.planner.build(broken, "broken")


def _replace(plan: L.LogicalNode, old: L.LogicalNode, new: L.LogicalNode) -> L.LogicalNode:
    import dataclasses

    if plan is old:
        return new
    changes = {
        f.name: _replace(getattr(plan, f.name), old, new)
        for f in dataclasses.fields(plan)  # type: ignore[arg-type]
        if isinstance(getattr(plan, f.name), L.LogicalNode)
    }
    return dataclasses.replace(plan, **changes)  # type: ignore[type-var]


# -- syntax: parsing, printing and binding of every registered kind ------------------------

#: windows as written, for every kind's syntax (a registered kind missing here fails the test)
SYNTAX = {
    W.NowSyntax: ["[Now]", "[Now Where (A > 1)]"],
    W.RowsSyntax: ["[Rows 2]", "[Rows Unbounded]"],
    W.RangeSyntax: ["[Range 4]", "[Range 2 seconds Slide 1 second]", "[Range Unbounded]"],
    W.PartitionSyntax: ["[Partition By K, S.A Rows 1]"],
}


def _catalog() -> Catalog:
    cat = Catalog()
    cat.register_stream("S", [("K", "integer"), ("A", "integer")])
    return cat


def _spec(plan: L.LogicalNode) -> W.WindowDef:
    return next(n.spec for n in L.walk_plan(plan) if isinstance(n, L.Window))


def test_every_window_kind_has_syntax_printing_and_binding() -> None:
    # every concrete ast.Window is registered (names: see the first test), and every meaning has a syntax
    written = {k.__qualname__ for k in ast.Window.__subclasses__() if not inspect.isabstract(k)}
    assert {k.__qualname__ for k in W.WINDOWS} == written
    assert set(SYNTAX) == set(W.WINDOWS)
    bound: set[type[W.WindowDef]] = set()
    for kind, texts in SYNTAX.items():
        for text in texts:
            q = parse_query(f"select * from S {text}")
            w = q.from_[0].window
            assert type(w) is kind and to_cql(w) == text and parse_query(to_cql(q)) == q
            spec = _spec(bind_query(_catalog(), q).plan)
            assert type(spec) in kind.binds_to
            bound.add(type(spec))
    assert bound == set(W.window_kinds())


def test_a_window_syntax_without_binding_cannot_be_built() -> None:
    @dataclass(frozen=True, slots=True)
    class Half(ast.Window):  # parses and prints, but never says what it means
        @classmethod
        def parse(cls, p: W.WindowParser) -> Self:
            return cls()

        def body(self) -> str:
            return "Half"

    with pytest.raises(TypeError, match="abstract method '?bind"):
        Half()


# -- a new kind, defined here only -----------------------------------------------------------


def _tumble() -> tuple[type[W.WindowDef], type[ast.Window]]:
    """A toy kind, ``[Tumble T]``: the elements since the last multiple of ``T`` (not Sluice's)."""

    @dataclass(frozen=True, slots=True)
    class Tumble(W.WindowDef):
        size: int
        time_based: ClassVar[bool] = True

        def changes_after(self, ts: int) -> tuple[int, ...]:
            return (ts, (ts // self.size + 1) * self.size)

        def contents(self, upto: Sequence[tuple[int, W.Row]], tau: int) -> list[W.Row]:
            return [r for t, r in upto if t >= tau // self.size * self.size]

        def describe(self, names: tuple[str, ...] = ()) -> str:
            return f"Tumble {self.size} ticks"

    @dataclass(frozen=True, slots=True)
    class TumbleSyntax(ast.Window):
        keyword: ClassVar[str] = "TUMBLE"
        title: ClassVar[str] = "Tumble"
        binds_to: ClassVar[tuple[type[W.WindowDef], ...]] = (Tumble,)

        size: ast.Duration

        @classmethod
        def parse(cls, p: W.WindowParser) -> Self:
            return cls(p.duration())

        def body(self) -> str:
            return f"Tumble {self.size.sql()}"

        def bind(self, ctx: W.WindowBinding) -> W.WindowDef:
            n = ctx.ticks(self.size)
            if n == 0:
                raise ctx.error("Tumble must be at least one tick", self.size.span)
            return Tumble(n)

    return Tumble, TumbleSyntax


def test_a_new_window_kind_is_its_own_classes_plus_registration(monkeypatch: pytest.MonkeyPatch) -> None:
    from sluice.reference import evaluate

    Tumble, TumbleSyntax = _tumble()
    monkeypatch.setattr(W, "WINDOWS", (*W.WINDOWS, TumbleSyntax))  # its registration

    # parsing (keyword in any case, a unitless duration, a window Where) and printing
    q = parse_query("select A from S [tumble 4 Where A > 1] X")
    w = q.from_[0].window
    assert w == TumbleSyntax(ast.Duration(4, None), where=parse_query("select * from S where A > 1").where)
    assert (w.span.start, w.span.end) == (16, 38)
    assert to_cql(q) == "SELECT A FROM S [Tumble 4 Where (A > 1)] AS X" and parse_query(to_cql(q)) == q
    with pytest.raises(ParseError, match="expected Now, Rows, Range, Partition By or Tumble, found 'Slide'"):
        parse_query("select * from S [Slide 4]")

    # binding: durations in ticks with the binder's errors, its own errors at its spans
    cat = _catalog()
    assert _spec(bind_query(cat, "select * from S [Tumble 2 minutes]").plan) == Tumble(120)
    with pytest.raises(BindError, match="1:25: Tumble must be at least one tick"):
        bind_query(cat, "select * from S [Tumble 0 seconds]")
    with pytest.raises(BindError, match="500 milliseconds is not a whole number of ticks"):
        bind_query(cat, "select * from S [Tumble 500 ms]")

    # its meaning: EXPLAIN and the reference evaluator (at its change instants, as at every tick)
    bq = bind_query(cat, "Dstream(select A from S [Tumble 4])")
    assert "Window Tumble 4 ticks" in explain(bq.plan)
    data = {"S": [(1, (0, 10)), (2, (0, 20)), (5, (0, 50))]}
    out = evaluate(bq, data, until=9)
    assert [(e.ts, e.row) for e in out] == [(4, (10,)), (4, (20,)), (8, (50,))]
    assert evaluate(bq, data, until=9, instants="all") == out

    # no runtime operator (out of the toy's scope): the engine refuses it, never runs it as another kind
    eng = EmbeddedEngine()
    eng.execute("register stream S (K integer, A integer)")
    with pytest.raises(InternalError, match=r"no operator runs the window \[Tumble 4 ticks\]"):
        eng.planner.build(bind_query(eng.catalog, "Istream(select * from S [Tumble 4])").plan, "toy")

    monkeypatch.undo()  # unregistered, the keyword is no window
    with pytest.raises(ParseError, match="expected Now, Rows, Range or Partition By, found 'Tumble'"):
        parse_query("select * from S [Tumble 4]")
