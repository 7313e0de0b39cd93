"""A memory limit per key on Spark (issue #13 item 1, design 021 "On Spark"): each processor key's
engine holds its queues and synopses within ``key_memory_limit`` by the embedded engine's own
sampling and shedding at its input; what every key dropped comes back to the driver, which reports
it per query (``approximation``, ``statistics()``) — counted exactly, never silently.
"""

from __future__ import annotations

import random
from collections import Counter

import pytest
from sluice.approx.limits import QueryLimits
from sluice.backends import Sluice
from sluice.backends.embedded import EmbeddedEngine
from sluice.backends.spark.engine import SparkEngine
from sluice.errors import SluiceError
from sluice.reference.compare import diff_outputs

pytestmark = pytest.mark.spark

DDL = "register stream A (K integer, V integer); register stream B (K integer, W integer)"
JOIN = "Istream(select * from A [Range 40], B [Range 40] where A.K = B.K)"


def _feed(n: int = 3000, seed: int = 3) -> tuple[dict[str, list[tuple[int, int, int]]], int]:
    rnd = random.Random(seed)
    rows: dict[str, list[tuple[int, int, int]]] = {"A": [], "B": []}
    t = 0
    for i in range(n):  # (every element its own value: an Istream of the join nets out no equal tuples)
        t += rnd.choice([0, 1])
        rows[rnd.choice("AB")].append((t, rnd.randint(1, 3), i))
    return rows, t


def _run(eng, rows, t) -> None:
    eng.push("A", rows["A"])
    eng.push("B", rows["B"])
    eng.close(t + 1)
    eng.run()


def _exact(queries: dict[str, str], rows, t) -> dict[str, list]:
    emb = EmbeddedEngine()
    emb.execute(DDL)
    qs = {n: emb.register_query(text, name=n) for n, text in queries.items()}
    _run(emb, rows, t)
    return {n: q.results() for n, q in qs.items()}


def _joined(spark, tmp_path, limit: str):
    """The window join on Spark under ``limit`` per key, fed and run to the end."""
    rows, t = _feed()
    eng = SparkEngine(spark=spark, workdir=tmp_path, key_memory_limit=limit)
    eng.execute(DDL)
    q = eng.register_query(JOIN, name="j")
    _run(eng, rows, t)
    return eng, q, rows, t


def test_a_key_memory_limit_that_suffices_drops_nothing_and_counts_every_element(spark, tmp_path) -> None:
    eng, q, rows, t = _joined(spark, tmp_path, "64MB")
    assert not diff_outputs(_exact({"j": JOIN}, rows, t)["j"], q.results())
    st = eng.statistics()
    assert st["key_memory_limit"] == 64_000_000
    mine = st["queries"]["j"]
    by = {s.name: s for s in mine["shedding"]}
    assert {n: (s.offered, s.kept, s.dropped) for n, s in by.items()} == {
        "a": (len(rows["A"]), len(rows["A"]), 0),
        "b": (len(rows["B"]), len(rows["B"]), 0),
    }
    assert 0 < mine["peak_key_memory"] < 64_000_000 and mine["keys"] >= 1
    assert q.approximation.exact and q.approximation.describe() == "exact"
    assert not eng.rejected()  # the keys' reports are not rejections
    eng.stop()


def test_below_what_a_key_needs_memory_stays_under_it_and_every_drop_is_counted(spark, tmp_path) -> None:
    eng, q, rows, t = _joined(spark, tmp_path, "30KB")
    exact = _exact({"j": JOIN}, rows, t)["j"]
    got = q.results()
    # dropped at a key's input, before any window: the join of what was kept, a sub-multiset of
    # the exact answer (an Istream of a window join: each output element is a pair of kept inputs)
    extra = Counter((e.ts, e.sign, e.row) for e in got) - Counter((e.ts, e.sign, e.row) for e in exact)
    assert not extra and 0 < len(got) < len(exact)
    mine = eng.statistics()["queries"]["j"]
    # as each key's manager measured it, at every admission and when each run starts and ends; within runs,
    # after every step, more (a join's output waiting for the next operator: design 021, "Memory within a run")
    assert mine["peak_key_memory"] <= 30_000 and mine["peak_key_memory"] <= mine["peak_key_memory_in_runs"]
    by = {s.name: s for s in mine["shedding"]}
    assert by["a"].offered == len(rows["A"]) and by["b"].offered == len(rows["B"])
    assert all(s.kept + s.sampled_out + s.shed == s.offered for s in by.values())
    a = q.approximation
    assert a.dropped == sum(s.dropped for s in by.values()) > 0 and not a.exact
    assert a.precision is not None and a.precision.fp == 0.0
    # the reported recall (1 − FN, from the kept fractions summed over keys) against the measured one
    assert abs((1 - a.precision.fn) - len(got) / len(exact)) < 0.05, (a.describe(), len(got), len(exact))
    assert "elements dropped" in a.describe()
    assert any("load shedding begins" in e for e in mine["approx_events"]), mine["approx_events"]
    assert not eng.rejected()
    eng.stop()


