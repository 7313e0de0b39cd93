"""Sampling rate reduction at registration (STREAM §5.1.2): ``Sample(a To b)`` — the rates a user
tolerates — gets its rate chosen once, when the query is registered: ``b`` unless its window
would not fit in what the memory limit leaves free, then as low as needed, never below ``a``.
The answer is then exactly the written query's at that rate (design 021, "Static sampling").
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from sluice.backends.embedded import EmbeddedEngine
from sluice.cql.errors import ParseError
from sluice.cql.parser import parse_query
from sluice.cql.printer import to_cql
from sluice.plan import logical as L
from sluice.reference import evaluate
from sluice.reference.compare import diff_outputs


def _samples(plan: L.LogicalNode) -> list[L.Sample]:
    out = [plan] if isinstance(plan, L.Sample) else []
    return out + [s for c in plan.inputs() for s in _samples(c)]


def _stream(lo: int, hi: int) -> pa.Table:
    ts = np.arange(lo, hi)
    return pa.table({"ts": ts, "a": ts % 97, "b": ts})


def test_the_range_parses_prints_and_refuses_nonsense() -> None:
    q = parse_query("select * from S Sample(10 To 50.5) [Range 3]")
    assert to_cql(q) == "SELECT * FROM S [Range 3] Sample(10 To 50.5)" and parse_query(to_cql(q)) == q
    for bad, msg in [
        ("select * from S Sample(50 to 10)", "from the lowest percentage to the highest"),
        ("select * from S Sample(10 to 150)", "at most 100"),
        ("select * from S Sample(10 to x)", "highest sampling percentage after TO"),
        ("select * from S Sample(10 x)", "or To and the highest"),
    ]:
        with pytest.raises(ParseError, match=msg):
            parse_query(bad)


def test_without_a_limit_the_highest_rate_and_the_written_querys_answer() -> None:
    eng = EmbeddedEngine()
    eng.execute("register stream S (a integer, b integer)")
    q = eng.register_query("Istream(select a, b from S Sample(10 To 50) where a < 60)", name="q")
    (s,) = _samples(q.bound.plan)
    assert (s.fraction, s.least, s.most) == (0.5, 0.1, 0.5)
    assert "Sample [50% of 10–50%]" in eng.explain("q")
    eng.push("S", _stream(1, 2001))
    eng.close()
    data = {"S": [(int(t), (int(t) % 97, int(t))) for t in range(1, 2001)]}
    assert not diff_outputs(evaluate(q.bound.plan, data, {}, until=2000), q.results())
    assert 400 < len(q.results()) < 850 and q.approximation.exact


def _running(limit: str, least: int, min_precision: float = 0.0) -> tuple[EmbeddedEngine, object, object]:
    """An engine whose stream S brought 2,000 elements (one a tick), then a query over a window
    of 10,000 ticks with ``Sample(least To 80)`` registered, and a plain one beside it.
    """
    eng = EmbeddedEngine(memory_limit=limit)
    eng.execute("register stream S (a integer, b integer)")
    eng.register_query("Istream(select a from S where a < 0)", name="watch")
    for lo in range(1, 2001, 250):
        eng.push("S", _stream(lo, lo + 250))
        eng.run()
    q = eng.register_query(
        f"select a, count(*) from S Sample({least} To 80) [Range 10000] group by a",
        name="q",
        min_precision=min_precision,
    )
    plain = eng.register_query("select count(*) from S [Range 50]", name="plain")
    return eng, q, plain


def test_a_window_that_would_not_fit_gets_a_lower_rate_chosen_once_and_reported() -> None:
    eng, q, plain = _running("400KB", 5)
    (s,) = _samples(q.bound.plan)
    assert 0.05 < s.fraction < 0.8 and (s.least, s.most) == (0.05, 0.8)
    (event,) = [e for e in eng.statistics().approx_events if e.action == "static-sample"]
    assert "q: Sample(5 To 80) over S at" in event.detail and "more than the" in event.detail
    assert "(chosen at registration)" in q.approximation.describe() and not q.approximation.exact
    assert f"Sample [{s.fraction * 100:g}% of 5–80%]" in eng.explain("q")
    for lo in range(2001, 8001, 250):
        eng.push("S", _stream(lo, lo + 250))
        eng.run()
    eng.close()
    st = eng.statistics()
    assert st.peak_memory < st.memory_limit and all(s.dropped == 0 for s in st.shedding), st.shedding
    assert q.approximation.dropped == 0 and plain.approximation.exact  # nothing else was dropped
    # the rate stays for the query's life: exactly the written query at that rate, from its start
    assert _samples(q.bound.plan)[0].fraction == s.fraction
    for h in (q, plain):  # (registered while running: the stream from its first instant)
        data = {"S": [(t, (t % 97, t)) for t in range(h.start, 8001)]}
        assert not diff_outputs(evaluate(h.bound.plan, data, {}, start=h.start, until=8000), h.results())


def test_never_below_the_lowest_rate_tolerated_nor_the_querys_least_precision() -> None:
    assert _samples(_running("150KB", 40)[1].bound.plan)[0].fraction == 0.4
    assert _samples(_running("150KB", 5, min_precision=0.75)[1].bound.plan)[0].fraction == pytest.approx(0.6)
    assert _samples(_running("150KB", 5, min_precision=1)[1].bound.plan)[0].fraction == 0.8


def test_a_stream_without_history_keeps_the_highest_rate() -> None:
    eng = EmbeddedEngine(memory_limit="10KB")
    eng.execute("register stream S (a integer, b integer)")
    q = eng.register_query("select count(*) from S Sample(5 To 80) [Range 3000]")
    assert _samples(q.bound.plan)[0].fraction == 0.8
    assert not [e for e in eng.statistics().approx_events if e.action == "static-sample"]


def test_queries_registered_one_after_another_do_not_each_take_the_whole_free_memory() -> None:
    """A window just registered holds nothing yet: what it will hold is reserved until its span
    has passed, so the next query's rate is chosen from what is left.
    """
    eng, q, _ = _running("400KB", 5)
    first = _samples(q.bound.plan)[0].fraction
    r = eng.register_query("select a, count(*) from S Sample(5 To 80) [Range 10000] group by a", name="r")
    assert _samples(r.bound.plan)[0].fraction < first


def test_the_report_survives_deactivate_and_activate_and_precision_is_counted_per_sample() -> None:
    eng, q, _ = _running("400KB", 5)
    (s,) = _samples(q.bound.plan)
    before = q.approximation.describe()
    eng.deactivate("q")
    eng.activate("q")
    assert q.approximation.describe() == before and not q.approximation.exact
    # a self-join with one side lowered: recall is that side's chosen/asked, counted once
    j = eng.register_query(
        "Istream(select X.a from S Sample(5 To 80) [Range 10000] as X, S [Range 5] as Y where X.b = Y.b)", name="j"
    )
    (x,) = _samples(j.bound.plan)
    assert x.fraction < 0.8
    assert j.approximation.precision.fn == pytest.approx(1 - x.fraction / 0.8)
