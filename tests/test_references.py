"""Referential integrity with a bounded delay (STREAM §4.1): ``FOREIGN KEY (a) REFERENCES R(b)
WITHIN k`` — an element of ``R`` is never stamped more than ``k`` after an element of the
referencing stream with its value.  Checked where ``R`` releases its elements (a late one is
rejected with its reason), and read by joins and aggregates over ``R.b``, which forget what can no
longer pair (design 023, "Referential integrity").
"""

from __future__ import annotations

import pickle
import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sluice.backends.embedded import EmbeddedEngine
from sluice.catalog import Catalog, CatalogError
from sluice.cql.ast import StreamConstraint
from sluice.cql.errors import BindError, ParseError
from sluice.errors import InUseError
from sluice.plan import bind_query
from sluice.plan.ddl import execute, open_catalog
from sluice.reference import evaluate
from sluice.reference.compare import diff_outputs
from sluice.runtime.operators.join import Join

from engine_runner import push_in_pieces
from strategies import SLOW_OK

ORDERS = "register stream Orders (oid integer, cust integer)"
FULFIL = "register stream Fulfillments (oid integer, qty integer) foreign key (oid) references Orders(oid) within {k}"
JOIN = "Istream(select F.oid, O.cust, F.qty from Fulfillments as F, Orders as O where F.oid = O.oid)"  # §4.1's example


def _engine(k: int = 3, **options: Any) -> EmbeddedEngine:
    eng = EmbeddedEngine(**options)
    eng.execute(ORDERS)
    eng.execute(FULFIL.format(k=k))
    return eng


# -- declaring it ---------------------------------------------------------------------------


def test_ddl_round_trips_persists_and_the_api_takes_it(tmp_path) -> None:
    cat = open_catalog(tmp_path / "c.db")
    execute(cat, ORDERS)
    execute(cat, "register stream F (oid integer, qty integer) FOREIGN KEY (oid) REFERENCES orders WITHIN 5")
    (c,) = cat.lookup("F").constraints
    # the referenced stream's name as it was registered; its attribute defaults to the same name
    assert c == StreamConstraint("REFERENCES", "oid", 5, "Orders", "oid")
    assert c.sql() == "FOREIGN KEY (oid) REFERENCES Orders(oid) WITHIN 5"
    again = open_catalog(tmp_path / "c.db")  # replayed in order: Orders before what references it
    assert again.lookup("F").constraints == (c,)
    eng = EmbeddedEngine()
    eng.register_stream("O", [("id", "integer")])
    eng.register_stream("G", [("oid", "integer")], constraints=[("references", "oid", "O(id)", 2)])
    assert eng.catalog.lookup("G").constraints == (StreamConstraint("REFERENCES", "oid", 2, "O", "id"),)


@pytest.mark.parametrize(
    ("ddl", "message"),
    [
        ("register stream F (oid integer) foreign key (oid) references Nope(oid)", "Nope is not a registered stream"),
        ("register stream F (oid integer) foreign key (oid) references F(oid)", "cannot reference itself"),
        ("register stream F (oid integer) foreign key (oid) references R(oid)", "R is not a registered stream"),
        ("register stream F (oid integer) foreign key (oid) references Orders(nope)", "Orders has no attribute nope"),
        (
            "register stream F (oid varchar(4)) foreign key (oid) references Orders(oid)",
            "F.oid is varchar\\(4\\) but Orders.oid is integer",
        ),
        ("register stream F (x integer) foreign key (oid) references Orders(oid)", "names no attribute of F"),
        ("register relation F (oid integer) foreign key (oid) references Orders(oid)", "a relation has none"),
    ],
)
def test_declaration_errors_are_clear(ddl: str, message: str) -> None:
    cat = Catalog()
    execute(cat, ORDERS)
    execute(cat, "register relation R (oid integer)")
    with pytest.raises(BindError, match=message):
        execute(cat, ddl)
    assert [d.name for d in cat.sources] == ["Orders", "R"]
    with pytest.raises(CatalogError, match="F: FOREIGN KEY \\(oid\\) REFERENCES Nope\\(oid\\) WITHIN 1: Nope is not"):
        cat.register_stream("F", [("oid", "integer")], constraints=[("references", "oid", "Nope", 1)])


