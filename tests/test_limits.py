"""Living within a memory limit (issue #13; STREAM §5, ``sluice.approx``, design 021).

The oracle for an approximated run is the reference evaluator on the elements the engine kept:
whatever was dropped (each drop handed to ``on_shed``), the answers are exact for the rest.
"""

from __future__ import annotations

import pickle
import random
from collections import Counter
from typing import Any

import pyarrow as pa
import pytest
from sluice.approx.allocate import Demand, allocate
from sluice.approx.limits import QueryLimits, parse_size
from sluice.approx.precision import estimate, horizons, unsafe_streams
from sluice.backends.embedded import EmbeddedEngine
from sluice.catalog import Catalog
from sluice.errors import SluiceError
from sluice.plan import bind_query
from sluice.reference import evaluate
from sluice.reference.compare import diff_outputs
from tests.test_timeline import formed_pairs

DDL = "REGISTER STREAM A (K integer, V integer); REGISTER STREAM B (K integer, V integer); REGISTER RELATION R (K integer)"


def _catalog() -> Catalog:
    cat = Catalog()
    cat.register_stream("A", [("K", "integer"), ("V", "integer")])
    cat.register_stream("B", [("K", "integer"), ("V", "integer")])
    cat.register_relation("R", [("K", "integer")])
    return cat


# -- what the user states --------------------------------------------------------------------
def test_sizes_and_query_limits_are_checked_with_messages() -> None:
    assert parse_size("64MB") == 64_000_000 and parse_size("2 KiB") == 2048 and parse_size(10) == 10
    for bad in ("lots", "-5MB", 0, "12 parsecs", True):
        with pytest.raises(SluiceError, match="memory_limit"):
            parse_size(bad)  # type: ignore[arg-type]
    with pytest.raises(SluiceError, match="min_precision"):
        QueryLimits(min_precision=1.5)
    with pytest.raises(SluiceError, match="weight"):
        QueryLimits(weight=-1)
    eng = EmbeddedEngine(memory_limit="1MB")
    eng.execute(DDL)
    with pytest.raises(SluiceError, match="min_precision"):
        eng.register_query("select * from A", min_precision=2)
    with pytest.raises(SluiceError, match="memory_limit"):
        EmbeddedEngine(memory_limit="much")


# -- where approximation is safe, and the precision it gives (§5.1.1, §5.3) --------------------
@pytest.mark.parametrize(
    ("query", "unsafe"),
    [
        ("select * from A [Range 10] where V > 1", {}),
        ("select * from A [Range 10], B [Now] where A.K = B.K", {}),
        ("select distinct K from A [Range 10]", {"a": "DISTINCT"}),
        ("select K, count(*) from A [Range 10] group by K", {"a": "aggregate"}),
        ("select K from A [Range 10] except select K from B [Range 10]", {"a": "DISTINCT", "b": "EXCEPT"}),
        ("select K from A [Range 10] except all select K from B [Range 10]", {"b": "EXCEPT"}),
        ("select * from A [Rows 5]", {"a": "Rows"}),
        ("select * from A [Range 10] where not exists (select * from B [Range 5] where B.K = A.K)", {"b": "subquery"}),
        ("select * from R, A [Range 3] where R.K = A.K", {}),
    ],
)
def test_the_papers_bad_cases_are_found(query: str, unsafe: dict[str, str]) -> None:
    found = unsafe_streams(bind_query(_catalog(), query).plan)
    assert set(found) == set(unsafe)
    for s, word in unsafe.items():
        assert word in found[s]


def test_precision_model_of_selections_joins_and_unsafe_plans() -> None:
    cat = _catalog()
    sel = bind_query(cat, "select * from A [Range 10] where V > 1").plan
    join = bind_query(cat, "select * from A [Range 10], B [Range 10] where A.K = B.K").plan
    agg = bind_query(cat, "select K, count(*) from A [Range 10] group by K").plan
    assert estimate(sel, {}).exact  # type: ignore[union-attr]
    p = estimate(sel, {"a": 0.8})
    assert p is not None and p.fp == 0 and p.fn == pytest.approx(0.2)
    p = estimate(join, {"a": 0.5, "b": 0.8})  # a pair needs both elements: 1 − 0.5·0.8
    assert p is not None and p.fp == 0 and p.fn == pytest.approx(0.6)
    assert estimate(agg, {"a": 0.5}) is None and estimate(agg, {"b": 0.5}).exact  # type: ignore[union-attr]
    assert horizons(join) == {"a": 11.0, "b": 11.0}
    assert horizons(bind_query(cat, "select * from A").plan) == {"a": float("inf")}


def test_the_allocator_favours_weight_and_keeps_least_precision() -> None:
    mem = {"a": 1000.0, "b": 1000.0}
    r = allocate(mem, {"a": 1.0, "b": 1.0}, 0.0, 1000.0, [Demand(4.0, ("a",)), Demand(1.0, ("b",))])
    assert r.feasible and r.rates["a"] > r.rates["b"] and r.projected <= 1000.0 * 1.001
    r = allocate(mem, {"a": 1.0, "b": 1.0}, 0.0, 1000.0, [Demand(4.0, ("a",)), Demand(1.0, ("b",), 0.6)])
    assert r.feasible and r.rates["b"] >= 0.6 * 0.999 and r.projected <= 1000.0 * 1.001
    r = allocate(mem, {"a": 1.0, "b": 1.0}, 0.0, 1000.0, [Demand(1.0, ("a",), 0.9), Demand(1.0, ("b",), 0.9)])
    assert not r.feasible  # 0.9 + 0.9 of 1000 B each do not fit in 1000 B: said, not hidden
    r = allocate(mem, {"a": 1.0, "b": 1.0}, 0.0, 5000.0, [Demand(1.0, ("a",)), Demand(1.0, ("b",))])
    assert r.rates == {"a": 1.0, "b": 1.0}  # fits: nothing approximated
    r = allocate(mem, {"a": 1.0, "b": 1.0}, 2000.0, 1000.0, [Demand(1.0, ("a",)), Demand(1.0, ("b",))])
    assert not r.feasible and r.rates == {"a": 0.01, "b": 0.01}  # fixed state over the target: the floor, said
    r = allocate(mem, {"a": 1.0, "b": 1.0}, 0.0, 1500.0, [Demand(1.0, ("a", "b"))], frozenset({"a"}))
    assert r.rates["a"] == 1.0 and r.rates["b"] == pytest.approx(0.5, abs=0.01)


