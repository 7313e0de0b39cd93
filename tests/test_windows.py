"""Window kinds are objects (``sluice.plan.windows``): every kind has its operator, its meaning by
definition and its EXPLAIN text, and a kind nobody registered is an error, never run as another."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pytest
from sluice import EmbeddedEngine
from sluice.errors import InternalError
from sluice.plan import logical as L
from sluice.plan import windows as W
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
