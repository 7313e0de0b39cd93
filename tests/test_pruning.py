"""Column pruning below windows and at join inputs (``sluice.plan.pruning``, issue #15 item 1):
the answer is the definition's (the reference evaluator never sees rewritten plans), the kept
rows hold only the columns read, and the rule stays out where a copy of fewer columns would
change which rows there are."""

from __future__ import annotations

import functools

import pytest
from sluice import EmbeddedEngine
from sluice.catalog import Catalog
from sluice.plan import bind_query, execute, rules
from sluice.plan import logical as L
from sluice.plan.analysis import has_subquery
from sluice.plan.pruning import prune_plan, source_columns_read
from sluice.plan.rules import PRUNE_COLUMNS, rewrite
from sluice.reference import evaluate
from sluice.reference.compare import diff_outputs
from sluice.runtime.operators.shared_join import SharedWindowJoin
from sluice.runtime.planner import rules_for

DDL = (
    "register stream S (K integer, V integer, Txt varchar(40), F float); "
    "register stream T (K integer, W integer, Note varchar(40)); "
    "register relation R (K integer, N varchar(4), Pad varchar(40))"
)


def _cat() -> Catalog:
    cat = Catalog()
    execute(cat, DDL)
    return cat


def _data() -> tuple[dict, dict]:
    streams = {
        "S": [(t, (t % 3, t % 5 - 1, "s" * (t % 7), t / 4)) for t in range(1, 15)],
        "T": [(t, (t % 3, t % 4, None if t % 6 == 0 else "n" * t)) for t in range(2, 15, 2)],
    }
    relations = {
        "R": [(0, "+", (0, "a", "p")), (0, "+", (1, "b", "pp")), (6, "+", (2, "a", "")), (9, "-", (0, "a", "p"))]
    }
    return streams, relations


def _run(query: str, cat: Catalog | None = None, sharing: bool = False) -> tuple[list, object]:
    cat = cat or _cat()
    streams, relations = _data()
    eng = EmbeddedEngine(cat, start=0, sharing=sharing)
    q = eng.register_query(query)
    eng.push("R", [(t, s, *r) for t, s, r in relations["R"]])
    for name, rows in streams.items():
        eng.push(name, [(t, *r) for t, r in rows])
    eng.close(16)
    assert not eng.failures
    return q.results(), q


def _windows_and_join_inputs(plan: L.LogicalNode) -> list[L.LogicalNode]:
    """What the windows and the joins of ``plan`` keep rows of."""
    out: list[L.LogicalNode] = []
    for n in L.walk_plan(plan):
        if isinstance(n, L.Window):
            out.append(n.input)
        elif isinstance(n, L.Join):
            out += [x for x in (n.left, n.right) if not isinstance(_unfiltered(x), L.Window | L.Join)]
    return out


def _unfiltered(n: L.LogicalNode) -> L.LogicalNode:
    while isinstance(n, L.Filter):
        n = n.input
    return n