def test_weights_and_exact_only_queries_hold_in_a_processor_shared_by_several_queries(spark, tmp_path) -> None:
    """Queries joining the same streams run in one processor per key (design 020); each keeps its
    weight and least precision there: an exact-only query (``PRECISION 1`` in CQL) locks the
    streams it reads, so nothing of them is dropped and both answers are exact, while the key
    reports that it held more than the limit because of it.
    """
    rows, t = _feed(2000, seed=5)
    other = "select A.V, B.W from A [Range 20], B [Range 20] where A.K = B.K and A.V > 1000"
    eng = SparkEngine(spark=spark, workdir=tmp_path, key_memory_limit="10KB")
    eng.execute(DDL)
    eng.execute(f"REGISTER QUERY strict WEIGHT 2 PRECISION 1 AS {JOIN}")
    loose = eng.register_query(other, name="loose", weight=0.5)
    _run(eng, rows, t)
    exact = _exact({"strict": JOIN, "loose": other}, rows, t)
    assert set(eng.queries["strict"].group) == {"strict", "loose"}  # one processor per key serves both
    for name in ("strict", "loose"):
        assert not diff_outputs(exact[name], eng.queries[name].results()), name
    st = eng.statistics()["queries"]
    assert all(s.dropped == 0 for s in st["strict"]["shedding"])
    assert st["strict"]["peak_key_memory"] > 10_000
    assert any("over-limit" in e for e in st["strict"]["approx_events"]), st["strict"]["approx_events"]
    assert eng.queries["strict"].approximation.limits.min_precision == 1.0
    assert loose.approximation.limits.weight == 0.5 and loose.approximation.exact
    eng.stop()


def test_the_limit_is_checked_and_each_backend_names_its_own() -> None:
    with pytest.raises(SluiceError, match="key_memory_limit"):
        SparkEngine(memory_limit="64MB")
    with pytest.raises(SluiceError, match="memory_limit"):
        SparkEngine(key_memory_limit="lots")
    with pytest.raises(SluiceError, match="embedded engine holds one limit"):
        Sluice("embedded", key_memory_limit="4MB")


def test_a_window_a_query_lets_shrink_shrinks_per_key_and_is_reported(spark, tmp_path) -> None:
    rows, t = _feed()
    eng = SparkEngine(spark=spark, workdir=tmp_path, key_memory_limit="2KB")
    eng.execute(DDL)
    q = eng.register_query("select * from A [Range 200 At Least 20] where V > 0", name="w")
    _run(eng, rows, t)
    a = q.approximation
    assert list(a.windows) == ["[Range 200 ticks At Least 20 ticks] over a"], a.describe()
    size, held = a.windows["[Range 200 ticks At Least 20 ticks] over a"]
    assert 20 <= size < 200 and 0 < held < 1
    assert a.precision is not None and a.precision.fn >= 1 - held - 1e-9  # (the window's loss at least)
    events = eng.statistics()["queries"]["w"]["approx_events"]
    assert any(": compress: " in e and "200→" in e for e in events), events
    eng.stop()


def test_sluice_run_takes_a_key_memory_limit_on_spark(spark, tmp_path, capsys) -> None:
    from sluice.cli import main

    (tmp_path / "q.cql").write_text("register stream S (K integer, V integer);\nselect * from S [Range 2];\n")
    (tmp_path / "s.csv").write_text("ts,K,V\n1,1,10\n2,2,20\n2,1,5\n4,1,7\n")
    args = ["run", str(tmp_path / "q.cql"), "--source", f"S={tmp_path / 's.csv'}", "--until", "6"]
    assert main([*args, "--key-memory-limit", "1MB"]) == 1  # the embedded engine names its own limit
    assert "holds one limit for all its state: --memory-limit" in capsys.readouterr().err
    assert main([*args, "--backend", "spark", "--master", "local[2]", "--key-memory-limit", "1MB"]) == 0
    err = capsys.readouterr().err
    assert "q1: key memory limit 1000000 B: peak" in err and "0 stream elements dropped; exact" in err, err


