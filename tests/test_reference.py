"""Properties of the reference evaluator itself."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sluice.catalog import Catalog
from sluice.errors import EvaluationError
from sluice.plan import bind_query, execute
from sluice.reference import evaluate
from sluice.reference.compare import diff_outputs


def _catalog() -> Catalog:
    cat = Catalog()
    execute(
        cat,
        """register stream S (K integer, V integer);
           register stream S2 (K integer, V integer);
           register relation R (K integer);""",
    )
    return cat


CAT = _catalog()

# Queries whose relations change only at some instants: evaluating at change instants only
# must give exactly what evaluating every tick gives.
WINDOWED = [
    "select * from S [Range 3 Seconds]",
    "select * from S [Now]",
    "select K, count(*) from S [Range 2 Seconds] group by K",
    "select * from S [Range 5 Seconds Slide 2 Seconds]",
    "select * from S [Rows 2]",
    "select * from S [Partition By K Rows 1]",
    "select S.V, S2.V from S [Range 1 Second], S2 [Range 2 Seconds] where S.K = S2.K",
    "Istream(select * from S [Range 2 Seconds])",
    "Dstream(select * from S [Range 2 Seconds])",
    "select count(*) from Dstream(select * from S [Range 1 Second]) [Range 3 Seconds]",
    "select count(*) from Istream(select K from S [Now]) [Range 2 Seconds Slide 3 Seconds]",
    "select S.K from S [Range 4 Seconds] where S.K in (select K from R)",
    "select count(*) from S [Range 1 Second] where V > 0",
]

elements = st.lists(st.tuples(st.integers(0, 12), st.integers(0, 2), st.integers(-2, 2)), max_size=10)


@settings(max_examples=60)
@given(
    elements,
    elements,
    st.lists(st.tuples(st.integers(0, 12), st.integers(0, 2)), max_size=4),
    st.sampled_from(WINDOWED),
)
def test_change_instants_equal_every_tick(s, s2, r, query) -> None:
    streams = {
        "S": [(t, (k, v)) for t, k, v in sorted(s, key=lambda e: e[0])],
        "S2": [(t, (k, v)) for t, k, v in sorted(s2, key=lambda e: e[0])],
    }
    relations = {"R": [(t, "+", (k,)) for t, k in r]}
    bq = bind_query(CAT, query)
    fast = evaluate(bq, streams, relations, start=0, until=20)
    slow = evaluate(bq, streams, relations, start=0, until=20, instants="all")
    assert fast == slow


def test_rows_ties_follow_arrival_order() -> None:
    bq = bind_query(CAT, "select V from S [Rows 1]")
    a = evaluate(bq, {"S": [(1, (0, 1)), (1, (0, 2))]})
    b = evaluate(bq, {"S": [(1, (0, 2)), (1, (0, 1))]})
    assert [e.row for e in a] == [(2,)] and [e.row for e in b] == [(1,)]


def test_out_of_order_input_is_ordered_by_timestamp() -> None:
    bq = bind_query(CAT, "select V from S")
    out = evaluate(bq, {"S": [(3, (0, 3)), (1, (0, 1))]})
    assert [(e.ts, e.row) for e in out] == [(1, (1,)), (3, (3,))]


def test_deleting_an_absent_tuple_is_an_error() -> None:
    bq = bind_query(CAT, "select * from R")
    with pytest.raises(EvaluationError, match=r"relation R: deletion of \(1,\) at 2"):
        evaluate(bq, relations={"R": [(2, "-", (1,))]})


def test_wrong_arity_names_the_element() -> None:
    bq = bind_query(CAT, "select * from S")
    with pytest.raises(EvaluationError, match=r"stream S, element 2 \(ts 5\): 1 values for 2 attributes"):
        evaluate(bq, {"S": [(1, (1, 1)), (5, (1,))]})


def test_scalar_subquery_with_two_rows_is_an_error() -> None:
    bq = bind_query(CAT, "select (select K from R) from S")
    with pytest.raises(EvaluationError, match="scalar subquery returned 2 rows at instant 1"):
        evaluate(bq, {"S": [(1, (1, 1))]}, {"R": [(0, "+", (1,)), (0, "+", (2,))]})


def test_refuses_huge_tick_ranges() -> None:
    bq = bind_query(CAT, "Rstream(select * from S [Now])")
    with pytest.raises(EvaluationError, match="meant for small inputs"):
        evaluate(bq, {"S": [(0, (1, 1)), (10**9, (1, 1))]})


def test_relation_output_nets_to_the_relation() -> None:
    """Replaying the +/- elements of a relation query rebuilds R(τ) at each instant."""
    bq = bind_query(CAT, "select K, sum(V) from S [Range 2 Seconds] group by K")
    data = {"S": [(t, (t % 2, t)) for t in range(10)]}
    out = evaluate(bq, data)
    state: Counter = Counter()
    for e in out:
        state[e.row] += 1 if e.sign == "+" else -1
        assert state[e.row] >= 0
    final = evaluate(bind_query(CAT, "Rstream(select K, sum(V) from S [Range 2 Seconds] group by K)"), data)
    assert +state == Counter(e.row for e in final if e.ts == 9)


def test_compare_nets_deletes_and_reinserts() -> None:
    from sluice.reference import Element as E

    assert diff_outputs([E(1, "+", (1,))], [E(1, "+", (1,)), E(1, "-", (1,)), E(1, "+", (1,))]) == []
