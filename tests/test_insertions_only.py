"""Istream of an aggregate: the aggregate builds only its changes' insertions (issue #11).

``Planner._stream_op`` gives a pure Istream over injective projections of an aggregate an
aggregate of its own that never builds the deletions the Istream would drop.  These tests pin
when it applies (EXPLAIN), and that the answers are the reference evaluator's — also when the
same aggregate serves a relation query in the same engine, and at the first instant of an
aggregate without GROUP BY (which keeps the relation's aggregate: its first instant's row merges
with a change there only if it sees the deletion).  The differential test draws such queries too.
"""

from __future__ import annotations

import pytest
from sluice.backends.embedded import EmbeddedEngine
from sluice.catalog import Catalog
from sluice.plan import bind_query, execute
from sluice.reference import evaluate
from sluice.reference.compare import diff_outputs

from engine_runner import run_engine

DDL = "register stream S (K integer, V integer);"


def _catalog() -> Catalog:
    cat = Catalog()
    execute(cat, DDL)
    return cat


# an arrival and an expiry at one instant leave some counts unchanged (no output for them)
ROWS = [(1, (1, 5)), (1, (2, 7)), (2, (1, 3)), (4, (1, 9)), (4, (2, None)), (5, (2, 2)), (7, (1, 1)), (7, (1, 1))]


@pytest.mark.parametrize(
    ("query", "insertions"),
    [
        ("Istream(select K, count(*) from S [Range 3] group by K)", True),
        ("Istream(select count(*), K from S [Range 3] group by K)", True),  # any order of the columns
        ("Istream(select K, sum(V), avg(V), min(V), max(V) from S [Range 2] group by K)", True),
        ("Istream(select K, count(distinct V) from S [Range 3] group by K)", True),  # the per-value path
        ("Istream(select count(*), max(V) from S [Rows 3])", False),  # no GROUP BY: its row0 merges at start
        ("Istream(select count(*) from S [Range 3] group by K)", False),  # not injective: groups may collide
        ("Dstream(select K, count(*) from S [Range 3] group by K)", False),
    ],
)
def test_istream_of_an_aggregate_equals_the_reference(query: str, insertions: bool) -> None:
    cat = _catalog()
    eng = EmbeddedEngine(cat)
    eng.register_query(query, name="q")
    plan = eng.explain("q")
    assert ("insertions only (read by Istream)" in plan) is insertions, plan
    if insertions:
        assert "IDstream [insert-only input: pass-through]" in plan, plan
    streams = {"S": ROWS}
    expected = evaluate(bind_query(cat, query), streams, {}, start=1, until=9)
    for chunk in (None, 1, 3):
        got = run_engine(cat, query, streams, {}, start=1, until=9, chunk=chunk)
        assert not diff_outputs(expected, got), (query, chunk, diff_outputs(expected, got)[:5])
    assert expected, "the case shows some output"


def test_the_relation_query_keeps_its_own_aggregate() -> None:
    """An Istream query and a relation query over the same aggregate, in one engine: each has the
    answer it would have alone (they do not share the aggregate, whose outputs differ).
    """
    cat = _catalog()
    rel = "select K, count(*) from S [Range 3] group by K"
    ist = f"Istream({rel})"
    streams = {"S": ROWS}
    for query, other in ((rel, ist), (ist, rel)):
        expected = evaluate(bind_query(cat, query), streams, {}, start=1, until=9)
        got = run_engine(cat, query, streams, {}, start=1, until=9, extra_queries=(other, query))
        assert not diff_outputs(expected, got), (query, diff_outputs(expected, got)[:5])
    eng = EmbeddedEngine(cat)
    eng.register_query(rel, name="r")
    eng.register_query(ist, name="i")
    assert "insertions only" not in eng.explain("r") and "insertions only" in eng.explain("i")