PRUNED = [
    ("select S.V, R.N from S [Range 3], R where S.K = R.K", {("K", "V"), ("K", "N")}),
    ("select T.W from S [Rows 2], T [Range 2] where S.K = T.K and S.V > 0", {("K", "V"), ("K", "W")}),
    ("select K, count(*), max(V) from S [Range 4] group by K", {("K", "V")}),
    ("select count(*) from S [Range 3 Slide 2]", {("K",)}),  # nothing read: the first fixed-width column
    ("select sum(F) from S [Now] where Txt <> 'ss'", {("F",)}),  # (the selection went below the window)
    ("Istream(select S.K, T.Note from S [Range 2], T [Now] where S.K = T.K)", {("K",), ("K", "Note")}),
    # through a FROM subquery's projection: its copies that nothing reads go, its computed columns stay
    ("select Q.K from (select K, V + 1 as X, Txt from S) as Q [Range 3] where Q.X > 1", {("K", "X")}),
    ("select Q.K, R.N from (select * from S [Range 4]) as Q, R where Q.K = R.K", {("K",), ("K", "N")}),
    # a relation joined after a grouping: only what the join and the result read of the grouping
    (
        "select G.K, R.N from (select K, count(*) as c, sum(V) as s from S [Range 5] group by K) as G, R where G.K = R.K",
        {("K", "V"), ("K",), ("K", "N")},
    ),
    # three windows, reordered by the join-order rule first; S's window twice: one operator, so
    # both occurrences keep what either reads
    (
        "select S.V, T.W, U.Txt from S [Range 3], T [Range 3], S as U [Range 3] where S.K = U.K and T.K = U.K",
        {("K", "V", "Txt"), ("K", "W")},
    ),
    # NEXMark Q7's shape: the query's window and its subquery's are one
    (
        "Rstream(select S.K, S.V from S [Range 3 Slide 3] where S.V = (select max(V) from S [Range 3 Slide 3]))",
        {("K", "V"), ("max",)},  # (and the subquery's one row, joined)
    ),
    ("select X.K, Y.F from S [Range 3 Slide 3] as X, S [Range 3 Slide 3] as Y where X.K = Y.K", {("K", "F")}),
    # a stream read by Istream of a window, then windowed again
    ("select X.K, count(*) from (Istream(select K, V from S [Range 2] where V > 0)) as X [Range 3] group by X.K", None),
]


@pytest.mark.parametrize("query,kept", PRUNED)
def test_pruned_plans_answer_the_definition_and_keep_only_the_columns_read(query: str, kept: set | None) -> None:
    cat = _cat()
    streams, relations = _data()
    expected = evaluate(bind_query(cat, query), streams, relations, start=0, until=16)
    got, q = _run(query, cat)
    assert PRUNE_COLUMNS in q.rewrites  # type: ignore[attr-defined]
    diffs = diff_outputs(expected, got)
    assert not diffs, "\n".join(diffs[:10])
    if kept is not None:
        plan = rewrite(bind_query(cat, query).plan, rules_for(sharing=False)).plan
        held = {n.schema.names for n in _windows_and_join_inputs(plan)}
        assert held == kept


DECLINED = [
    "select K from S [Partition By Txt Rows 2]",  # which rows a partition keeps depends on values
    # a correlated subquery reads the outer row by position (its own window is pruned)
    "select K from S [Range 3] where V > (select count(*) from T [Now] where T.K = S.K)",
    "select X.K from (select distinct * from S [Range 2]) as X, R where X.K = R.K",  # DISTINCT reads whole tuples
    "select K from (select * from S Sample(50) [Range 2]) as X",  # a sample hashes the whole tuple
    "select K from (Istream(select * from S [Range 2])) as X [Now]",  # so does Istream
    "select * from S [Range 3], R where S.K = R.K",  # every column read
]


@pytest.mark.parametrize("query", DECLINED)
def test_what_compares_or_hashes_whole_tuples_still_gets_them(query: str) -> None:
    """Below a partitioned window, a sample, DISTINCT, Istream and a selection with a subquery,
    every column stays: the rule narrows only above them."""
    bound = bind_query(_cat(), query).plan
    assert _boundaries(rewrite(bound, rules_for(sharing=False)).plan) == _boundaries(bound)


def _boundaries(plan: L.LogicalNode) -> list[tuple[str, int]]:
    out = []
    for n in L.walk_plan(plan, into_subqueries=False):
        whole = (
            isinstance(n, L.Sample | L.Distinct | L.StreamOp)
            or (isinstance(n, L.Window) and bool(n.spec.partition))
            or (isinstance(n, L.Filter) and has_subquery(n.predicate))
        )
        if whole:
            out.append((type(n).__name__, len(n.inputs()[0].schema)))
    return out


