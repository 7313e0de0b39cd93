"""Which queries Spark may split over keys (``sluice.backends.spark.compile``): a plan analysis,
no Spark needed.  Each rejection below is a query whose answer a split would change."""

from __future__ import annotations

import pytest
from sluice.backends.spark.compile import partitioning, pushdown, unsplittable
from sluice.catalog import Catalog
from sluice.cql.parser import parse_script
from sluice.plan import bind_query
from sluice.plan.ddl import execute_statement
from sluice.plan.expr import render
from sluice.plan.rules import rewrite

DDL = (
    "register stream S (K integer, V integer, F float); register stream T (K integer, W integer);"
    " register relation R (K integer, N varchar(4))"
)


def plan(query: str):
    """The plan the Spark compiler analyses: the bound plan rewritten (``sluice.plan.rules``)."""
    cat = Catalog()
    for st in parse_script(DDL):
        execute_statement(cat, st, DDL, DDL[st.span.start : st.span.end])
    return rewrite(bind_query(cat, query).plan).plan


def keys(query: str):
    p = partitioning(plan(query))
    return None if p is None else p.keys


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("select K, count(*) from S [Range 10 Seconds] group by K", {"s": (0,)}),
        ("Istream(select K, count(*) from S [Range 10 Seconds] group by K)", {"s": (0,)}),
        ("select * from S [Partition By K Rows 2]", {"s": (0,)}),
        ("select * from S [Range 2 Seconds] where V > 1", {"s": (0, 1)}),  # whole elements (F is a float)
        ("select K, V from S [Now] where V > 1", {"s": (0, 1)}),
        ("select S.V, T.W from S [Range 5 Seconds], T [Now] where S.K = T.K", {"s": (0,), "t": (0,)}),
        ("select S.V, R.N from S [Now], R where S.K = R.K", {"s": (0,), "r": (0,)}),
        (
            "select S.V, T.W from S [Range 5 Seconds], T [Range 5 Seconds] where S.V = T.W and S.K < T.K",
            {"s": (1,), "t": (1,)},
        ),
        ("select distinct V from S [Range 10 Seconds] group by K, V", {"s": (1,)}),
        ("select V from S where K < 50", {"s": (0, 1)}),  # Istream over an insert-only relation: any split
    ],
)
def test_partitionable_queries_and_their_keys(query, expected) -> None:
    assert keys(query) == expected


@pytest.mark.parametrize(
    ("query", "why"),
    [
        # the counts of two groups can swap at one instant: the relation is unchanged, but each key alone changed
        ("Istream(select count(*) from S [Range 10 Seconds] group by K)", "Istream of a relation without the key"),
        # the key K is projected away before DISTINCT
        ("select distinct V from S [Partition By K Rows 2]", "DISTINCT over tuples that no longer carry the key"),
        ("select count(*) from S [Range 10 Seconds]", "no GROUP BY"),  # one answer row over all elements
        ("select * from S [Rows 3]", "[Rows 3] orders the whole stream"),  # a global arrival order
        ("Dstream(select K from S [Rows 2])", "[Rows 2] orders the whole stream"),
        (  # no equi-join
            "select S.V, T.W from S [Range 5 Seconds], T [Range 5 Seconds] where S.K < T.K",
            "without an equality of their key columns",
        ),
        ("select S.V, T.W from S [Now], T [Rows 2] where S.K = T.K", "[Rows 2] orders the whole stream"),
        ("select A.V from S [Now] as A, S [Range 2 Seconds] as B where A.K = B.K", "reads one source twice"),
        ("select K from S [Now] where K in (select K from R)", "subquery"),  # a subquery reads R whole
        ("select F, count(*) from S [Range 1 Second] group by F", "GROUP BY does not include"),  # float: no key
    ],
)
def test_queries_a_split_would_change_run_on_one_key_and_say_why(query, why) -> None:
    assert partitioning(plan(query)) is None
    assert why in unsplittable(plan(query))


def test_a_relation_without_an_equi_join_is_replicated() -> None:
    p = partitioning(plan("select S.V, R.N from S [Now], R where S.K > R.K"))
    assert p is not None and p.keys == {"s": (0, 1)}


def test_float_columns_are_never_keys() -> None:
    p = partitioning(plan("select F, count(*) from S [Range 1 Second] group by F"))
    assert p is None


def test_pushdown_crosses_time_windows_joins_and_group_keys_only() -> None:
    names = ("K", "V", "F")
    got = pushdown(plan("select K, count(*) from S [Range 10 Seconds] where V > 1 and K <> 2 group by K"))
    assert [render(e, names) for e in got["s"]] == ["(V > 1)", "(K <> 2)"]
    assert pushdown(plan("select * from S [Rows 5] where V > 1")) == {}
    got = pushdown(plan("select S.V from S [Now], T [Range 2 Seconds] where S.K = T.K and T.W > 3 and S.F < 1.5"))
    assert [render(e) for e in got["t"]] == ["(T.W > 3)"]
    assert [render(e) for e in got["s"]] == ["(S.F < 1.5)"]
    got = pushdown(plan("select K, count(*) as c from S [Now] group by K having K > 1 and count(*) > 2"))
    assert [render(e, names) for e in got["s"]] == ["(K > 1)"]


def test_pushdown_moves_columns_inside_every_expression_kind() -> None:
    """Regression: a pushed predicate's columns were renumbered only under plain calls, so a CASE
    over the right side of a join kept the joined row's position (4) instead of T's own (1)."""
    from sluice.plan.expr import ColRef, walk_expr

    got = pushdown(
        plan("select S.V from S [Now], T [Range 2 Seconds] where S.K = T.K and case when T.W > 3 then 1 else 0 end = 1")
    )
    assert [x.index for p in got["t"] for x in walk_expr(p) if isinstance(x, ColRef)] == [1]