def test_parse_errors_point_at_the_clause() -> None:
    eng = _engine()
    with pytest.raises(ParseError, match="whole number of time units after WITHIN"):
        eng.execute("register stream G (oid integer) foreign key (oid) references Orders(oid) within x")
    for unit in ("seconds", "ms", "s"):
        with pytest.raises(ParseError, match="own time, without a unit") as e:
            eng.execute(f"register stream G (oid integer) foreign key (oid) references Orders(oid) within 2 {unit}")
        assert "^" * len(unit) in str(e.value)
    with pytest.raises(ParseError, match="'\\(' before the referencing attribute"):
        eng.execute("register stream G (oid integer) foreign key oid references Orders")
    with pytest.raises(ValueError, match="'Stream' or 'Stream\\(column\\)'"):
        StreamConstraint.of(("references", "oid", "Orders(oid", 1))


def test_a_referenced_stream_is_not_dropped_before_what_references_it() -> None:
    eng = _engine()
    with pytest.raises(
        InUseError, match="Fulfillments \\(FOREIGN KEY \\(oid\\) REFERENCES Orders\\(oid\\) WITHIN 3\\)"
    ):
        eng.unregister_source("Orders")
    eng.unregister_source("Fulfillments")
    # Orders no longer waits for it: its elements are released as they complete
    q = eng.register_query("select * from Orders")
    eng.push("Orders", [(1, 1, 10), (2, 2, 20)])
    eng.run()
    assert [e.row for e in q.results()] == [(1, 10)]
    eng.unregister(q.name)
    eng.unregister_source("Orders")


def test_declared_while_running_its_early_elements_are_late() -> None:
    """Registered after Orders released up to ts 10: a fulfillment stamped before 10 − k would
    speak of orders already out — rejected as late — and Orders goes on once it catches up.
    """
    eng = EmbeddedEngine()
    eng.execute(ORDERS)
    q = eng.register_query("Istream(select * from Orders)")
    eng.push("Orders", [(t, t, 0) for t in range(1, 12)])
    eng.run()
    assert len(q.results()) == 10
    eng.execute(FULFIL.format(k=2))
    eng.push("Fulfillments", [(5, 5, 1), (8, 50, 1), (12, 12, 1)])
    eng.push("Orders", [(13, 50, 0), (14, 12, 0), (15, 15, 0)])
    eng.close()
    # (8, 50) is in time (8 + 2 ≥ 10) and makes (13, 50) late; (5, 5) is behind what was released
    assert [e.row[0] for e in q.results()] == [*range(1, 12), 12, 15]
    late, order = sorted(eng.rejected())
    assert "Fulfillments" in late and "ts 5" in late
    assert order.startswith("Orders: element at ts 13: oid = 50 violates")


def test_unregistering_the_referencing_stream_ends_its_check_unless_state_was_forgotten_by_it() -> None:
    eng = _engine(k=1)
    q = eng.register_query("select oid, count(*) from Orders group by oid", name="g")
    assert "REFERENCED BY Fulfillments" in eng.explain("g")
    eng.push("Fulfillments", [(1, 7, 1)])
    eng.push("Orders", [(1, 1, 0), (5, 7, 0)])
    eng.heartbeat(5)
    eng.run()
    assert len(eng.rejected()) == 1  # 7 came 4 after its reference
    with pytest.raises(InUseError, match="queries g forget state by its references to Orders"):
        eng.unregister_source("Fulfillments")
    eng.unregister("g")
    eng.unregister_source("Fulfillments")
    assert eng.sources["orders"].constraints == ()
    q = eng.register_query("Istream(select * from Orders)")
    eng.push("Orders", [(6, 7, 0)])  # no longer checked against the old references
    eng.close()
    assert [e.row for e in q.results()] == [(7, 0)] and len(eng.rejected()) == 1


def test_a_snapshot_restores_only_into_an_engine_with_the_same_references() -> None:
    eng = _engine(k=1)
    eng.register_query(JOIN, name="j")
    eng.push("Fulfillments", [(1, 7, 1)])
    eng.run()
    blob = pickle.dumps(eng.snapshot_state())
    other = EmbeddedEngine()
    other.execute(ORDERS)
    other.execute("register stream Fulfillments (oid integer, qty integer)")
    other.register_query(JOIN, name="j")
    with pytest.raises(Exception, match="restore into an engine with the same streams and references|plan"):
        other.restore_state(pickle.loads(blob))


def test_each_reference_and_the_streams_own_punctuations_name_their_own_cause() -> None:
    eng = EmbeddedEngine()
    eng.execute("register stream O (oid integer) punctuated by oid")
    eng.execute("register stream F1 (oid integer) foreign key (oid) references O within 100")
    eng.execute("register stream F2 (oid integer) foreign key (oid) references O within 1")
    eng.push("F1", [(1, 5), (1, 6)])
    eng.push("F2", [(1, 5)])
    eng.push("O", [(1, 9)])
    eng.punctuate("O", "oid", values=[9])
    eng.push("O", [(4, 5), (5, 9), (6, 6)])
    eng.close()
    why = sorted(eng.rejected())
    assert len(why) == 2
    assert "oid = 5 violates oid REFERENCED BY F2(oid) WITHIN 1: an element of F2" in why[0]
    assert "oid = 9 violates PUNCTUATED BY oid: a punctuation before it" in why[1]


