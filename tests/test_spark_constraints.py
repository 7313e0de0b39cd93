"""k-constraints on Spark (design 023): the driver checks them as rows are pushed — the same
elements rejected, for the same reasons, as the embedded engine's sources reject — so a native
query and one run by the processors give the embedded engine's answers.
"""

from __future__ import annotations

import pytest
from sluice.backends.embedded import EmbeddedEngine
from sluice.backends.spark.engine import SparkEngine
from sluice.errors import SluiceError

pytestmark = pytest.mark.spark

DDL = (
    "register stream O (oid integer, x integer) ordered by oid within 1 unique by oid; "
    "register stream F (oid integer, qty integer) clustered by oid"
)
QUERIES = {
    "native": "select * from O where x >= 0",
    "joined": "Istream(select O.oid, F.qty from O, F where O.oid = F.oid)",
}
O_ROWS = [(1, 1, 0), (2, 3, 0), (3, 2, 0), (4, 1, 0), (5, None, 0), (6, 4, 1)]  # (4, 1) and NULL violate
F_ROWS = [(1, 1, 5), (2, 1, 6), (3, 3, 7), (4, 1, 8), (5, 2, 9), (6, 4, 1)]  # (4, 1): its cluster closed


def _run(eng) -> dict[str, list]:
    eng.execute(DDL)
    for name, q in QUERIES.items():
        eng.register_query(q, name=name)
    eng.push("O", O_ROWS[:3])
    eng.push("F", F_ROWS[:3])
    eng.run()
    eng.push("O", O_ROWS[3:])
    eng.push("F", F_ROWS[3:])
    eng.close()
    eng.run()
    return {name: sorted(eng.results(name)) for name in QUERIES}


def test_the_driver_rejects_what_the_embedded_sources_reject(spark, tmp_path) -> None:
    embedded = EmbeddedEngine()
    want = _run(embedded)
    eng = SparkEngine(spark=spark, workdir=tmp_path)
    assert _run(eng) == want and want["joined"]
    stats = {s.name: (s.accepted, dict(s.rejected_reasons)) for s in eng.statistics()["sources"]}
    assert stats == {s.name: (s.accepted, dict(s.rejected_reasons)) for s in embedded.statistics().sources}
    assert stats["O"] == (4, {"constraint": 2}) and stats["F"] == (5, {"constraint": 1})
    assert sorted(eng.rejected()) == sorted(embedded.rejected())
    # the processors' engines read ORDERED BY and UNIQUE BY (true of one key's rows), not CLUSTERED BY
    assert eng.ddl["o"].endswith("ORDERED BY oid WITHIN 1 UNIQUE BY oid;") and "CLUSTERED" not in eng.ddl["f"]
    worker = EmbeddedEngine()  # a processor's engine is built from that DDL and the query's text
    worker.execute("\n".join(eng.ddl.values()))
    plan = worker.explain(worker.register_query(QUERIES["joined"]).name)
    assert "O UNIQUE BY oid: right rows whose key it closed not kept" in plan


def test_spark_refuses_what_it_cannot_check(spark, tmp_path) -> None:
    eng = SparkEngine(spark=spark, workdir=tmp_path / "a", slack=2)
    with pytest.raises(SluiceError, match="need slack 0 on Spark"):
        eng.execute("register stream S (a integer) ordered by a")
    with pytest.raises(SluiceError, match="need slack 0 on Spark"):
        eng.register_stream("S", [("a", "integer")], constraints=[("ordered", "a")])
    assert not eng.catalog.sources
    eng = SparkEngine(spark=spark, workdir=tmp_path / "b")
    eng.register_stream("S", [("a", "integer")], constraints=[("clustered", "a", 2)])
    with pytest.raises(SluiceError, match="declares k-constraints"):
        eng.attach_directory("S", tmp_path / "in")
    # punctuations (design 023): refused with the reason, on the DDL and through the API
    with pytest.raises(SluiceError, match="PUNCTUATED BY is not available on the Spark backend yet"):
        eng.execute("register stream P (a integer) punctuated by a")
    with pytest.raises(SluiceError, match="PUNCTUATED BY is not available on the Spark backend yet"):
        eng.register_stream("P", [("a", "integer")], constraints=[("punctuated", "a")])
    with pytest.raises(SluiceError, match=r"punctuate\('S', 'a'\) is not available on the Spark backend yet"):
        eng.punctuate("S", "a", upto=3)
    assert [d.name for d in eng.catalog.sources] == ["S"]
