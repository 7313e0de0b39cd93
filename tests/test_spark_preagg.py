"""Spark's pre-aggregation of sliding-window group-bys (design 015) on a real SparkSession.

Spark's streaming aggregation computes the partials (per group, slide instant and class) and the
processor runs the rewritten query over them; the answer — at every run, not only at the end —
and the notes must be the embedded engine's.  The rewrite itself is tested without Spark in
``tests/test_preagg.py``.
"""

from __future__ import annotations

import random

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from sluice.backends.embedded import EmbeddedEngine
from sluice.backends.spark.engine import SparkEngine
from sluice.cql.ast import TimeUnit
from sluice.reference import evaluate
from sluice.reference.compare import diff_outputs

from preagg_oracle import elements, unnamed

pytestmark = pytest.mark.spark

DDL = "register stream S (A integer, K integer, B integer)"
QUERIES = [
    "select K, count(*), sum(A) from S [Range 10 Slide 3] where B > 0 group by K",
    "Istream(select K, count(*) + 1 as c, max(A), min(A), count(B) from S [Range 9 Slide 3] group by K having sum(A) > 3)",
    "select K, count(*) from S [Range 2 Slide 5] group by K",  # T < U: some elements are never in it
]
BIG = 9_223_372_036_854_775_000


def test_sliding_group_bys_are_pre_aggregated_and_answer_as_the_embedded_engine_at_every_run(spark, tmp_path) -> None:
    """Negative timestamps, a slack of 1 with rows out of order within it, NULL group keys."""
    rnd = random.Random(3)
    rows, t = [], -50
    for _ in range(240):
        t += rnd.choice([0, 1, 1, 2, 3])
        rows.append((t, rnd.randint(-5, 9), rnd.choice([0, 1, 2, 3, None]), rnd.choice([None, -1, 2, 5])))
    for i in range(0, len(rows) - 1, 7):  # swap neighbours one tick apart: out of order within the slack
        if rows[i + 1][0] == rows[i][0] + 1:
            rows[i], rows[i + 1] = rows[i + 1], rows[i]
    rows += [(t + 1, BIG, 1, 1), (t + 1, BIG, 1, 1), (t + 1, -5, 1, 1)]  # a partial sum beyond 64 bits
    eng = SparkEngine(spark=spark, workdir=tmp_path, time_unit=TimeUnit.SECOND, slack=1)
    emb = EmbeddedEngine(time_unit=TimeUnit.SECOND, slack=1)
    for e in (eng, emb):
        e.execute(DDL)
    handles = [eng.register_query(q, name=f"q{i}") for i, q in enumerate(QUERIES)]
    twins = [emb.register_query(q, name=f"q{i}") for i, q in enumerate(QUERIES)]
    for i in range(0, len(rows), 80):
        part = rows[i : i + 80]
        for e in (eng, emb):
            e.push("S", part)
            e.heartbeat(max(r[0] for r in part) - 3)  # instants up to here complete: answered in this run
        eng.run()
        emb.run()
        for h, w in zip(handles, twins, strict=True):
            assert elements(eng.results(h)) == elements(w.results()), (h.bound.text, i)
    eng.close()
    emb.close()
    for h, w in zip(handles, twins, strict=True):
        assert "pre-aggregated by Spark" in eng.explain(h)
        assert w.results() and elements(eng.results(h)) == elements(w.results()), h.bound.text
    stats = eng.statistics()["queries"]
    emb_notes = unnamed(emb.rejected())
    assert emb_notes and unnamed(sum((stats[f"q{i}"]["rejected"] for i in range(3)), [])) == emb_notes
    eng.stop()


def test_pre_aggregation_can_be_turned_off_for_the_same_answer(spark, tmp_path) -> None:
    rows = [(t, t % 7 - 3, t % 3, 1) for t in range(0, 60, 2)]
    answers = []
    for pre in (True, False):
        eng = SparkEngine(spark=spark, workdir=tmp_path / str(pre), time_unit=TimeUnit.SECOND, preaggregate=pre)
        eng.execute(DDL)
        h = eng.register_query(QUERIES[0])
        eng.push("S", rows)
        eng.close()
        assert ("pre-aggregated by Spark" in eng.explain(h)) is pre
        answers.append(elements(eng.results(h)))
        eng.stop()
    assert answers[0] and answers[0] == answers[1]


