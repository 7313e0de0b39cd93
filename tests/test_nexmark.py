"""NEXMark Q0–Q8 (benchmarks/nexmark/*.cql, the published CQL) on the embedded engine, equal to the
reference evaluator on generated events; and the generator's faithfulness to Beam's."""

from __future__ import annotations

from pathlib import Path

import pytest
from sluice.backends.embedded import EmbeddedEngine
from sluice.catalog import Catalog
from sluice.cql.ast import TimeUnit
from sluice.plan import bind_query, execute
from sluice.reference import evaluate
from sluice.reference.compare import diff_outputs
from sluice.workloads.nexmark import DDL, JavaRandom, NexmarkGenerator, as_rows, categories

QUERIES = sorted((Path(__file__).resolve().parents[1] / "benchmarks" / "nexmark").glob("q*.cql"))


def doltoeur(x: int) -> float:
    return x * 0.89


@pytest.fixture(scope="module")
def data():
    rows = as_rows(NexmarkGenerator(rate=1000).events(600))
    return {k: [(r[0], tuple(r[1:])) for r in v] for k, v in rows.items()}


def test_all_nine_queries_are_there() -> None:
    assert [q.stem for q in QUERIES] == [f"q{i}" for i in range(9)]


@pytest.mark.parametrize("path", QUERIES, ids=[q.stem for q in QUERIES])
def test_nexmark_query_engine_equals_reference(path: Path, data) -> None:
    text = path.read_text()
    cat = Catalog(time_unit=TimeUnit.MILLISECOND)
    execute(cat, DDL)
    cat.register_function("DOLTOEUR", doltoeur, "float", ["bigint"])
    cats = [(t, s, tuple(r)) for t, s, *r in categories()]
    expected = evaluate(bind_query(cat, text), data, {"Category": cats}, start=0, until=599)
    eng = EmbeddedEngine(cat, start=0)
    q = eng.register_query(text)
    eng.push("Category", categories())
    for name, rows in data.items():
        eng.push(name, [(t, *r) for t, r in rows])
    eng.close(599)
    assert not eng.rejected()
    diffs = diff_outputs(expected, q.results())
    assert not diffs, "\n".join(diffs[:10])
    if path.stem in ("q0", "q1"):
        assert q.results(), f"{path.stem} should produce output on 600 events"


def test_java_random_is_java_util_random() -> None:
    r = JavaRandom(42)
    assert (r.next_int(), r.next_int()) == (-1170105035, 234785527)
    r = JavaRandom(0)
    assert [r.next_int(10) for _ in range(10)] == [0, 8, 9, 7, 5, 3, 1, 1, 9, 4]
    assert JavaRandom(42).next_double() == 0.7275636800328681
    assert JavaRandom(42).next_long() == -5025562857975149833


def test_generator_shape() -> None:
    g = NexmarkGenerator(rate=10_000)
    events = list(g.events(5000))
    kinds = [type(e).__name__ for e in events]
    assert kinds[:5] == ["Person", "Auction", "Auction", "Auction", "Bid"]
    assert kinds.count("Person") == 100 and kinds.count("Auction") == 300
    assert [e.id for e in events if type(e).__name__ == "Person"][:3] == [1000, 1001, 1002]
    assert events[-1].date_time == (4999 * 100) // 1000  # base + n·(10⁶/rate) µs, in ms
    assert events == list(NexmarkGenerator(rate=10_000).events(5000))  # deterministic


def test_bench_checks_answers_against_duckdb(tmp_path) -> None:
    from sluice.experiments.bench import bench, table

    doc = bench(["q0", "q2", "q3", "q7"], events=3000, batch=1000, out=tmp_path / "nx.json", engines=("embedded",))
    assert (tmp_path / "nx.json").exists()
    res = doc["results"]
    assert all(res[q]["duckdb"]["answer_equal"] for q in ("q0", "q2", "q3"))
    assert res["q7"]["duckdb"] is None and res["q0"]["embedded"]["events_per_s"] > 0
    assert res["q7"]["reference_check"] == {"events": 3000, "equal": True, "output_elements": 300}
    assert "| q3 |" in table(doc)


def test_bench_peer_harness_checks_answers_and_reports_what_cannot_run(tmp_path, monkeypatch) -> None:
    """The peer harness (not a peer): a runner's wrong answer fails the benchmark, a runner that
    cannot express a query is reported with its reason, a missing environment is 'not installed'."""
    import sys
    from collections import Counter

    from sluice.experiments import bench as B

    runner = tmp_path / "fake_nexmark.py"
    runner.write_text(
        "import json, sys\n"
        "a = dict(zip(sys.argv[1::2], sys.argv[2::2]))\n"
        "doc = {'engine': 'fake', 'version': '0', 'query': a['--query']}\n"
        "if a['--query'] == 'q5':\n    doc['unsupported'] = 'per-instant answers'\n"
        "else:\n    doc.update(seconds=0.5, rows=[[1, 2]] if a['--query'] == 'q0' else [[9, 9]])\n"
        "open(a['--out'], 'w').write(json.dumps(doc))\n"
    )
    monkeypatch.setattr(B, "PEER_DIR", tmp_path)
    monkeypatch.setattr(B, "peer_python", lambda peer: Path(sys.executable))
    expected = Counter([(1, 2)])
    assert B.run_peer("fake", "q0", tmp_path, expected)["status"] == "ok"
    with pytest.raises(AssertionError, match="differs"):
        B.run_peer("fake", "q1", tmp_path, expected)
    assert B.run_peer("fake", "q5", tmp_path, None) == {
        "status": "cannot express",
        "why": "per-instant answers",
        "version": "0",
    }
    monkeypatch.setattr(B, "peer_python", lambda peer: tmp_path / "no-such-venv" / "python")
    assert B.run_peer("fake", "q0", tmp_path, expected)["status"] == "not installed"


@pytest.mark.spark
def test_bench_spark_column_equals_the_embedded_engine(spark, tmp_path) -> None:
    from sluice.experiments.bench import bench

    doc = bench(["q2", "q5"], events=2000, batch=500, out=tmp_path / "nx.json", engines=("embedded", "spark"), check=0)
    for q in ("q2", "q5"):
        s = doc["results"][q]["spark"]
        assert s["answer_equal"] and s["events_per_s"] > 0, q
    assert "native" in doc["results"]["q2"]["spark"]["partitioning"]


def test_events_without_extras_differ_only_in_extra() -> None:
    """``extra`` is each event's last draw from its own Random(n): leaving it out changes nothing else."""
    import dataclasses

    full = list(NexmarkGenerator(rate=10_000).events(2000))
    lean = list(NexmarkGenerator(rate=10_000, extras=False).events(2000))
    assert any(e.extra for e in full) and not any(e.extra for e in lean)
    assert [dataclasses.replace(e, extra="") for e in full] == lean