# -- what it checks and what it saves ---------------------------------------------------------


def test_a_late_order_is_rejected_with_its_reason_and_the_rest_go_on() -> None:
    eng = _engine(k=3)
    q = eng.register_query(JOIN, name="j")
    eng.push("Orders", [(1, 1, 10)])
    eng.push("Fulfillments", [(2, 1, 5), (3, 2, 7), (4, 3, 1)])
    eng.push("Orders", [(5, 2, 20), (8, 3, 30), (9, 4, 40)])  # 2 within 3 of ts 3; 3 is one too late
    eng.push("Fulfillments", [(10, 4, 9)])
    eng.close()
    assert [e.row for e in q.results()] == [(1, 10, 5), (2, 20, 7), (4, 40, 9)]
    (why,) = eng.rejected()
    assert why == (
        "Orders: element at ts 8: oid = 3 violates oid REFERENCED BY Fulfillments(oid) WITHIN 3: an element of "
        "Fulfillments with that value came more than 3 time unit(s) of Fulfillments before it"
    )
    src = {s.name: s for s in eng.statistics().sources}
    assert src["Orders"].rejected_reasons == (("constraint", 1),) and src["Orders"].accepted == 3
    assert "Orders oid REFERENCED BY Fulfillments(oid) WITHIN 3: left rows whose key it closed not kept" in (
        eng.explain("j")
    )


def test_the_join_keeps_a_fulfillment_only_while_its_order_may_still_come() -> None:
    """Each order comes up to ``k`` after its fulfillments, and orders are not unique: without
    the constraint the join keeps every fulfillment; with it, those of the last ``k`` ticks.
    """
    n, k = 2000, 5
    rng = random.Random(3)
    fills = [(t, t, rng.randint(1, 9)) for t in range(1, n + 1)]
    orders = sorted((t + rng.randint(0, k), t, 0) for t in range(1, n + 1))
    kept, answers = [], []
    for decl in (False, True):
        eng = EmbeddedEngine()
        eng.execute(ORDERS)
        eng.execute(FULFIL.format(k=k) if decl else "register stream Fulfillments (oid integer, qty integer)")
        q = eng.register_query(JOIN, name="j")
        peak = 0
        for lo in range(0, n, 50):
            eng.push("Fulfillments", fills[lo : lo + 50])
            eng.push("Orders", [o for o in orders if lo < o[0] <= lo + 50])
            eng.run()
            # every synopsis's fulfillments (a shared window join's, or the join's own)
            held = eng.statistics().synopses
            peak = max(peak, sum(s.tuples for name, s in held) - _orders_held(eng))
        eng.push("Orders", [o for o in orders if o[0] > n])
        eng.close()
        kept.append(peak)
        answers.append(sorted(q.results()))
        assert not eng.rejected()
    assert answers[0] == answers[1] and len(answers[0]) == n
    # the fulfillments of at most k + 1 instants, plus those of the batch not yet read past
    assert kept[0] >= n - 50 and kept[1] <= 2 * (k + 1) + 50, kept


def _orders_held(eng: EmbeddedEngine) -> int:
    """The orders the join holds (every one: orders are not unique, nothing forgets them)."""
    return sum(s.enqueued for s in eng.statistics().queues if s.name == "Orders")


def test_the_referenced_stream_waits_for_the_referencing_one() -> None:
    """Orders is released no further than Fulfillments has been, plus k: until then a late order
    could not be told from one in time.  A heartbeat on Fulfillments lets it go.
    """
    eng = _engine(k=2)
    q = eng.register_query("Istream(select * from Orders)")
    eng.push("Orders", [(t, t, 0) for t in range(1, 11)])
    eng.run()
    assert not q.results()
    eng.heartbeat(4, "Fulfillments")
    eng.run()
    assert [e.ts for e in q.results()] == [1, 2, 3, 4, 5, 6]
    eng.close()
    assert len(q.results()) == 10


# -- the engine against the definition -------------------------------------------------------

