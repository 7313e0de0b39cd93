"""Changing a running engine (issue #11): queries added and removed at any time; the engine's
options as a user passes them (strings for units and strategies, strategy parameters).
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sluice import EmbeddedEngine, SluiceError, TimeUnit
from sluice.plan import bind_query
from sluice.reference import Element, evaluate
from sluice.reference.compare import diff_outputs

DDL = "register stream S (K integer, V integer); register relation R (K integer)"

LATE_QUERIES = [
    "select K, count(*) from S [Range 3 Seconds] group by K",
    "Istream(select K, sum(V) from S [Range 2 Seconds] group by K)",
    "select count(*), max(V) from S [Rows 2]",
    "select S.K, V from S [Range 2 Seconds], R where S.K = R.K",
    "Rstream(select * from S [Now])",
    "select * from S where V > 0",
    "select distinct K from S [Range 4 Seconds]",
]


def _reference(eng: EmbeddedEngine, text: str, s_rows, r_ups, start: int, until: int):
    """The oracle for a query whose first instant is ``start``: the streams from ``start`` on, the
    relation as it stood at ``start`` (earlier changes apply at ``start``).
    """
    streams = {"S": [(t, (k, v)) for t, k, v in s_rows if t >= start]}
    relations = {"R": [(max(t, start), s, (k,)) for t, s, k in r_ups]}
    return evaluate(bind_query(eng.catalog, text), streams, relations, start=start, until=until)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.tuples(st.integers(1, 12), st.integers(0, 2), st.integers(-3, 3)), min_size=1, max_size=25),
    st.lists(st.tuples(st.integers(1, 12), st.integers(0, 2)), max_size=6),
    st.sampled_from(LATE_QUERIES),
    st.integers(1, 12),
    st.booleans(),
)
def test_a_query_added_part_way_equals_the_reference_from_its_start(s_rows, r_ins, late, split, sharing) -> None:
    s_rows = sorted(s_rows)
    r_ups = sorted((t, "+", k) for t, k in r_ins)
    eng = EmbeddedEngine(sharing=sharing)
    eng.execute(DDL)
    early = eng.register_query(late)  # the same text: a late query must not share its state
    first = [r for r in s_rows if r[0] <= split]
    eng.push("S", first)
    eng.push("R", [u for u in r_ups if u[0] <= split])
    eng.run()
    q = eng.register_query(late)
    # nothing released yet (no complete instant): the late query is as if registered first
    first_instant = min([s_rows[0][0]] + [u[0] for u in r_ups])
    start = q.start if q.start is not None else first_instant
    eng.push("S", [r for r in s_rows if r[0] > split])
    eng.push("R", [u for u in r_ups if u[0] > split])
    until = max(t for t, _, _ in s_rows)
    eng.close(until)
    assert not eng.rejected()
    diffs = diff_outputs(_reference(eng, late, s_rows, r_ups, start, until), q.results())
    assert not diffs, f"{late} from {start}\n" + "\n".join(diffs[:8])
    # the query registered first saw everything
    assert not diff_outputs(_reference(eng, late, s_rows, r_ups, first_instant, until), early.results())


def test_a_query_registered_after_run_receives_input_pushed_later() -> None:
    eng = EmbeddedEngine()
    eng.execute(DDL)
    eng.push("S", [(1, 1, 1), (2, 2, 2)])
    eng.run()  # instant 1 is complete (2 arrived), instant 2 may still get elements
    q = eng.register_query("select * from S")
    assert q.start == 2
    eng.push("S", [(2, 3, 3), (3, 4, 4)])
    eng.close()
    assert [(e.ts, e.row) for e in q.results()] == [(2, (2, 2)), (2, (3, 3)), (3, (4, 4))]


def test_closing_a_query_removes_its_private_operators_and_keeps_shared_ones() -> None:
    eng = EmbeddedEngine()
    eng.execute(DDL)
    a = eng.register_query("select K, count(*) from S [Range 2 Seconds] group by K")
    b = eng.register_query("select K, sum(V) from S [Range 2 Seconds] group by K")
    eng.push("S", [(1, 1, 5), (2, 1, 6)])
    eng.run()
    n_ops = len(eng.statistics().operators)
    a.close()
    assert "q1" not in eng.queries and eng.explain().startswith("query q2")
    assert len(eng.statistics().operators) < n_ops
    assert "SharedWindow port 0 → q2: [Range 2 ticks]" in eng.explain(b)  # the shared window stays for q2
    eng.push("S", [(3, 1, 7)])
    eng.close()
    expected = _reference(eng, b.bound.text, [(1, 1, 5), (2, 1, 6), (3, 1, 7)], [], 1, 3)
    assert not diff_outputs(expected, b.results())
    with pytest.raises(SluiceError, match="no query named 'q1'"):
        eng.unregister("q1")
    a.close()  # closing twice is harmless


def test_a_removed_query_leaves_nothing_held_in_shared_queues() -> None:
    eng = EmbeddedEngine()
    eng.execute(DDL)
    keep = eng.register_query("select * from S")
    gone = eng.register_query("select K from S [Rows 5]")
    gone.close()
    eng.push("S", [(t, t, t) for t in range(1, 50)])
    eng.close()
    assert keep.count == 49
    assert eng.statistics().queue_bytes == 0


def test_time_units_and_strategy_parameters_as_strings() -> None:
    eng = EmbeddedEngine(time_unit="millisecond", scheduler="threshold")  # threshold has a default budget
    assert eng.catalog.time_unit is TimeUnit.MILLISECOND and eng.strategy.limit == 64 * 2**20
    assert EmbeddedEngine(time_unit="minutes").catalog.time_unit is TimeUnit.MINUTE
    assert EmbeddedEngine(scheduler="threshold:memory=5MB").strategy.limit == 5_000_000
    with pytest.raises(SluiceError, match="unknown time unit 'fortnight'"):
        EmbeddedEngine(time_unit="fortnight")
    with pytest.raises(SluiceError, match="has no parameter 'memroy'"):
        EmbeddedEngine(scheduler="threshold:memroy=5MB")
    with pytest.raises(SluiceError, match="unknown scheduler 'bogus'"):
        EmbeddedEngine(scheduler="bogus")


def test_a_time_window_without_a_unit_counts_the_streams_own_time() -> None:
    """STREAM 0.6.0's parser.y: ``time_spec: T_INT`` — ``[Range 4]`` is four units of the stream's time."""
    eng = EmbeddedEngine()
    eng.execute("register stream S (A integer); register stream M (A integer) unit minute")
    rows = [(t, t % 2) for t in range(1, 12)]
    plain = eng.register_query("select A, count(*) from S [Range 4] group by A")
    unit = eng.register_query("select A, count(*) from S [Range 4 Seconds] group by A")
    slide = eng.register_query("select count(*) from S [Range 4 Slide 2]")
    per_minute = eng.register_query("select count(*) from M [Range 2]")
    assert "Range 120 ticks" in eng.explain(per_minute)  # two of M's minutes, in the catalog's seconds
    eng.push("S", rows)
    eng.close()
    assert plain.results() == unit.results() and plain.results()
    expected = evaluate(
        bind_query(eng.catalog, "select count(*) from S [Range 4 Seconds Slide 2 Seconds]"),
        {"S": [(t, (a,)) for t, a in rows]},
        {},
        start=1,
        until=11,
    )
    assert not diff_outputs(expected, slide.results())


def test_the_cli_rejects_a_bad_scheduler_in_one_line(tmp_path, capsys) -> None:
    from sluice.cli import main

    f = tmp_path / "q.cql"
    f.write_text("register stream S (A integer); select * from S;")
    assert main(["run", str(f), "--scheduler", "threshold:memory=lots"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "memory='lots'" in err


def test_a_bounded_output_buffer_keeps_the_last_elements_and_subscribers_see_all() -> None:
    eng = EmbeddedEngine()
    eng.execute(DDL)
    seen: list = []
    last3 = eng.register_query("select * from S", retain=3)
    none = eng.register_query("select * from S where V > 0", retain=0)
    none.subscribe(seen.extend)
    everything = eng.register_query("select * from S where V > -100")
    rows = [(t, t, t % 3 - 1) for t in range(1, 21)]
    for i in range(0, 20, 7):
        eng.push("S", rows[i : i + 7])
        eng.run()
    eng.close()
    assert [e.row for e in last3.results()] == [(18, -1), (19, 0), (20, 1)] and last3.count == 20
    assert none.results() == [] and none.count == len(seen) == sum(1 for r in rows if r[2] > 0)
    assert everything.count == len(everything.results()) == 20
    with pytest.raises(SluiceError, match="retain must be"):
        eng.register_query("select * from S", retain=-1)


def test_a_subscriber_pushing_into_the_engine_is_seen_by_the_loop_it_interrupts() -> None:
    """The loop asks again only the units a step may have changed (issue #11); a push from a
    subscriber runs the engine inside that step, so the interrupted loop asks every unit again:
    what the push fed is processed by the same run() call, nothing waits for the next one.
    """
    eng = EmbeddedEngine()
    eng.execute("register stream S (A integer); register stream T (A integer)")
    first = eng.register_query("Istream(select A from S [Range Unbounded] where A > 0)", name="first")
    second = eng.register_query("select A, count(*) from T [Range 10] group by A", name="second")

    def forward(elements: list[Element]) -> None:
        eng.push("T", [(ts, *row) for ts, _, row in elements])
        eng.heartbeat(max(ts for ts, _, _ in elements), "T")
        eng.run()  # a run inside the interrupted one

    first.subscribe(forward)
    eng.push("S", [(1, 5), (2, -1), (3, 5), (4, 7)])
    eng.heartbeat(4, "S")
    eng.run()
    assert [r for _, _, r in first.results()] == [(5,), (5,), (7,)]
    assert second.results() == [(1, "+", (5, 1)), (3, "-", (5, 1)), (3, "+", (5, 2)), (4, "+", (7, 1))]


@pytest.mark.parametrize(
    "query", ["select K, count(*) from S [Range 3] group by K", "Istream(select K, sum(V) from S [Range 3] group by K)"]
)
def test_the_output_order_does_not_depend_on_batch_boundaries(query: str) -> None:
    """Group ids order a batch's changes within an instant; new groups get them in the order they
    first appear, so the same input in one batch or row by row gives the same output, in order.
    """
    rows = [(t, k, t * k) for t in range(1, 9) for k in (7, 3, 9, 5) if (t + k) % 3]
    outs = []
    for step in (len(rows), 1, 5):
        eng = EmbeddedEngine()
        eng.execute("register stream S (K integer, V integer)")
        q = eng.register_query(query)
        for i in range(0, len(rows), step):
            eng.push("S", rows[i : i + step])
            eng.run()
        eng.close()
        outs.append(q.results())
    assert outs[0] == outs[1] == outs[2] and outs[0]


@pytest.mark.parametrize("scheduler", ["fifo", "chain", "path-capacity", "simplified-segment"])
def test_stepping_one_decision_at_a_time_answers_as_running_and_asks_only_the_units_a_step_touched(
    scheduler, monkeypatch
) -> None:
    """The loop keeps each unit's has-work answer from one run() to the next (the experiments step
    the engine one decision at a time): the answers equal a plain run's, and a step asks again only
    the units it may have changed, plus every unit once when a run finds nothing left to do."""
    from sluice.runtime.units import EngineUnit

    def build() -> tuple[EmbeddedEngine, list]:
        eng = EmbeddedEngine(scheduler=scheduler, budget=1, sharing=False)
        eng.execute("register stream S (A integer, B integer)")
        eng.execute("register stream T (A integer, C integer)")
        qs = [eng.register_query(f"select A, B from S [Range 3] where A > {k}") for k in range(8)]
        qs += [eng.register_query(f"Istream(select S.A, C from S [Rows 2], T [Rows 3] where S.A = T.A and B > {k})")
               for k in range(4)]  # fmt: skip
        return eng, qs

    rows = [(t, t % 5, t % 7) for t in range(40)]
    plain, qp = build()
    plain.push("S", [(t, a, b) for t, a, b in rows])
    plain.push("T", [(t, a, c) for t, a, c in rows if t % 2])
    plain.close()
    stepped, qs = build()
    asked = 0
    has_work = EngineUnit.has_work

    def counting(self: EngineUnit) -> bool:
        nonlocal asked
        asked += 1
        return has_work(self)

    monkeypatch.setattr(EngineUnit, "has_work", counting)
    steps = 0
    for t, a, b in rows:
        stepped.push("S", [(t, a, b)])
        if t % 2:
            stepped.push("T", [(t, a, b)])
        while stepped.run(max_steps=1):
            steps += 1
    stepped.close()
    for a, b in zip(qp, qs, strict=True):
        assert [(e.ts, e.sign, e.row) for e in a.results()] == [(e.ts, e.sign, e.row) for e in b.results()]
    units = len(stepped.loop._units or [])
    assert steps > 0 and units > 10
    # before: every unit asked at every call (units × (steps + calls)); now a few per step
    assert asked < units * steps / 3, (asked, units, steps)


def test_estimates_must_be_finite() -> None:
    eng = EmbeddedEngine(scheduler="chain")
    with pytest.raises(SluiceError, match="finite"):
        eng.set_estimates({"select#1": (1e-3, float("nan"))})


def test_a_quantum_is_time_each_operator_takes_as_many_tuples_as_its_cost_allows() -> None:
    """Round-robin's quantum (Chain §4.3: "a fixed time quantum") is the same time for every
    operator: one costing a quarter of the mean takes four times the tuples a turn, one costing
    four times it a quarter — not the same number of tuples each (budget × quantum)."""
    eng = EmbeddedEngine(scheduler="round-robin", budget=16)
    eng.execute("register stream S (A integer, B integer)")
    eng.register_query("select A from S where A >= 0 and B >= 0")
    eng.register_query("Istream(select A, B from S [Range Unbounded] where B >= 0)")
    ops = [o for o in eng.operators if o.kind not in ("Output", "StreamSource")]
    # a dear selection, a cheap one, and a projection between them (seconds per tuple)
    costs = {o.name: {"select#1": 4e-3, "select#3": 0.5e-3}.get(o.name, 1e-3) for o in ops}
    eng.set_estimates({n: (c, 1.0) for n, c in costs.items()})
    eng.push("S", [(t, t, t) for t in range(400)])
    taken: dict[str, list[int]] = {}
    before = {o.name: o.tuples_in for o in ops}
    while eng.run(max_steps=1):
        u = eng.loop.last
        assert u is not None
        (op,) = u.ops
        taken.setdefault(op.name, []).append(op.tuples_in - before[op.name])
        before[op.name] = op.tuples_in
    mean = sum(costs.values()) / len(costs)
    first = {o.name for o in ops if any(r.queue.name == "S" for r in o.readers)}  # (a backlog of 400)
    assert first == {"select#1", "select#3"}
    for name, turns in taken.items():
        want = round(16 * mean / costs[name])  # tuples a full turn gives it
        assert max(turns) == want if name in first else max(turns) <= want, (name, turns[:5], want)
    # a time unit in seconds: each takes that time's worth, whatever budget the strategy names
    for scheduler in ("round-robin", "round-robin:budget=4"):
        eng = EmbeddedEngine(scheduler=scheduler, budget=16)
        eng.execute("register stream S (A integer, B integer)")
        eng.register_query("select A from S where A >= 0 and B >= 0")
        eng.set_estimates({o.name: (1e-3, 1.0) for o in eng.operators if o.kind not in ("Output", "StreamSource")})
        eng.loop.time_unit_seconds = 8e-3
        eng.push("S", [(t, t, t) for t in range(100)])
        assert eng.run(max_steps=1) == 1
        (op,) = eng.loop.last.ops
        assert op.tuples_in == 8, scheduler
    with pytest.raises(SluiceError, match="positive number of seconds"):
        eng.loop.time_unit_seconds = 0.0