def test_a_joins_precision_weighs_each_keys_recall_by_the_output_it_stands_for() -> None:
    """A join split by key that samples a hot key and keeps the cold ones: the answer's recall is
    the keys' recalls weighed by the exact output each stands for, not the product of the kept
    fractions summed over keys (a review's case: one hot key, 100 A and 100 B at 10%; a hundred
    cold keys of one A and one B, all kept).
    """
    from sluice.backends.spark.budget import report, tally
    from sluice.catalog import Catalog
    from sluice.plan import bind_query

    cat = Catalog()
    cat.register_stream("A", [("K", "integer"), ("V", "integer")])
    cat.register_stream("B", [("K", "integer"), ("W", "integer")])
    plan = bind_query(cat, "select * from A [Range 10], B [Range 10] where A.K = B.K").plan
    hot_fn = 1 - 0.1 * 0.1
    notes = [
        report(
            "hot",
            1,
            {"a": (100, 10, 90, 0), "b": (100, 10, 90, 0)},
            {"a": 0.1, "b": 0.1},
            900,
            precision={"q": (0.0, hot_fn, None)},
            out={"q": 100},
        ),  # 10 × 10 of the exact 100 × 100
        report(
            "cold",
            1,
            {"a": (100, 100, 0, 0), "b": (100, 100, 0, 0)},
            {"a": 1.0, "b": 1.0},
            100,
            precision={"q": (0.0, 0.0, None)},
            out={"q": 100},
        ),  # a hundred keys' one pair each
    ]
    a = tally(notes).approximation(plan, QueryLimits(), "q")
    exact, got = 100 * 100 + 100, 100 + 100
    assert a.precision is not None and a.precision.fn == pytest.approx(1 - got / exact)  # 0.980
    assert a.kept == {"a": 0.55, "b": 0.55}  # (the product of these, 0.3025, would say FN 0.6975)
    # reports read in any order (file sinks): a key's latest figures are those of its highest seq
    later = report("hot", 2, {}, {"a": 0.5, "b": 0.5}, 900, precision={"q": (0.0, 0.75, None)}, out={})
    assert tally([later, *notes]).streams["a"].rate == 0.5 == tally([*notes, later]).streams["a"].rate


def test_a_distinct_per_key_becomes_a_bloom_filter_and_the_driver_sums_what_it_lost(spark, tmp_path) -> None:
    """STREAM §5.2.1's Bloom filter for duplicate elimination, per key (design 021 "Bloom
    filters"): each key's DISTINCT over an input that only inserts is compressed when it passes the
    key's limit; the answer is a subset of the exact one and the recall the driver reports from
    the keys' filters is the measured one.
    """
    ddl = "register stream S (A integer, C integer)"
    query = "select distinct A, C from S"
    rnd = random.Random(7)
    rows = [(i, rnd.randrange(30_000), rnd.randrange(3)) for i in range(40_000)]
    emb = EmbeddedEngine()
    emb.execute(ddl)
    want = emb.register_query(query, name="d")
    eng = SparkEngine(spark=spark, workdir=tmp_path, key_memory_limit="60KB")
    eng.execute(ddl)
    q = eng.register_query(query, name="d")
    for e in (emb, eng):
        for i in range(0, len(rows), 10_000):
            e.push("S", rows[i : i + 10_000])
        e.close(len(rows))
        e.run()
    exact = {e.row for e in want.results()}
    got = [e.row for e in q.results()]
    assert len(set(got)) == len(got) and set(got) <= exact and len(got) < len(exact)
    a = q.approximation
    ((d, bloom),) = a.synopses.items()
    assert d == "DISTINCT over s" and bloom.keys >= 1 and bloom.values == len(got)
    assert a.precision is not None and a.precision.fp == 0.0 and a.dropped == 0
    assert abs((1 - a.precision.fn) - len(got) / len(exact)) < 0.02, (a.describe(), len(got), len(exact))
    mine = eng.statistics()["queries"]["d"]
    assert mine["peak_key_memory"] <= 60_000
    assert any("Bloom filter" in e for e in mine["approx_events"])
    eng.stop()


