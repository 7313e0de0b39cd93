"""Shared window joins on Spark (issue #12 item 5): queries that join the same two streams through
windows, split by the same keys, run as one stateful processor per key — one streaming query, one
SharedWindowJoin per key serving them all — and each reads exactly its own answer, the embedded
engine's, at every run.
"""

from __future__ import annotations

import random

import pytest
from sluice.backends.embedded import EmbeddedEngine
from sluice.backends.spark.engine import SparkEngine
from sluice.cql.ast import TimeUnit
from sluice.errors import InUseError, SluiceError
from sluice.reference.compare import diff_outputs

pytestmark = pytest.mark.spark

DDL = "register stream A (K integer, V integer); register stream B (K integer, W integer)"
QUERIES = [
    "Istream(select * from A [Range 2], B [Range 2] where A.K = B.K)",
    "select A.V, B.W from A [Range 9], B [Range 4] where A.K = B.K and A.V > 2",
    "select A.K, count(*) from A [Range 5], B [Now] where A.K = B.K group by A.K",
    # [Rows N] counts every element of B: not split by K, so not in the others' processors
    "select * from A [Rows 3], B [Range 4] where A.K = B.K",
]


def test_queries_sharing_a_join_run_in_one_processor_and_each_gets_its_answer(spark, tmp_path) -> None:
    rnd = random.Random(11)
    eng = SparkEngine(spark=spark, workdir=tmp_path, time_unit=TimeUnit.SECOND)
    emb = EmbeddedEngine(time_unit=TimeUnit.SECOND)
    for e in (eng, emb):
        e.execute(DDL)
    handles = [eng.register_query(q, name=f"q{i}") for i, q in enumerate(QUERIES)]
    alone = eng.register_query("select * from A [Range 3] where V > 100", name="other")  # not a join: alone
    twins = [emb.register_query(q, name=f"q{i}") for i, q in enumerate(QUERIES)]
    t = 0
    for step in range(3):
        a_rows, b_rows = [], []
        for _ in range(40):
            t += rnd.choice([0, 1, 1, 2])
            (a_rows if rnd.random() < 0.5 else b_rows).append((t, rnd.choice([1, 2, 3, None]), rnd.randint(0, 9)))
        for e in (eng, emb):
            e.push("A", a_rows)
            e.push("B", b_rows)
            e.heartbeat(t)
        eng.run()
        emb.run()
        for h, w in zip(handles, twins, strict=True):
            assert not diff_outputs(w.results(), eng.results(h)), (h.name, step)
    assert all(h.group == ("q0", "q1", "q2") for h in handles[:3]), [h.group for h in handles]
    assert handles[3].group == () and alone.group == ()
    assert len({id(h.stream) for h in handles[:3]}) == 1  # one streaming query serves the three
    assert "runs in one processor per key with q1, q2" in eng.explain("q0")
    assert "one processor" not in eng.explain("other")
    assert all(w.results() for w in twins)
    assert not eng.rejected()
    # their state is one checkpoint: they leave together
    with pytest.raises(InUseError, match=r"with q1, q2 .*unregister\('q0', 'q1', 'q2'\)"):
        eng.unregister("q0")
    with pytest.raises(InUseError, match="with q2"):  # all leave or none: q3 (alone) stays as it was
        eng.unregister("q3", "q0", "q1")
    assert "q3" in eng.queries and (tmp_path / "q3" / "checkpoint").exists() and handles[3].stream.isActive
    eng.unregister("q0", "q1", "q2", "q0")
    assert set(eng.queries) == {"q3", "other"} and not list(tmp_path.glob("*/members.json"))
    eng.stop()


def test_off_runs_each_query_alone(spark, tmp_path) -> None:
    eng = SparkEngine(spark=spark, workdir=tmp_path, time_unit=TimeUnit.SECOND, shared_join="off")
    eng.execute(DDL)
    hs = [eng.register_query(q, name=f"q{i}") for i, q in enumerate(QUERIES[:2])]
    eng.push("A", [(1, 1, 5)])
    eng.push("B", [(1, 1, 7)])
    eng.heartbeat(2)
    eng.run()
    assert all(h.group == () for h in hs) and hs[0].stream is not hs[1].stream
    assert [e.row for e in eng.results(hs[0])] == [(1, 5, 1, 7)]
    eng.stop()