def test_sample_keeps_the_same_elements_with_the_rule() -> None:
    """A projection above the sample may narrow what the window keeps, never what the sample
    hashes: the answer is the definition's."""
    query = "select X.K from (select K, V from S Sample(50)) as X [Range 2]"
    cat = _cat()
    streams, relations = _data()
    expected = evaluate(bind_query(cat, query), streams, relations, start=0, until=16)
    got, q = _run(query, cat)
    assert PRUNE_COLUMNS in q.rewrites  # type: ignore[attr-defined]
    assert not diff_outputs(expected, got)


def test_a_computed_column_nothing_reads_still_drops_the_row_it_fails_on() -> None:
    """V · 2⁶² overflows at V = 2: that row is dropped with or without the column's reader."""
    query = "select Q.K from (select K, V * 4611686018427387904 as X, Txt from S) as Q [Range 20]"
    plan = rewrite(bind_query(_cat(), query).plan, rules_for(sharing=False)).plan
    assert {n.schema.names for n in _windows_and_join_inputs(plan)} == {("K", "X")}
    eng = EmbeddedEngine(_cat(), start=0, sharing=False)
    q = eng.register_query(query)
    eng.push("S", [(1, 1, 1, "a", 0.5), (2, 2, 2, "b", 0.5), (3, 3, 0, "c", 0.5)])
    eng.close(4)
    assert sorted(e.row for e in q.results() if e.sign == "+") == [(1,), (3,)]


def test_kept_bytes_shrink_with_the_columns_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """A 1,000-element window over a stream with a text column, the query reading two
    integer columns: the synopses hold a fraction of the bytes, and the answer is the same."""
    rows = [(t, t % 10, t, "x" * 40, t / 3) for t in range(1, 1001)]
    query = "select S.K, sum(S.V) from S [Range 1000] group by S.K"

    def held(rule_on: bool) -> tuple[int, list]:
        if not rule_on:
            monkeypatch.setattr(rules, "RULES", tuple(r for r in rules.RULES if r.name != PRUNE_COLUMNS))
        eng = EmbeddedEngine(_cat(), start=0, sharing=False)
        q = eng.register_query(query)
        eng.push("S", rows)
        eng.heartbeat(1000)
        eng.run()
        assert (PRUNE_COLUMNS in q.rewrites) is rule_on
        return eng.statistics().synopsis_bytes, [repr(e) for e in q.results()]

    pruned, with_rule = held(True)
    whole, without = held(False)
    assert with_rule == without
    assert pruned * 2 < whole, (pruned, whole)  # (K, V) of (K, V, 40 characters, F): 41,880 of 94,005 B


def test_windows_shared_by_stream_keep_every_column_and_the_rest_are_pruned() -> None:
    """With sharing (the default), the windows one operator serves for every query over a stream
    (STREAM §3.2; Hammad et al.'s shared window joins) keep what any query reads: nothing below
    them is pruned, and queries reading different columns share them.  A window with a slide and
    a relation at a join's input are each a query's own: those are pruned."""
    cat = _cat()
    queries = [
        "select S.V from S [Range 3], T [Range 3] where S.K = T.K",
        "select S.V, T.K from S [Range 5], T [Now] where S.K = T.K",
        "select S.Txt from S [Range 5], T [Range 5] where S.K = T.K",
        "select K, count(*) from S [Range 4 Slide 2] group by K",
        "select R.N from S [Rows 2], R where S.K = R.K",
    ]
    streams, relations = _data()
    eng = EmbeddedEngine(cat, start=0, shared_join="swf")
    qs = [eng.register_query(q) for q in queries]
    eng.push("R", [(t, s, *r) for t, s, r in relations["R"]])
    for name, rows in streams.items():
        eng.push(name, [(t, *r) for t, r in rows])
    eng.close(16)
    assert not eng.failures
    for text, q in zip(queries, qs, strict=True):
        assert not diff_outputs(evaluate(bind_query(cat, text), streams, relations, start=0, until=16), q.results())
    assert [PRUNE_COLUMNS in q.rewrites for q in qs] == [False, False, False, True, True]
    (join,) = [o for o in eng.operators if isinstance(o, SharedWindowJoin)]
    assert join.queries == {"q1", "q2", "q3"}
    plan = rewrite(bind_query(cat, queries[4]).plan, rules_for(sharing=True)).plan
    assert {n.schema.names for n in _windows_and_join_inputs(plan)} == {("K", "V", "Txt", "F"), ("K", "N")}


