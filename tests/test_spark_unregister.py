"""Unregistering on the Spark backend, as on the embedded engine: a query stops and its name
starts afresh; a stream, relation or view goes once nothing uses it, and a source registered
again under its name starts empty (its old events kept aside, their numbers still counted).
"""

from __future__ import annotations

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from sluice.backends.spark.engine import SparkEngine
from sluice.errors import InUseError, SluiceError

pytestmark = pytest.mark.spark


def rows(eng: SparkEngine, name: str) -> list[tuple[object, ...]]:
    return [(e.ts, *e.row) for e in eng.results(name)]


def _last_seq(directory, pattern: str) -> int:
    """The highest event number in the Parquet files under ``directory``."""
    return max(
        pc.max(pq.read_table(f, columns=["seq"]).column(0)).as_py() for f in directory.glob(f"{pattern}/*.parquet")
    )


def test_unregister_queries_and_sources(spark, tmp_path) -> None:
    eng = SparkEngine(spark=spark, workdir=tmp_path)
    eng.execute("register stream S (A integer); register view V as select A from S where A > 0")
    eng.register_query("select * from V", name="q")
    eng.push("S", [(1, 5), (2, -1)])
    eng.heartbeat(2)
    eng.run()
    assert rows(eng, "q") == [(1, 5)]
    with pytest.raises(InUseError, match="S is used by V, q: unregister those first"):
        eng.unregister_source("S")
    eng.unregister("q")
    assert "q" not in eng.queries and not (tmp_path / "q" / "checkpoint").exists()
    with pytest.raises(SluiceError, match="no query named 'q'"):
        eng.results("q")
    eng.push("S", [(3, 7)])
    eng.heartbeat(3)
    eng.run()
    eng.register_query("select * from V", name="q")  # the name again: a new query, from now on
    eng.push("S", [(4, 8)])
    eng.heartbeat(4)
    eng.run()
    assert rows(eng, "q") == [(4, 8)]

    # a file sink's output stays; the same path again would have Spark skip the new batches
    eng.register_query("select * from S", name="f", sink="json")
    eng.push("S", [(5, 9)])
    eng.heartbeat(5)
    eng.run()
    eng.unregister("f")
    assert list((tmp_path / "f" / "out").glob("part-*.json"))
    with pytest.raises(SluiceError, match="_spark_metadata"):
        eng.register_query("select * from S", name="f", sink="json")

    with pytest.raises(InUseError, match="V is used by q"):
        eng.unregister_source("V")
    eng.unregister("q")
    eng.unregister_source("V")
    eng.push("S", [(6, 1), (7, 1)])  # no heartbeat: instant 6 is complete, 7 is held
    eng.run()
    eng.unregister_source("S")
    retired = list((tmp_path / "retired").glob("*/part-*.parquet"))
    assert retired and not (tmp_path / "sources" / "s").exists()
    # a new engine on the work directory numbers events after every one written, retired ones too
    # (the last number is the marker saying what S released, after its rows: Inbox.release)
    last = max(_last_seq(tmp_path / "retired", "*"), _last_seq(tmp_path, "markers"))
    assert _last_seq(tmp_path / "retired", "*") == last - 1
    assert SparkEngine(spark=spark, workdir=tmp_path).inbox.seq == last == eng.inbox.seq
    eng.execute("register stream S (B varchar(4))")  # the name again, another schema: empty
    eng.register_query("select B from S", name="r")
    eng.push("S", [(7, "x")])
    eng.heartbeat(7)
    eng.run()
    assert rows(eng, "r") == [(7, "x")]
    eng.stop()


def test_with_closes_the_input_and_stops_the_streaming_queries_on_both_backends(spark, tmp_path) -> None:
    """``with engine:`` on both backends: leaving closes the input (every answer delivered), and
    on Spark the streaming queries stop (left running, they keep polling their sources); leaving
    on an error runs nothing more, and Spark's queries stop all the same.
    """
    from sluice.backends.embedded import EmbeddedEngine

    answers = []
    for make in (EmbeddedEngine, lambda: SparkEngine(spark=spark, workdir=tmp_path / "a")):
        with make() as eng:
            eng.execute("register stream S (A integer)")
            q = eng.register_query("select count(*) from S [Range 2]", name="c")
            eng.push("S", [(1, 5), (2, 6)])
        answers.append([(e.ts, e.sign, e.row) for e in q.results()])
    assert answers[0] == answers[1] == [(1, "+", (1,)), (2, "-", (1,)), (2, "+", (2,))]
    assert not spark.streams.active  # (the fixture stops what a test leaves: none from here)
    with pytest.raises(ZeroDivisionError), SparkEngine(spark=spark, workdir=tmp_path / "b") as eng:
        eng.execute("register stream S (A integer)")
        eng.register_query("select * from S", name="e")
        eng.push("S", [(1, 5)])
        eng.close()  # (the first instant fixed: the query starts)
        assert eng.queries["e"].stream.id in {s.id for s in spark.streams.active}
        raise ZeroDivisionError
    assert not spark.streams.active