def test_without_sharing_each_query_runs_alone_with_the_same_answer(spark, tmp_path) -> None:
    """``sharing=False`` on Spark as on the embedded engine: no processor serves several queries,
    and a 3-way join (a dataflow join inside its processor) gives the embedded engine's answer."""
    with pytest.raises(SluiceError, match="needs sharing=True"):
        SparkEngine(spark=spark, workdir=tmp_path, sharing=False, shared_join="greedy")
    eng = SparkEngine(spark=spark, workdir=tmp_path, time_unit=TimeUnit.SECOND, sharing=False)
    emb = EmbeddedEngine(time_unit=TimeUnit.SECOND, sharing=False)
    three = "select A.V, B.W, C.W from A [Range 3], B [Range 3], B [Range 1] as C where A.K = B.K and B.K = C.K"
    for e in (eng, emb):
        e.execute(DDL)
    hs = [eng.register_query(q, name=f"q{i}") for i, q in enumerate([*QUERIES[:2], three])]
    ws = [emb.register_query(q, name=f"q{i}") for i, q in enumerate([*QUERIES[:2], three])]
    for e in (eng, emb):
        e.push("A", [(1, 1, 5), (2, 2, 6), (3, 1, 7)])
        e.push("B", [(1, 1, 7), (2, 1, 8), (3, 2, 9)])
        e.heartbeat(4)
        e.run()
    assert all(h.group == () for h in hs) and len({id(h.stream) for h in hs}) == 3
    for h, w in zip(hs, ws, strict=True):
        assert w.results() and not diff_outputs(w.results(), eng.results(h)), h.name
    eng.stop()


def test_a_group_resumes_from_its_checkpoint_after_a_restart(spark, tmp_path) -> None:
    """Stop an engine whose three queries run in one processor part-way; a new engine on the same
    workdir registering the same queries forms the same group, resumes its checkpoint (the shared
    join's state per key), and between them the two engines give each query exactly the embedded
    engine's answer: nothing lost, nothing repeated.
    """
    rnd = random.Random(5)
    steps = []
    t = 0
    for _ in range(4):
        a_rows, b_rows = [], []
        for _ in range(30):
            t += rnd.choice([0, 1, 2])
            (a_rows if rnd.random() < 0.5 else b_rows).append((t, rnd.choice([1, 2, 3]), rnd.randint(0, 9)))
        steps.append((a_rows, b_rows, t))
    emb = EmbeddedEngine(time_unit=TimeUnit.SECOND)
    emb.execute(DDL)
    twins = [emb.register_query(q, name=f"q{i}") for i, q in enumerate(QUERIES[:3])]
    got: list[list] = [[] for _ in twins]
    for n, half in enumerate((steps[:2], steps[2:])):
        eng = SparkEngine(spark=spark, workdir=tmp_path / "w", time_unit=TimeUnit.SECOND)
        eng.execute(DDL)
        # the second engine registers them in another order: the group is the saved one
        order = [0, 1, 2] if n == 0 else [2, 0, 1]
        by_name = {f"q{i}": eng.register_query(QUERIES[i], name=f"q{i}") for i in order}
        handles = [by_name[f"q{i}"] for i in range(3)]
        for k, (a_rows, b_rows, ts) in enumerate(half):
            for e in (eng, emb):
                e.push("A", a_rows)
                e.push("B", b_rows)
                e.heartbeat(ts)
            eng.run()
            if n == 0 and k == 0:  # stopped and run again on the same engine: the group resumes whole
                eng.stop()
        assert all(h.group == ("q0", "q1", "q2") for h in handles)
        for i, h in enumerate(handles):
            got[i] += eng.results(h)
        assert not eng.rejected()
        eng.stop()  # the streaming query stops; its checkpoint and the state per key stay on disk
    lone = SparkEngine(spark=spark, workdir=tmp_path / "w", time_unit=TimeUnit.SECOND)
    lone.execute(DDL)
    lone.register_query(QUERIES[1], name="q1")
    with pytest.raises(SluiceError, match="register q0, q2 again before run"):
        lone.run()  # one member alone cannot resume the group's checkpoint
    emb.run()
    for i, w in enumerate(twins):
        assert w.results(), f"q{i}"
        assert not diff_outputs(w.results(), got[i]), f"q{i}"
        assert len(got[i]) == len(w.results()), f"q{i}"
