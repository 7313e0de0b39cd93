"""The dataflow level (Getta & Vossough §2.3, §3.1): a join of three or more inputs as one
operator without intermediate synopses, its per-input order by eq. 3, and eq. 1–2's decision to
keep an intermediate result.

The oracle is the reference evaluator; every plan shape (``join_intermediates`` "drop", "keep",
"auto") must give its answer exactly, however the input is fed, scheduled or snapshotted.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from sluice.backends.embedded import EmbeddedEngine
from sluice.catalog import Catalog
from sluice.errors import SluiceError
from sluice.plan import bind_query, execute
from sluice.plan.dataflow import MAX_EXHAUSTIVE, Intermediate, Mode, Step, best_order, cost, keep_intermediate
from sluice.reference import evaluate
from sluice.reference.compare import diff_outputs
from sluice.runtime.operators import dataflow_join
from sluice.runtime.operators.dataflow_join import DataflowJoin

from engine_runner import run_engine
from strategies import relation_updates

DDL = """
register stream A (K integer, V integer);
register stream B (K integer, V integer);
register stream C (K integer, V integer);
register relation R (K integer, N varchar(4));
"""


CAT = Catalog()
execute(CAT, DDL)

# -- eq. 3 ------------------------------------------------------------------------------------


def test_eq3_by_hand() -> None:
    # τ = (1, 2, 3), f = (4, 0.5, ·): block β = (1, 4, 2); item β = (1, 2.5, 1.5)
    assert cost([1, 2, 3], [4, 0.5, 9]) == 1 + 4 * 2 + 2 * 3
    assert cost([1, 2, 3], [4, 0.5, 9], Mode.ITEM) == 1 + 2.5 * 2 + 1.5 * 3
    with pytest.raises(ValueError):
        cost([1], [1, 2])


def test_the_papers_example_puts_the_difference_first() -> None:
    """§3.1: δ_s: →(w_s), ⋈_b(w_r), −_c(w_t) is better as −_c(w_t) first, since a difference
    returns at most one item per item (rates alike)."""
    fan = {1: 3.0, 2: 1.0}  # joining w_r makes 3 items, the difference at most 1
    order, _ = best_order([1, 2], lambda done, j: Step(1.0, fan[j]), first=0)
    assert order == (2, 1)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.floats(0.01, 10), st.floats(0, 10)), min_size=2, max_size=MAX_EXHAUSTIVE))
def test_block_and_item_mode_choose_the_same_order(ops: list[tuple[float, float]]) -> None:
    """Item mode's eq. 3 is (Σ τ + block cost)/2, and Σ τ is the same in every order."""
    steps = {j: Step(t, f) for j, (t, f) in enumerate(ops, start=1)}
    others = list(steps)

    def step(done: frozenset[int], j: int) -> Step:
        return steps[j]

    block, cb = best_order(others, step, 0, Mode.BLOCK)
    item, ci = best_order(others, step, 0, Mode.ITEM)
    assert ci == pytest.approx((sum(t for t, _ in ops) + cb) / 2)
    # the same order, or one that costs the same
    assert block == item or cost([steps[j].tau for j in item], [steps[j].fanout for j in item]) == pytest.approx(cb)
    # and no order is cheaper than the one chosen
    for perm in itertools.permutations(others):
        assert cost([steps[j].tau for j in perm], [steps[j].fanout for j in perm]) >= cb - 1e-9


def test_beyond_the_exhaustive_limit_the_order_is_greedy() -> None:
    fan = {j: float(j) for j in range(1, 9)}
    order, c = best_order(list(reversed(fan)), lambda done, j: Step(1.0, fan[j]), first=0)
    assert order == tuple(range(1, 9))
    assert c == cost([1.0] * 8, [fan[j] for j in order])


# -- eq. 1–2 ----------------------------------------------------------------------------------


