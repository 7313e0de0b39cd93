"""MIN/MAX over a window of a stream, vectorised (``runtime/operators/counting.py``,
``Counting._extremes``): the window deletes in insertion order, so each group keeps a monotonic
queue and every instant's extreme is a range maximum.  Against the reference evaluator: integers, floats, strings, NULLs, groups that empty
and come back, every window kind that deletes in order, input in pieces, snapshots between them.
"""

from __future__ import annotations

import pickle

from hypothesis import given, settings
from hypothesis import strategies as st
from sluice.backends.embedded import EmbeddedEngine
from sluice.plan import bind_query
from sluice.reference import evaluate
from sluice.reference.compare import diff_outputs

QUERIES = [
    "select K, max(V), min(V), count(*), sum(V) from S [Range 5] group by K",
    "select max(V), min(N) from S [Rows 3]",
    "select K, max(N), min(distinct V) from S [Range 4 Slide 2] where V > 3 group by K",
    "select K, min(V) from S [Now] group by K",
    "select K, max(F), min(F), avg(F) from S [Range 3] group by K",
    "select min(V) from S [Range Unbounded]",
    "select K, max(V) from S [Range 2] group by K having max(V) > 4",
]

rows = st.lists(
    st.tuples(
        st.integers(0, 2),
        st.integers(0, 2),
        st.none() | st.sampled_from([1, 5, 7, 9, -3]),
        st.none() | st.sampled_from(["a", "b", "ab", ""]),
        st.none() | st.sampled_from([0.5, -1.0, 2.25, 1e300]),
    ),
    max_size=30,
)


@settings(max_examples=150)
@given(st.sampled_from(QUERIES), rows, st.sampled_from([1, 3, 100]), st.booleans())
def test_fifo_extremes_equal_the_definition(query, steps, piece, snapshots) -> None:
    t, data = 0, []
    for dt, k, v, n, f in steps:
        t += dt
        data.append((t, k, v, n, f))

    def build() -> tuple[EmbeddedEngine, object]:
        eng = EmbeddedEngine(start=0)
        eng.execute("REGISTER STREAM S (K integer, V integer, N varchar(4), F float)")
        return eng, eng.register_query(query, name="q")

    eng, _ = build()
    assert "input deletes in insertion order" in eng.explain()
    for i in range(0, len(data), piece):
        eng.push("S", data[i : i + piece])
        eng.run()
        if snapshots:
            blob = pickle.dumps(eng.snapshot_state())
            eng, _ = build()
            eng.restore_state(pickle.loads(blob))
    eng.close(t + 6)
    expected = evaluate(bind_query(eng.catalog, query), {"S": [(r[0], r[1:]) for r in data]}, {}, start=0, until=t + 6)
    diffs = diff_outputs(expected, eng.queries["q"].results())
    assert not diffs, "\n".join(diffs[:10])


def test_over_a_join_min_max_keep_the_general_path() -> None:
    """A join's output does not delete in insertion order: no FIFO claim, the accumulators run."""
    eng = EmbeddedEngine(start=0)
    eng.execute("REGISTER STREAM S (K integer, V integer); REGISTER STREAM T (K integer, W integer)")
    eng.register_query("select max(S.V) from S [Range 3], T [Range 5] where S.K = T.K")
    assert "insertion order" not in eng.explain()