# -- the engine under a limit ------------------------------------------------------------------
def _feed(
    n: int, seed: int, streams: tuple[str, ...] = ("A", "B"), keys: int = 20
) -> list[tuple[str, tuple[Any, ...]]]:
    rnd = random.Random(seed)
    return [(rnd.choice(streams), (t // 3, rnd.randrange(keys), rnd.randrange(100))) for t in range(n)]


def _run(
    queries: dict[str, tuple[str, dict[str, Any]]], feed: list[tuple[str, tuple[Any, ...]]], limit: Any, chunk: int = 60
) -> tuple[EmbeddedEngine, dict[str, Any], dict[str, Counter[tuple[Any, ...]]], int]:
    eng = EmbeddedEngine(memory_limit=limit, start=0)
    eng.execute(DDL)
    qs = {n: eng.register_query(q, n, **kw) for n, (q, kw) in queries.items()}
    dropped: dict[str, Counter[tuple[Any, ...]]] = {"A": Counter(), "B": Counter()}

    def gone(stream: str, b: pa.Table, reason: str) -> None:
        assert reason in ("sampled", "shed")
        for r in b.to_pylist():
            dropped[stream][(r["__ts"], r["c0"], r["c1"])] += 1

    eng.on_shed(gone)
    peak = 0
    for i in range(0, len(feed), chunk):
        part = feed[i : i + chunk]
        for s in ("A", "B"):
            rows = [r for name, r in part if name == s]
            if rows:
                eng.push(s, rows)
                peak = max(peak, eng.statistics().memory_bytes)
        eng.run()
        peak = max(peak, eng.statistics().memory_bytes)
    eng.close()
    return eng, qs, dropped, peak


def _kept(feed: list[tuple[str, tuple[Any, ...]]], dropped: dict[str, Counter[tuple[Any, ...]]]) -> dict[str, Any]:
    left = {s: Counter(c) for s, c in dropped.items()}
    out: dict[str, list[Any]] = {"A": [], "B": []}
    for s, r in feed:
        if left[s][r] > 0:
            left[s][r] -= 1
            continue
        out[s].append((r[0], r[1:]))
    assert all(not +c for c in left.values())  # every drop was of an element pushed
    return out


QUERIES = {
    "sel": ("select * from A [Range 400] where V < 50", {}),
    "join": ("select A.K, A.V, B.V from A [Range 300], B [Range 200] where A.K = B.K", {"weight": 3.0}),
    "agg": ("select K, count(*), sum(V) from B [Range 250] group by K", {}),
    "rstream": ("select rstream(*) from A [Now] where K < 3", {}),
}


def test_the_peak_counts_what_a_push_left_waiting_and_what_a_run_holds_between_steps() -> None:
    """``peak_memory`` is measured at admissions and when a run starts and ends: a push's elements
    waiting for the run count, even where the run leaves nothing held (a filter drops them all;
    measured only at admissions and after runs, this peak was 25 B).  ``peak_memory_in_runs`` is
    measured after every step of a run too: a join's 10,000 pairs waiting in its output queue
    for the next operator, which the peak between runs never sees.
    """
    eng = EmbeddedEngine(memory_limit="50MB", start=0)
    eng.execute(DDL)
    eng.register_query("select * from A where V > 1000", retain=0)
    eng.push("A", [(t, t % 7, t) for t in range(1000)])
    waiting = eng.registry.source("A").waiting()[1]
    eng.run()
    st = eng.statistics()
    assert waiting > 16_000 and st.peak_memory >= waiting and st.memory_bytes < 100  # (its admission checker)
    assert st.peak_memory_in_runs >= st.peak_memory

    eng = EmbeddedEngine(memory_limit="50MB", start=0)
    eng.execute(DDL)
    eng.register_query("Istream(select A.V, B.V from A [Range 1000], B [Range 1000] where A.K = B.K)", retain=0)
    for s in "AB":
        eng.push(s, [(t, 1, t) for t in range(100)])
        eng.run()
    eng.close()
    st = eng.statistics()
    assert st.peak_memory_in_runs >= 100 * 100 * 16 > st.peak_memory  # two integers a pair, at the least
    assert not st.shed


ONE_KEY_JOIN = "Istream(select A.V, B.V from A [Range 1000], B [Range 1000] where A.K = B.K)"


@pytest.mark.parametrize("scheduler", [None, "fifo", "chain", "path-capacity", "round-robin"])
def test_under_a_limit_a_join_reads_in_pieces_and_its_pairs_go_on_before_it_reads_more(scheduler) -> None:
    """100 elements of B meet A's 100 of one key: 10,000 pairs.  Under an ample limit the join's
    turn forms them all before anything reads them: 414,777 B held at once (257,961 B under
    path capacity, whose unit is the whole path).  Under 64 KB (the windows need 13 KB) the turn
    runs in pieces (``sluice.backends.embedded.pacing``), the operators below the join read its
    pairs whenever the engine is past the limit, and the shared join splits its queued pairing
    into units of about a piece's work: 68,400 B measured (109,129 B under path capacity) —
    lower, near the limit (design 021, "Steps in pieces").  Same answers, nothing dropped.
    """

    def run(limit: str | int) -> tuple[Any, list[Any], Any]:
        eng = EmbeddedEngine(memory_limit=limit, start=0, **({"scheduler": scheduler} if scheduler else {}))
        eng.execute(DDL)
        q = eng.register_query(ONE_KEY_JOIN)
        for s in "AB":
            eng.push(s, [(t, 1, t) for t in range(100)])
            eng.run()
        eng.close()
        return eng.statistics(), q.results(), eng.pacer

    ample, want, _ = run("1GB")
    st, got, pacer = run(64_000)
    assert not diff_outputs(want, got) and len(got) == 10_000
    assert st.shed == 0 and st.peak_memory <= 64_000
    assert pacer is not None and pacer.pieces > 1 and pacer.drains > 0
    assert st.peak_memory_in_runs < ample.peak_memory_in_runs


def test_a_subscriber_that_runs_the_engine_while_a_step_is_paced_does_not_nest_without_end() -> None:
    """An output run within a paced step (drained, or by the loop) calls its subscriber, which may
    run the engine: that nested run takes whole turns (paced too, every delivery nested another
    run — to Python's recursion limit, failing the query, in a review's case).  Same answer as
    whole turns."""
    depth, most = [0], [0]

    def answer(paced: bool) -> list[Any]:
        eng = EmbeddedEngine(memory_limit=400_000, start=0)
        assert eng.pacer is not None
        eng.pacer.enabled = paced
        eng.execute(DDL)
        q = eng.register_query(ONE_KEY_JOIN)

        def nested(_: Any) -> None:
            depth[0] += 1
            most[0] = max(most[0], depth[0])
            try:
                eng.run()
            finally:
                depth[0] -= 1

        q.subscribe(nested)
        for s in "AB":
            eng.push(s, [(t, t % 20, t) for t in range(2000)])
            eng.run()
        eng.close()
        assert q.error is None and not eng.statistics().shed
        return q.results()

    whole = answer(False)
    assert not diff_outputs(whole, answer(True)) and len(whole) > 100_000
    assert most[0] < 10  # (5 measured; paced nested runs, 15 here and 99 with a RecursionError elsewhere)


def test_an_engine_restored_under_a_limit_measures_and_sheds_as_the_one_it_was_saved_from(tmp_path: Any) -> None:
    """The memory meter keeps maps keyed by operators' ids; restored, they named no operator and
    were never rebuilt: the restored engine measured 2,233,752 B where it held 58,650 B and
    attributed no join state to a stream, so it shed 66 elements where the engine it was saved
    from shed 158 (a review, session 41).  Now the two shed, measure and answer alike."""
    rnd, t, feed = random.Random(1), 0, []
    for _ in range(12):
        rows: dict[str, list[tuple[int, int, int]]] = {"A": [], "B": []}
        for _ in range(rnd.randrange(50, 600)):
            t += rnd.choice([0, 0, 0, 1])
            rows[rnd.choice("AB")].append((t, rnd.randrange(6), rnd.randrange(50)))
        feed.append(rows)

    def step(e: EmbeddedEngine, rows: dict[str, list[tuple[int, int, int]]]) -> None:
        for s, r in rows.items():
            e.push(s, r)
        e.run()

    eng = EmbeddedEngine(memory_limit=60_000, start=0, scheduler="chain")
    eng.execute(DDL)
    eng.register_query("Istream(select A.K, A.V, B.V from A [Range 200], B [Range 100] where A.K = B.K)", "q")
    for rows in feed[:6]:
        step(eng, rows)
    eng.checkpoint(tmp_path / "ck")
    back = EmbeddedEngine.restore(tmp_path / "ck")
    for e in (eng, back):
        for rows in feed[6:]:
            step(e, rows)
        e.close()
    a, b = eng.statistics(), back.statistics()
    assert a.shed == b.shed > 0 and a.memory_bytes == b.memory_bytes
    assert not diff_outputs(eng.queries["q"].results(), back.queries["q"].results())


def test_the_peak_within_runs_is_a_keys_own_state() -> None:
    """A Spark processor restores each key's state into one engine: the peak within runs goes
    with it, as the peak does (left out, a key of two elements reported another key's 414,777 B)."""
    eng = EmbeddedEngine(memory_limit="50MB", start=0)
    eng.execute(DDL)
    eng.register_query("Istream(select A.V, B.V from A [Range 1000], B [Range 1000] where A.K = B.K)", retain=0)
    fresh = eng.snapshot_state()
    for s in "AB":
        eng.push(s, [(t, 1, t) for t in range(100)])
        eng.run()
    assert eng.statistics().peak_memory_in_runs >= 160_000
    eng.restore_state(fresh)
    st = eng.statistics()
    assert st.peak_memory_in_runs == st.peak_memory == 0


def test_under_a_generous_limit_nothing_is_dropped_and_answers_are_exact() -> None:
    feed = _feed(1500, 1)
    eng, qs, dropped, _ = _run(QUERIES, feed, "500MB")
    st = eng.statistics()
    assert st.shed == 0 and not st.approx_events and st.memory_limit == 500_000_000
    streams = _kept(feed, dropped)
    for name, q in qs.items():
        assert q.approximation.exact and q.approximation.describe() == "exact"
        want = evaluate(bind_query(eng.catalog, QUERIES[name][0]), streams, {}, start=0, until=feed[-1][1][0])
        assert not diff_outputs(want, q.results()), name


def test_under_a_tight_limit_memory_stays_under_it_and_answers_are_exact_for_what_was_kept() -> None:
    feed = _feed(12000, 2)
    exact_eng, _, _, exact_peak = _run(QUERIES, feed, "1GB")
    limit = exact_peak // 3
    eng, qs, dropped, peak = _run(QUERIES, feed, limit)
    st = eng.statistics()
    assert peak <= limit, (peak, limit)  # measured after every push and every run
    assert peak <= st.peak_memory <= limit and st.peak_memory <= st.peak_memory_in_runs  # (within: design 021)
    # conservation, per stream: offered = kept + sampled out + shed, and every drop was handed over
    for s in st.shedding:
        assert s.offered == s.kept + s.sampled_out + s.shed
        assert sum(dropped[s.name].values()) == s.dropped
    assert st.shed > 0 and sum(s.offered for s in st.shedding) == len(feed)
    # the answers are the oracle's on what was kept, for every query (safe or not)
    streams = _kept(feed, dropped)
    for name, q in qs.items():
        want = evaluate(bind_query(eng.catalog, QUERIES[name][0]), streams, {}, start=0, until=feed[-1][1][0])
        assert not diff_outputs(want, q.results()), name
        assert not q.approximation.exact
    # the aggregate reads B unsafely: B is never sampled, only shed when the limit is reached
    shed_b = next(s for s in st.shedding if s.name == "B")
    assert shed_b.sampled_out == 0 and shed_b.rate == 1.0
    agg = qs["agg"].approximation
    assert agg.precision is None and "aggregate" in agg.describe()
    assert qs["sel"].approximation.precision is not None
    assert "approximation: approximate" in eng.explain("sel")
    del exact_eng


def _states(out: list[Any], until: int) -> tuple[Counter[tuple[Any, ...]], float, list[tuple[int, Counter[Any]]]]:
    """A relation's delta stream → (final contents, time-integrated size, contents per instant)."""
    cur: Counter[tuple[Any, ...]] = Counter()
    area = 0.0
    per: list[tuple[int, Counter[Any]]] = []
    for e in out:
        if per and per[-1][0] != e.ts:
            per.append((e.ts, Counter()))
        elif not per:
            per.append((e.ts, Counter()))
        area += (1 if e.sign == "+" else -1) * (until + 1 - e.ts)
        cur[e.row] += 1 if e.sign == "+" else -1
        per[-1] = (e.ts, +cur)
    return cur, area, per


def _measured(want: list[Any], got: list[Any], until: int) -> tuple[float, float]:
    """(FP, FN) of a relation's answer over time: the approximate relation is checked to be a
    sub-multiset of the exact one at every instant either changes; FN is the time-integrated
    fraction of the exact relation missing.
    """
    _, exact_area, exact_per = _states(want, until)
    _, got_area, got_per = _states(got, until)
    ex = dict(exact_per)
    ex_times = sorted(ex)
    extra = 0
    import bisect

    for t, c in got_per:  # the exact relation as of t: its last change at or before t
        i = bisect.bisect_right(ex_times, t) - 1
        extra += sum((c - (ex[ex_times[i]] if i >= 0 else Counter())).values())
    return extra / max(1, sum(sum(c.values()) for _, c in got_per)), 1 - got_area / exact_area


def test_reported_precision_matches_the_precision_measured_against_the_oracle() -> None:
    queries = {
        "sel": ("select * from A [Range 400] where V < 50", {}),
        "join": ("select A.K, B.V from A [Range 300], B [Range 200] where A.K = B.K and A.V < 20", {}),
    }
    feed = _feed(6000, 3)
    until = feed[-1][1][0]
    _, _, _, exact_peak = _run(queries, feed, "1GB")
    eng, qs, _, _ = _run(queries, feed, exact_peak // 2)
    everything = {s: [(r[0], r[1:]) for n, r in feed if n == s] for s in ("A", "B")}
    for name, q in qs.items():
        a = q.approximation
        assert a.precision is not None and a.precision.fp == 0 and a.precision.fn > 0.05
        want = evaluate(bind_query(eng.catalog, queries[name][0]), everything, {}, start=0, until=until)
        fp, fn = _measured(want, q.results(), until)
        # the stated bound: no false positives, and the model's FN (each stream sampled
        # independently; a join's pair kept when both of its elements are) within 0.1 of the
        # measured, time-integrated miss rate of the relation
        assert fp == 0, (name, fp)
        assert abs(fn - a.precision.fn) <= 0.1, (name, fn, a.describe())


def test_weights_buy_precision_and_exact_only_queries_are_never_approximated() -> None:
    queries = {
        "heavy": ("select * from A [Range 600] where V < 90", {"weight": 10.0}),
        "light": ("select * from B [Range 600] where V < 90", {"weight": 1.0}),
    }
    feed = _feed(16000, 4)
    _, _, _, exact_peak = _run(queries, feed, "1GB")
    eng, qs, _, _ = _run(queries, feed, exact_peak // 2)
    rates = {s.name: s.rate for s in eng.statistics().shedding}
    kept = {n: q.approximation.kept for n, q in qs.items()}
    assert rates["A"] > rates["B"] and kept["heavy"]["a"] > kept["light"]["b"], (rates, kept)
    # exact only: its stream is never dropped — the other absorbs what it can, and the manager
    # says when the limit is exceeded because of it
    queries["light"] = (queries["light"][0], {"min_precision": 1.0})
    eng, qs, dropped, _ = _run(queries, feed, exact_peak // 4)
    assert qs["light"].approximation.exact and not dropped["B"] and dropped["A"]
    events = eng.statistics().approx_events
    assert any(e.action == "over-limit" and "exact-only" in e.detail for e in events)


def test_relations_are_never_dropped_and_a_limited_engine_checkpoints(tmp_path: Any) -> None:
    eng = EmbeddedEngine(memory_limit="20KB", start=0)
    eng.execute(DDL)
    q = eng.register_query("select A.K, A.V from R, A [Range 50] where R.K = A.K", "q")
    eng.push("R", [(0, "+", k) for k in range(50)])
    for t in range(0, 400, 4):
        eng.push("A", [(t + i // 40, i % 50, i) for i in range(160)])
        eng.run()
    st = eng.statistics()
    assert st.shed > 0 and all(s.name != "R" for s in st.shedding)
    assert eng.sources["r"].source_statistics().accepted == 50
    eng.checkpoint(tmp_path / "ck")
    back = EmbeddedEngine.restore(tmp_path / "ck")
    assert back.limits is not None and back.limits.streams["a"].offered == st.shedding[0].offered
    back.push("A", [(400, 1, 1)])
    back.close()
    assert back.queries["q"].approximation.dropped >= q.approximation.dropped


def test_a_state_snapshot_carries_the_limits_rates_counters_and_random_state() -> None:
    """``snapshot_state`` / ``restore_state`` (the Spark processor's per key, design 021 "On
    Spark"): an engine restored from a snapshot holds the manager's rates, counters, shares and
    random state as they were, counts on from them, and answers exactly for what it kept.
    (Its drops need not be the original's: a restored batch's bytes are its own where the
    original's were a slice of a larger buffer, so memory measures a little differently.)
    """
    feed = _feed(3000, 4)
    dropped: dict[str, Counter[tuple[Any, ...]]] = {"A": Counter(), "B": Counter()}

    def gone(stream: str, b: pa.Table, reason: str) -> None:
        for r in b.to_pylist():
            dropped[stream][(r["__ts"], r["c0"], r["c1"])] += 1

    def engine() -> EmbeddedEngine:
        eng = EmbeddedEngine(memory_limit=6000, start=0)
        eng.execute(DDL)
        eng.register_query(QUERIES["join"][0], "join")
        eng.on_shed(gone)
        return eng

    def push(eng: EmbeddedEngine, part: list[tuple[str, tuple[Any, ...]]]) -> None:
        for i in range(0, len(part), 60):
            for s in ("A", "B"):
                rows = [r for name, r in part[i : i + 60] if name == s]
                if rows:
                    eng.push(s, rows)
            eng.run()

    first = engine()
    push(first, feed[:1500])
    assert first.limits is not None and first.limits.streams["a"].dropped > 0  # the limit was reached
    snap = pickle.loads(pickle.dumps(first.snapshot_state()))
    second = engine()
    second.restore_state(snap)
    assert second.limits is not None
    assert second.limits.streams == first.limits.streams and second.limits.peak == first.limits.peak
    assert second.limits.rng.random() == first.limits.rng.random()  # the same draws from here
    assert second.limits._fair == first.limits._fair
    push(second, feed[1500:])
    second.close()
    assert second.limits.streams["a"].offered == sum(1 for s, _ in feed if s == "A")
    assert sum(st.dropped for st in second.limits.streams.values()) == sum(sum(c.values()) for c in dropped.values())
    want = evaluate(
        bind_query(second.catalog, QUERIES["join"][0]), _kept(feed, dropped), {}, start=0, until=feed[-1][1][0]
    )
    assert not diff_outputs(want, second.queries["join"].results())


def test_spark_refuses_a_memory_limit_with_a_message_before_starting() -> None:
    from sluice.backends.spark.engine import SparkEngine

    with pytest.raises(SluiceError, match="not available on the Spark backend"):
        SparkEngine(memory_limit="64MB")
    with pytest.raises(SluiceError, match="memory_limit"):
        SparkEngine(memory_limit="lots")


def test_sluice_run_takes_a_memory_limit(tmp_path: Any, capsys: Any) -> None:
    from sluice.cli import main

    csv = tmp_path / "a.csv"
    csv.write_text("ts,K,V\n" + "".join(f"{t // 5},{t % 7},{t % 100}\n" for t in range(4000)))
    cql = tmp_path / "q.cql"
    cql.write_text("REGISTER STREAM A (K integer, V integer);\nselect * from A [Range 100] where V < 50;\n")
    rc = main(["run", str(cql), "--source", f"A={csv}", "--memory-limit", "6KB", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert rc == 0 and "memory limit 6000 B" in err and "q1: approximate" in err, err
    out = (tmp_path / "out" / "q1.out").read_text()
    assert 0 < len(out.splitlines()) < 4000  # 2000 matching rows, each inserted and deleted: fewer kept
    # a limit the exact run fits in (peak ~10 KB) drops nothing: before a stream's memory was
    # measured, its first slices were judged at twice their bytes and 15 elements were shed
    assert main(["run", str(cql), "--source", f"A={csv}", "--memory-limit", "30KB"]) == 0
    assert "q1: exact" in capsys.readouterr().err
    assert main(["run", str(cql), "--source", f"A={csv}", "--memory-limit", "lots"]) != 0
    assert "memory_limit='lots'" in capsys.readouterr().err


# -- inactive queries (STREAM §2.4) -----------------------------------------------------------
def _inactive_run(query: str) -> tuple[EmbeddedEngine, Any, Any, int]:
    eng = EmbeddedEngine(start=0)
    eng.execute(DDL)
    q = eng.register_query(query, "q")
    feed = _feed(3000, 5)
    ctrl = None
    at = -1
    for i in range(0, len(feed), 100):
        part = feed[i : i + 100]
        for s in ("A", "B"):
            rows = [r for n, r in part if n == s]
            if rows:
                eng.push(s, rows)
        eng.run()
        if i == 1000:
            before = eng.statistics().synopsis_bytes
            eng.deactivate("q")
            at = q.inactive_since
            assert eng.statistics().synopsis_bytes < before  # its state is freed
            assert "inactive since instant" in eng.explain("q") and not q.active
        if i == 2000:
            eng.activate("q")
            ctrl = eng.register_query(query, "ctrl")  # registered at the same moment
    eng.close()
    return eng, q, ctrl, at


def test_an_inactive_stream_query_stops_and_resumes_as_if_registered_again() -> None:
    query = "select istream(A.K, B.V) from A [Range 50], B [Range 30] where A.K = B.K"
    eng, q, ctrl, at = _inactive_run(query)
    streams = {s: [(r[0], r[1:]) for n, r in _feed(3000, 5) if n == s] for s in ("A", "B")}
    want = evaluate(bind_query(eng.catalog, query), streams, {}, start=0, until=at - 1)
    before = [e for e in q.results() if e.ts < at]
    assert not diff_outputs(want, before)
    after = [e for e in q.results() if e.ts >= at]
    assert after and after == ctrl.results()


def test_an_inactive_relation_query_is_emptied_then_resumes_consistently() -> None:
    query = "select K, count(*) from A [Range 40] group by K"
    eng, q, ctrl, at = _inactive_run(query)
    contents: Counter[Any] = Counter()
    for e in q.results():
        contents[e.row] += 1 if e.sign == "+" else -1
        if e.ts == at:
            assert e.sign == "-"
        assert contents[e.row] >= 0  # never deletes what it does not hold
    final = Counter({r: n for r, n in contents.items() if n})
    now = q.contents()
    assert Counter(zip(*(now.column(i).to_pylist() for i in range(2, now.num_columns)), strict=True)) == final
    ctrl_final: Counter[Any] = Counter()
    for e in ctrl.results():
        ctrl_final[e.row] += 1 if e.sign == "+" else -1
    assert final == Counter({r: n for r, n in ctrl_final.items() if n})


def test_deactivating_names_and_limits() -> None:
    eng = EmbeddedEngine(memory_limit="10KB", start=0)
    eng.execute(DDL)
    q = eng.register_query("select K, count(*) from A [Range 40] group by K", "agg", retain=5)
    with pytest.raises(SluiceError, match="retain"):
        eng.deactivate("agg")  # a bounded relation answer cannot be emptied exactly
    with pytest.raises(SluiceError, match="no query named"):
        eng.deactivate("nope")
    e = eng.register_query("select * from B [Range 40]", "exact", min_precision=1.0)
    assert "b" in eng.limits.locked()  # type: ignore[union-attr]
    eng.deactivate("exact")
    eng.deactivate("exact")  # twice: nothing more
    assert "b" not in eng.limits.locked()  # type: ignore[union-attr]  # an inactive query locks nothing
    eng.activate("exact")
    assert "b" in eng.limits.locked() and e.active  # type: ignore[union-attr]
    eng.deactivate("exact")
    e.close()  # closing an inactive query forgets it
    with pytest.raises(SluiceError, match="no inactive query"):
        eng.activate("exact")
    assert q.active


# -- tolerable imprecision in CQL (STREAM §5.2) ------------------------------------------------
def test_register_query_states_weight_and_precision_in_cql() -> None:
    from sluice.cql.errors import ParseError
    from sluice.cql.parser import parse_script
    from sluice.cql.printer import to_cql

    eng = EmbeddedEngine(memory_limit="1MB")
    out = eng.execute(
        DDL + "; REGISTER QUERY big WEIGHT 2 PRECISION 0.9 AS select * from A [Range 10] where V > 1;"
        " register query plain as select K from A [Range 5]; CREATE QUERY exact PRECISION 1 AS select * from B"
    )
    big, plain, exact = out[-3:]
    assert (big.name, big.limits) == ("big", QueryLimits(2.0, 0.9))  # type: ignore[union-attr]
    assert (plain.name, plain.limits) == ("plain", QueryLimits())  # type: ignore[union-attr]
    assert exact.limits.exact_only and "b" in eng.limits.locked()  # type: ignore[union-attr]
    assert "approximation: exact (weight 2, min precision 0.9)" in eng.explain("big")
    text = "REGISTER QUERY big WEIGHT 2 PRECISION 0.9 AS SELECT * FROM A [Range 10] WHERE (V > 1)"
    assert to_cql(parse_script(text)[0]) == text  # round trip
    bad = {
        "REGISTER QUERY b PRECISION 1.5 AS select * from A": ("between 0 and 1", "^^^"),
        "REGISTER QUERY b WEIGHT x AS select * from A": ("expected a number after WEIGHT", "^"),
        "REGISTER QUERY b WEIGHT 1 WEIGHT 2 AS select * from A": ("WEIGHT given twice", "^^^^^^"),
        "REGISTER QUERY b select * from A": ("expected AS", "^^^^^^"),
    }
    for q, (msg, caret) in bad.items():
        with pytest.raises(ParseError, match=msg) as e:
            eng.execute(q)
        assert caret in str(e.value)
    with pytest.raises(SluiceError, match="already registered"):
        eng.execute("REGISTER QUERY big AS select * from A")


# -- latency targets and the strategy that meets them (issue #13 item 5; Jiang) ---------------
class Clock:
    """A clock the test sets (module level: an engine with it can be checkpointed)."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_missed_latency_target_switches_to_path_capacity_and_back_and_answers_stay_exact() -> None:
    clock = Clock()
    eng = EmbeddedEngine(start=0)
    eng.qos.clock = clock  # the latency meter's wall clock, set by the test
    eng.execute(DDL)
    q = eng.register_query("select * from A [Range 20] where V < 50", "q", max_latency="200ms")
    other = eng.register_query("select A.K, B.V from A [Range 5], B [Now] where A.K = B.K", "other")
    feed = _feed(2000, 6)
    for i in range(0, len(feed), 100):
        part = feed[i : i + 100]
        for s in ("A", "B"):
            rows = [r for n, r in part if n == s]
            if rows:
                eng.push(s, rows)
        clock.now += 0.5 if i == 500 else 0.01  # one slow turn: its outputs are 0.5 s late
        eng.run()
        if i == 500:
            assert eng.strategy.name == "path-capacity"
    eng.close()
    lat = q.latency
    assert lat.target == 0.2 and lat.missed >= 1 and lat.max == pytest.approx(0.5) and lat.count > 10
    assert "target 200 ms missed by" in eng.explain("q")
    events = [e for e in eng.statistics().approx_events if e.action == "strategy"]
    assert "round-robin → path-capacity: latency over target: q (max 500 ms > 200 ms)" in events[0].detail
    assert "path-capacity → round-robin" in events[-1].detail  # back after quiet runs
    streams = {s: [(r[0], r[1:]) for n, r in feed if n == s] for s in ("A", "B")}
    for query in (q, other):  # switching changes when results appear, never what they are
        want = evaluate(bind_query(eng.catalog, query.bound.text), streams, {}, start=0, until=feed[-1][1][0])
        assert not diff_outputs(want, query.results()), query.name


def test_a_chosen_scheduler_is_kept_and_memory_pressure_picks_chain() -> None:
    clock = Clock()
    eng = EmbeddedEngine(start=0, scheduler="fifo")
    eng.qos.clock = clock
    eng.execute(DDL)
    eng.register_query("select * from A [Range 20]", "q", max_latency=0.1)
    eng.push("A", [(0, 1, 1)])
    eng.heartbeat(0)
    clock.now = 1.0
    eng.run()
    assert eng.strategy.name == "fifo"
    assert any(e.action == "late" and "kept" in e.detail for e in eng.statistics().approx_events)
    # under a memory limit, with no latency target missed: Chain (least queue memory) while memory is at risk
    eng = EmbeddedEngine(start=0, memory_limit="20KB")
    eng.execute(DDL)
    eng.register_query("select * from A [Range 400]", "q")
    for t in range(0, 400, 4):
        eng.push("A", [(t + i // 40, i % 50, i) for i in range(160)])
        eng.run()
        if eng.limits.at_risk():  # type: ignore[union-attr]
            assert eng.strategy.name == "chain"
            break
    else:
        pytest.fail("memory never came near the limit")
    with pytest.raises(SluiceError, match="max_latency"):
        eng.register_query("select * from A", max_latency="soon")


def test_latency_in_cql() -> None:
    from sluice.cql.errors import ParseError
    from sluice.cql.parser import parse_script
    from sluice.cql.printer import to_cql

    eng = EmbeddedEngine()
    eng.execute(DDL)
    (q,) = eng.execute("REGISTER QUERY fast LATENCY 250 ms WEIGHT 2 AS select * from A")
    assert q.limits == QueryLimits(2.0, 0.0, 0.25)  # type: ignore[union-attr]
    text = "REGISTER QUERY fast WEIGHT 2 LATENCY 250 ms AS SELECT * FROM A"
    assert to_cql(parse_script(text)[0]) == text
    with pytest.raises(ParseError, match="time unit after the LATENCY"):
        eng.execute("REGISTER QUERY f LATENCY 2 parsecs AS select * from A")


# -- review regressions (session 11) ----------------------------------------------------------
def test_a_whole_file_in_one_push_is_admitted_in_slices_and_kept_when_it_fits() -> None:
    eng = EmbeddedEngine(memory_limit="60KB", start=0)
    eng.execute(DDL)
    q = eng.register_query("select * from A [Range 100] where V < 50", "sel")
    eng.push("A", [(t // 5, t % 7, t % 100) for t in range(20000)])  # ~24 KB of state at most
    eng.close()
    # before the slices: 19,430 of 20,000 shed; now at most the first slice's cautious estimate
    assert eng.statistics().shed <= 200 and q.approximation.kept["a"] >= 0.99


def test_a_stream_lowered_before_an_unsafe_reader_goes_back_to_rate_1() -> None:
    eng = EmbeddedEngine(memory_limit="40KB", start=0)
    eng.execute(DDL)
    eng.register_query("select * from A [Range 200]", "wide")
    for t in range(0, 600, 10):
        eng.push("A", [(t + i // 10, i, i) for i in range(100)])
        eng.run()
    assert eng.limits.streams["a"].rate < 1  # type: ignore[union-attr]
    eng.register_query("select distinct K from A [Range 50]", "d")
    eng.unregister("wide")
    eng.push("A", [(600, 1, 1)])
    eng.run()
    st = eng.limits.streams["a"]  # type: ignore[union-attr]
    before = st.sampled_out
    for t in range(601, 900, 10):
        eng.push("A", [(t + i // 10, i, i) for i in range(100)])
        eng.run()
    assert st.rate == 1.0 and st.sampled_out == before  # read below DISTINCT: never sampled


def test_unread_streams_failing_callbacks_and_repeated_over_limit_events() -> None:
    eng = EmbeddedEngine(memory_limit="5KB", start=0)
    eng.execute(DDL)
    eng.push("B", [(t, 1, 1) for t in range(3000)])  # nobody reads B: nothing dropped
    assert eng.statistics().shed == 0
    eng.register_query("select * from A [Range 500]", "exact", min_precision=1.0)
    calls = []

    def bad(stream: str, b: pa.Table, reason: str) -> None:
        calls.append(b.num_rows)
        raise RuntimeError("disk full")

    eng.on_shed(bad)
    for t in range(0, 400, 4):
        eng.push("A", [(t + i // 40, i % 50, i) for i in range(160)])
        eng.run()
    events = eng.statistics().approx_events
    assert 1 <= sum(e.action == "over-limit" for e in events) <= 5  # one per episode, not one per push (100)
    a = eng.limits.streams["a"]  # type: ignore[union-attr]
    assert a.offered == 16000 and a.kept == 16000
    with pytest.raises(SluiceError, match="at least 1 byte"):
        EmbeddedEngine(memory_limit=0.5)


def test_a_failing_on_shed_callback_loses_nothing_uncounted() -> None:
    eng = EmbeddedEngine(memory_limit="5KB", start=0)
    eng.execute(DDL)
    eng.register_query("select * from A [Range 500]", "q")

    def bad(stream: str, b: pa.Table, reason: str) -> None:
        raise RuntimeError("disk full")

    eng.on_shed(bad)
    for t in range(0, 400, 4):
        eng.push("A", [(t + i // 40, i % 50, i) for i in range(160)])
        eng.run()
    a = eng.limits.streams["a"]  # type: ignore[union-attr]
    assert a.offered == 16000 == a.kept + a.sampled_out + a.shed and a.dropped > 0
    assert any(e.action == "callback" and "disk full" in e.detail for e in eng.statistics().approx_events)


def test_a_least_precision_that_cannot_be_held_is_reported() -> None:
    """min_precision < 1 is a target the allocator keeps when it can; when the limit cannot be
    held otherwise the query is told it is below it (review of session 11: it was silent).
    """
    queries = {"sel": ("select * from A [Range 400] where V < 50", {"min_precision": 0.95})}
    feed = _feed(6000, 4, streams=("A",))
    _, _, _, exact_peak = _run(queries, feed, "1GB")
    _, qs, _, _ = _run(queries, feed, exact_peak // 5)
    a = qs["sel"].approximation
    assert a.precision is not None and 1 - a.precision.fn < 0.95
    assert a.below_min and "below its least precision 0.95" in a.describe()
    _, qs, _, _ = _run(queries, feed, "1GB")
    assert not qs["sel"].approximation.below_min


def test_a_stream_new_to_a_full_engine_is_still_held_to_the_limit() -> None:
    """Review: a stream holding under 1% of the limit was admitted past the cap — a second window
    query filling from a push of large rows took memory 20% over the limit.
    """
    eng = EmbeddedEngine(memory_limit=100_000, start=0)
    eng.execute("REGISTER STREAM A (K integer, V varchar(1000)); REGISTER STREAM B (K integer, V varchar(1000))")
    eng.register_query("select * from A [Range 1000000]", "a")
    t = 0
    while eng.statistics().memory_bytes < 90_000 and t < 400:
        eng.push("A", [(t, t, "x" * 900)])
        eng.run()
        t += 1
    eng.register_query("select * from B [Range 1000000]", "b")
    eng.push("B", [(t + i, i, "y" * 900) for i in range(100)])
    eng.run()
    st = eng.statistics()
    assert st.peak_memory <= 100_000, st.peak_memory
    b = next(s for s in st.shedding if s.name == "B")
    assert b.offered == 100 and b.kept + b.dropped == 100 and b.dropped > 0


PLAIN_JOIN = "select A.K, A.V, B.V from A [Range 6 seconds], B [Range 4500 milliseconds] where A.K = B.K"


def two_streams(
    limit: int | None, query: str = PLAIN_JOIN, idle_runs: int = 0, events: int = 60_000, batch: int = 1_000
) -> tuple[EmbeddedEngine, int]:
    """``query`` over A and B (millisecond timestamps, keys from 10,000) fed as a user with two
    files would: a batch of each stream, then a heartbeat and a run (and ``idle_runs`` more).  The
    engine, and the most memory seen after every round.
    """
    import numpy as np

    rng = np.random.default_rng(1)
    ts = np.arange(events, dtype=np.int64)
    side = rng.random(events) < 0.5
    eng = EmbeddedEngine(time_unit="millisecond", start=0, memory_limit=limit)
    eng.execute("register stream A (K integer, V integer); register stream B (K integer, V integer)")
    eng.register_query(query, retain=0)
    data = {
        name: pa.table(
            {"ts": ts[m], "K": rng.integers(0, 10_000, int(m.sum())), "V": rng.integers(0, 1000, int(m.sum()))}
        )
        for name, m in (("A", side), ("B", ~side))
    }
    peak = 0
    for lo in range(0, events, batch):
        for name, t in data.items():
            i, j = np.searchsorted(t.column("ts").to_numpy(), [lo, lo + batch])
            eng.push(name, t.slice(int(i), int(j - i)))
        eng.heartbeat(lo + batch - 1)
        for _ in range(1 + idle_runs):
            eng.run()
        peak = max(peak, eng.statistics().memory_bytes)
    return eng, peak


@pytest.mark.parametrize("share", [2, 3])
def test_a_batch_waiting_for_the_other_stream_is_counted_at_what_it_will_cost(share: int) -> None:
    # A's batch waits at its source (the join needs B's) holding 25 B an element; in the join it
    # holds ~75 B.  Counted at 25 B, B's batch was admitted against it and memory went to 1.06×
    # (half the exact peak) and 1.10× (a third) the limit while the windows filled.
    _, exact = two_streams(None)
    limit = exact // share
    eng, peak = two_streams(limit)
    engine_peak = eng.statistics().peak_memory
    assert peak <= limit and engine_peak <= limit, (peak, engine_peak, limit)


@pytest.mark.parametrize("exact_only", [False, True])
def test_drops_are_aimed_at_the_state_sampling_cannot_shrink(exact_only: bool) -> None:
    """Design 021, "Drops aimed at the culprit": an unbounded group-by on A (never sampled: below
    an aggregate; or exact-only) fills the limit while a window on B holds a few percent of it.
    Sampling or shedding B would free only B's own few bytes, which A's growing groups would take
    at once: B keeps its fair share, untouched, and A — the culprit — is shed (or, exact-only,
    passes the limit, reported, and B loses only the few elements shed before A's groups had
    passed it) while B's answer stays exact for what it kept.
    """
    eng = EmbeddedEngine(memory_limit="40KB", start=0)
    eng.execute("register stream A (K integer, V integer); register stream B (K integer, V integer)")
    groups = eng.register_query(
        "select K, count(*) from A group by K", "groups", min_precision=1.0 if exact_only else 0.0
    )
    win = eng.register_query("select * from B [Range 50] where V < 50", "win")
    gone: Counter[tuple[Any, ...]] = Counter()
    eng.on_shed(lambda s, b, _: gone.update((r["__ts"], r["c0"], r["c1"]) for r in b.to_pylist()) if s == "B" else None)
    rnd = random.Random(1)
    b_rows = []
    for t in range(200):
        eng.push("A", [(t, t * 20 + i, 1) for i in range(20)])  # new groups all the time
        b = [(t, rnd.randrange(10), rnd.randrange(100)) for _ in range(5)]
        b_rows += b
        eng.push("B", b)
        eng.run()
    eng.close()
    st = eng.statistics()
    by = {s.name: s for s in st.shedding}
    # (exact-only: B is shed only until A's groups have passed the limit, a few elements)
    assert by["B"].dropped <= (0.02 * len(b_rows) if exact_only else 0) and by["B"].rate == 1.0
    assert by["B"].dropped == sum(gone.values())
    left, kept = Counter(gone), []
    for r in b_rows:
        if left[r]:
            left[r] -= 1  # (one of the dropped)
        else:
            kept.append(r)
    want = evaluate(
        bind_query(eng.catalog, "select * from B [Range 50] where V < 50"),
        {"B": [(r[0], r[1:]) for r in kept]},
        {},
        start=0,
        until=199,
    )
    assert not diff_outputs(want, win.results())
    events = " | ".join(e.detail for e in st.approx_events)
    if exact_only:
        assert by["A"].dropped == 0 and groups.approximation.exact
        assert st.peak_memory > 40_000 and "over-limit" in {e.action for e in st.approx_events}
    else:
        assert by["A"].shed > 0 and st.peak_memory <= 40_000
        culprit = [e.detail for e in st.approx_events if e.action == "culprit"]
        assert len(culprit) == 1 and "not sampled: A " in culprit[0], events  # (named once, the episode)


def test_a_stream_holding_nothing_reserves_nothing_and_a_new_stream_is_admitted() -> None:
    """Review cases of the fair shares: a pass-through stream beside an unbounded group-by holds
    nothing, so it wants nothing — the group-by may use the limit up to the cap (an earlier
    version reserved half of it); and a stream registered after the shares were taken, with an
    exact-only reader past the limit, is admitted (it has no share yet: the plain rule).
    """
    eng = EmbeddedEngine(memory_limit="40KB", start=0)
    eng.execute("register stream A (K integer, V integer); register stream B (K integer, V integer)")
    eng.register_query("select K, count(*) from A group by K", "groups")
    eng.register_query("select * from B where V < 50", "pass")
    for t in range(200):
        eng.push("A", [(t, t * 5 + i, 1) for i in range(5)])
        eng.push("B", [(t, i, i * 2) for i in range(50)])
        eng.run()
    st = eng.statistics()
    assert 0.9 * 40_000 < st.peak_memory <= 40_000, st.peak_memory
    assert {s.name: s.shed for s in st.shedding}["A"] > 0

    eng = EmbeddedEngine(memory_limit="40KB", start=0)
    eng.execute("register stream A (K integer, V integer)")
    eng.register_query("select K, count(*) from A group by K", "g", min_precision=1.0)
    for t in range(100):
        eng.push("A", [(t, t * 20 + i, 1) for i in range(20)])
        eng.run()
    eng.execute("register stream C (K integer, V integer)")
    c = eng.register_query("select * from C [Range 10]", "c")
    eng.push("C", [(100, 1, 1)])
    eng.run()
    assert eng.statistics().peak_memory > 40_000  # (the exact-only reader passed it, reported)
    by = {s.name: s for s in eng.statistics().shedding}
    assert by["C"].offered == 1 == by["C"].kept + by["C"].dropped  # (counted: an OverflowError before)
    assert c.approximation.exact == (by["C"].kept == 1)


BACKLOG_JOIN = "Istream(select S.K, S.I as SI, T.I as TI from S [Range 1 Second], T [Range 1 Second] where S.K = T.K)"


@pytest.mark.parametrize(
    ("limit", "chunk"),
    [
        (157_000, 50_000),
        (157_000, 5_000),
        (60_000, 50_000),
        (250_000, 50_000),
        (300_000, 50_000),
        (100_000, 1_000),  # (a review: S's backlog within its share at its own bytes, T shed, S in: 1.07x)
        (120_000, 500),  # (S's held ones, where shedding left them in the window's last half: 1.012x)
    ],
)
def test_a_join_fed_one_streams_backlog_before_the_other_stays_under_its_limit(
    limit: int, chunk: int, query: str = BACKLOG_JOIN, ranges: tuple[int, int] = (1000, 1000)
) -> None:
    """The shape of a Spark key's micro-batch (all of S's rows, then all of T's; or 5 s of each
    in turn): S waits for T at its own bytes, then fills its empty window at a join buffer's cost
    while most of it still waits — 1.29x, 1.25x and 1.72x the limit before its waiting elements
    were priced at what they will hold and shed from the queue (design 021, "A join fed one
    stream's big batch before the other's"); 1.05x at 250 KB while that price was a guess, until
    T's first slice was a probe of ``FEW`` rows.  And nothing is lost: every element the engine
    dropped, from the queue or at admission, is handed to ``on_shed``, and the answer is the exact
    answer over the rest.
    """
    import numpy as np

    n = 50_000
    rng = np.random.default_rng(11)
    ddl = "register stream S (I integer, K integer); register stream T (I integer, K integer)"
    ts = np.arange(n, dtype=np.int64)
    data = {s: pa.table({"ts": ts, "I": ts, "K": rng.integers(0, 100_000, n)}) for s in ("S", "T")}
    eng = EmbeddedEngine(time_unit="millisecond", memory_limit=limit)
    eng.execute(ddl)
    q = eng.register_query(query, retain=0)
    got: list[pa.Table] = []
    q.subscribe_arrow(got.append)
    gone: dict[str, set[int]] = {"S": set(), "T": set()}
    eng.on_shed(lambda s, b, _: gone[s].update(b.column(2).to_pylist()))  # (__ts, __sign, I, K: I is unique)
    for lo in range(0, n, chunk):
        for s in ("S", "T"):
            eng.push(s, data[s].slice(lo, chunk))
        eng.run()
    eng.close()
    st = eng.statistics()
    assert st.peak_memory <= limit, st.peak_memory / limit
    by = {x.name: x for x in st.shedding}
    assert by["S"].shed > 0  # (from the queue: S waits for T)
    # fed whole, T comes after S's backlog, shed and gone: once the limit no longer binds, T is
    # raised again (a lowered stream holding next to nothing was left at 1% for good)
    assert chunk < n or limit < 100_000 or by["T"].kept > n * 3 // 4, by["T"]
    for s in ("S", "T"):
        assert by[s].offered == n == by[s].kept + by[s].dropped and by[s].dropped == len(gone[s])
    exact = EmbeddedEngine(time_unit="millisecond")
    exact.execute(ddl)
    want = exact.register_query(query, retain=0)
    rows: list[pa.Table] = []
    want.subscribe_arrow(rows.append)
    for s in ("S", "T"):
        kept = ~np.isin(ts, np.fromiter(gone[s], np.int64, len(gone[s])))
        exact.push(s, data[s].filter(pa.array(kept)))
    exact.close()

    def answer(ts_: list[pa.Table]) -> Counter[tuple[Any, ...]]:
        return Counter(tuple(r.values()) for t in ts_ for r in t.to_pylist())

    assert answer(got) == answer(rows)
    assert sum(t.num_rows for t in got) > 0 or limit < 100_000  # (at 60 KB, 0-3 pairs of 977 are kept)
    # the recall reported is that of the pairs the kept elements can form (within both windows at
    # once), not the kept fractions multiplied: S is kept early and T late (157 KB whole: 0.0495
    # reported where they form 0.0174 — design 021, "Drops that depend on time")
    ks, kt = (~np.isin(ts, np.fromiter(gone[s], np.int64, len(gone[s]))) for s in ("S", "T"))
    formed = formed_pairs(ts, ks, kt, ranges[1], ranges[0])  # (T within S's windows)
    precision = q.approximation.precision
    assert precision is not None
    assert abs(1 - precision.fn - formed) <= 0.05 * formed + 0.002, (1 - precision.fn, formed)


def test_a_join_of_unequal_windows_fed_one_streams_backlog_first_stays_under_its_limit() -> None:
    """S [Range 1 Second] joined with T [Range 5 Seconds], 5 s of each in turn under 60 KB: at
    their own bytes S's waiting elements looked within its share, so T's batches were shed
    instead and S's backlog entered anyway — 1.11x the limit (a review)."""
    query = "Istream(select S.K, S.I as SI, T.I as TI from S [Range 1 Second], T [Range 5 Seconds] where S.K = T.K)"
    test_a_join_fed_one_streams_backlog_before_the_other_stays_under_its_limit(60_000, 5_000, query, (1000, 5000))


def _fed(limit: int, queries: list[str], n: int, chunk: int, order: str, keys: int = 100_000) -> Any:
    """The statistics of an engine under ``limit`` running ``queries`` over streams ``order``
    (``I``, ``K``: K random in ``keys``, one element a millisecond each), fed ``chunk`` of each
    in turn with a run between."""
    import numpy as np

    rng = np.random.default_rng(11)
    ts = np.arange(n, dtype=np.int64)
    eng = EmbeddedEngine(time_unit="millisecond", memory_limit=limit)
    eng.execute("; ".join(f"register stream {s} (I integer, K integer)" for s in sorted(order)))
    for q in queries:
        eng.register_query(q, retain=0)
    data = {s: pa.table({"ts": ts, "I": ts, "K": rng.integers(0, keys, n)}) for s in sorted(order)}
    for lo in range(0, n, chunk):
        for s in order:
            eng.push(s, data[s].slice(lo, chunk))
        eng.run()
    eng.close()
    return eng.statistics()


@pytest.mark.parametrize("limit", [100_000, 120_000, 140_000])
def test_two_joins_sharing_a_stream_stay_under_the_limit(limit: int) -> None:
    """``S [1 s] ⋈ T [1 s]`` beside ``T [3 s] ⋈ U [500 ms]``, 500 ms of S, T and U in turn: U's
    first elements, no synopsis holding one yet, were priced at a guess (57 B) and held 73 B
    each — 1.015x, 1.026x and 1.041x these limits until its own first slice was a probe of
    ``FEW`` rows (``streams.guessed``).  Nothing lost: what was offered was kept or counted dropped.
    """
    queries = [
        "Istream(select S.K, T.I from S [Range 1 Second], T [Range 1 Second] where S.K = T.K)",
        "Istream(select T.K, U.I from T [Range 3 Seconds], U [Range 500 Milliseconds] where T.K = U.K)",
    ]
    st = _fed(limit, queries, 3_000, 500, "STU")
    assert st.peak_memory <= limit, st.peak_memory / limit
    assert sum(x.dropped for x in st.shedding) > 0  # (the limit binds)
    assert all(x.offered == 3_000 == x.kept + x.dropped for x in st.shedding)


def test_a_budget_that_suffices_drops_nothing_from_batches_longer_than_the_windows() -> None:
    """The join above, 5 s of S then 5 s of T in turn, under 400 KB: unlimited it peaks at
    271 KB, so nothing may be dropped.  Each 5 s batch holds 1 s of itself at once in the 1 s
    windows (``streams.at_once``); priced as if all of it were held, 2,903 of S were shed, and
    once each element's cost was measured over what the windows really hold (``held_now``),
    10,199 (0.80 of the pairs kept, memory never past 0.62 of the limit).
    """
    st = _fed(400_000, [BACKLOG_JOIN], 50_000, 5_000, "ST")
    assert st.peak_memory <= 400_000
    assert {x.name: (x.offered, x.kept) for x in st.shedding} == {"S": (50_000, 50_000), "T": (50_000, 50_000)}


@pytest.mark.parametrize(
    ("chunk", "limit", "order"), [(300, 60_000, "ST"), (700, 160_000, "ST"), (6_000, 60_000, "TS")]
)
def test_an_aggregate_beside_a_join_waiting_for_its_other_input_stays_under_the_limit(
    chunk: int, limit: int, order: str
) -> None:
    """A GROUP BY over S takes S's elements in at once while a join of S waits for T: S's held
    elements do not leave with S's own time, so a batch longer than S's windows is priced whole
    (``streams.frontier``) — discounted, 1.081x, 1.022x and 1.011x these limits (a review)."""
    queries = [
        "Istream(select K, count(*) from S [Range 500 Milliseconds] group by K)",
        "Istream(select S.K, T.I from S [Range 2 Seconds], T [Range 1 Second] where S.K = T.K)",
    ]
    st = _fed(limit, queries, 6_000, chunk, order, keys=200)
    assert st.peak_memory <= limit, st.peak_memory / limit
    assert all(x.offered == 6_000 == x.kept + x.dropped for x in st.shedding)


def test_an_aggregates_bytes_kept_as_its_groups_change_equal_summing_them() -> None:
    """``Aggregate.state_bytes`` is kept as each run changes its groups (measured at every
    admission and step under a limit, summed over every group it made a GROUP BY of 20,000 groups
    run at 0.22 of its speed without a limit) — equal to summing them, as groups come and leave
    a window, and after a snapshot is restored."""
    from sluice.runtime.operators.aggregate import Aggregate, _group_bytes

    eng = EmbeddedEngine(memory_limit="50MB", start=0)
    eng.execute(DDL)
    # (MIN/MAX over a partitioned window, which deletes out of insertion order: the value-level path)
    eng.register_query("select K, max(V), count(distinct V) from A [Partition By K Rows 3] group by K", retain=0)
    agg = next(op for op in eng.operators if isinstance(op, Aggregate))
    assert agg._counting is None
    rnd = random.Random(4)
    for t in range(0, 400, 10):
        eng.push("A", [(t + i, rnd.randrange(40), rnd.randrange(9)) for i in range(10)])
        eng.run()
        assert agg.state_bytes() == sum(_group_bytes(g) for g in agg.groups.values()) > 0
    snap = eng.snapshot_state()
    eng.push("A", [(400, 1, 1)])
    eng.run()
    eng.restore_state(snap)
    assert agg in eng.operators and agg.state_bytes() == sum(_group_bytes(g) for g in agg.groups.values())


def test_a_target_missed_run_after_run_is_one_late_episode_not_an_event_per_run() -> None:
    """With nothing to switch (a chosen scheduler; Spark), a query late at every run is one
    ``late`` event until a measured run meets its target (``on-target``) — not an event per run,
    which a pipeline late all day would pile up; its misses are counted all the same.
    """
    from sluice.approx.qos import QoS

    clock = Clock()
    qos = QoS(pinned=True, clock=clock)
    qos.add("slow", 0.1)
    qos.add("quiet", 0.1)
    for i in range(50):  # late at every run
        qos.pushed(i)
        clock.now += 1.0
        qos.answered("slow", i)
        qos.choose("fifo", False)
    assert [e.action for e in qos.events] == ["late"] and "slow" in qos.events[0].detail
    qos.choose("fifo", False)  # a run that measured nothing: still late
    assert len(qos.events) == 1 and qos.queries["slow"].missed == 50
    qos.pushed(60)
    qos.answered("slow", 60)  # on time
    qos.choose("fifo", False)
    assert [e.action for e in qos.events] == ["late", "on-target"] and "slow" in qos.events[1].detail
    qos.pushed(61)
    clock.now += 1.0
    qos.answered("slow", 61)
    qos.choose("fifo", False)
    assert [e.action for e in qos.events] == ["late", "on-target", "late"]
    # removed and added again before the next run (unregister and register, deactivate and
    # activate): a fresh query, its first on-time run no episode's end (a review)
    qos.forget("slow")
    qos.add("slow", 0.1)
    qos.pushed(62)
    qos.answered("slow", 62)
    qos.choose("fifo", False)
    assert len(qos.events) == 3 and qos.queries["slow"].count == 1 and not qos.queries["slow"].missed
    clock.now += 1.0
    qos.answered("slow", 62)
    qos.choose("fifo", False)
    assert [e.action for e in qos.events][-1] == "late"
