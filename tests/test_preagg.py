"""Spark's pre-aggregation of sliding-window group-bys (design 015), tested apart from Spark.

The rewrite (``sluice.backends.spark.preagg``) is exact when the embedded engine running the
rewritten query over the partials — computed here by hand as Spark's aggregation groups them
(``tests/preagg_oracle.py``) — answers as the original query over the raw rows, element for
element, with the same notes.  The Spark frame computing the partials is tested against this
in ``tests/test_spark_preagg.py``.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sluice.backends.embedded import EmbeddedEngine
from sluice.backends.spark.preagg import LOWER, UPPER, PreAggregate, preaggregate
from sluice.cql.ast import TimeUnit
from sluice.plan import bind_query

from preagg_oracle import elements, partials, unnamed

DDL = "register stream S (A integer, K integer, B integer, F float, N varchar(4))"
BIG = 2**62


def _pre(query: str) -> PreAggregate | None:
    eng = EmbeddedEngine(time_unit=TimeUnit.MILLISECOND)
    eng.execute(DDL)
    return preaggregate(query, eng.catalog, bind_query(eng.catalog, query).plan)


def _compare(query: str, rows: list[tuple[Any, ...]], keep: Any = None) -> None:
    pre = _pre(query)
    assert pre is not None, query
    raw = EmbeddedEngine(time_unit=TimeUnit.MILLISECOND, start=0)
    raw.execute(DDL)
    want = raw.register_query(query)
    raw.push("S", rows)
    raw.close(200)
    up, lo = partials(pre, rows, keep)
    eng = EmbeddedEngine(time_unit=TimeUnit.MILLISECOND, start=0)
    eng.execute(pre.ddl)
    got = eng.register_query(pre.query)
    eng.push(UPPER, up)
    eng.push(LOWER, lo)
    eng.close(200)
    assert elements(got.results()) == elements(want.results()), (query, pre.query)
    assert unnamed(eng.rejected()) == unnamed(raw.rejected())


QUERIES = [
    ("select K, count(*), sum(A) from S [Range 10 Slide 3] group by K", None),
    (
        "select K, count(*), sum(A) from S [Range 9 Slide 3] where B > 0 group by K",
        lambda r: r[2] is not None and r[2] > 0,
    ),
    (
        "Istream(select K, count(*) + 1 as c, max(A), min(A), count(B) from S [Range 7 Slide 4] group by K having sum(A) > 3)",
        None,
    ),
    ("select K, N, min(A), count(N) from S [Range 2 Slide 5] group by K, N", None),  # T < U: some rows never in it
    ("Dstream(select X.K, sum(B) from S as X [Range 6 Slide 2] group by X.K)", None),
    ("select distinct K, count(*) from S [Range 5 Slide 5] group by K, A", None),
]

ROW = st.tuples(
    st.integers(0, 3),  # gap to the previous timestamp
    st.one_of(st.none(), st.integers(-5, 9), st.sampled_from([BIG, -BIG, 2**63 - 1, -(2**63)])),
    st.integers(0, 3),
    st.one_of(st.none(), st.integers(-3, 3)),
    st.sampled_from(["a", "b", None]),
)


@pytest.mark.parametrize("query,keep", QUERIES)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(ROW, max_size=60))
def test_the_rewritten_query_over_partials_answers_as_the_original(query: str, keep: Any, draws: list[Any]) -> None:
    rows, t = [], 0
    for gap, a, k, b, n in draws:
        t += gap
        rows.append((t, a, k, b, 0.5, n))
    _compare(query, rows, keep)


def test_partial_sums_beyond_64_bits_travel_in_pieces_and_overflow_as_the_original() -> None:
    rows = [(3, 5, 1, 1, 0.0, "a"), (8, BIG, 1, 1, 0.0, "a"), (8, BIG, 1, 1, 0.0, "a"), (9, BIG, 1, 1, 0.0, "a")]
    rows += [(9, -BIG, 1, 1, 0.0, "a"), (20, 1, 1, 1, 0.0, "a")]
    pre = _pre("select K, sum(A) from S [Range 10 Slide 3] group by K")
    assert pre is not None
    up, _ = partials(pre, rows)
    assert len([r for r in up if r[0] == 9]) == 2  # 3 * 2^62 at instant 9: two pieces
    _compare("select K, count(*), sum(A) from S [Range 10 Slide 3] group by K", rows)


@pytest.mark.parametrize(
    "query,why",
    [
        ("select K, avg(A) from S [Range 10 Slide 3] group by K", "AVG"),
        ("select K, sum(F) from S [Range 10 Slide 3] group by K", "a float sum is not exact in Spark"),
        ("select K, count(distinct A) from S [Range 10 Slide 3] group by K", "DISTINCT"),
        ("select K, count(*) from S [Range 10] group by K", "no slide: one row per element anyway"),
        ("select K, count(*) from S [Rows 10] group by K", "not a time window"),
        ("select K, count(*) from S [Partition By K Rows 2] group by K", "not a time window"),
        ("select count(*) from S [Range 10 Slide 3]", "no GROUP BY: a row over the empty window"),
        ("select F, count(*) from S [Range 10 Slide 3] group by F", "Spark folds -0.0 into 0.0"),
        ("select K, sum(A + 1) from S [Range 10 Slide 3] group by K", "an expression inside the aggregate"),
        ("select K, count(*) from S [Range 10 Slide 3] group by K, K", "a key twice: one column each"),
        ("select K, count(*) from S [Range 10 Slide 3] where A in (select A from S [Now]) group by K", "subquery"),
    ],
)
def test_queries_pre_aggregation_cannot_answer_exactly_are_left_alone(query: str, why: str) -> None:
    assert _pre(query) is None, why


def test_the_rewrite_keeps_the_select_list_having_and_stream_operator() -> None:
    pre = _pre(
        "Istream(select X.K, count(*) + 1 as c from S as X [Range 10 Seconds Slide 1 Second] group by K having sum(A) > 3)"
    )
    assert pre is not None
    assert (pre.range, pre.slide, pre.lower_range) == (10_000, 1_000, 9_999)
    assert pre.query == (
        "Istream(SELECT X.K, (SUM(sluice_n) + 1) AS c FROM ((SELECT * FROM sluice_upper [Range 10000 Slide 1000]) "
        "UNION ALL (SELECT * FROM sluice_lower [Range 9999 Slide 1000])) AS X GROUP BY K HAVING (SUM(sluice_sum_a) > 3))"
    )
