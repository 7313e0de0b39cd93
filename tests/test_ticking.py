"""CURRENT_TIME over a relation: the interval fast path equals the tick-by-tick definition."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from sluice.backends.embedded import EmbeddedEngine
from sluice.plan import bind_query
from sluice.reference import evaluate
from sluice.reference.compare import diff_outputs
from sluice.runtime.operators.ticking import TickingMap, interval_filter

DDL = "register stream S (K integer, E timestamp); register relation R (K integer, E integer)"

INTERVAL_QUERIES = [
    "select * from R where E < CURRENT_TIME",
    "select K from R where CURRENT_TIME <= E + 2 and K > 0",
    "select * from R where E = CURRENT_TIME",
    "select * from R where E - 3 < CURRENT_TIME and CURRENT_TIME < E + 4",
    "Istream(select K, E from S [Range 5 Seconds] where E >= CURRENT_TIME)",
    "Dstream(select K from S [Rows 3] where E > CURRENT_TIME)",
]
GENERAL_QUERIES = ["select * from R where E <> CURRENT_TIME", "select * from R where E < CURRENT_TIME or K = 1"]


def _operators(eng: EmbeddedEngine) -> list[TickingMap]:
    return [u for u in eng.operators if isinstance(u, TickingMap)]


def test_interval_filters_are_recognised() -> None:
    eng = EmbeddedEngine()
    eng.execute(DDL)
    for q in INTERVAL_QUERIES:
        assert interval_filter(_pred(eng, q)) is not None, q
    for q in GENERAL_QUERIES:
        assert interval_filter(_pred(eng, q)) is None, q


def _pred(eng: EmbeddedEngine, q: str):
    from sluice.plan import logical as L

    plan = bind_query(eng.catalog, q).plan
    filters = [n for n in L.walk_plan(plan) if isinstance(n, L.Filter)]
    return filters[0].predicate


UPDATES = st.lists(
    st.tuples(st.integers(0, 12), st.booleans(), st.integers(0, 3), st.one_of(st.none(), st.integers(-2, 15))),
    max_size=12,
)


def _valid(ups):
    """A relation's updates that only delete what is there, sorted by time."""
    held: dict[tuple, int] = {}
    out = []
    for t, ins, k, e in sorted(ups, key=lambda u: u[0]):
        row = (k, e)
        if not ins and held.get(row, 0) > 0:
            held[row] -= 1
            out.append((t, "-", k, e))
        else:
            held[row] = held.get(row, 0) + 1
            out.append((t, "+", k, e))
    return out


@settings(max_examples=60, deadline=None, derandomize=True)
@given(st.sampled_from(INTERVAL_QUERIES + GENERAL_QUERIES), UPDATES, st.integers(12, 25))
def test_current_time_filters_equal_the_reference(query, updates, until) -> None:
    ups = _valid(updates)
    stream = [(t, k, e) for t, _, k, e in ups]
    eng = EmbeddedEngine(start=0)
    eng.execute(DDL)
    q = eng.register_query(query)
    eng.push("R", ups)
    eng.push("S", stream)
    eng.close(until)
    expected = evaluate(
        q.bound,
        {"S": [(t, (k, e)) for t, k, e in stream]},
        {"R": [(t, s, (k, e)) for t, s, k, e in ups]},
        start=0,
        until=until,
    )
    assert not diff_outputs(expected, q.results()), query
    assert any(op._interval is not None for op in _operators(eng)) == (query in INTERVAL_QUERIES)
