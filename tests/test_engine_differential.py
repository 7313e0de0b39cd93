"""Differential: random streams, relations and queries — the embedded engine must give exactly
the reference evaluator's output, instant by instant as multisets, however it is fed and scheduled."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sluice.catalog import Catalog
from sluice.plan import execute

from backends import SCHEDULERS
from engine_runner import reference_diffs, run_engine
from strategies import relation_updates

DDL = """
register stream S (K integer, V integer);
register stream S2 (K integer, W integer);
register relation R (K integer, N varchar(4));
"""


def _catalog() -> Catalog:
    cat = Catalog()
    execute(cat, DDL)
    return cat


CAT = _catalog()


def test_the_runner_runs_the_scheduler_it_is_given() -> None:
    """The differential test varies the strategy only if the engine really runs it."""
    for name in SCHEDULERS:
        engines: list = []
        run_engine(
            CAT,
            "select K, count(*) from S [Range 2 Seconds] group by K",
            {"S": [(1, (1, 2)), (2, (1, 3))]},
            {},
            start=1,
            until=4,
            budget=1,
            engines=engines,
            scheduler=name,
        )
        (eng,) = engines
        assert eng.strategy.name == eng.statistics().scheduler == name.split(":")[0]
    engines = []
    run_engine(CAT, "select * from S", {"S": [(1, (1, 2))]}, {}, engines=engines, scheduler="threshold:memory=2KB")
    assert engines[0].strategy.limit == 2000


windows = st.sampled_from(
    [
        "",
        "[Now]",
        "[Rows 1]",
        "[Rows 3]",
        "[Range 2 Seconds]",
        "[Range 4 Seconds Slide 3 Seconds]",
        "[Partition By K Rows 2]",
        "[Range Unbounded]",
        "[Rows 2 Where V > 0]",
    ]
)
preds = st.sampled_from(
    [
        "",
        "$V > 0",
        "$V is null",
        "($K = 1 or $V < -1)",
        "not ($V between -1 and 1)",
        "$K in (0, 2)",
        "$V % 2 = 0",
        "$V / 2 <> 0",
    ]
)


def q(pred: str, alias: str = "") -> str:
    pre = f"{alias}." if alias else ""
    return pred.replace("$V", pre + "V").replace("$K", pre + "K")


aggs = st.sampled_from(
    ["count(*)", "count(V)", "sum(V)", "min(V)", "max(V)", "avg(V)", "count(distinct V)", "sum(V), max(V), count(*)"]
)


@st.composite
def queries(draw: st.DrawFn) -> str:
    w = draw(windows)
    p = draw(preds)
    where = f" where {q(p)}" if p else ""
    shape = draw(st.integers(0, 13))
    if shape == 0:
        if draw(st.booleans()):
            return f"select K, CURRENT_TIME - V from S {w}{where}"
        return f"select K, V * 2 from S {w}{where}"
    if shape == 1:
        return f"select {'distinct ' if draw(st.booleans()) else ''}K from S {w}{where}"
    if shape == 2:
        key = draw(st.sampled_from(["K", "V / 2", "K, V"]))
        having = draw(st.sampled_from(["", " having count(*) > 1"]))
        return f"select {key}, {draw(aggs)} from S {w}{where} group by {key}{having}"
    if shape == 3:
        return f"select {draw(aggs)} from S {w}{where}"
    if shape == 4:
        w2 = draw(windows.filter(lambda x: "V" not in x))
        return (
            f"select S.V, S2.W from S {w}, S2 {w2} where S.K = S2.K{' and S.V < S2.W' if draw(st.booleans()) else ''}"
        )
    if shape == 5:
        return f"select S.V, R.N from S {w}, R where S.K = R.K{(' and ' + q(p, 'S')) if p else ''}"
    if shape == 6:
        op = draw(st.sampled_from(["Istream", "Dstream", "Rstream"]))
        return f"{op}(select K, V from S {w}{where})"
    if shape == 7:
        op = draw(st.sampled_from(["union", "union all", "except", "intersect", "except all", "intersect all"]))
        return f"select K from S {w} {op} select K from S2 {draw(windows.filter(lambda x: 'V' not in x))}"
    if shape == 8:
        inner = f"select K, V from S {w}{where}"
        outer_w = draw(st.sampled_from(["[Rows 2]", "[Range 1 Second]", "[Now]"]))
        return f"select count(*), max(T.V) from Istream({inner}) {outer_w} T"
    if shape == 9:
        return f"select X.V, Y.V from S {w} X, S [Rows 2] Y where X.K = Y.K and X.V <= Y.V"
    if shape == 12:  # three inputs, one-sided conjuncts on each (the push-down rules, sluice.plan.rules)
        w2 = draw(windows.filter(lambda x: "V" not in x))
        one_sided = [q(p, "S")] if p else []
        one_sided += draw(st.lists(st.sampled_from(["S2.W > 0", "R.N = 'a'", "S2.W % 2 = 0"]), max_size=2))
        return "select S.V, S2.W, R.N from S {}, S2 {}, R where {}".format(
            w, w2, " and ".join(["S.K = S2.K", "S2.K = R.K", *one_sided])
        )
    if shape == 13:  # the stream of an aggregate's changes (the planner's insertions-only aggregate)
        op = draw(st.sampled_from(["Istream", "Istream", "Dstream"]))
        cols = draw(st.sampled_from(["K, {a}", "{a}, K", "{a}", "K"]))  # injective or not
        group = " group by K" if "K" in cols or draw(st.booleans()) else ""
        return f"{op}(select {cols.format(a=draw(aggs))} from S {w}{where}{group})"
    if shape == 10:
        sub = draw(
            st.sampled_from(
                [
                    "S.V in (select W from S2 {w2})",
                    "S.V not in (select W from S2 {w2})",
                    "exists (select * from S2 {w2} where S2.K = S.K)",
                    "not exists (select * from S2 {w2} where S2.K = S.K and S2.W > S.V)",
                    "S.V > all (select W from S2 {w2} where S2.K = S.K)",
                    "S.V <= any (select W - 1 from S2 {w2})",
                    "S.K in (select K from R)",
                    "exists (select * from R where R.K < S.K)",
                ]
            )
        )
        w2 = draw(windows.filter(lambda x: "V" not in x))
        extra = f" and {q(p, 'S')}" if p and draw(st.booleans()) else ""
        return f"select S.K, S.V from S {w} where {sub.format(w2=w2)}{extra}"
    sel = draw(
        st.sampled_from(
            [
                "(select max(W) from S2 [Rows 2])",
                "exists (select * from R where R.K = S.K)",
                "(select count(*) from R where R.K = S.K)",
                "S.V in (select W from S2 [Now])",
            ]
        )
    )
    return f"select S.K, {sel} from S {w}"


values = st.one_of(st.none(), st.integers(-3, 3))
stream_rows = st.lists(st.tuples(st.integers(0, 10), st.integers(0, 2), values), max_size=12).map(
    lambda rs: sorted(rs, key=lambda r: r[0])
)


@settings(max_examples=600, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(
    queries(),
    stream_rows,
    stream_rows,
    relation_updates(),
    # (piece size, tuple budget, snapshot + restore into a new engine after each piece)
    st.sampled_from([(None, 65536, False), (1, 1, False), (3, 2, False), (1, 65536, True), (2, 3, True)]),
    st.booleans(),
    st.sampled_from(SCHEDULERS),
)
def test_engine_equals_reference(query, s_rows, s2_rows, r_ups, feed, sharing, scheduler) -> None:
    streams = {"S": [(t, (k, v)) for t, k, v in s_rows], "S2": [(t, (k, v)) for t, k, v in s2_rows]}
    relations = {"R": r_ups}
    chunk, budget, snapshots = feed
    extra = (query,) if sharing else ()
    diffs = reference_diffs(
        CAT,
        query,
        streams,
        relations,
        chunk=chunk,
        budget=budget,
        sharing=sharing,
        extra_queries=extra,
        scheduler=scheduler,
        snapshots=snapshots,
    )
    assert not diffs, f"{query} [{scheduler}]\n" + "\n".join(diffs[:10])