def _drops(got: list[tuple[str, object, str]]) -> dict[str, Counter]:
    """What ``on_shed`` was handed, per stream (its name as registered, as on the embedded engine):
    (ts, K, V) of each element, counted.
    """
    out: dict[str, Counter] = {"a": Counter(), "b": Counter()}
    for stream, batch, reason in got:
        assert reason in ("sampled", "shed") and set(batch.column(1).to_pylist()) == {1}
        out[stream.lower()].update(zip(*(batch.column(i).to_pylist() for i in (0, 2, 3)), strict=True))
    return out


def test_on_shed_hands_the_driver_every_element_a_key_dropped(spark, tmp_path) -> None:
    """As ``EmbeddedEngine.on_shed``: each batch a key's limit dropped, once, on the driver — and
    the answer is the exact answer over the elements not handed over (the oracle: the embedded
    engine without a limit, fed what was kept).  A failing callback is reported, never raised.
    """
    rows, t = _feed()
    got: list[tuple[str, object, str]] = []
    eng = SparkEngine(spark=spark, workdir=tmp_path, key_memory_limit="30KB")
    eng.execute(DDL)
    eng.on_shed(lambda s, b, r: got.append((s, b, r)))  # (before the query: any order works)
    eng.on_shed(lambda s, b, r: 1 / 0)
    q = eng.register_query(JOIN, name="j")
    _run(eng, rows, t)
    drops = _drops(got)
    mine = eng.statistics()["queries"]["j"]
    by = {s.name: s for s in mine["shedding"]}
    assert {n: sum(c.values()) for n, c in drops.items()} == {n: by[n].dropped for n in ("a", "b")}
    assert by["a"].dropped + by["b"].dropped > 0
    kept = {}
    for s in ("A", "B"):
        left = Counter(drops[s.lower()])
        kept[s] = []
        for r in rows[s]:
            if left[r] > 0:
                left[r] -= 1
            else:
                kept[s].append(r)
        assert not +left  # every element handed over was pushed
    assert not diff_outputs(_exact({"j": JOIN}, kept, t)["j"], q.results())
    assert any("on_shed callback" in e and "ZeroDivisionError" in e for e in mine["approx_events"])
    assert not eng.rejected()  # the shipped elements are not rejections
    eng.stop()


