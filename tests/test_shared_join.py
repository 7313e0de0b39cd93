"""The shared window join (Hammad et al. 2003; ``sluice/runtime/operators/shared_join.py``): every
query it serves gets exactly its isolated answer — the reference evaluator's — under every policy,
both variants, any unit of scheduling and budget, pushed at once, in pieces, or through a
snapshot after every piece; queries added and removed while it runs; what EXPLAIN says.
"""

from __future__ import annotations

import pickle
import random
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sluice.backends.embedded import EmbeddedEngine
from sluice.errors import SluiceError
from sluice.plan import bind_query
from sluice.reference import evaluate
from sluice.reference.compare import diff_outputs
from sluice.runtime.operators.join_buffer import Family
from sluice.runtime.operators.shared_join import SharedWindowJoin
from sluice.runtime.operators.shared_join_spec import Policy, SharedJoinOptions, Variant
from sluice.runtime.stats import SharedJoinStats

DDL = "REGISTER STREAM A (K integer, V integer); REGISTER STREAM B (K integer, W integer)"
WINDOWS = ["Now", "Range 0", "Range 1", "Range 3", "Range 8", "Rows 1", "Rows 3", "Range Unbounded"]
PREDICATES = [
    "A.K = B.K",
    "A.K = B.K AND A.V > 2",
    "A.K = B.K AND B.W < 6 AND A.V < 8",
    "A.K = B.K AND A.V <= B.W",
    "A.V < B.W",  # no keys: nested loop
]
OPTIONS = [
    "greedy",
    "swf",
    "lwo",
    "greedy:unit=1",
    "swf:unit=2",
    "lwo:variant=nested-loop",
    "greedy:variant=nested-loop",
]


def _query(wa: str, wb: str, pred: str, form: int) -> str:
    core = f"FROM A [{wa}], B [{wb}] WHERE {pred}"
    if form == 0:
        return f"SELECT * {core}"
    if form == 1:
        return f"Istream(SELECT A.V, B.W {core})"
    return f"Dstream(SELECT A.K, B.W {core})"


def _streams(rnd: random.Random, n: int, span: int) -> dict[str, list[tuple[int, tuple[Any, ...]]]]:
    def one() -> list[tuple[int, tuple[Any, ...]]]:
        rows = [(rnd.randrange(span), (rnd.choice([0, 1, 2, None]), rnd.randrange(10))) for _ in range(n)]
        return sorted(rows, key=lambda r: r[0])

    return {"A": one(), "B": one()}


def _run(
    queries: list[str],
    streams: dict[str, list[tuple[int, tuple[Any, ...]]]],
    until: int,
    *,
    shared_join: str,
    budget: int = 65536,
    chunk: int | None = None,
    snapshots: bool = False,
) -> tuple[EmbeddedEngine, list[Any]]:
    def build() -> tuple[EmbeddedEngine, list[Any]]:
        eng = EmbeddedEngine(shared_join=shared_join, budget=budget, start=0)
        eng.execute(DDL)
        return eng, [eng.register_query(q, name=f"q{i}") for i, q in enumerate(queries)]

    eng, qs = build()
    feeds = sorted(((t, name, (t, *row)) for name, rows in streams.items() for t, row in rows), key=lambda f: f[0])
    step = chunk or len(feeds) or 1
    for i in range(0, len(feeds), step):
        by: dict[str, list[Any]] = {}
        for _, name, row in feeds[i : i + step]:
            by.setdefault(name, []).append(row)
        for name, rows in by.items():
            eng.push(name, rows)
        eng.run()
        if snapshots:
            blob = pickle.dumps(eng.snapshot_state())
            eng, qs = build()
            eng.restore_state(pickle.loads(blob))
    eng.close(until)
    assert not eng.rejected(), eng.rejected()
    return eng, [q.results() for q in qs]


def _expected(eng: EmbeddedEngine, query: str, streams: dict[str, Any], until: int) -> list[Any]:
    return evaluate(bind_query(eng.catalog, query), streams, {}, start=0, until=until)