@pytest.mark.parametrize(
    "query",
    [
        "select X.K, X.V from S [Range 3 Slide 3] as X, S [Range 3 Slide 3] as Y where X.K = Y.K",
        "Rstream(select S.K, S.V from S [Range 3 Slide 3] where S.V = (select max(V) from S [Range 3 Slide 3]))",
        # the review's shapes: under FROM subqueries' projections, and read by an IN subquery
        "select A.K, B.V from (select K, V, F from S [Range 3 Slide 3]) as A, "
        "(select K, V, F from S [Range 3 Slide 3]) as B where A.K = B.K",
        "select A.K, B.V from (select K, V, F from S [Range 3 Slide 3]) as A, S [Range 3 Slide 3] as B where A.K = B.K",
        "select X.K from S [Range 3 Slide 3] as X where X.V in (select V from S [Range 3 Slide 3])",
    ],
)
def test_a_window_read_twice_stays_one_operator(query: str) -> None:
    """Pruning never splits one window operator into two (it keeps the union of the columns its
    occurrences read, or leaves such windows whole), and the answer is the definition's."""
    cat = _cat()
    streams, relations = _data()
    expected = evaluate(bind_query(cat, query), streams, relations, start=0, until=16)
    got, _ = _run(query, cat, sharing=True)
    assert not diff_outputs(expected, got)
    plan = rewrite(bind_query(cat, query).plan, rules_for(sharing=True)).plan
    assert len({n for n in L.walk_plan(plan) if isinstance(n, L.Window)}) == 1


@pytest.mark.parametrize("query", [q for q, _ in PRUNED] + DECLINED)
def test_a_streams_columns_the_answer_does_not_depend_on_may_hold_anything(query: str) -> None:
    """``source_columns_read`` (what the Spark backend sends its processors: the rest arrive as
    NULL): the definition over the streams with every other column NULL is the same answer.
    """
    cat = _cat()
    streams, relations = _data()
    bound = bind_query(cat, query)
    read = source_columns_read(bound.plan, functools.partial(prune_plan, transform=rules.transform))
    blurred = {
        name: [(t, tuple(v if j in read[name.lower()] else None for j, v in enumerate(r))) for t, r in rows]
        for name, rows in streams.items()
        if name.lower() in read
    }
    expected = evaluate(bound, streams, relations, start=0, until=16)
    got = evaluate(bound, {**streams, **blurred}, relations, start=0, until=16)
    assert expected and not diff_outputs(expected, got)
    if query in DECLINED[1:5]:  # (a correlated subquery, DISTINCT *, a sample, Istream of *: all of S)
        assert read["s"] == frozenset(range(4))


def test_the_columns_read_are_those_the_pruning_rule_keeps() -> None:
    cat = _cat()
    reads = {
        q: source_columns_read(bind_query(cat, q).plan, functools.partial(prune_plan, transform=rules.transform))
        for q in (PRUNED[0][0], PRUNED[2][0], PRUNED[3][0], PRUNED[5][0])
    }
    assert list(reads.values()) == [
        {"s": frozenset({0, 1}), "r": frozenset({0, 1})},  # (the Spark backend still sends a relation whole)
        {"s": frozenset({0, 1})},
        {"s": frozenset({0})},  # count(*): the narrowest column
        {"s": frozenset({0}), "t": frozenset({0, 2})},
    ]
