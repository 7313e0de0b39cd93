"""`x op ALL/ANY (subquery)` answered from a summary (extremes, NULLs, value set) must equal the
definition (`fold_subquery`: one 3VL comparison per subquery row) for every input."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from sluice.datatypes import BOOLEAN
from sluice.plan.expr import Subquery
from sluice.runtime.rowexpr import Summary, fold_subquery, fold_summary

values = st.one_of(st.none(), st.integers(-3, 3))
kinds = st.one_of(
    st.tuples(
        st.just("QUANT"),
        st.sampled_from(["eq", "ne", "lt", "le", "gt", "ge"]),
        st.sampled_from(["ALL", "ANY"]),
        st.just(False),
    ),
    st.tuples(st.just("IN"), st.just("="), st.just("ANY"), st.booleans()),
)


@given(kinds, st.integers(-4, 4), st.lists(st.tuples(values, st.integers(0, 2)), max_size=6))
def test_summary_fold_equals_the_definition(kind, x, rows) -> None:
    k, op, quant, negated = kind
    e = Subquery(k, plan=None, type=BOOLEAN, op=op, quantifier=quant, negated=negated)  # type: ignore[arg-type]
    rows = [((v,), n) for v, n in rows]
    s = Summary.of(rows)
    assert s is not None
    assert fold_summary(e, x, s) == fold_subquery(e, x, rows)


def test_no_summary_when_a_value_is_nan() -> None:
    assert Summary.of([((float("nan"),), 1), ((1.0,), 1)]) is None
