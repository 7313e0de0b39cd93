"""A selection's conjuncts evaluated one after another in the order an A-Greedy-style monitor
picks (``sluice.runtime.operators.filter_order``): the same rows as the predicate evaluated at
once, whatever the order, and an order that follows drifting selectivities."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sluice.backends.embedded import EmbeddedEngine
from sluice.catalog import Catalog
from sluice.plan import bind_query, execute
from sluice.reference import evaluate
from sluice.reference.compare import diff_outputs
from sluice.runtime.operators import stateless
from sluice.runtime.operators.filter_order import FilterOrder, Monitor, greedy
from sluice.runtime.operators.stateless import Select

from engine_runner import run_engine

CAT = Catalog()
execute(CAT, "register stream S (K integer, V integer, N varchar(4))")


def test_greedy_by_hand() -> None:
    # conjunct 0 keeps everything, 1 keeps half, 2 keeps a quarter; equal costs
    rows = np.array([[1, 1, 1], [1, 1, 0], [1, 0, 0], [1, 0, 0]], bool)
    # (after 2, the one row left passes 0 and 1 alike: neither drops anything, written order)
    assert greedy(rows, np.ones(3)) == [2, 0, 1]
    # conjunct 2 twice as costly per row it drops: 1 (cost 1 / drops 1/2 = 2) before 2 (4 / (3/4) ≈ 5.3)
    assert greedy(rows, np.array([1.0, 1.0, 4.0])) == [1, 2, 0]


def test_greedy_reads_conditional_pass_rates() -> None:
    """A-Greedy's point: once 0 has run, 1 (which drops the same rows) drops nothing more, and 2
    — less selective alone — goes before it."""
    rows = np.array([[0, 0, 1], [0, 0, 1], [1, 1, 0], [1, 1, 1]], bool)
    assert greedy(rows, np.ones(3)) == [0, 2, 1]
    # without the correlation, the individually more selective 1 would come second
    assert greedy(np.array([[0, 1, 1], [0, 0, 1], [1, 1, 0], [1, 0, 1]], bool), np.ones(3))[1] == 1


def test_cost_per_row_is_the_slope_not_the_fixed_cost_of_a_call() -> None:
    """A conjunct seen on 32 rows and on 10,000: its fixed cost per call (1 ms here) must not
    count as a cost per row — cheap-per-row conjuncts would look costly on small samples."""
    m = Monitor(2)
    for rows in (32, 10_000, 32, 10_000):
        m.record(0, rows, 1e-3 + rows * 1e-9)  # cheap per row, costly per call
        m.record(1, rows, 1e-5 + rows * 1e-7)  # costly per row
    cheap, costly = m.costs()
    assert cheap == pytest.approx(1e-9, rel=1e-3) and costly == pytest.approx(1e-7, rel=1e-3)
    fixed = Monitor(1)
    fixed.record(0, 100, 1e-3)  # one size only: the mean per row
    assert fixed.costs()[0] == pytest.approx(1e-5)


def test_small_batches_are_evaluated_at_once_unprofiled() -> None:
    eng = EmbeddedEngine(CAT, start=0)
    eng.register_query("Rstream(select K, V from S [Now] where K > 0 and V > 0)", name="q")
    for t in range(20):
        eng.push("S", [(t, 1, 1, "a")] * 10)
        eng.run()
    op = _select(eng)
    assert op.monitor is not None and op.monitor.batches == 0 and op.monitor.profiled == 0


def _select(eng: EmbeddedEngine) -> Select:
    (op,) = [o for o in eng.operators if isinstance(o, Select) and o.monitor is not None]
    return op


def test_the_order_follows_drifting_selectivities() -> None:
    """First V > 0 keeps nearly nothing (it goes first, against the written order), then K > 0
    does: the order swaps back, and the answer is the reference evaluator's."""
    ticks = itertools.count()
    eng = EmbeddedEngine(CAT, start=0, clock=lambda: float(next(ticks)))  # every evaluation costs alike
    query = "Rstream(select K, V from S [Now] where K > 0 and V > 0)"
    q = eng.register_query(query, name="q")
    op = _select(eng)
    rows = []
    for t in range(0, 10):  # V > 0 rarely, K > 0 always
        batch = [(t, 1, int(i == 0), "a") for i in range(64)]
        rows += batch
        eng.push("S", batch)
        eng.run()
    assert op.monitor is not None and op.monitor.order == [1, 0]
    for t in range(10, 40):  # now K > 0 rarely, V > 0 always
        batch = [(t, int(i == 0), 1, "b") for i in range(64)]
        rows += batch
        eng.push("S", batch)
        eng.run()
    assert op.monitor.order == [0, 1]
    eng.close()
    expected = evaluate(bind_query(CAT, query), {"S": [(t, r) for t, *r in rows]}, {}, start=0, until=39)
    assert not diff_outputs(expected, q.results())


conjuncts = st.lists(
    st.sampled_from(
        ["K > 0", "V is not null", "V % 2 = 0", "N <> 'b'", "K + V < 3", "N like 'a%'", "V between -1 and 2"]
    ),
    min_size=2,
    max_size=4,
    unique=True,
)
values = st.one_of(st.none(), st.integers(-3, 3))
rows_ = st.lists(
    st.tuples(st.integers(0, 6), st.integers(-1, 2), values, st.sampled_from(["a", "b", "ab", None])), max_size=40
).map(lambda rs: sorted(rs, key=lambda r: r[0]))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(conjuncts, rows_, st.sampled_from(list(FilterOrder)), st.sampled_from([None, 1, 5]))
def test_every_order_selects_what_the_predicate_does(cs, rows, mode, chunk) -> None:
    query = f"Istream(select K, V, N from S where {' and '.join(cs)})"
    data = {"S": [(t, (k, v, n)) for t, k, v, n in rows]}
    start, until = (rows[0][0], rows[-1][0]) if rows else (0, 0)
    expected = evaluate(bind_query(CAT, query), data, {}, start=start, until=until)
    saved = stateless.FILTER_ORDER, stateless.SMALL
    stateless.FILTER_ORDER, stateless.SMALL = mode, 1  # (every batch monitored, however small)
    try:
        got = run_engine(CAT, query, data, {}, start=start, until=until, chunk=chunk)
    finally:
        stateless.FILTER_ORDER, stateless.SMALL = saved
    assert not diff_outputs(expected, got)


@pytest.mark.parametrize("mode", list(FilterOrder))
def test_a_row_a_conjunct_cannot_evaluate_is_dropped_in_any_order(mode: FilterOrder) -> None:
    saved = stateless.FILTER_ORDER, stateless.SMALL
    stateless.FILTER_ORDER, stateless.SMALL = mode, 1
    try:
        eng = EmbeddedEngine(CAT, start=0)
        q = eng.register_query("Istream(select K from S where K * 4611686018427387904 > 0 and V > 0)", name="q")
        eng.push("S", [(0, 1, 1, "a"), (0, 2, 1, "a"), (1, 0, 1, "a"), (1, -1, 5, "a")])
        eng.close()
    finally:
        stateless.FILTER_ORDER, stateless.SMALL = saved
    assert [e.row for e in q.results()] == [(1,)]  # K = 2 overflows: dropped, counted
    assert len(eng.rejected()) == 1 and "overflow" in eng.rejected()[0]
