"""``sluice serve --backend spark``: the same session over the SparkEngine — register, push
(through the admission check), subscribe, read; the embedded engine's controls refused with the
reason; a new server on the same state and Spark workdir resumes its queries.
"""

from __future__ import annotations

import json

import pytest
from sluice.backends.spark.engine import SparkEngine
from sluice.server.controls import Controls
from sluice.server.session import NotFound, Refused, ServerSession
from sluice.server.store import Store

pytestmark = pytest.mark.spark


def test_spark_backend_registers_pushes_and_reads(spark, tmp_path):
    store = Store(tmp_path / "server.db")
    s = ServerSession(SparkEngine(spark=spark, workdir=tmp_path / "w"), store, backend="spark")
    assert [
        r["kind"] for r in s.execute("register stream S (A integer); register query big as select A from S where A > 1")
    ] == ["stream", "query"]
    sub = s.subscribe("big", None)
    rows = b"\n".join(
        json.dumps(r).encode() for r in ({"ts": 1, "A": 5}, {"ts": 2, "A": "x"}, {"ts": 2, "A": 1}, {"ts": 3, "A": 8})
    )
    rep = s.push("S", "jsonl", rows, heartbeat=3)
    assert rep == {"accepted": 3, "rejected": [{"row": 2, "reason": "'x' is not an integer"}]}
    assert [(e["ts"], e["row"]["A"]) for e in s.results("big")["elements"]] == [(1, 5), (3, 8)]
    assert [e["row"]["A"] for e in sub.take_json()[0]] == [5, 8]
    assert "big" in s.explain("big")
    with pytest.raises(Refused, match="Spark"):
        Controls(s).update(None, None, {"scheduler": "chain"})
    s.engine.stop()
    store.close()
    # a new server on the same state and workdir: the query again, its output going on from the
    # checkpoint — neither the output before the stop again (read then) nor a gap
    s2 = ServerSession(SparkEngine(spark=spark, workdir=tmp_path / "w"), Store(tmp_path / "server.db"), backend="spark")
    assert s2.restore() == {"objects": 1, "queries": 1, "pushes": 0}  # (a journal is the embedded engine's)
    s2.push("S", "jsonl", json.dumps({"ts": 4, "A": 9}).encode(), heartbeat=4)
    assert [(e["ts"], e["row"]["A"]) for e in s2.results("big")["elements"]] == [(4, 9)]
    s2.unregister("big")  # gone from the engine, its checkpoint and the store
    assert not (tmp_path / "w" / "big" / "checkpoint").exists()
    with pytest.raises(NotFound):
        s2.results("big")
    assert s2.drop("S") == {"unregistered": "S", "kind": "stream"}
    assert not s2.store.queries() and not s2.store.objects()
    s2.close()
