"""k-constraints on a stream's order (STREAM §4.1; design 023): declared in DDL, checked as a
source releases its elements, and read by joins to keep less.

The oracle: each constraint written as its definition (a loop over the admitted elements), and
the reference evaluator over what it admits — the engine must give exactly those answers, reject
exactly the rest, whatever the batching, slack, runs and snapshots in between.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sluice.backends.embedded import EmbeddedEngine
from sluice.catalog import Catalog, CatalogError
from sluice.cql.ast import StreamConstraint
from sluice.cql.errors import ParseError
from sluice.cql.parser import parse_script
from sluice.cql.printer import to_cql
from sluice.plan import bind_query
from sluice.plan.ddl import execute, open_catalog
from sluice.reference import evaluate
from sluice.reference.compare import diff_outputs
from sluice.runtime.constraints import Constraints
from sluice.runtime.operators.join import Join

from engine_runner import push_in_pieces
from strategies import SLOW_OK


def admitted(values: list[tuple[Any, ...]], constraints: list[tuple[str, int, int]]) -> list[bool]:
    """By definition: ``constraints`` are (kind, column, k); positions count admitted elements."""
    kept: list[tuple[Any, ...]] = []
    out = []
    for row in values:
        ok = True
        for kind, col, k in constraints:
            v = row[col]
            if v is None:
                ok = False
            elif kind == "ORDERED":  # not below any element more than k positions before it
                ok = ok and all(not v < w[col] for w in kept[: max(0, len(kept) - k)])
            elif kind == "UNIQUE":  # no element before it has it
                ok = ok and all(w[col] != v for w in kept)
            else:  # at most k elements with another value between two with this one
                last = [i for i, w in enumerate(kept) if w[col] == v]
                ok = ok and (not last or len(kept) - last[-1] - 1 <= k)
        out.append(ok)
        if ok:
            kept.append(row)
    return out


# -- the checker against the definition ---------------------------------------------------


def _batch(rows: list[tuple[Any, ...]], types: list[pa.DataType]) -> pa.Table:
    cols = {"__ts": pa.array(range(len(rows)), pa.int64()), "__sign": pa.array([1] * len(rows), pa.int8())}
    for i, t in enumerate(types):
        cols[f"c{i}"] = pa.array([r[i] for r in rows], t)
    return pa.table(cols)


constraint = st.one_of(
    st.tuples(st.sampled_from(["ORDERED", "CLUSTERED"]), st.integers(0, 1), st.integers(0, 3)),
    st.tuples(st.just("UNIQUE"), st.integers(0, 1), st.just(0)),
)


@settings(max_examples=200, deadline=None)
@given(
    ints=st.lists(st.one_of(st.none(), st.integers(0, 12)), max_size=40),
    strs=st.lists(st.sampled_from(["a", "b", "c", "d", "e", "f"]), max_size=40),
    cons=st.lists(constraint, min_size=1, max_size=2, unique_by=lambda c: (c[0], c[1])),
    cuts=st.lists(st.integers(1, 9), max_size=10),
)
def test_the_checker_admits_what_the_definition_does_however_it_is_batched(ints, strs, cons, cuts) -> None:
    rows = list(zip(ints, strs, strict=False))
    want = admitted(rows, cons)
    arr = Constraints("S", [(StreamConstraint(kind, f"c{col}", k), col) for kind, col, k in cons])
    got: list[tuple[Any, ...]] = []
    i = 0
    for n in [*cuts, len(rows)]:
        part = rows[i : i + n]
        i += n
        if part:
            kept, why = arr.check(_batch(part, [pa.int64(), pa.string()]))
            got += list(zip(kept.column("c0").to_pylist(), kept.column("c1").to_pylist(), strict=True))
            assert len(why) == min(5, len(part) - kept.num_rows)
    assert got == [r for r, ok in zip(rows, want, strict=True) if ok]


def test_many_violations_in_one_batch_are_checked_one_by_one() -> None:
    """Past a few re-checks the rest of a batch goes one element at a time: same answer."""
    rng = random.Random(3)
    rows = [(rng.randrange(50), "x") for _ in range(300)]
    want = admitted(rows, [("ORDERED", 0, 2)])
    kept, why = Constraints("S", [(StreamConstraint("ORDERED", "c0", 2), 0)]).check(
        _batch(rows, [pa.int64(), pa.string()])
    )
    assert kept.column("c0").to_pylist() == [r[0] for r, ok in zip(rows, want, strict=True) if ok]
    assert sum(not ok for ok in want) > 100 and len(why) == 5


# -- declaring them -------------------------------------------------------------------------


def test_ddl_round_trips_and_persists(tmp_path) -> None:
    text = "REGISTER STREAM F (oid integer, item varchar(8)) UNIT second ORDERED BY oid WITHIN 3 UNIQUE BY item"
    (stmt,) = parse_script(text)
    assert to_cql(stmt) == text
    cat = open_catalog(tmp_path / "c.db")
    execute(cat, text)
    cat.close()
    again = open_catalog(tmp_path / "c.db")
    assert again.lookup("F").constraints == (
        StreamConstraint("ORDERED", "oid", 3),
        StreamConstraint("UNIQUE", "item", 0),
    )


@pytest.mark.parametrize(
    "ddl, message",
    [
        ("register relation R (a integer) ordered by a", "a relation has none"),
        ("register stream S (a integer) ordered by b", "names no attribute of S"),
        ("register stream S (a integer) ordered by a within 2 ordered by A", "given twice"),
        ("register stream S (a integer) clustered by a within 4294967296", "k counts elements"),
    ],
)
def test_declaration_errors_are_clear(ddl, message) -> None:
    cat = Catalog()
    with pytest.raises(Exception, match=message):
        execute(cat, ddl)
    assert not cat.sources


def test_the_api_takes_constraints_and_refuses_bad_ones() -> None:
    eng = EmbeddedEngine()
    eng.register_stream("S", [("a", "integer")], constraints=[("ordered", "a", 2)])
    assert eng.catalog.lookup("S").constraints == (StreamConstraint("ORDERED", "a", 2),)
    with pytest.raises(CatalogError, match="kind is 'ordered', 'clustered', 'unique', 'punctuated' or 'references'"):
        eng.register_stream("T", [("a", "integer")], constraints=[("sorted", "a")])
    with pytest.raises(CatalogError, match="UNIQUE BY a takes no adherence k"):
        eng.register_stream("T", [("a", "integer")], constraints=[("unique", "a", 1)])
    with pytest.raises(ParseError, match="UNIQUE BY takes no WITHIN"):
        eng.execute("register stream U (a integer) unique by a within 1")
    with pytest.raises(ParseError, match="whole number of elements after WITHIN"):
        eng.execute("register stream U (a integer) ordered by a within -1")


# -- the engine against the definition ------------------------------------------------------

DDL = "register stream O (oid integer, a integer) {o}; register stream F (oid integer, b integer) {f}"

QUERIES = [
    "Istream(select O.oid, O.a, F.b from O, F where O.oid = F.oid)",  # STREAM §4.1's Orders ⋈ Fulfillments
    "select O.oid, F.b from O, F where O.oid = F.oid and F.b > 0",
    "select F.b, count(*) from O, F where O.oid = F.oid group by F.b",
    "Istream(select O.a, F.b from O [Range 3], F where O.oid = F.oid)",  # only F's constraints apply
    "select O.a, F.b from O [Rows 2], F where O.oid = F.oid",
    "Rstream(select O.oid, F.b from O [Now], F where O.oid = F.oid)",
    "Istream(select X.a, Y.a from O as X, O as Y where X.oid = Y.oid and X.a < Y.a)",
    "select P.k, F.b from (select oid + 0 as j, oid as k from O) as P, F where P.k = F.oid and P.j >= 0",
    "Dstream(select O.a, F.b from O, F [Range 2] where O.oid = F.oid and O.a = F.b)",
    # grouped by a constrained attribute: counting aggregates, value-level ones, a selection
    "select oid, count(*), sum(a), avg(a) from O group by oid",
    "select oid, max(b), count(distinct b) from F group by oid",
    "Istream(select oid, count(*) from F where b > 0 group by oid)",
    "select oid, a, count(*) from O group by a, oid",
    # a projection that drops some rows of a value (b = 2 overflows): not whole for CLUSTERED BY
    "select P.oid, max(P.r) from (select oid, b * 4611686018427387904 as r from F) as P group by P.oid",
    "select P.oid, P.r, O.a from (select oid, b * 4611686018427387904 as r from F) as P, O where P.oid = O.oid",
]


def _decl(kind: str, k: int) -> str:
    if kind == "UNIQUE":
        return "UNIQUE BY oid"
    return f"{kind} BY oid WITHIN {k}" if kind else ""


def _stream(rng: random.Random, n: int, noise: int) -> list[tuple[int, int, int]]:
    """(ts, oid, value): oids mostly rising in runs, with ``noise`` out of place."""
    rows, t, oid = [], 1, 0
    for _ in range(n):
        t += rng.choice([0, 0, 1, 2])
        oid += rng.choice([0, 0, 1])
        o = oid - rng.randrange(noise + 1) if noise else oid
        rows.append((t, o, rng.randrange(-1, 3)))
    return rows


CASE = st.fixed_dictionaries(
    {
        "seed": st.integers(0, 10**6),
        "o_kind": st.sampled_from(["", "ORDERED", "CLUSTERED", "UNIQUE"]),
        "f_kind": st.sampled_from(["ORDERED", "CLUSTERED", "UNIQUE"]),
        "ks": st.tuples(st.integers(0, 3), st.integers(0, 3)),
        "noise": st.integers(0, 3),
        "slack": st.integers(0, 2),
        "chunk": st.integers(1, 9),
        "snapshots": st.booleans(),
    }
)


@settings(max_examples=12, **SLOW_OK)
@given(case=CASE)
def test_answers_equal_the_definition_over_the_admitted_elements(case) -> None:
    """Every query shape over random constrained streams (a few cases; ``-m slow``: many)."""
    _answers_equal_the_definition(**case)


@pytest.mark.slow
@settings(max_examples=100, **SLOW_OK)
@given(case=CASE)
def test_answers_equal_the_definition_over_the_admitted_elements_many_cases(case) -> None:
    _answers_equal_the_definition(**case)


def _answers_equal_the_definition(
    seed: int, o_kind: str, f_kind: str, ks: tuple[int, int], noise: int, slack: int, chunk: int, snapshots: bool
) -> None:
    rng = random.Random(seed)
    ddl = DDL.format(o=_decl(o_kind, ks[0]), f=_decl(f_kind, ks[1]))
    streams = {"O": _stream(rng, 30, noise), "F": _stream(rng, 30, noise)}
    # pushed out of order within the slack: each element at most ``slack`` ticks after later ones
    pushes = sorted(
        (
            (t + rng.randint(0, slack), i, name, (t, o, v))
            for name, rows in streams.items()
            for i, (t, o, v) in enumerate(rows)
        ),
    )
    start = 0

    def build() -> tuple[EmbeddedEngine, list[Any]]:
        eng = EmbeddedEngine(slack=slack, start=start)
        eng.execute(ddl)
        return eng, [eng.register_query(q, name=f"q{i}") for i, q in enumerate(QUERIES)]

    eng, handles = push_in_pieces(build, [(name, row) for _, _, name, row in pushes], chunk, snapshots)
    until = max(t for rows in streams.values() for t, _, _ in rows) + 3
    eng.close(until)

    # the definition: each stream in its order (timestamps, ties in arrival order), then admitted
    kinds = {"O": (o_kind, ks[0]), "F": (f_kind, ks[1])}
    data, rejected = {}, 0
    for name in streams:
        arrived = [row for _, _, n, row in pushes if n == name]
        ordered = sorted(arrived, key=lambda r: r[0])  # stable: ties keep arrival order
        kind, k = kinds[name]
        ok = (
            admitted([r[1:] for r in ordered], [(kind, 0, 0 if kind == "UNIQUE" else k)])
            if kind
            else [True] * len(ordered)
        )
        data[name] = [(t, (o, v)) for (t, o, v), good in zip(ordered, ok, strict=True) if good]
        rejected += ok.count(False)
    assert sum(s.rejected for s in eng.statistics().sources) == rejected
    cat = Catalog()
    execute(cat, ddl)
    for q, h in zip(QUERIES, handles, strict=True):
        want = evaluate(bind_query(cat, q), data, {}, start=start, until=until)
        diffs = diff_outputs(want, h.results())
        assert not diffs, (q, ddl, diffs[:5])


# -- what it saves --------------------------------------------------------------------------


def _orders_and_fulfillments(ddl: str, n: int = 3000) -> tuple[EmbeddedEngine, Any]:
    eng = EmbeddedEngine()
    eng.execute(ddl)
    q = eng.register_query("Istream(select O.oid, F.qty from O, F where O.oid = F.oid)")
    rng = random.Random(7)
    orders = [(t, t, 0) for t in range(1, n + 1)]  # an order per instant
    # its fulfillments, in pieces, up to two instants later
    fills = sorted(
        (t + rng.randint(0, 2), t, rng.randint(1, 9)) for t in range(1, n + 1) for _ in range(rng.randint(1, 3))
    )
    for lo in range(0, n, 100):
        eng.push("O", orders[lo : lo + 100])
        eng.push("F", [f for f in fills if lo < f[0] <= lo + 100])
        eng.run()
    eng.close()
    return eng, q


def test_the_join_keeps_only_what_can_still_pair() -> None:
    """Orders ⋈ Fulfillments (STREAM §4.1's example): without constraints both synopses hold
    every element; with Orders ordered and Fulfillments ordered within 3 by orderID, a handful.
    """
    plain = "register stream O (oid integer, x integer); register stream F (oid integer, qty integer)"
    eng0, q0 = _orders_and_fulfillments(plain)
    eng1, q1 = _orders_and_fulfillments(
        "register stream O (oid integer, x integer) ordered by oid; "
        "register stream F (oid integer, qty integer) ordered by oid within 6"
    )
    assert sorted(q0.results()) == sorted(q1.results()) and len(q1.results()) > 3000
    assert not eng1.rejected()
    (j0,) = [op for op in eng0.operators if op.kind in ("Join", "SharedWindowJoin")]
    (j1,) = [op for op in eng1.operators if isinstance(op, Join)]
    assert len(j0.synopses()[0]) + len(j0.synopses()[1]) >= 3000
    assert len(j1.left) + len(j1.right) <= 20
    assert "O ORDERED BY oid WITHIN 0: right rows whose key it closed not kept" in eng1.explain(q1.name)


def _order_join(o: str, f: str) -> tuple[EmbeddedEngine, Any]:
    """Orders ⋈ Fulfillments with these declarations after each stream's attributes."""
    eng = EmbeddedEngine()
    eng.execute(f"register stream O (oid integer, x integer) {o}; register stream F (oid integer, qty integer) {f}")
    return eng, eng.register_query("Istream(select O.oid, F.qty from O, F where O.oid = F.oid)")


def test_clustered_arrival_lets_the_join_forget_finished_orders() -> None:
    """Fulfillments clustered by orderID (each order's pieces together) but in no order: an
    order's row leaves the join when its cluster closed — the closed orderIDs are kept, as
    numbers (8 bytes each): an order arriving after its cluster closed is not kept either.
    """
    eng, q = _order_join("", "clustered by oid within 1")
    ids = list(range(1, 501))
    random.Random(5).shuffle(ids)
    eng.push("O", [(1, i, 0) for i in ids])
    eng.push("F", [(2 + n, i, n % 4) for n, i in enumerate(j for i in ids for j in (i, i, i))])
    eng.close()
    assert len(q.results()) == 1500 and not eng.rejected()
    (j,) = [op for op in eng.operators if isinstance(op, Join)]
    # every order's row left; the fulfillments stay (a later order could still match them: that
    # orders come first is referential integrity, which this does not declare)
    assert len(j.left) <= 2 and len(j.right) == 1500
    assert j.right_promise is not None and 500 * 8 <= j.right_promise.nbytes() <= 500 * 8 + 2 * 16


def test_the_papers_example_keeps_no_fulfillment_and_an_order_until_its_last_one() -> None:
    """STREAM §4.1: with each order once (UNIQUE BY: the join is many-one) and arriving before its
    fulfillments, "we need not maintain a join synopsis for the F operand at all"; with the
    fulfillments clustered by orderID, "we need only save O tuples for a given orderID until the
    next orderID is seen".
    """
    eng, q = _order_join("unique by oid", "clustered by oid")
    ids = list(range(1, 301))
    random.Random(2).shuffle(ids)  # in no order: only unique, and each before its fulfillments
    peak = [0, 0]
    for n, i in enumerate(ids):
        eng.push("O", [(3 * n + 1, i, 0)])
        eng.push("F", [(3 * n + 2, i, 1), (3 * n + 3, i, 2)])
        eng.heartbeat(3 * n + 3)
        eng.run()
        (j,) = [op for op in eng.operators if isinstance(op, Join)]
        peak = [max(peak[0], len(j.left)), max(peak[1], len(j.right))]
    eng.push("O", [(1000, 7, 0)])  # order 7 again: rejected
    eng.close()
    assert len(q.results()) == 600 and peak == [1, 0]
    assert eng.rejected() == ["O: element at ts 1000: oid = 7 violates UNIQUE BY oid: an element before it had it"]
    text = eng.explain(q.name)
    assert "O UNIQUE BY oid: right rows whose key it closed not kept" in text
    assert "F CLUSTERED BY oid WITHIN 0: left rows whose key it closed not kept" in text


@pytest.mark.parametrize(
    "query, counting",
    [
        ("select oid, count(*), sum(qty) from F group by oid", "Counting"),
        ("select oid, count(distinct qty), max(qty) from F group by oid", "DistinctCounting"),
    ],
)
def test_grouping_forgets_the_groups_it_closed(query, counting) -> None:
    """Per-order totals over fulfillments ordered by orderID within 3: the aggregate keeps a few
    groups, not one per order — counting aggregates and DISTINCT ones (their (group, value) pairs
    too) alike.
    """
    sizes, answers = [], []
    for decl in ("", "ordered by oid within 3"):
        eng = EmbeddedEngine()
        eng.execute(f"register stream F (oid integer, qty integer) {decl}")
        q = eng.register_query(query)
        rng = random.Random(1)
        rows = [(t, t // 2 - rng.randint(0, 1), rng.randint(1, 9)) for t in range(1, 4001)]
        for lo in range(0, len(rows), 250):
            eng.push("F", rows[lo : lo + 250])
            eng.run()
        eng.close()
        assert not eng.rejected()
        (agg,) = [op for op in eng.operators if op.kind == "Aggregate"]
        assert type(agg._counting).__name__ == counting
        sizes.append(agg.state_bytes())
        answers.append(sorted(q.results()))
        if decl:
            assert "F ORDERED BY oid WITHIN 3: groups it closed forgotten" in eng.explain(q.name)
    assert answers[0] == answers[1]
    assert sizes[1] * 50 < sizes[0], sizes


def test_a_checkpoint_carries_what_the_constraints_track(tmp_path) -> None:
    """Killed mid-run and restored: the source still rejects by what came before, the join still
    forgets — the same answers and rejections as an engine that ran through.
    """
    ddl = (
        "register stream O (oid integer, x integer) ordered by oid; "
        "register stream F (oid integer, qty integer) clustered by oid within 1"
    )
    rows_o = [(t, t, 0) for t in range(1, 41)] + [(41, 3, 0)]  # the last one violates
    rows_f = [(t, t // 2, t) for t in range(1, 41)] + [(41, 5, 0)]  # 5's cluster closed long ago
    outs = []
    for cut in (None, 20):
        eng = EmbeddedEngine()
        eng.execute(ddl)
        q = eng.register_query("Istream(select O.oid, F.qty from O, F where O.oid = F.oid)", name="q")
        for lo in range(0, 40, 10):
            if lo == cut:
                eng.checkpoint(tmp_path / "ck")
                eng = EmbeddedEngine.restore(tmp_path / "ck")
                q = eng.queries["q"]
            eng.push("O", rows_o[lo : lo + 10])
            eng.push("F", rows_f[lo : lo + 10])
            eng.run()
        eng.push("O", rows_o[40:])
        eng.push("F", rows_f[40:])
        eng.close()
        (j,) = [op for op in eng.operators if isinstance(op, Join)]
        outs.append((sorted(q.results()), sorted(eng.rejected()), len(j.left), len(j.right)))
    assert outs[0] == outs[1]
    # O's rows for orders F has not reached stay (oid 19..40); F's rows behind O's floor left
    assert len(outs[0][1]) == 2 and outs[0][2] <= 22 and outs[0][3] <= 1


def test_a_projection_that_drops_some_rows_of_a_value_keeps_the_value_open() -> None:
    """F clustered by oid within 1, read through a projection whose product overflows for b = 2:
    that row is dropped (a row error), which puts two others between oid 1's remaining rows — a
    join or aggregate that tracked CLUSTERED BY through it would close oid 1 too early (a review
    found this: the aggregate emitted a second row for group 1, the join lost a pair).
    """
    ddl = "register stream F (oid integer, b integer) clustered by oid within 1; register stream G (oid integer, x integer)"
    p = "(select oid, b * 4611686018427387904 as r from F) as P"
    queries = [
        f"select P.oid, max(P.r) from {p} group by P.oid",
        f"select P.oid, P.r, G.x from {p}, G where P.oid = G.oid",
    ]
    f_rows = [(1, 1, 1), (2, 2, 1), (3, 1, 2), (4, 3, 1), (5, 1, 1)]
    eng = EmbeddedEngine(start=0)
    eng.execute(ddl)
    handles = [eng.register_query(q) for q in queries]
    for text in queries:
        assert "CLUSTERED" not in eng.explain(handles[queries.index(text)].name)
    eng.push("G", [(1, 1, 7)])
    for row in f_rows:
        eng.push("F", [row])
        eng.heartbeat(row[0])
        eng.run()
    eng.close(6)
    cat = Catalog()
    execute(cat, ddl)
    data = {"F": [(t, (o, b)) for t, o, b in f_rows], "G": [(1, (1, 7))]}
    for q, h in zip(queries, handles, strict=True):
        diffs = diff_outputs(evaluate(bind_query(cat, q), data, {}, start=0, until=6), h.results())
        assert not diffs, (q, diffs)


def test_one_column_in_two_keys_is_tracked_once_and_counted() -> None:
    eng = EmbeddedEngine()
    eng.execute("register stream O (oid integer, x integer) unique by oid; register stream F (a integer, b integer)")
    q = eng.register_query("Istream(select * from O, F where O.oid = F.a and O.oid = F.b)")
    assert eng.explain(q.name).count("O UNIQUE BY oid") == 1
    eng.push("O", [(t, t, 0) for t in range(1, 101)])
    eng.push("F", [(t, t, t) for t in range(1, 101)])
    eng.close()
    assert len(q.results()) == 100
    (j,) = [op for op in eng.operators if isinstance(op, Join)]
    assert j.left_promise is not None and len(j.left_promise.checks) == 1
    assert len(j.right) == 0 and j.state_bytes() >= 100 * 8  # the keys seen, counted
    assert eng.sources["o"].state_bytes() >= 100 * 8  # the source's check keeps them too


def test_a_violation_is_rejected_with_its_reason_and_the_engine_goes_on() -> None:
    eng = EmbeddedEngine()
    eng.execute("register stream O (oid integer, x integer) ordered by oid within 1")
    q = eng.register_query("select oid from O")
    eng.push("O", [(1, 5, 0), (2, 3, 0), (3, 4, 0), (4, None, 0), (5, 6, 0)])
    eng.close()
    assert [e.row for e in q.results()] == [(5,), (3,), (6,)]
    stats = eng.statistics().sources[0]
    assert (stats.accepted, dict(stats.rejected_reasons)) == (3, {"constraint": 2})
    msgs = eng.rejected()
    assert any("oid = 4 violates ORDERED BY oid WITHIN 1: below 5" in m for m in msgs), msgs
    assert any("NULL oid violates ORDERED BY oid WITHIN 1" in m for m in msgs), msgs


def test_no_guard_where_the_key_is_computed_or_the_input_deletes() -> None:
    eng = EmbeddedEngine()
    eng.execute(
        "register stream O (oid integer, x integer) ordered by oid; "
        "register stream F (oid integer, qty integer) ordered by oid"
    )
    for text in (
        "select * from O [Range 2], F [Now] where O.oid = F.oid",  # neither input only inserts
        "select * from O, F where O.oid + 1 = F.oid + 1",  # keys computed
        "select * from O, F where O.x = F.qty",  # not the constrained attribute
    ):
        q = eng.register_query(text)
        assert "STREAM §4.1" not in eng.explain(q.name), text
    q = eng.register_query("select * from O [Range 2], F where O.oid = F.oid")
    text = eng.explain(q.name)
    assert "F ORDERED BY oid WITHIN 0: left rows" in text and "right rows" not in text


def test_values_compare_as_numbers_of_each_type() -> None:
    """A float and a string key: the floor and the closed set are kept in the column's type."""
    for typ, vals in (("float", [0.5, 1.5, 1.25, 2.5]), ("varchar(4)", ["a", "c", "b", "d"])):
        eng = EmbeddedEngine()
        eng.execute(f"register stream O (k {typ}) ordered by k within 1; register stream F (k {typ}) ordered by k")
        q = eng.register_query("Istream(select O.k from O, F where O.k = F.k)")
        eng.push("O", [(i, v) for i, v in enumerate(vals)])
        eng.push("F", [(i, v) for i, v in enumerate(sorted(vals))])
        eng.close()
        assert sorted(e.row[0] for e in q.results()) == sorted(vals)
        assert not eng.rejected()


def test_the_floor_is_kept_as_a_number_array() -> None:
    a = Constraints("S", [(StreamConstraint("ORDERED", "c0", 2), 0)])
    a.track(_batch([(i, "x") for i in range(10)], [pa.int64(), pa.string()]))
    assert a.checks[0].floor == 7 and isinstance(a.checks[0].recent, np.ndarray)
