"""The engine's first instant under out-of-order input (slack): answers from it equal the
definition evaluated from it (docs/design/004, "The first instant").

Found by a review (session 17): an element admitted within the slack but stamped before the first
instant went through the plans at its own stamp, so answers appeared at instants the definition
never has.  The first instant is now fixed lazily — when an element can first be released, at the
earliest element waiting on any source — and a stream element stamped before it is late
(rejected, counted), a relation's change before it applies at it.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sluice.backends.embedded import EmbeddedEngine
from sluice.catalog import Catalog
from sluice.plan import bind_query
from sluice.plan.ddl import execute
from sluice.reference import evaluate
from sluice.reference.compare import diff_outputs

QUERIES = [
    "select * from S",
    "Rstream(select K from S [Now])",
    "select * from (select K from S where V >= 0) as X [Range 2]",
    "select K, count(*) from S [Range 3] group by K",
    "select count(*) from S [Range 2]",
    "Istream(select S.K, T.W from S [Range 2], T [Rows 2] where S.K = T.K)",
    "Dstream(select * from S [Rows 2])",
    "select R.N, count(*) from S [Range 3], R where S.K = R.K group by R.N",
]

# (stream, timestamp jitter, K, V/W); each element's timestamp is a base clock plus its jitter
arrivals = st.lists(
    st.tuples(st.sampled_from("ST"), st.integers(-3, 3), st.integers(0, 2), st.integers(-1, 2), st.booleans()),
    min_size=1,
    max_size=25,
)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    arrivals=arrivals,
    slack=st.integers(0, 3),
    given_start=st.sampled_from([None, 4]),
    r_at=st.integers(0, 25),
    r_ts=st.sampled_from([0, 5, 8]),
)
def test_answers_from_the_first_instant_equal_the_definition(arrivals, slack, given_start, r_at, r_ts) -> None:
    cat = Catalog()
    execute(cat, "register stream S (K integer, V integer); register stream T (K integer, W integer)")
    execute(cat, "register relation R (K integer, N varchar(3))")
    eng = EmbeddedEngine(cat, slack=slack, start=given_start)
    handles = [eng.register_query(q) for q in QUERIES]
    r_rows = [(r_ts, "+", 1, "one"), (r_ts, "+", 2, "two")]  # before the first instant: applied at it
    taken: dict[str, list] = {"S": [], "T": []}
    clock = 5
    for i, (name, jitter, k, v, run) in enumerate(arrivals):
        if i == r_at:
            eng.push("R", r_rows)
        clock += i % 2
        t = max(clock + jitter, 0)
        before = {s.name: s.accepted for s in eng.statistics().sources}[name]
        eng.push(name, [(t, k, v)])
        if {s.name: s.accepted for s in eng.statistics().sources}[name] > before:
            taken[name].append((t, (k, v)))  # what the engine admitted, as it says
        if run:
            eng.run()
    if r_at >= len(arrivals):
        eng.push("R", r_rows)
    until = clock + 6
    eng.close(until)
    start = eng.ctx.start
    assert start is not None
    if given_start is not None:
        assert start == given_start
    at = max(r_ts, start)
    relations = {"R": [(at, "+", (1, "one")), (at, "+", (2, "two"))]}
    for q, h in zip(QUERIES, handles, strict=True):
        expected = evaluate(bind_query(cat, q), taken, relations, start=start, until=until)
        diffs = diff_outputs(expected, h.results())
        assert not diffs, (q, start, diffs[:4])


def test_a_relations_changes_before_the_first_instant_apply_at_it_in_their_own_order() -> None:
    """Review: a deletion stamped 4 arriving before its insertion stamped 3, both before the first
    instant 5, was raised to 5 on arrival and then came first (a deletion of an absent row)."""
    eng = EmbeddedEngine(slack=3)
    eng.execute("register stream S (K integer); register relation R (K integer)")
    q = eng.register_query("Rstream(select * from R)")
    n = eng.register_query("select count(*) from S [Range 2], R")
    eng.push("S", [(5, 1)])
    eng.run()
    assert eng.statistics().first_instant is None and q.results() == []  # 5 is not complete yet (slack 3)
    eng.push("S", [(9, 1)])
    eng.run()
    assert eng.ctx.start == eng.statistics().first_instant == 5
    eng.push("R", [(4, "-", 7), (3, "+", 7)])
    eng.close(7)
    assert not eng.rejected() and q.results() == []
    expected = evaluate(
        bind_query(eng.catalog, "select count(*) from S [Range 2], R"),
        {"S": [(5, (1,)), (9, (1,))]},
        {"R": [(5, "+", (7,)), (5, "-", (7,))]},
        start=5,
        until=9,
    )
    assert not diff_outputs(expected, n.results())


def test_the_spark_driver_fixes_the_first_instant_by_the_same_rule(tmp_path) -> None:
    """The driver's inbox (no Spark needed): not at a heartbeat with nothing pushed, not before an
    element can be released, then at the earliest pushed; an unregistered source's waiting rows
    no longer count (review: a KeyError)."""
    from sluice.backends.spark.inbox import Inbox

    cat = Catalog()
    execute(cat, "register stream S (K integer); register stream T (K integer)")
    inbox = Inbox(cat, tmp_path, slack=2)
    inbox.complete("h", 4, None)
    inbox.push("S", [(5, 1), (3, 1)])  # S first pushed after the heartbeat: complete to 4 too (3 is late)
    assert inbox.admission["s"].rejected["late"] == 1
    assert inbox.first is None and inbox.fix_first() is None  # S's instant 5 is not complete
    inbox.forget(cat.lookup("S"))
    inbox.push("T", [(9, 1), (20, 1)])
    assert inbox.fix_first() == 9
    inbox.push("T", [(8, 2), (19, 2)])  # 8: late by the slack (17 complete); 19 taken
    inbox.push("S", [(7, 3)])  # before the first instant: late
    assert inbox.admission["t"].accepted == 3 and inbox.admission["s"].accepted == 0
    assert any("before the first instant 9" in m for m in inbox.messages())
