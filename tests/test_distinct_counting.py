"""COUNT/SUM/AVG of DISTINCT values in two counting passes (``DistinctCounting``): equal to the
reference evaluator over windows (inputs that delete in insertion order), joins and relations
(inputs that do not), NULLs, float zeros and infinities, beside plain aggregates and MIN/MAX, fed
in pieces, scheduled every way and snapshotted between pieces.
"""

from __future__ import annotations

import pickle

import numpy as np
import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sluice.backends.embedded import EmbeddedEngine
from sluice.catalog import Catalog
from sluice.plan import execute
from sluice.runtime.operators.aggregate import Aggregate
from sluice.runtime.operators.counting import Counting
from sluice.runtime.operators.distinct_counting import DistinctCounting

from backends import SCHEDULERS
from engine_runner import reference_diffs

DDL = """
register stream S (K integer, V integer, F float);
register stream S2 (K integer, W integer);
register relation R (K integer, V integer);
"""
CAT = Catalog()
execute(CAT, DDL)

DISTINCT = ["count(distinct V)", "sum(distinct V)", "avg(distinct V)", "count(distinct F)", "sum(distinct F)"]
PLAIN = ["count(*)", "count(V)", "sum(V)", "avg(F)", "max(V)", "min(F)"]
INPUTS = {  # (from, whether MIN/MAX may be asked: the input deletes in insertion order)
    "S [Range 2 Seconds]": True,
    "S [Rows 2]": True,
    "S [Range 4 Seconds Slide 3 Seconds]": True,
    "S": True,
    "S [Partition By K Rows 1]": False,
    "R": False,
}


@st.composite
def queries(draw: st.DrawFn) -> str:
    source = draw(st.sampled_from(sorted(INPUTS) + ["join"]))
    fifo = INPUTS.get(source, False)
    if source == "join":
        source, prefix = "S [Range 2 Seconds], S2 [Rows 2]", "S."
        where = " where S.K = S2.K"
    else:
        prefix, where = "", ""
    if source == "R":
        calls = draw(
            st.lists(
                st.sampled_from(["count(distinct V)", "sum(distinct V)", "avg(distinct V)", "count(*)", "sum(V)"]),
                min_size=1,
                max_size=3,
            )
        )
        calls.append("count(distinct V)")
    else:
        plain = [p for p in PLAIN if fifo or not p.startswith(("max", "min"))]
        calls = draw(st.lists(st.sampled_from(DISTINCT + plain), min_size=1, max_size=4))
        calls.append(draw(st.sampled_from(DISTINCT)))
    calls = [
        c.replace("(V", f"({prefix}V")
        .replace("(F", f"({prefix}F")
        .replace("distinct V", f"distinct {prefix}V")
        .replace("distinct F", f"distinct {prefix}F")
        for c in calls
    ]
    key = draw(st.sampled_from(["", f"{prefix}K", f"{prefix}K, {prefix}V % 2"]))
    select = f"select {key + ', ' if key else ''}{', '.join(calls)} from {source}{where}"
    select += f" group by {key}" if key else ""
    if draw(st.integers(0, 4)) == 0:
        return f"Istream({select})"
    return select


floats = st.sampled_from([None, 0.0, -0.0, 1.5, -2.25, 3.0, float("inf"), float("-inf"), 1e308])
stream_rows = st.lists(
    st.tuples(st.integers(0, 10), st.integers(0, 2), st.one_of(st.none(), st.integers(-2, 2)), floats), max_size=14
).map(lambda rs: sorted(rs, key=lambda r: r[0]))
s2_rows = st.lists(st.tuples(st.integers(0, 10), st.integers(0, 2), st.integers(-2, 2)), max_size=8).map(
    lambda rs: sorted(rs, key=lambda r: r[0])
)


@st.composite
def relation_changes(draw: st.DrawFn) -> list[tuple[int, str, tuple[int, int | None]]]:
    """Insertions of (0–2, NULL | −2…2) and deletions of rows R holds, at non-decreasing instants."""
    ups: list[tuple[int, str, tuple[int, int | None]]] = []
    present: list[tuple[int, int | None]] = []
    t = 0
    for _ in range(draw(st.integers(0, 10))):
        t += draw(st.integers(0, 2))
        if present and draw(st.booleans()):
            ups.append((t, "-", present.pop(draw(st.integers(0, len(present) - 1)))))
        else:
            row = (draw(st.integers(0, 2)), draw(st.one_of(st.none(), st.integers(-2, 2))))
            present.append(row)
            ups.append((t, "+", row))
    return ups


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(
    queries(),
    stream_rows,
    s2_rows,
    relation_changes(),
    st.sampled_from([(None, 65536, False), (1, 1, False), (3, 2, False), (1, 65536, True), (2, 3, True)]),
    st.sampled_from(SCHEDULERS),
)
def test_distinct_aggregates_equal_the_reference(query, s_rows, s2, r_ups, feed, scheduler) -> None:
    streams = {"S": [(t, (k, v, f)) for t, k, v, f in s_rows], "S2": [(t, (k, w)) for t, k, w in s2]}
    relations = {"R": r_ups}
    chunk, budget, snapshots = feed
    engines: list[EmbeddedEngine] = []
    diffs = reference_diffs(
        CAT,
        query,
        streams,
        relations,
        chunk=chunk,
        budget=budget,
        scheduler=scheduler,
        snapshots=snapshots,
        engines=engines,
    )
    assert not diffs, f"{query} [{scheduler}]\n" + "\n".join(diffs[:10])
    aggregates = [op for op in engines[-1].registry.all_operators() if isinstance(op, Aggregate)]
    # (all of one argument, the rewrite ``distinct-aggregates-over-distinct-rows`` makes them plain
    # aggregates over DISTINCT rows: the counting path either way, never the value-level one)
    assert aggregates and all(isinstance(op._counting, Counting | DistinctCounting) for op in aggregates), query


