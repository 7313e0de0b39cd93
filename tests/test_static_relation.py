"""Static relations on the embedded engine (``attach_static``, as on Spark) and STREAM §2.2's
transformation they allow: a stream joined with a static relation needs no window of the stream.

The oracle is the reference evaluator given the relation's rows inserted at the first instant.
"""

from __future__ import annotations

import pickle

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sluice.backends.embedded import EmbeddedEngine
from sluice.catalog import Catalog
from sluice.errors import SluiceError
from sluice.plan import bind_query
from sluice.plan.ddl import execute
from sluice.reference import evaluate
from sluice.reference.compare import diff_outputs
from sluice.runtime.operators.join import Join

DDL = "register stream S (K integer, V integer); register relation R (K integer, N varchar(4))"
STATIC = [(1, "one"), (2, "two"), (2, "deux"), (4, "four")]

QUERIES = [
    # STREAM §2.1's third example, by shape: Istream over [Range Unbounded] joined with a static relation
    "select S.V, R.N from S, R where S.K = R.K",
    "select S.V, R.N from S [Range Unbounded], R where S.K = R.K and R.N <> 'two' and S.V > 0",
    "Rstream(select S.V, R.N from S [Now], R where S.K = R.K)",
    "Istream(select S.K, R.N from S [Now], R where S.K = R.K)",  # a tuple at consecutive instants is new once
    "select R.N, count(*), sum(S.V) from S [Range 3], R where S.K = R.K group by R.N",
    "Dstream(select S.V, R.N from S [Rows 2], R where S.K = R.K)",
    "select S.V, R.N from S [Partition By S.K Rows 1], R where S.K = R.K",
    "select * from R",
    "Rstream(select N from R where K > 1)",
    "select count(*) from S [Range 2], R",  # a cross product
]


def _catalog() -> Catalog:
    cat = Catalog()
    execute(cat, DDL)
    return cat


def _engine(static: bool, queries: list[str], **kw: object) -> tuple[EmbeddedEngine, list]:
    eng = EmbeddedEngine(_catalog(), **kw)  # type: ignore[arg-type]
    if static:
        eng.attach_static("R", STATIC)
    return eng, [eng.register_query(q, name=f"q{i}") for i, q in enumerate(queries)]


def _expected(query: str, rows: list[tuple[int, int, int]], start: int, until: int) -> list:
    streams = {"S": [(t, (k, v)) for t, k, v in rows]}
    relations = {"R": [(start, "+", r) for r in STATIC]}
    return evaluate(bind_query(_catalog(), query), streams, relations, start=start, until=until)


# (gap to the previous element's timestamp, K, V)
elements = st.lists(st.tuples(st.integers(0, 3), st.integers(0, 5), st.integers(-2, 3)), max_size=40)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(gaps=elements, chunk=st.integers(1, 7), given_start=st.booleans())
def test_queries_over_a_static_relation_equal_the_definition(gaps, chunk, given_start) -> None:
    """Every query shape, pushed in pieces with runs between: the same answers as the definition
    with the relation's rows inserted at the first instant (the engine's ``start``, or its first
    element's timestamp).
    """
    rows, t = [], 2
    for dt, k, v in gaps:  # distinct and repeated timestamps
        t += dt
        rows.append((t, k, v))
    until = (rows[-1][0] if rows else 0) + 4
    # the first instant: given, else the first element's (else the first completed: close's)
    start = 0 if given_start else rows[0][0] if rows else until
    eng, handles = _engine(True, QUERIES, start=0 if given_start else None)
    for i in range(0, len(rows), chunk):
        eng.push("S", rows[i : i + chunk])
        eng.run()
    eng.close(until)
    assert not eng.rejected()
    for q, h in zip(QUERIES, handles, strict=True):
        diffs = diff_outputs(_expected(q, rows, start, until), h.results())
        assert not diffs, (q, diffs[:5])


def test_the_stream_side_is_not_kept() -> None:
    """Istream(S [Range Unbounded] ⋈ R): with R static the join keeps R's rows only and the
    unbounded window nothing; pushed at the start instead, the stream's side grows with it.
    """
    query = "select S.V, R.N from S, R where S.K = R.K"
    held = {}
    for static in (True, False):
        eng, (h,) = _engine(static, [query])
        if not static:
            eng.push("R", [(0, "+", *r) for r in STATIC])
        for b in range(10):
            eng.push("S", [(b * 100 + j, j % 5, b * 100 + j) for j in range(100)])
            eng.run()
        eng.close()
        (join,) = [o for o in eng.operators if isinstance(o, Join)]
        held[static] = (len(join.left), len(join.right), sum(o.state_bytes() for o in eng.operators))
        # static rows are counted as accepted, as pushed ones are (and as Spark counts them)
        assert {st.name: st.accepted for st in eng.statistics().sources} == {"S": 1000, "R": 4}
        assert len(h.results()) == 1000 * 4 // 5  # keys 1, 2, 2, 4 of 0..4
    assert held[True][:2] == (0, 4)
    assert held[False][:2] == (1000, 4)
    assert held[True][2] * 10 < held[False][2]


def test_explain_says_which_input_is_not_kept() -> None:
    eng, (h,) = _engine(True, ["select S.V, R.N from S, R where S.K = R.K and R.K > 1"])
    assert "R static: left input not kept (STREAM §2.2)" in eng.explain(h)