QUERIES = [
    "Istream(select O.oid, O.a, F.b from O, F where O.oid = F.oid)",
    "select O.oid, F.b from O, F where O.oid = F.oid and F.b > 0",
    "select F.b, count(*) from O, F where O.oid = F.oid group by F.b",
    "Istream(select O.a, F.b from O, F [Range 3] where O.oid = F.oid)",
    "Rstream(select O.oid, F.b from O [Now], F where O.oid = F.oid)",
    "select oid, count(*), sum(a) from O group by oid",
    "select oid, max(b), count(*) from F group by oid",
    "Istream(select * from O where a > 0)",
]


def _stream(rng: random.Random, n: int, spread: int, nulls: bool) -> list[tuple[int, Any, int]]:
    """(ts, oid, value): oids from a small range, so that values meet across the two streams."""
    rows, t = [], 1
    for _ in range(n):
        t += rng.choice([0, 0, 1, 2])
        oid = None if nulls and rng.random() < 0.1 else rng.randrange(spread)
        rows.append((t, oid, rng.randrange(-1, 3)))
    return rows


CASE = st.fixed_dictionaries(
    {
        "seed": st.integers(0, 10**6),
        "k": st.integers(0, 4),
        "unique": st.booleans(),
        "spread": st.sampled_from([5, 20, 60]),
        "slack": st.integers(0, 2),
        "chunk": st.integers(1, 9),
        "snapshots": st.booleans(),
    }
)


@settings(max_examples=12, **SLOW_OK)
@given(case=CASE)
def test_answers_equal_the_definition_over_the_admitted_elements(case) -> None:
    """Random orders and fulfillments, some orders late (a few cases; ``-m slow``: many)."""
    _answers_equal_the_definition(**case)


@pytest.mark.slow
@settings(max_examples=100, **SLOW_OK)
@given(case=CASE)
def test_answers_equal_the_definition_over_the_admitted_elements_many_cases(case) -> None:
    _answers_equal_the_definition(**case)


def _answers_equal_the_definition(
    seed: int, k: int, unique: bool, spread: int, slack: int, chunk: int, snapshots: bool
) -> None:
    rng = random.Random(seed)
    ddl = (
        f"register stream O (oid integer, a integer){' unique by oid' if unique else ''}; "
        f"register stream F (oid integer, b integer) foreign key (oid) references O(oid) within {k}"
    )
    streams = {"O": _stream(rng, 30, spread, nulls=True), "F": _stream(rng, 30, spread, nulls=True)}
    pushes = sorted(
        (t + rng.randint(0, slack), i, name, (t, o, v))
        for name, rows in streams.items()
        for i, (t, o, v) in enumerate(rows)
    )

    def build() -> tuple[EmbeddedEngine, list[Any]]:
        eng = EmbeddedEngine(slack=slack, start=0)
        eng.execute(ddl)
        return eng, [eng.register_query(q, name=f"q{i}") for i, q in enumerate(QUERIES)]

    eng, handles = push_in_pieces(build, [(name, row) for _, _, name, row in pushes], chunk, snapshots)
    until = max(t for rows in streams.values() for t, _, _ in rows) + 3
    eng.close(until)

    # the definition: each stream in its order (timestamps, ties in arrival order); an order is
    # admitted unless a fulfillment with its oid came more than k before it (or, unique, an
    # admitted order had it)
    def ordered(name: str) -> list[tuple[int, Any, int]]:
        return sorted((row for _, _, n, row in pushes if n == name), key=lambda r: r[0])

    first: dict[Any, int] = {}
    for t, o, _ in ordered("F"):
        if o is not None:
            first.setdefault(o, t)
    seen: set[Any] = set()
    data: dict[str, list[tuple[int, tuple[Any, ...]]]] = {"O": [], "F": [(t, (o, v)) for t, o, v in ordered("F")]}
    rejected = 0
    for t, o, v in ordered("O"):
        late = o is not None and o in first and t > first[o] + k
        again = unique and (o is None or o in seen)
        if late or again:
            rejected += 1
            continue
        seen.add(o)
        data["O"].append((t, (o, v)))
    assert sum(s.rejected for s in eng.statistics().sources) == rejected
    cat = Catalog()
    execute(cat, ddl)
    for q, h in zip(QUERIES, handles, strict=True):
        want = evaluate(bind_query(cat, q), data, {}, start=0, until=until)
        diffs = diff_outputs(want, h.results())
        assert not diffs, (q, ddl, diffs[:5])