def _check(eng: EmbeddedEngine, queries: list[str], got: list[Any], streams: dict[str, Any], until: int) -> None:
    for q, out in zip(queries, got, strict=True):
        d = diff_outputs(_expected(eng, q, streams, until), out)
        assert not d, f"{q}: {d}"


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10**6),
    windows=st.lists(st.tuples(st.sampled_from(WINDOWS), st.sampled_from(WINDOWS)), min_size=1, max_size=4),
    preds=st.lists(st.sampled_from(PREDICATES), min_size=1, max_size=2),
    forms=st.lists(st.integers(0, 2), min_size=4, max_size=4),
    option=st.sampled_from(OPTIONS),
    budget=st.sampled_from([2, 9, 65536]),
    mode=st.sampled_from(["whole", "pieces", "snapshots"]),
)
def test_each_query_gets_its_isolated_answer(
    seed: int,
    windows: list[tuple[str, str]],
    preds: list[str],
    forms: list[int],
    option: str,
    budget: int,
    mode: str,
) -> None:
    rnd = random.Random(seed)
    streams = _streams(rnd, rnd.randrange(5, 40), rnd.randrange(3, 25))
    queries = [_query(wa, wb, preds[i % len(preds)], forms[i]) for i, (wa, wb) in enumerate(windows)]
    until = 30
    chunk = None if mode == "whole" else rnd.randrange(1, 8)
    eng, got = _run(
        queries, streams, until, shared_join=option, budget=budget, chunk=chunk, snapshots=mode == "snapshots"
    )
    _check(eng, queries, got, streams, until)
    # the queries with one predicate share one operator
    joins = [o for o in eng.operators if isinstance(o, SharedWindowJoin)]
    assert len(joins) <= len(set(preds)) * 4  # (one per predicate and pair of window families)
    assert joins and not any(o.kind == "Join" for o in eng.operators)


def _counted(option: str, seed: int = 5) -> tuple[SharedJoinStats, list[Any]]:
    windows = [("Range 1", "Range 1"), ("Range 3", "Range 3"), ("Range 8", "Range 3"), ("Range 8", "Range 8")]
    queries = [f"SELECT * FROM A [{wa}], B [{wb}] WHERE A.K = B.K AND B.W < 8" for wa, wb in windows]
    streams = _streams(random.Random(seed), 60, 40)
    eng, got = _run(queries, streams, 60, shared_join=option, budget=3, chunk=5)
    _check(eng, queries, got, streams, 60)
    (st,) = [s for s in eng.statistics().operators if isinstance(s, SharedJoinStats)]
    return st, got


@pytest.mark.parametrize("option", ["lwo:unit=1", "swf:unit=1", "greedy:unit=1", "greedy", "swf:variant=nested-loop"])
def test_the_join_counts_its_own_work(option: str) -> None:
    st, got = _counted(option)
    assert st.kind == "SharedWindowJoin" and st.steps > 0 and st.probes > 0
    # every pair a port gets was found by a step and examined there; a pair leaves once it came
    assert st.found <= st.examined
    if "nested-loop" not in option:
        assert st.examined == st.found  # hashing examines only the pairs with equal keys
    for p, out in enumerate(got):
        plus, minus = sum(e.sign == "+" for e in out), sum(e.sign == "-" for e in out)
        assert minus <= st.deleted[p] <= st.inserted[p] <= st.found
        # (the output nets a deleted row and an equal row inserted at the same instant)
        assert plus <= st.inserted[p] and st.inserted[p] - st.deleted[p] == plus - minus
    assert st.tuples_out == sum(st.inserted) + sum(st.deleted)
    # after the run nothing waits: no join work queued, no output held for release
    assert (st.pending_units, st.pending_elements, st.held_rows) == (0, 0, 0)
    assert st.held_peak > 0
    # the same input gives the same counts
    again, _ = _counted(option)
    assert _counts(again) == _counts(st)