def test_a_parquet_directory_is_pre_aggregated_and_a_row_behind_an_emitted_slide_is_counted(spark, tmp_path) -> None:
    """Rows read by Spark itself.  The lateness rule (design 014/015): a row behind Spark's
    watermark is rejected, with a count, once the slide it belongs to is complete; a row of a
    slide still open changes no instant already answered and is taken — the answer is the
    definition over the rows taken.
    """
    d = tmp_path / "in"
    d.mkdir()

    def write(name: str, rows: list[tuple[int | None, int, int, int]]) -> None:
        cols = list(zip(*rows, strict=True))
        pq.write_table(
            pa.table({n: pa.array(c, pa.int64()) for n, c in zip(["ts", "A", "K", "B"], cols, strict=True)}), d / name
        )

    query = "select K, count(*), sum(A) from S [Range 10 Slide 5] group by K"
    first = [(t, t, t % 2, 1) for t in (9, 3, 20, 1, 14, 17)]  # out of order within one file: nothing late
    # 12 and 13: their slide (ending 15) is out — one group of late rows for Spark; 18: its slide is open
    # None: a row without a timestamp — in no slide, rejected with a note, not lost
    second = [(12, 100, 0, 1), (13, 50, 0, 1), (18, 200, 1, 1), (22, 5, 0, 1), (None, 1, 1, 1)]
    eng = SparkEngine(spark=spark, workdir=tmp_path / "w", time_unit=TimeUnit.SECOND, start=0)
    eng.execute(DDL)
    eng.attach_directory("S", d, "parquet")
    h = eng.register_query(query)
    write("a.parquet", first)
    eng.run()
    write("b.parquet", second)
    eng.run()
    eng.close(30)
    assert "pre-aggregated by Spark" in eng.explain(h)
    taken = sorted(first + [r for r in second if r[0] not in (12, 13, None)])
    expected = evaluate(h.bound, {"S": [(t, (a, k, b)) for t, a, k, b in taken]}, start=0, until=30)
    got = eng.results(h)
    assert expected and not diff_outputs(expected, got) and len(got) == len(expected)
    late, untimed = sorted(eng.statistics()["queries"][h.name]["rejected"])
    assert untimed == f"S: a row without a valid ts was rejected (query {h.name})"
    # both rows counted (Spark's Python workers aggregated them into one partial)
    assert late == (
        "S: 2 element(s) arrived behind Spark's watermark (late: pre-aggregated, their slides ending at 15 "
        "were complete at 19; design 015)"
    )
    eng.stop()


def test_rows_without_ts_or_before_the_first_instant_are_rejected_whatever_the_where(spark, tmp_path) -> None:
    """An attached row Spark cannot stamp, or stamped before the first instant, is rejected with a
    note — as on the native path and the embedded engine, whose admission comes before any
    selection — even when it would fail the WHERE Spark applies before pre-aggregating.
    """
    d = tmp_path / "in"
    d.mkdir()
    rows = [(4, 7, 1, 1), (5, -1, 1, 1), (None, -3, 0, 1), (12, 2, 0, 1), (13, 3, 1, 1), (21, 1, 0, 1)]
    cols = list(zip(*rows, strict=True))
    pq.write_table(
        pa.table({n: pa.array(c, pa.int64()) for n, c in zip(["ts", "A", "K", "B"], cols, strict=True)}), d / "a.parquet"
    )
    query = "select K, count(*), sum(A) from S [Range 10 Slide 5] where A > 0 group by K"
    eng = SparkEngine(spark=spark, workdir=tmp_path / "w", time_unit=TimeUnit.SECOND, start=10)
    eng.execute(DDL)
    eng.attach_directory("S", d, "parquet")
    h = eng.register_query(query)
    eng.close(30)
    assert "pre-aggregated by Spark" in eng.explain(h)
    taken = [r for r in rows if r[0] is not None and r[0] >= 10]
    expected = evaluate(h.bound, {"S": [(t, (a, k, b)) for t, a, k, b in taken]}, start=10, until=30)
    got = eng.results(h)
    assert expected and not diff_outputs(expected, got) and len(got) == len(expected)
    assert sorted(eng.statistics()["queries"][h.name]["rejected"]) == [
        "S: a row without a valid ts was rejected (query " + h.name + ")",
        "S: element at ts 4 is before the first instant 10",
        "S: element at ts 5 is before the first instant 10",
    ]
    eng.stop()
