"""Spark's pre-aggregation of sliding-window group-bys (design 015), tested apart from Spark.

The rewrite (``sluice.backends.spark.preagg``) is exact when the embedded engine running the
rewritten query over the partials — computed here by hand as Spark's aggregation groups them
(``tests/preagg_oracle.py``) — answers as the original query over the raw rows, element for
element, with the same notes.  The Spark frame computing the partials is tested against this
in ``tests/test_spark_preagg.py``.
"""

from __future__ import annotations

import itertools
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sluice.backends.embedded import EmbeddedEngine
from sluice.backends.spark.partials import SlidePartials
from sluice.backends.spark.preagg import LOWER, UPPER, PreAggregate, preaggregate
from sluice.cql.ast import TimeUnit
from sluice.datatypes import arrow_type
from sluice.plan import bind_query

from preagg_oracle import elements, partials, unnamed

DDL = "register stream S (A integer, K integer, B integer, F float, N varchar(4))"
BIG = 2**62


def _pre(query: str) -> PreAggregate | None:
    eng = EmbeddedEngine(time_unit=TimeUnit.MILLISECOND)
    eng.execute(DDL)
    return preaggregate(query, eng.catalog, bind_query(eng.catalog, query).plan)


def _compare(query: str, rows: list[tuple[Any, ...]], keep: Any = None, cuts: list[int] | None = None) -> None:
    """The rewritten query over partials answers as ``query`` over ``rows``: partials by hand, or
    (``cuts``) as Spark's Python workers compute them over the rows cut into batches there.
    """
    pre = _pre(query)
    assert pre is not None, query
    raw = EmbeddedEngine(time_unit=TimeUnit.MILLISECOND, start=0)
    raw.execute(DDL)
    want = raw.register_query(query)
    raw.push("S", rows)
    raw.close(200)
    up, lo = partials(pre, rows, keep) if cuts is None else _by_workers(pre, rows, keep, cuts)
    eng = EmbeddedEngine(time_unit=TimeUnit.MILLISECOND, start=0)
    eng.execute(pre.ddl)
    got = eng.register_query(pre.query)
    eng.push(UPPER, up)
    eng.push(LOWER, lo)
    eng.close(200)
    assert elements(got.results()) == elements(want.results()), (query, pre.query)
    assert unnamed(eng.rejected()) == unnamed(raw.rejected())


def _by_workers(pre: PreAggregate, rows: list[tuple[Any, ...]], keep: Any, cuts: list[int]) -> tuple[list, list]:
    """The partial streams' rows as ``SlidePartials`` makes them from ``rows`` (WHERE applied
    first, as Spark does) cut into batches at ``cuts``: several partials of one slide and group.
    """
    eng = EmbeddedEngine(time_unit=TimeUnit.MILLISECOND)
    eng.execute(DDL)
    d = eng.catalog.lookup("S")
    fn = SlidePartials(pre, pre.types(d), "no ts")
    kept = [r for r in rows if keep is None or keep(r[1:])]
    names = ["et"] + [f"c{j}" for j in range(len(d.schema))]
    types = [pa.int64()] + [arrow_type(t) for t in d.schema.types]
    columns = list(zip(*kept, strict=True)) or [()] * len(types)
    table = pa.table([pa.array(c, t) for c, t in zip(columns, types, strict=True)], names=names)
    up: list[Any] = []
    lo: list[Any] = []
    ends = sorted({0, len(kept), *(c % (len(kept) + 1) for c in cuts)})
    for i, j in itertools.pairwise(ends):
        out = fn.table(table.slice(i, j - i).select(["et", *fn.inputs()]))
        assert out.schema == fn.schema
        for r in out.to_pylist():
            assert r["note"] is None
            (lo if r["lower"] else up).append((r["a"], *list(r.values())[3:]))
    # in time order, as the processor pushes them (it sorts its input by ts)
    return sorted(up, key=lambda r: r[0]), sorted(lo, key=lambda r: r[0])


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


@pytest.mark.parametrize("query,keep", QUERIES)
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(ROW, max_size=60), st.lists(st.integers(0, 60), max_size=4))
def test_partials_of_sparks_python_workers_batch_by_batch_answer_as_the_original(
    query: str, keep: Any, draws: list[Any], cuts: list[int]
) -> None:
    """``SlidePartials`` (``mapInArrow``, design 015) over any cutting of the rows into batches."""
    rows, t = [], 0
    for gap, a, k, b, n in draws:
        t += gap
        rows.append((t, a, k, b, 0.5, n))
    _compare(query, rows, keep, cuts)


def test_the_workers_partials_of_one_batch_are_the_oracles_and_a_row_without_ts_is_a_note() -> None:
    rows = [(3, 5, 1, 1, 0.0, "a"), (8, BIG, 1, 1, 0.0, "a"), (8, BIG, 1, 1, 0.0, "a"), (9, BIG, 1, None, 0.0, "a")]
    rows += [(9, -BIG, 1, 1, 0.0, "a"), (9, None, 2, 1, 0.0, "b"), (20, 1, None, 1, 0.0, "a")]
    pre = _pre("select K, count(*), sum(A), max(A), count(B) from S [Range 10 Slide 3] group by K")
    assert pre is not None
    up, lo = _by_workers(pre, rows, None, [])
    want_up, want_lo = partials(pre, rows)
    assert [r for r in want_up if r[2] == 0] == [(9, 1, 0, 2**62, None, 0)]  # 2^63 at 9: two pieces
    assert sorted(up, key=repr) == sorted(want_up, key=repr) and sorted(lo, key=repr) == sorted(want_lo, key=repr)
    eng = EmbeddedEngine(time_unit=TimeUnit.MILLISECOND)
    eng.execute(DDL)
    fn = SlidePartials(pre, pre.types(eng.catalog.lookup("S")), "S: a row without a valid ts was rejected")
    untimed = pa.table({"et": pa.array([4, None], pa.int64()), "c0": pa.array([1, 2], pa.int64()),
                        "c1": pa.array([1, 1], pa.int64()), "c2": pa.array([None, 1], pa.int64())})  # fmt: skip
    out = fn.table(untimed.select(["et", *fn.inputs()])).to_pylist()
    assert [r["note"] for r in out] == ["S: a row without a valid ts was rejected", None]
    assert out[1]["a"] == 6 and out[1]["sluice_n"] == 1
    # with the first instant at 5: the row at 4 is a note too (no partial stamped 6 counts it)
    fn = SlidePartials(pre, pre.types(eng.catalog.lookup("S")), "no ts", first=5)
    out = fn.table(untimed.select(["et", *fn.inputs()])).to_pylist()
    assert sorted(r["note"] for r in out) == ["S: element at ts 4 is before the first instant 5", "no ts"]


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