def _counts(st: SharedJoinStats) -> tuple[Any, ...]:
    return (st.steps, st.probes, st.examined, st.found, st.work, st.inserted, st.deleted, st.held_peak)


def test_the_policies_find_the_same_pairs_in_more_steps() -> None:
    """Each pair is found once, by the later element's scan of the band holding its partner, so the
    pairs found and examined do not depend on the policy; LWO scans each unit's largest window in
    one step, SWF and Greedy take one step per band (here the three extents each input's units scan).
    """
    runs = {p: _counted(f"{p}:unit=1")[0] for p in ("lwo", "swf", "greedy")}
    nested = {p: _counted(f"{p}:unit=1,variant=nested-loop")[0] for p in ("lwo", "swf", "greedy")}
    for r in (runs, nested):
        assert len({(s.found, s.examined, s.inserted, s.deleted) for s in r.values()}) == 1
    assert nested["lwo"].found == runs["lwo"].found < nested["lwo"].examined
    lwo = runs["lwo"]
    held = lwo.tuples_in - lwo.unselected  # (B.W < 8 in every query: the other B elements are not held)
    assert 0 < lwo.unselected < lwo.tuples_in
    assert lwo.steps == held  # unit=1: a step per element held
    assert runs["swf"].steps == runs["greedy"].steps == 3 * held  # A's windows 1, 3, 8; B's 1, 3, 8


def test_the_papers_example_shares_one_join_and_explain_names_its_queries_and_windows() -> None:
    """Hammad §2.2's two queries: one join of A and B, 1-second and 1-minute windows."""
    eng = EmbeddedEngine()
    eng.execute(DDL)
    q1 = eng.register_query(
        "Istream(SELECT * FROM A [Range 1 Second], B [Range 1 Second] WHERE A.K = B.K)", name="small"
    )
    q2 = eng.register_query(
        "Istream(SELECT * FROM A [Range 1 Minute], B [Range 1 Minute] WHERE A.K = B.K)", name="large"
    )
    ops = [o for o in eng.operators if o.kind not in ("Output", "IDstream")]
    assert [o.kind for o in ops] == ["SharedWindowJoin"]
    text = eng.explain()
    assert text.count("SharedWindowJoin [K = K; greedy, hash]") == 2  # one operator, under each query
    assert "port 0 → small: [Range 1 ticks] ⋈ [Range 1 ticks]" in text
    assert "port 1 → large: [Range 60 ticks] ⋈ [Range 60 ticks]" in text
    eng.push("A", [(0, 1, 10), (30, 1, 11)])
    eng.push("B", [(0, 1, 20), (31, 1, 21), (100, 1, 22)])
    eng.close(120)
    assert [(e.ts, e.row) for e in q1.results()] == [(0, (1, 10, 1, 20)), (31, (1, 11, 1, 21))]
    assert len(q2.results()) == 4  # a0·b0, a30·b0, a0·b31, a30·b31 (b100 is over a minute after both)