def test_eq1_keeps_the_intermediate_when_t_outruns_r_and_s() -> None:
    """§3.1: the lower the frequencies of r and s against t, the shorter the wait, the more w_rs pays."""
    equal = Intermediate((1, 1, 1), f_rs=1, f_sr=1, f_ts=1)
    assert not keep_intermediate(equal)  # two writes of w_rs per item of t, one join saved
    assert keep_intermediate(Intermediate((1, 1, 5), f_rs=1, f_sr=1, f_ts=1))
    assert keep_intermediate(Intermediate((0, 0, 1), f_rs=1, f_sr=1, f_ts=0.5))  # static r and s
    assert not keep_intermediate(Intermediate((1, 1, 0), f_rs=1, f_sr=1, f_ts=9))  # t never arrives
    assert keep_intermediate(Intermediate((0, 0, 0), f_rs=1, f_sr=1, f_ts=1))  # nothing changes: join once
    # a t that makes more partners in w_s saves more by reading w_rs
    assert keep_intermediate(Intermediate((1, 1, 1), f_rs=1, f_sr=1, f_ts=3))
    assert Intermediate((2, 1, 4), f_rs=3, f_sr=1, f_ts=1, tau_write=2).wait() == (2 * 3 + 1 * 1) / 4 * 2


# -- plans ------------------------------------------------------------------------------------

THREE = "select A.V, B.V, C.V from A [Range 4], B [Range 4], C [Range 4] where A.K = B.K and B.K = C.K"


def _kinds(eng: EmbeddedEngine) -> list[str]:
    return [o.kind for o in eng.operators]


def test_default_plan_drops_the_intermediate_and_keep_restores_the_tree() -> None:
    drop = EmbeddedEngine(CAT)
    drop.register_query(THREE, name="q")
    assert "DataflowJoin" in _kinds(drop) and "Join" not in _kinds(drop)
    assert "no intermediate synopses (Getta & Vossough §2.3)" in drop.explain("q")
    keep = EmbeddedEngine(CAT, join_intermediates="keep")
    keep.register_query(THREE, name="q")
    assert "DataflowJoin" not in _kinds(keep) and "Join" in _kinds(keep)
    with pytest.raises(SluiceError, match="join_intermediates='tree': expected one of auto, keep, drop"):
        EmbeddedEngine(CAT, join_intermediates="tree")


def test_auto_keeps_the_join_of_rarely_changing_inputs() -> None:
    """Static relations first, a stream last: their join is written once and read by every
    element of the stream (eq. 1's extreme case, §3.1) — a binary join kept under the stream's."""
    cat = Catalog()
    execute(cat, "register stream S (K integer); register relation P (K integer); register relation Q (K integer)")
    query = "select * from P, Q, S [Range 3] where P.K = Q.K and Q.K = S.K"
    eng = EmbeddedEngine(cat)
    eng.attach_static("P", [(1,), (2,)])
    eng.attach_static("Q", [(1,), (1,)])
    eng.register_query(query, name="q")
    assert "DataflowJoin" not in _kinds(eng)
    eng.push("S", [(1, 1), (2, 2), (3, 1)])
    eng.close()
    assert sorted(e.row for e in eng.results("q") if e.sign == "+") == [(1, 1, 1)] * 4
    forced = EmbeddedEngine(cat, join_intermediates="drop")
    forced.attach_static("P", [(1,), (2,)])
    forced.attach_static("Q", [(1,), (1,)])
    forced.register_query(query, name="q")
    assert "DataflowJoin" in _kinds(forced)
    forced.push("S", [(1, 1), (2, 2), (3, 1)])
    forced.close()
    assert sorted(map(tuple, forced.results("q"))) == sorted(map(tuple, eng.results("q")))


def test_auto_decides_the_same_whenever_the_query_is_registered() -> None:
    """A plan must not depend on when its query was registered (a snapshot restores into an
    engine that registered the same queries, before any input): "auto" reads what registration
    knows — static relations never change, other inputs alike — not the rates seen so far."""
    early = EmbeddedEngine(CAT, start=1)
    early.register_query("select * from A", name="warm")
    early.register_query(THREE, name="q")
    late = EmbeddedEngine(CAT, start=1)
    late.register_query("select * from A", name="warm")
    for t in range(1, 41):  # C five times as often as A and B
        late.push("C", [(t, t % 3, t)])
        if t % 5 == 0:
            late.push("A", [(t, t % 3, t)])
            late.push("B", [(t, t % 3, t)])
    late.run()
    late.register_query(THREE, name="q")
    for eng in (early, late):
        assert [o.kind for o in eng.operators if "q" in o.queries].count("DataflowJoin") == 1
    state = early.snapshot_state()
    again = EmbeddedEngine(CAT, start=1)
    again.register_query("select * from A", name="warm")
    again.register_query(THREE, name="q")
    again.restore_state(state)