def test_a_checkpoint_carries_the_references(tmp_path) -> None:
    """Killed mid-run and restored: Orders still rejects by the fulfillments before the cut, and
    still waits for Fulfillments — the same answers and rejections as an engine that ran through.
    """
    rows_f = [(t, t, t) for t in range(1, 41)]
    rows_o = [(t + 2, t, 0) for t in range(1, 41) if t % 7] + [(44, 7, 0)]  # the last is late (7 at ts 7)
    rows_o.sort()
    outs = []
    for cut in (None, 20):
        eng = _engine(k=3)
        q = eng.register_query(JOIN, name="j")
        for lo in range(0, 40, 10):
            if lo == cut:
                eng.checkpoint(tmp_path / "ck")
                eng = EmbeddedEngine.restore(tmp_path / "ck")
                q = eng.queries["j"]
            eng.push("Fulfillments", rows_f[lo : lo + 10])
            eng.push("Orders", [o for o in rows_o if lo < o[0] <= lo + 10])
            eng.run()
        eng.push("Orders", [o for o in rows_o if o[0] > 40])
        eng.close()
        (j,) = [op for op in eng.operators if isinstance(op, Join)]
        outs.append((sorted(q.results()), eng.rejected(), len(j.left)))
    assert outs[0] == outs[1]
    assert len(outs[0][0]) == 35 and len(outs[0][1]) == 1 and outs[0][2] <= 4


def test_text_keys_and_the_referencing_streams_own_unit() -> None:
    """``WITHIN k`` counts the referencing stream's time units (seconds here, on a millisecond
    catalog: 2 s = 2,000 ticks); text keys compare as text.
    """
    eng = EmbeddedEngine(time_unit="millisecond")
    eng.execute("register stream O (code varchar(8), x integer) unit millisecond")
    eng.execute("register stream F (code varchar(8)) unit second foreign key (code) references O within 2")
    q = eng.register_query("Istream(select * from O)")
    eng.push("F", [(1, "ab"), (1, "cd"), (2, "ab")])  # at 1,000 ms and 2,000 ms
    eng.push("O", [(2500, "zz", 1), (2999, "cd", 2), (3000, "ab", 3), (3001, "cd", 4), (3001, "ab", 5)])
    eng.close()
    # "ab" is bounded by its first reference (1 s): by 3,000 ms, though another came at 2 s
    assert [e.row for e in q.results()] == [("zz", 1), ("cd", 2), ("ab", 3)]
    assert [m.split(":")[1] for m in eng.rejected()] == [" element at ts 3001"] * 2


@pytest.mark.parametrize("seed", range(4))
def test_queries_registered_while_running_answer_by_the_definition(seed: int) -> None:
    """Half the queries registered part-way (a new epoch of the plan, each reading the streams
    from its first instant): the same admitted elements, the same answers as the definition.
    """
    rng = random.Random(seed)
    ddl = (
        "register stream O (oid integer, a integer); "
        "register stream F (oid integer, b integer) foreign key (oid) references O(oid) within 2"
    )
    streams = {"O": _stream(rng, 40, 20, nulls=False), "F": _stream(rng, 40, 20, nulls=False)}
    pushes = sorted((t, i, name, (t, o, v)) for name, rows in streams.items() for i, (t, o, v) in enumerate(rows))
    eng = EmbeddedEngine(start=0)
    eng.execute(ddl)
    handles = {f"q{i}": eng.register_query(q, name=f"q{i}") for i, q in enumerate(QUERIES) if i % 2 == 0}
    half = len(pushes) // 2
    for n, (_, _, name, row) in enumerate(pushes):
        if n == half:
            eng.run()
            handles |= {f"q{i}": eng.register_query(q, name=f"q{i}") for i, q in enumerate(QUERIES) if i % 2}
        eng.push(name, [row])
    until = max(t for rows in streams.values() for t, _, _ in rows) + 3
    eng.close(until)
    first: dict[Any, int] = {}
    for t, o, _ in sorted(streams["F"], key=lambda r: r[0]):
        first.setdefault(o, t)
    data = {
        "O": [(t, (o, v)) for t, o, v in sorted(streams["O"], key=lambda r: r[0]) if not t > first.get(o, t) + 2],
        "F": [(t, (o, v)) for t, o, v in sorted(streams["F"], key=lambda r: r[0])],
    }
    assert sum(s.rejected for s in eng.statistics().sources) == len(streams["O"]) - len(data["O"])
    cat = Catalog()
    execute(cat, ddl)
    for name, h in handles.items():
        start = h.start if h.start is not None else 0
        since = {s: [(t, r) for t, r in rows if t >= start] for s, rows in data.items()}
        want = evaluate(bind_query(cat, QUERIES[int(name[1:])]), since, {}, start=start, until=until)
        assert not diff_outputs(want, h.results()), (name, start)