@pytest.mark.parametrize("policy", ["greedy", "swf", "lwo"])
def test_queries_added_and_removed_while_running_match_the_unshared_engine(policy: str) -> None:
    """A query registered while the engine runs joins the running shared join (§4) from its first
    instant; removing one leaves the others' answers alone — the same answers as joins of their own.
    """
    rnd = random.Random(7)
    streams = _streams(rnd, 120, 60)
    plan = [
        (0, "Istream(SELECT * FROM A [Range 2], B [Range 2] WHERE A.K = B.K)"),
        (0, "SELECT * FROM A [Rows 3], B [Range 5] WHERE A.K = B.K"),
        (15, "SELECT A.V, B.W FROM A [Range 20], B [Range 20] WHERE A.K = B.K AND A.V > 3"),
        (15, "SELECT * FROM A [Range 2], B [Range 2] WHERE A.K = B.K"),  # same windows, later: a port of its own
        (30, "Istream(SELECT * FROM A [Range 6], B [Now] WHERE A.K = B.K)"),
    ]
    remove = {40: "q1", 45: "q2"}

    def run(shared_join: str) -> tuple[EmbeddedEngine, dict[str, list[Any]]]:
        eng = EmbeddedEngine(shared_join=shared_join, start=0, budget=5)
        eng.execute(DDL)
        qs: dict[str, Any] = {}
        feeds = sorted(((t, n, (t, *r)) for n, rows in streams.items() for t, r in rows), key=lambda f: f[0])
        for tick in range(0, 61):
            for at, q in plan:
                if at == tick:
                    name = f"q{len(qs)}"
                    qs[name] = eng.register_query(q, name=name)
            if tick in remove:
                eng.unregister(remove[tick])
            for name in ("A", "B"):
                rows = [r for t, n, r in feeds if t == tick and n == name]
                if rows:
                    eng.push(name, rows)
            eng.heartbeat(tick)
            eng.run()
        eng.close(70)
        return eng, {n: q.results() for n, q in qs.items()}

    shared, got = run(policy)
    alone, want = run("off")
    for name in want:
        assert not diff_outputs(want[name], got[name]), name
        assert want[name]
    # the rows⋈time join served only q1: removed with it; q2's port is dropped from the other
    (join,) = [o for o in shared.operators if isinstance(o, SharedWindowJoin)]
    assert join.spec.families == (Family.TIME, Family.TIME)
    assert sorted(q for p in join.active_ports() for q in p.queries) == ["q0", "q3", "q4"]


def test_a_query_with_a_larger_window_registered_later_reads_only_from_its_start() -> None:
    eng = EmbeddedEngine(start=0)
    eng.execute(DDL)
    eng.register_query("SELECT * FROM A [Range 1], B [Range 1] WHERE A.K = B.K", name="small")
    eng.push("A", [(0, 1, 1)])
    eng.push("B", [(0, 1, 2)])
    eng.heartbeat(5)
    eng.run()
    late = eng.register_query("Istream(SELECT * FROM A [Range 100], B [Range 100] WHERE A.K = B.K)", name="late")
    eng.push("B", [(7, 1, 3)])
    eng.push("A", [(8, 1, 4)])
    eng.close(10)
    # the pairs with the elements of instant 0 are before its start
    assert [(e.ts, e.row) for e in late.results()] == [(8, (1, 4, 1, 3))]


def test_selections_pulled_up_keep_the_buffer_shared_and_answers_exact() -> None:
    """Hammad §2.1: selections on one input would give each query a join of its own; pulled up
    into the ports, both queries share one join."""
    eng = EmbeddedEngine(start=0)
    eng.execute(DDL)
    qa = eng.register_query("SELECT * FROM A [Range 3], B [Range 3] WHERE A.K = B.K AND A.V > 5", name="a")
    qb = eng.register_query("SELECT * FROM A [Range 9], B [Range 9] WHERE A.K = B.K AND B.W < 2", name="b")
    assert len([o for o in eng.operators if isinstance(o, SharedWindowJoin)]) == 1
    text = eng.explain("a")
    assert "where (A.V > 5)" in text and "where (B.W < 2)" in text
    streams = _streams(random.Random(3), 60, 30)
    for name, rows in streams.items():
        eng.push(name, [(t, *r) for t, r in rows])
    eng.close(40)
    _check(eng, [qa.bound.text, qb.bound.text], [qa.results(), qb.results()], streams, 40)


def test_queries_the_shared_join_does_not_serve_keep_their_own_join() -> None:
    eng = EmbeddedEngine()
    eng.execute(DDL + "; REGISTER RELATION R (K integer)")
    for q in (
        "SELECT * FROM A [Range 4 Slide 2], B [Range 4] WHERE A.K = B.K",  # a slide
        "SELECT * FROM A [Partition By K Rows 2], B [Now] WHERE A.K = B.K",
        "SELECT * FROM A [Range 4], R WHERE A.K = R.K",  # a relation
    ):
        eng.register_query(q)
    assert not any(isinstance(o, SharedWindowJoin) for o in eng.operators)
    assert sum(o.kind == "Join" for o in eng.operators) == 3