# -- answers ----------------------------------------------------------------------------------

windows = st.sampled_from(
    ["[Now]", "[Rows 2]", "[Range 3]", "[Range 4 Slide 2]", "[Range Unbounded]", "[Partition By K Rows 1]"]
)
FROMS = {  # the inputs, by the names the conditions use
    "streams": "A {0}, B {1}, C {2}",
    "self-join": "A {0}, A {1} as B, C {2}",  # one stream read twice (two readers of one queue)
    "grouped": "A {0}, (select K, count(*) as V from B {1} group by K) as B, C {2}",  # a derived input
}
CONDITIONS = [
    "A.K = B.K and B.K = C.K",
    "A.K = C.K and B.K = C.K",  # written A × B first (the order rule joins C between)
    "A.K = B.K and A.V < C.V",  # C joins by a residual alone: a cross product, filtered
    "A.K = B.K and B.K = C.K and A.V + B.V > C.V",
    "A.K = B.K and B.V = C.V and C.K = R.K",
    "A.K = B.K and B.K = C.K and C.K = R.K and R.N <> 'b'",
    "A.V - B.V >= C.K and A.K = C.K",
    "",  # all pairs
]
values = st.one_of(st.none(), st.integers(-2, 2))
rows = st.lists(st.tuples(st.integers(0, 8), st.integers(0, 2), values), max_size=8).map(
    lambda rs: sorted(rs, key=lambda r: r[0])
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(
    st.tuples(windows, windows, windows),
    st.sampled_from(CONDITIONS),
    st.tuples(rows, rows, rows),
    relation_updates(),
    st.sampled_from([(None, 65536, False), (1, 1, False), (3, 2, False), (2, 3, True)]),
    st.sampled_from(["drop", "keep", "auto"]),
    st.sampled_from([0, 1, float("inf")]),  # the run's changes paired by interval join, either, by hash
    st.sampled_from(sorted(FROMS)),
)
@example(
    ("[Rows 2]", "[Range 3]", "[Now]"),
    CONDITIONS[0],
    ([(1, 1, 1), (1, 1, 1), (2, 1, 2)], [(1, 1, 0), (2, 1, 0)], [(2, 1, 5)]),
    [],
    (1, 1, False),
    "drop",
    0,
    "streams",
)
def test_every_plan_equals_the_reference(wins, cond, streams, r_ups, feed, intermediates, pairs, inputs) -> None:
    leaves = FROMS[inputs].format(*wins) + (", R" if "R." in cond else "")
    query = f"select * from {leaves}" + (f" where {cond}" if cond else "")
    data = {n: [(t, (k, v)) for t, k, v in rs] for n, rs in zip("ABC", streams, strict=True)}
    relations = {"R": r_ups}
    stamps = [t for rs in streams for t, _, _ in rs] + [t for t, _, _ in r_ups]
    start, until = (min(stamps), max(stamps)) if stamps else (0, 0)
    expected = evaluate(bind_query(CAT, query), data, relations, start=start, until=until)
    chunk, budget, snapshots = feed
    engines: list[EmbeddedEngine] = []
    saved, dataflow_join.PAIRS_PER_ROW = dataflow_join.PAIRS_PER_ROW, pairs
    try:
        got = run_engine(
            CAT,
            query,
            data,
            relations,
            start=start,
            until=until,
            chunk=chunk,
            budget=budget,
            snapshots=snapshots,
            join_intermediates=intermediates,
            engines=engines,
        )
    finally:
        dataflow_join.PAIRS_PER_ROW = saved
    problems = diff_outputs(expected, got)
    assert not problems, f"{query} ({intermediates}): {problems[:5]}"
    if intermediates == "drop":
        assert any(isinstance(o, DataflowJoin) for o in engines[-1].operators)


# -- the operator -----------------------------------------------------------------------------


def test_each_input_orders_its_joins_by_what_it_measured() -> None:
    """δ_A joins B and C in either order; which is cheaper follows the fan-outs it measures, and
    drifts with them — without a wrong answer (the order of a join is free)."""
    cat = Catalog()
    execute(
        cat, "register stream A (K integer, J integer); register stream B (K integer); register stream C (J integer)"
    )
    query = "select * from A [Range 2], B [Range 100], C [Range 100] where A.K = B.K and A.J = C.J"
    eng = EmbeddedEngine(cat, start=0)
    q = eng.register_query(query, name="q")
    (op,) = [o for o in eng.operators if isinstance(o, DataflowJoin)]
    # B: many rows with key 0; C: each J once
    eng.push("B", [(0, 0)] * 30)
    eng.push("C", [(0, j) for j in range(30)])
    eng.run()
    for t in range(1, 6):
        eng.push("A", [(t, 0, t)])
        eng.heartbeat(t)
        eng.run()
    assert op.orders[0] == (2, 1)  # C first: one partner; then B: thirty
    # now C holds thirty rows per J and B one per key
    eng.push("C", [(10, 7)] * 60)
    eng.push("B", [(10, k) for k in range(1, 40)])
    for t in range(11, 20):
        eng.push("A", [(t, t, 7)])
        eng.heartbeat(t)
        eng.run()
    assert op.orders[0] == (1, 2)
    eng.close()
    expected = evaluate(
        bind_query(cat, query),
        {
            "A": [(t, (0, t)) for t in range(1, 6)] + [(t, (t, 7)) for t in range(11, 20)],
            "B": [(0, (0,))] * 30 + [(10, (k,)) for k in range(1, 40)],
            "C": [(0, (j,)) for j in range(30)] + [(10, (7,))] * 60,
        },
        {},
        start=0,
        until=19,
    )
    assert not diff_outputs(expected, q.results())


def test_it_holds_less_than_the_tree_of_joins() -> None:
    """The tree keeps A ⋈ B besides the windows; the dataflow join keeps the windows only."""
    held = {}
    for mode in ("drop", "keep"):
        eng = EmbeddedEngine(CAT, start=0, join_intermediates=mode)
        eng.register_query(THREE, name="q")
        for t in range(40):
            eng.push("A", [(t, t % 2, t)])
            eng.push("B", [(t, t % 2, -t)])
            eng.push("C", [(t, t % 2, 0)])
        eng.run()
        held[mode] = eng.statistics().synopsis_bytes
    assert held["drop"] < held["keep"]


def test_a_static_relations_partners_are_not_kept() -> None:
    """Once every other input has ended (static relations, read), an input's rows pair with
    nothing later: the stream's window is not kept (STREAM §2.2, as the binary join does)."""
    cat = Catalog()
    execute(cat, "register stream S (K integer); register relation P (K integer); register relation Q (K integer)")
    query = "select * from S [Range 5], P, Q where S.K = P.K and P.K = Q.K"
    eng = EmbeddedEngine(cat, join_intermediates="drop")
    eng.attach_static("P", [(1,), (2,)])
    eng.attach_static("Q", [(1,), (1,)])
    eng.register_query(query, name="q")
    eng.push("S", [(t, t % 3) for t in range(1, 20)])
    eng.close()
    (op,) = [o for o in eng.operators if isinstance(o, DataflowJoin)]
    assert (len(op.syn[0]), op.syn[1].copies(), op.syn[2].copies()) == (0, 2, 2)
    expected = evaluate(
        bind_query(cat, query),
        {"S": [(t, (t % 3,)) for t in range(1, 20)]},
        {"P": [(1, "+", (1,)), (1, "+", (2,))], "Q": [(1, "+", (1,)), (1, "+", (1,))]},
        start=1,
        until=19,
    )
    got = eng.results("q")
    assert got and not diff_outputs(expected, got)


def test_a_kept_intermediate_feeds_a_dataflow_join() -> None:
    """Four inputs, two static relations first: eq. 1 keeps their join (a binary join), and the
    two streams join it in one dataflow join — exact either way."""
    cat = Catalog()
    execute(
        cat,
        "register relation P (K integer); register relation Q (K integer); "
        "register stream S (K integer, V integer); register stream T (K integer, V integer)",
    )
    query = "select * from P, Q, S [Range 3], T [Rows 2] where P.K = Q.K and Q.K = S.K and S.K = T.K"
    s_rows = [(t, (t % 3, t)) for t in range(1, 25)]
    t_rows = [(t, (t % 2, -t)) for t in range(1, 25, 2)]
    results = {}
    for mode in ("auto", "keep", "drop"):
        eng = EmbeddedEngine(cat, join_intermediates=mode)
        eng.attach_static("P", [(0,), (1,)])
        eng.attach_static("Q", [(1,), (1,), (2,)])
        eng.register_query(query, name="q")
        kinds = [o.kind for o in eng.operators if "q" in o.queries]
        if mode == "auto":  # P ⋈ Q kept, read by the dataflow join of it, S and T
            (op,) = [o for o in eng.operators if isinstance(o, DataflowJoin)]
            assert op.n == 3 and "Join" in kinds
        eng.push("S", [(t, *r) for t, r in s_rows])
        eng.push("T", [(t, *r) for t, r in t_rows])
        eng.close()
        results[mode] = eng.results("q")
    expected = evaluate(
        bind_query(cat, query),
        {"S": s_rows, "T": t_rows},
        {"P": [(1, "+", (0,)), (1, "+", (1,))], "Q": [(1, "+", (1,)), (1, "+", (1,)), (1, "+", (2,))]},
        start=1,
        until=24,
    )
    assert expected
    for mode, got in results.items():
        assert not diff_outputs(expected, got), mode


def test_sluice_run_takes_the_option_and_every_choice_writes_the_same_file(tmp_path: Any) -> None:
    from sluice.cli import main

    cql = tmp_path / "q.cql"
    cql.write_text(DDL + "\n" + THREE + ";\n")
    for s, rows in {"A": [(1, 1, 1), (2, 2, 2)], "B": [(1, 1, 5), (2, 2, 6)], "C": [(2, 1, 7), (3, 2, 8)]}.items():
        (tmp_path / f"{s}.csv").write_text("".join(f"{t},{k},{v}\n" for t, k, v in rows))
    outs = {}
    for choice in ("auto", "keep", "drop", "off"):
        out = tmp_path / choice
        argv = ["run", str(cql), *(x for s in "ABC" for x in ("--source", f"{s}={tmp_path / (s + '.csv')}"))]
        flags = ["--sharing", "off"] if choice == "off" else ["--join-intermediates", choice]
        assert main([*argv, "--out", str(out), *flags]) == 0
        outs[choice] = {p.name: p.read_text() for p in sorted(out.iterdir())}
    assert outs["auto"]["q1.out"] and outs["auto"] == outs["keep"] == outs["drop"] == outs["off"]


def test_the_spark_backend_takes_the_same_option_and_errors() -> None:
    from sluice.backends.spark.engine import SparkEngine

    with pytest.raises(SluiceError, match="join_intermediates='tree': expected one of auto, keep, drop"):
        SparkEngine(join_intermediates="tree")  # refused before a session starts


def test_static_relations_written_first_are_joined_once() -> None:
    """Three static relations before a stream: eq. 1 keeps their join (each prefix of static
    inputs joined by another static one changes never), and the stream joins it."""
    cat = Catalog()
    execute(
        cat,
        "register relation P (K integer); register relation Q (K integer); register relation U (K integer); "
        "register stream S (K integer)",
    )
    eng = EmbeddedEngine(cat)
    for r in "PQU":
        eng.attach_static(r, [(1,), (2,)])
    eng.register_query("select * from P, Q, U, S [Range 2] where P.K = Q.K and Q.K = U.K and U.K = S.K", name="q")
    assert "DataflowJoin" not in _kinds(eng) and _kinds(eng).count("Join") == 3
    eng.push("S", [(1, 1), (2, 3)])
    eng.close()
    assert [(e.ts, e.sign, e.row) for e in eng.results("q")][:1] == [(1, "+", (1, 1, 1, 1))]


def test_spark_groups_no_three_way_join_with_the_shared_joins_it_will_not_use() -> None:
    """On Spark, queries whose first window join is the same run in one processor around a shared
    window join; a 3-way join is a dataflow join unless intermediates are kept, so it has none."""
    from sluice.backends.spark.compile import window_join_signature

    eng = EmbeddedEngine(CAT)
    two = eng.register_query("select * from A [Range 2], B [Range 2] where A.K = B.K").bound.plan
    three = eng.register_query(THREE).bound.plan
    inside = eng.register_query(
        "select * from C [Range 2] where C.K in (select A.K from A [Range 2], B [Range 2] where A.K = B.K)"
    ).bound.plan
    assert window_join_signature(two, "auto") == window_join_signature(two, "keep") == ("a", "b")
    assert window_join_signature(three, "auto") is None and window_join_signature(three, "drop") is None
    assert window_join_signature(three, "keep") == ("a", "b")
    assert window_join_signature(inside, "auto") == ("a", "b")  # (a 2-way join in a subquery)