def test_a_static_relation_holds_nothing_back() -> None:
    """Heartbeats on the stream alone complete the join's instants: a static relation is complete
    as far as the other sources are (one that is only pushed holds the join back until it is).
    """
    query = "Rstream(select S.V, R.N from S [Now], R where S.K = R.K)"
    eng, (h,) = _engine(True, [query])
    eng.push("S", [(1, 1, 10), (2, 2, 20), (3, 4, 30)])
    eng.heartbeat(3, "S")
    eng.run()
    assert sorted((e.ts, e.row) for e in h.results()) == [
        (1, (10, "one")),
        (2, (20, "deux")),
        (2, (20, "two")),
        (3, (30, "four")),
    ]


def test_a_query_registered_while_running_sees_the_static_rows() -> None:
    query = "select S.V, R.N from S, R where S.K = R.K"
    eng, (first,) = _engine(True, [query], start=0)
    eng.push("S", [(1, 1, 10), (2, 2, 20)])
    eng.run()
    late = eng.register_query("Rstream(select S.V, R.N from S [Now], R where S.K = R.K)")
    eng.push("S", [(5, 4, 50), (6, 1, 60)])
    eng.close()
    assert sorted(e.row for e in first.results()) == [(10, "one"), (20, "deux"), (20, "two"), (50, "four"), (60, "one")]
    every = [(2, (20, "deux")), (2, (20, "two")), (5, (50, "four")), (6, (60, "one"))]
    assert late.start == 2  # the first instant not yet released (S is complete to 1)
    assert sorted((e.ts, e.row) for e in late.results()) == [e for e in every if e[0] >= late.start]


def test_checkpoint_and_snapshot_carry_the_static_relation(tmp_path) -> None:
    rows = [(t, t % 5, t) for t in range(30)]
    whole, (w,) = _engine(True, QUERIES[4:5], start=0)
    whole.push("S", rows)
    whole.close(35)
    expected = w.results()

    eng, (h,) = _engine(True, QUERIES[4:5], start=0)
    eng.push("S", rows[:12])
    eng.run()
    eng.checkpoint(tmp_path / "ck")
    back = EmbeddedEngine.restore(tmp_path / "ck")
    with pytest.raises(SluiceError, match="static"):
        back.push("R", [(20, "+", 9, "nine")])
    back.push("S", rows[12:])
    back.close(35)
    assert back.queries["q0"].results() == expected

    # snapshot_state into an engine built the same way (as the Spark processor does)
    eng2, _ = _engine(True, QUERIES[4:5], start=0)
    eng2.restore_state(pickle.loads(pickle.dumps(eng.snapshot_state())))
    eng2.push("S", rows[12:])
    eng2.close(35)
    assert eng2.queries["q0"].results() == expected


def test_declaration_errors_are_clear_and_change_nothing() -> None:
    eng, _ = _engine(False, [])
    with pytest.raises(SluiceError, match="S is a stream; only a relation can be static"):
        eng.attach_static("S", [(1, 2)])
    with pytest.raises(SluiceError, match="R, row 2: .*not an integer"):
        eng.attach_static("R", [(1, "a"), ("x", "b")])
    with pytest.raises(SluiceError, match="no stream or relation named 'T'"):
        eng.attach_static("T", [])
    eng.attach_static("R", STATIC)
    with pytest.raises(SluiceError, match="R already has contents"):
        eng.attach_static("R", STATIC)
    with pytest.raises(SluiceError, match=r"R is static \(attach_static\): its contents cannot change"):
        eng.push("R", [(1, "+", 3, "x")])
    pushed, _ = _engine(False, [])
    pushed.push("R", [(1, "+", 3, "x")])
    with pytest.raises(SluiceError, match="R already has contents"):
        pushed.attach_static("R", STATIC)
    ran, _ = _engine(False, ["select * from S"])
    ran.push("S", [(1, 1, 1), (2, 1, 1)])
    ran.run()  # (instant 1 complete: released)
    with pytest.raises(
        SluiceError, match=r"attach static relations before the first run\(\) that releases input \(R\)"
    ):
        ran.attach_static("R", STATIC)


def test_explain_claims_nothing_where_the_relation_side_ticks() -> None:
    """Review: σ with CURRENT_TIME over a relation is a ticking operator, which does not pass the
    end on, so the join keeps the stream's side — EXPLAIN must not say otherwise."""
    query = "select S.V from S, (select K from R where K < CURRENT_TIME) as X where S.K = X.K"
    eng, (h,) = _engine(True, [query])
    assert "TickingMap" in eng.explain(h)
    assert "not kept" not in eng.explain(h)
    eng.push("S", [(t, 1, t) for t in range(1, 6)])
    eng.close()
    (join,) = [o for o in eng.operators if isinstance(o, Join)]
    assert len(join.left) == 5 and join.holds_elements()


def test_the_memory_estimate_counts_no_join_as_holding_the_stream() -> None:
    """Review: the resource manager's cost of an element counts its holders; a join whose static
    input has ended holds none of the stream's elements."""
    holders = {}
    for static in (True, False):
        eng, _ = _engine(static, ["select S.V, R.N from S, R where S.K = R.K"])
        if not static:
            eng.push("R", [(0, "+", *r) for r in STATIC])
        eng.push("S", [(t, t % 5, t) for t in range(20)])
        eng.run()
        holders[static] = eng.meter().holders.get("s", 0)
    assert holders[True] == holders[False] - 1  # (the window below still counts as one)


def test_static_relations_alone_answer_at_close() -> None:
    """Review: with nothing pushed but static relations, ``close()`` inserts them at the first
    instant (0 if not given, as Spark does) so a query over them answers."""
    eng, (h, r) = _engine(True, ["select * from R", "Rstream(select count(*) from R)"])
    eng.close()
    assert sorted(e.row for e in h.results()) == sorted(STATIC)
    assert [(e.ts, e.row) for e in r.results()] == [(0, (4,))]