def test_off_and_no_sharing_plan_a_join_per_query() -> None:
    for kw in ({"shared_join": "off"}, {"sharing": False}):
        eng = EmbeddedEngine(**kw)  # type: ignore[arg-type]
        eng.execute(DDL)
        for w in (1, 5):
            eng.register_query(f"SELECT * FROM A [Range {w}], B [Range {w}] WHERE A.K = B.K")
        assert sum(o.kind == "Join" for o in eng.operators) == 2
        assert not any(isinstance(o, SharedWindowJoin) for o in eng.operators)


def test_options_are_parsed_or_refused_with_a_message() -> None:
    assert SharedJoinOptions.parse("greedy") == SharedJoinOptions(Policy.GREEDY)
    assert SharedJoinOptions.parse("SWF:variant=nested-loop, unit=1") == SharedJoinOptions(
        Policy.SWF, Variant.NESTED_LOOP, 1
    )
    assert SharedJoinOptions.parse("off") is None
    for bad, msg in [
        ("fastest", "unknown shared-join policy 'fastest'"),
        ("lwo:unit=0", "positive whole number"),
        ("lwo:variant=merge", "variant 'merge'"),
        ("lwo:speed=2", "unknown shared-join option 'speed'"),
        ("lwo:unit", "expected key=value"),
    ]:
        with pytest.raises(SluiceError, match=msg):
            SharedJoinOptions.parse(bad)
    with pytest.raises(SluiceError, match="needs sharing=True"):
        EmbeddedEngine(sharing=False, shared_join="greedy")


def test_a_row_error_in_a_pulled_up_selection_rejects_the_row_for_its_query_only() -> None:
    eng = EmbeddedEngine(start=0)
    eng.execute(DDL)
    bad = eng.register_query(
        "SELECT * FROM A [Range 2], B [Range 2] WHERE A.K = B.K AND A.V * 4611686018427387904 > 0", name="bad"
    )
    good = eng.register_query("SELECT * FROM A [Range 5], B [Range 5] WHERE A.K = B.K", name="good")
    eng.push("A", [(1, 1, 1), (1, 1, 2)])  # 2 · 2^62 overflows BIGINT: that row is rejected
    eng.push("B", [(1, 1, 7)])
    eng.close(3)
    assert len([e for e in good.results() if e.sign == "+"]) == 2
    assert [e.row for e in bad.results() if e.sign == "+"] == [(1, 1, 1, 7)]
    (msg,) = eng.rejected()
    assert msg.startswith("bad: SharedWindowJoin") and "overflow" in msg, msg