def test_on_shed_registered_while_running_starts_shipping_from_the_checkpoint(spark, tmp_path) -> None:
    """A file sink's query already running when ``on_shed`` is called starts again from its
    checkpoint and ships what it drops from then on, each batch handed over once however often
    the driver reads the files — also by a new engine on the same workdir — and whole: columns
    the query does not read included (found in review: they came as NULL).
    """
    ddl = "register stream A (K integer, V integer, X integer); register stream B (K integer, W integer)"
    keys_only = "Istream(select A.K, A.V, B.W from A [Range 40], B [Range 40] where A.K = B.K)"  # (X unread)
    rows, t = _feed()
    rows["A"] = [(*r, 7 * r[2]) for r in rows["A"]]
    half = {s: [r for r in rows[s] if r[0] <= t // 2] for s in rows}
    rest = {s: [r for r in rows[s] if r[0] > t // 2] for s in rows}
    eng = SparkEngine(spark=spark, workdir=tmp_path, key_memory_limit="8KB")
    eng.execute(ddl)
    q = eng.register_query(keys_only, name="j", sink="json", path=tmp_path / "out")
    eng.push("A", half["A"])
    eng.push("B", half["B"])
    eng.heartbeat(t // 2)
    eng.run()
    before = sum(s.dropped for s in eng.statistics()["queries"]["j"]["shedding"])
    assert before > 0  # (dropped before any callback: not handed over, as on the embedded engine)
    got: list[tuple[str, object, str]] = []
    eng.on_shed(lambda s, b, r: got.append((s, b, r)))
    assert q.stream is not None and q.processor.shipper is not None  # (started again at once, shipping)
    eng.push("A", rest["A"])
    eng.push("B", rest["B"])
    eng.close(t + 1)
    eng.run()  # (nothing new: nothing handed over twice)
    after = sum(s.dropped for s in eng.statistics()["queries"]["j"]["shedding"])
    drops: dict[str, Counter] = {"a": Counter(), "b": Counter()}
    for stream, batch, _ in got:  # each one pushed, every column as pushed
        cols = [0, *range(2, batch.num_columns)]
        drops[stream.lower()].update(zip(*(batch.column(i).to_pylist() for i in cols), strict=True))
    assert sum(sum(c.values()) for c in drops.values()) == after - before > 0
    assert not drops["a"] - Counter(rest["A"]) and not drops["b"] - Counter(rest["B"])
    emb = EmbeddedEngine()
    emb.execute(ddl)
    exact = emb.register_query(keys_only)
    _run(emb, rows, t)
    assert not Counter((e.ts, e.sign, e.row) for e in q.results()) - Counter(
        (e.ts, e.sign, e.row) for e in exact.results()
    )
    eng.stop()
    again = SparkEngine(spark=spark, workdir=tmp_path, key_memory_limit="8KB")
    again.execute(ddl)
    again.register_query(keys_only, name="j", sink="json", path=tmp_path / "out")
    more: list[tuple[str, object, str]] = []
    again.on_shed(lambda s, b, r: more.append((s, b, r)))
    again.run()
    assert not more  # (the same files, read by a new engine: what was handed over is saved)
    again.stop()


def test_latency_targets_on_spark_are_measured_and_reported_as_on_the_embedded_engine(spark, tmp_path) -> None:
    """``max_latency`` on Spark (refused before): the same calls as on the embedded engine, the
    latency measured from the push that reached an answer's instant to the run that delivered it
    — a target no micro-batch can meet is missed and an event says so (nothing switched: a
    micro-batch's answers leave together), a generous one is met — in ``statistics()``,
    ``explain`` and ``Query.latency``; in CQL too; and the answers are the embedded engine's.
    """
    rows, t = _feed(600)
    answers = {}
    for backend in ("embedded", "spark"):
        eng = EmbeddedEngine() if backend == "embedded" else SparkEngine(spark=spark, workdir=tmp_path)
        eng.execute(DDL)
        tight = eng.register_query(
            "select K, count(*) from A [Range 20] group by K", name="tight", max_latency="0.001ms"
        )
        (easy,) = eng.execute("REGISTER QUERY easy LATENCY 1 hours AS " + JOIN)
        # a join of the same streams on the same key: on Spark in one processor with ``easy``; no
        # output, so no latency (measured on its own rows, not its group's: a review)
        empty = eng.register_query(
            JOIN.replace("A.K = B.K", "A.K = B.K and A.V < 0"), name="empty", max_latency="0.001ms"
        )
        if backend == "spark":  # a file sink: the wait of the first element pushed since the run before
            on_file = eng.register_query(
                "select * from A where V >= 0", name="file", sink="parquet", max_latency="0.001ms"
            )
            eng.execute("register stream C (K integer)")
            eng.attach_directory("C", tmp_path / "c", "csv")
            with pytest.raises(SluiceError, match="C is read by Spark itself"):
                eng.register_query("select * from C", name="attached", max_latency="1s")
        for lo in range(0, len(rows["A"]), 200):  # (three runs: a latency measured at each)
            eng.push("A", rows["A"][lo : lo + 200])
            eng.push("B", rows["B"][lo : lo + 200])
            eng.run()
        eng.close(t + 1)
        stats = eng.statistics()
        latency = dict(stats["latency"] if backend == "spark" else stats.latency)
        assert latency["tight"].target == 1e-6 and latency["tight"].count >= 2, backend
        assert latency["tight"].missed == latency["tight"].count, backend
        assert latency["easy"].target == 3600 and latency["easy"].count >= 2 and not latency["easy"].missed
        assert latency["empty"].count == 0 and not empty.results(), backend  # type: ignore[union-attr]
        if backend == "spark":
            assert set(eng.queries["empty"].group) == {"easy", "empty"}  # (one processor: grouped at start)
            assert latency["file"].count >= 2 and latency["file"].missed == latency["file"].count
            assert on_file.results()  # type: ignore[union-attr]
        assert tight.latency.missed and not easy.latency.missed  # type: ignore[union-attr]
        assert "target 0.001 ms missed" in eng.explain(tight.name)  # type: ignore[union-attr]
        assert "target 3.6e+06 ms met" in eng.explain(easy.name)  # type: ignore[union-attr]
        events = stats["latency_events"] if backend == "spark" else stats.approx_events
        late = [e.detail for e in events if e.action == "late" or "latency over target" in e.detail]
        assert late and all("tight" in d and "easy" not in d for d in late), (backend, late)
        answers[backend] = {q.name: q.results() for q in (tight, easy)}  # type: ignore[union-attr]
    for name in ("tight", "easy"):
        assert answers["spark"][name] and not diff_outputs(answers["embedded"][name], answers["spark"][name])
    assert any("Spark: a micro-batch's answers leave together" in d for d in late)