def test_millisecond_stamps_at_scale_equal_the_value_level_path() -> None:
    """20,000 events at distinct millisecond stamps over 300 groups in batches of 1,000: the two
    passes give the per-(instant, group) accumulators' output row for row (the path they replace,
    kept for MIN/MAX over inputs that delete out of order).
    """
    rng = np.random.default_rng(3)
    n = 20_000
    v = rng.integers(0, 40, n).astype(object)
    v[rng.random(n) < 0.05] = None
    data = pa.table({"ts": np.arange(n), "K": rng.integers(0, 300, n), "V": pa.array(list(v), pa.int64())})
    query = "select K, count(distinct V), sum(distinct V), count(*), max(V) from S [Range 500] group by K"

    def run(two_passes: bool) -> list[pa.Table]:
        eng = EmbeddedEngine(time_unit="millisecond")
        eng.execute("register stream S (K integer, V integer)")
        q = eng.register_query(query, retain=0)
        (agg,) = [op for op in eng.registry.all_operators() if isinstance(op, Aggregate)]
        assert isinstance(agg._counting, DistinctCounting)
        if not two_passes:
            agg._counting = None
        out: list[pa.Table] = []
        q.subscribe_arrow(out.append)
        for lo in range(0, n, 1_000):
            eng.push("S", data.slice(lo, 1_000))
            eng.run()
        eng.close()
        return out

    fast, slow = pa.concat_tables(run(True)), pa.concat_tables(run(False))
    assert fast.num_rows > n  # (a change at nearly every stamp: a deletion and an insertion)

    def rows(t: pa.Table) -> list[tuple]:
        return sorted(tuple(r.values()) for r in t.to_pylist())

    assert rows(fast) == rows(slow)


def test_a_snapshot_of_the_value_level_path_restores_into_it() -> None:
    """A checkpoint saved before DISTINCT aggregates were counted (the per-group accumulators)
    restores into an engine that then goes on with them, with the same answer.
    """
    query = "select K, count(distinct V), count(*) from S group by K"

    def engine() -> tuple[EmbeddedEngine, list[tuple], object]:
        eng = EmbeddedEngine()
        eng.execute("register stream S (K integer, V integer)")
        out: list[tuple] = []
        q = eng.register_query(query, name="q")  # (held: a dropped handle's query is closed)
        q.subscribe(lambda es: out.extend((e.ts, e.sign, e.row) for e in es))
        return eng, out, q

    old, _, _q = engine()
    (agg,) = [op for op in old.registry.all_operators() if isinstance(op, Aggregate)]
    agg._counting = None  # as the engine was built before
    old.push("S", [(1, 1, 5), (2, 1, 6), (2, 2, 5)])
    old.run()
    blob = pickle.dumps(old.snapshot_state())
    new, out, _q2 = engine()
    new.restore_state(pickle.loads(blob))
    (agg,) = [op for op in new.registry.all_operators() if isinstance(op, Aggregate)]
    assert agg._counting is None
    new.push("S", [(3, 1, 5), (4, 1, 7)])
    new.close()
    assert [(t, s, r) for t, s, r in out if t >= 3] == [
        (3, "-", (1, 2, 2)),
        (3, "+", (1, 2, 3)),
        (4, "-", (1, 2, 3)),
        (4, "+", (1, 3, 4)),
    ]


def test_one_engine_restores_keys_saved_by_either_path_in_turn() -> None:
    """A Spark processor restores each key's state into one engine in turn: a key saved by the
    accumulators (before DISTINCT aggregates were counted) and then a new key go through the
    same engine, each on the path its state was saved by (a review: the second failed).
    """
    query = "select K, count(distinct V), count(*) from S group by K"

    def engine() -> tuple[EmbeddedEngine, object]:
        eng = EmbeddedEngine(start=0)
        eng.execute("register stream S (K integer, V integer)")
        return eng, eng.register_query(query, name="q")

    old, _q = engine()
    (agg,) = [op for op in old.registry.all_operators() if isinstance(op, Aggregate)]
    agg._counting = None  # (as the engine was built before)
    old.push("S", [(1, 1, 5), (2, 1, 6)])
    old.run()
    old_key = pickle.dumps(old.snapshot_state())
    eng, _q2 = engine()
    fresh = pickle.dumps(eng.snapshot_state())
    (agg,) = [op for op in eng.registry.all_operators() if isinstance(op, Aggregate)]
    eng.restore_state(pickle.loads(old_key))
    assert agg._counting is None
    eng.push("S", [(3, 1, 5)])
    eng.run()
    eng.restore_state(pickle.loads(fresh))
    assert isinstance(agg._counting, DistinctCounting)
    eng.push("S", [(4, 2, 7), (4, 2, 7), (4, 2, 8)])
    eng.close()
    assert sorted(e.row for e in _q2.results() if e.ts == 4) == [(2, 2, 3)]  # type: ignore[attr-defined]