def test_sluice_run_takes_the_policy_and_every_policy_writes_the_same_files(
    tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    from sluice.cli import main

    cql = tmp_path / "q.cql"
    cql.write_text(
        DDL.replace("; ", ";\n")
        + ";\nIstream(SELECT * FROM A [Range 2], B [Range 2] WHERE A.K = B.K);\n"
        + "SELECT A.V, B.W FROM A [Range 9], B [Rows 3] WHERE A.K = B.K AND A.V > 2;\n"
    )
    rnd = random.Random(5)
    streams = _streams(rnd, 50, 40)
    for name, rows in streams.items():
        (tmp_path / f"{name}.csv").write_text("".join(f"{t},{'' if k is None else k},{v}\n" for t, (k, v) in rows))
    outs = {}
    for policy in ("greedy", "swf:unit=1", "lwo:variant=nested-loop", "off"):
        out = tmp_path / policy.replace(":", "_").replace("=", "_")
        argv = ["run", str(cql), "--source", f"A={tmp_path / 'A.csv'}", "--source", f"B={tmp_path / 'B.csv'}"]
        assert main([*argv, "--out", str(out), "--shared-join", policy]) == 0
        outs[policy] = {p.name: p.read_text() for p in sorted(out.iterdir())}
    first = outs["off"]
    assert sorted(first) == ["q1.out", "q2.out"] and all(first.values())
    assert all(o == first for o in outs.values())
    capsys.readouterr()
    assert main(["run", str(cql), "--shared-join", "fastest"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("sluice: ") and "unknown shared-join policy 'fastest'" in err and "\n" not in err


def test_a_query_planned_onto_an_existing_port_is_served_when_the_first_goes() -> None:
    """Review of the planner's memo: an equal query reuses the port, and its owner must know it —
    removing the first query (or its failing) must not remove the operators the second reads."""
    eng = EmbeddedEngine(start=0)
    eng.execute(DDL)
    text = "SELECT * FROM A [Range 3], B [Range 3] WHERE A.K = B.K"
    first, second = eng.register_query(text, name="first"), eng.register_query(text, name="second")
    window = eng.register_query("SELECT count(*) FROM A [Range 3]", name="w1")
    window2 = eng.register_query("SELECT count(*) FROM A [Range 3]", name="w2")
    eng.push("A", [(1, 1, 1)])
    eng.push("B", [(1, 1, 2)])
    eng.run()
    first.close()
    window.close()
    eng.push("A", [(2, 1, 3)])
    eng.close(3)
    assert [(e.ts, e.row) for e in second.results() if e.sign == "+"] == [(1, (1, 1, 1, 2)), (2, (1, 3, 1, 2))]
    assert [e.row for e in window2.results() if e.sign == "+"] == [(0,), (1,), (2,)]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10**6),
    windows=st.lists(st.sampled_from(WINDOWS), min_size=2, max_size=5),
    mode=st.sampled_from(["whole", "pieces", "snapshots"]),
)
def test_windows_of_different_sizes_share_one_buffer_and_each_answer_is_exact(
    seed: int, windows: list[str], mode: str
) -> None:
    """STREAM §3.2: one SharedWindow per stream and family serves every size; each query (an
    aggregate, a projection, an Istream) gets the reference evaluator's answer."""
    rnd = random.Random(seed)
    streams = _streams(rnd, rnd.randrange(5, 40), rnd.randrange(3, 25))
    shapes = [
        "SELECT K, count(*), sum(V) FROM A [{w}] GROUP BY K",
        "SELECT * FROM A [{w}] WHERE V > 3",
        "Istream(SELECT V FROM A [{w}])",
        "SELECT DISTINCT K FROM A [{w}]",
    ]
    queries = [shapes[i % len(shapes)].format(w=w) for i, w in enumerate(windows)]
    chunk = None if mode == "whole" else rnd.randrange(1, 8)
    eng, got = _run(queries, streams, 30, shared_join="greedy", chunk=chunk, snapshots=mode == "snapshots")
    _check(eng, queries, got, streams, 30)
    from sluice.runtime.operators.shared_window import SharedWindow

    # over the stream itself: one per family (a selection pushed below a window is another stream)
    source = eng.sources["a"].output
    over_a = [o for o in eng.operators if isinstance(o, SharedWindow) and o.readers[0].queue is source]
    assert 1 <= len(over_a) <= 2


@pytest.mark.parametrize(
    "text", ["SELECT * FROM A [Range 3], B [Range 3] WHERE A.K = B.K", "SELECT count(*) FROM A [Range 3]"]
)
def test_a_name_used_again_after_removal_is_served(text: str) -> None:
    """Review finding: a port's handle kept a removed query's name, so the same name registered
    again was never recorded by the port's owner, and removing the other query cut it off."""
    eng = EmbeddedEngine(start=0)
    eng.execute(DDL)
    eng.register_query(text)  # q1
    eng.register_query(text).close()  # q2, gone
    again = eng.register_query(text)  # q2 again
    eng.unregister("q1")
    eng.push("A", [(1, 1, 1)])
    eng.push("B", [(1, 1, 2)])
    eng.close(3)
    assert [e for e in again.results() if e.sign == "+"]
    assert "query q2" in eng.explain()


@pytest.mark.parametrize("shared_join", ["off", "greedy", "greedy:variant=nested-loop"])
def test_integer_and_float_keys_match_exactly_beyond_two_to_the_53(shared_join: str) -> None:
    """Review finding: keys of two numeric types were both cast to double, which rounds BIGINTs
    beyond 2^53 (Arrow refused: the query failed); SQL compares them exactly."""
    eng = EmbeddedEngine(start=0, shared_join=shared_join)
    eng.execute("REGISTER STREAM A (K integer, V integer); REGISTER STREAM B (K float, W integer)")
    text = "SELECT * FROM A [Range 3], B [Range 3] WHERE A.K = B.K AND A.V > 0"
    q = eng.register_query(text)
    a = [(1, (2**53 + 1, 1)), (1, (7, 2)), (2, (-(2**63), 3))]
    b = [(1, (9007199254740992.0, 3)), (1, (7.0, 4)), (1, (7.5, 5)), (2, (float(-(2**63)), 6)), (2, (None, 7))]
    eng.push("A", [(t, *r) for t, r in a])
    eng.push("B", [(t, *r) for t, r in b])
    eng.close(5)
    assert not eng.failures
    assert not diff_outputs(_expected(eng, text, {"A": a, "B": b}, 5), q.results())
    assert [e.row for e in q.results() if e.sign == "+"] == [(7, 2, 7.0, 4), (-(2**63), 3, float(-(2**63)), 6)]


def test_the_residual_runs_only_on_pairs_some_query_keeps() -> None:
    """Review finding: a pulled-up selection must protect the rows it rules out — the common
    predicate overflowed (and was reported) on a row only a query's own WHERE excludes."""
    eng = EmbeddedEngine(start=0)
    eng.execute(DDL)
    text = "SELECT * FROM A [Range 3], B [Range 3] WHERE A.K = B.K AND A.V > 5 AND A.V * 4611686018427387904 > B.W"
    q = eng.register_query(text)
    eng.push("A", [(1, 1, 2), (1, 1, 0)])  # V = 2: outside the query's A.V > 5 (and 2 · 2^62 overflows)
    eng.push("B", [(1, 1, 3)])
    eng.close(6)
    assert not eng.rejected() and not eng.failures
    assert q.results() == []


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(1, 40), min_size=1, max_size=25),  # the batches appended
    st.integers(0, 60),  # elements dropped from the front
    st.lists(st.integers(0, 10_000), max_size=40),  # positions taken (any order, repeats)
)
def test_a_join_buffer_takes_rows_across_its_chunks(sizes: list[int], drop: int, picks: list[int]) -> None:
    """``JoinBuffer.take`` per chunk equals a take from the whole table, and appending keeps
    O(log n) chunks (each element copied O(log n) times, never the whole buffer per batch).
    """
    from sluice.datatypes import INTEGER, VARCHAR
    from sluice.runtime.batch import make
    from sluice.runtime.operators.join_buffer import JoinBuffer

    buf = JoinBuffer([INTEGER, VARCHAR])
    n = 0
    for k in sizes:
        vals = list(range(n, n + k))
        cols = [pa.array(vals, pa.int64()), pa.array([f"s{v}" for v in vals])]
        buf.append(make(list(range(n, n + k)), 1, cols, [INTEGER, VARCHAR]), n, [])
        n += k
        assert buf.table.column(0).num_chunks <= 2 * max(1, n).bit_length()
    buf.drop_before(min(drop, n - 1))
    held = n - buf.base
    idx = np.array([buf.base + p % held for p in picks], np.int64)
    whole = buf.table.combine_chunks().take(pa.array(idx - buf.base))
    assert buf.take(idx).equals(whole)
    assert buf.take(idx, [3]).column(0).equals(whole.column(3))
