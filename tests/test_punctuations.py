"""Punctuations (STREAM §4.1's "more dynamic technique"; Tucker et al.; design 023,
"Punctuations"): a stream declared ``PUNCTUATED BY a`` is told, while it runs, which values of
``a`` no later element has.  Joins and aggregates over ``a`` forget what only such elements
could still need; an element that breaks a punctuation is rejected with its reason.

The oracle: an element of F stamped ``t`` is admitted unless a punctuation ``(τ, values | ≤
bound)`` with ``τ < t`` names its ``oid`` (the definition, written as a loop), and the reference
evaluator over the admitted elements — whatever the batching, slack, runs and snapshots.
"""

from __future__ import annotations

import pickle
import random
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sluice.backends.embedded import EmbeddedEngine
from sluice.catalog import Catalog, CatalogError
from sluice.cql.ast import StreamConstraint
from sluice.cql.errors import BindError, ParseError
from sluice.cql.parser import parse_script
from sluice.cql.printer import to_cql
from sluice.errors import SluiceError
from sluice.plan import bind_query
from sluice.plan.ddl import execute
from sluice.reference import evaluate
from sluice.reference.compare import diff_outputs
from sluice.runtime.operators.aggregate import Aggregate
from sluice.runtime.operators.join import Join

from strategies import SLOW_OK

DDL = (
    "register stream O (oid integer, cust integer) {o}; register stream F (oid integer, qty integer) PUNCTUATED BY oid"
)
QUERIES = [
    "Istream(select O.oid, F.qty from O, F where O.oid = F.oid)",
    "Istream(select O.oid, F.qty from O [Range 3], F where O.oid = F.oid)",
    "select oid, count(*), sum(qty) from F group by oid",
    "select oid, max(qty) from F where qty > 0 group by oid",
]

CASE = st.fixed_dictionaries(
    {
        "seed": st.integers(0, 10**6),
        "unique_o": st.booleans(),
        "slack": st.integers(0, 2),
        "chunk": st.integers(1, 9),
        "snapshots": st.booleans(),
        "late": st.booleans(),  # the last two queries registered half-way (a new epoch of the plan)
    }
)


def _rows(rng: random.Random, n: int) -> list[tuple[int, int, int]]:
    """(ts, oid, value): oids mostly rising, some from earlier orders."""
    rows, t, oid = [], 1, 0
    for _ in range(n):
        t += rng.choice([0, 1, 1, 2])
        oid += rng.choice([0, 1])
        rows.append((t, oid - rng.choice([0, 0, 0, 1, 3]), rng.randrange(-1, 4)))
    return rows


@settings(max_examples=15, **SLOW_OK)
@given(case=CASE)
def test_answers_equal_the_definition_over_the_admitted_elements(case) -> None:
    """Random punctuations (values or a bound, at the latest stamp or later) on random streams."""
    _answers_equal_the_definition(**case)


@pytest.mark.slow
@settings(max_examples=150, **SLOW_OK)
@given(case=CASE)
def test_answers_equal_the_definition_over_the_admitted_elements_many_cases(case) -> None:
    _answers_equal_the_definition(**case)


def _answers_equal_the_definition(
    seed: int, unique_o: bool, slack: int, chunk: int, snapshots: bool, late: bool
) -> None:
    rng = random.Random(seed)
    ddl = DDL.format(o="UNIQUE BY oid" if unique_o else "")
    o_rows = [(t, i, rng.randrange(3)) for i, (t, _, _) in enumerate(_rows(rng, 25))]  # oids 0, 1, 2, …
    streams = {"O": o_rows, "F": _rows(rng, 35)}
    pushes = sorted(
        (t + rng.randint(0, slack), i, name, row)
        for name, rows in streams.items()
        for i, row in enumerate(rows)
        for t in [row[0]]
    )

    split = len(pushes) // 2 if late else 0
    first = QUERIES[:2] if late else QUERIES

    def build() -> EmbeddedEngine:
        eng = EmbeddedEngine(slack=slack, start=0)
        eng.execute(ddl)
        for i, q in enumerate(first):
            eng.register_query(q, name=f"q{i}")
        return eng

    eng = build()
    puncts: list[tuple[int, Any, Any]] = []  # (τ, values, upto): the definition's copy
    f_seen = None
    for i in range(0, len(pushes), chunk):
        if late and i >= split and "q2" not in eng.queries:
            for j in (2, 3):
                eng.register_query(QUERIES[j], name=f"q{j}")
            first = QUERIES
        for _, _, name, row in pushes[i : i + chunk]:
            eng.push(name, [row])
            if name == "F":
                f_seen = row[0] if f_seen is None else max(f_seen, row[0])
        if f_seen is not None and rng.random() < 0.6:
            later = rng.choice([None, 0, 1, 3])  # None: the latest stamp pushed (the default)
            tau = f_seen if later is None else f_seen + later
            ts = None if later is None else tau
            if rng.random() < 0.5:
                vals = sorted({rng.randrange(max(1, f_seen)) for _ in range(rng.randint(1, 3))})
                eng.punctuate("F", "oid", values=vals, ts=ts)
                puncts.append((tau, vals, None))
            else:
                bound = rng.randrange(max(1, f_seen // 2))
                eng.punctuate("F", "oid", upto=bound, ts=ts)
                puncts.append((tau, None, bound))
        eng.run()
        if snapshots and "q2" in eng.queries and late:  # a plan with late queries: the whole engine
            with tempfile.TemporaryDirectory() as d:
                eng.checkpoint(Path(d) / "ck")
                eng = EmbeddedEngine.restore(Path(d) / "ck")
        elif snapshots:  # the state alone, into a plan built again
            blob = pickle.dumps(eng.snapshot_state())
            eng = build()
            eng.restore_state(pickle.loads(blob))
    until = max(t for rows in streams.values() for t, _, _ in rows) + 4
    eng.close(until)

    def excluded(t: int, oid: int) -> bool:
        return any(tau < t and (oid in vals if vals is not None else oid <= upto) for tau, vals, upto in puncts)

    def unique_ok(rows: list[tuple[int, int, int]]) -> list[bool]:
        seen: set[int] = set()
        out = []
        for _, oid, _ in rows:
            out.append(oid not in seen)
            seen.add(oid)
        return out

    data, rejected = {}, 0
    for name in streams:
        ordered = sorted((row for _, _, n, row in pushes if n == name), key=lambda r: r[0])  # ties: arrival
        if name == "F":
            ok = [not excluded(t, oid) for t, oid, _ in ordered]
        else:
            ok = unique_ok(ordered) if unique_o else [True] * len(ordered)
        data[name] = [(t, (o, v)) for (t, o, v), good in zip(ordered, ok, strict=True) if good]
        rejected += ok.count(False)
    assert sum(s.rejected for s in eng.statistics().sources) == rejected
    cat = Catalog()
    execute(cat, ddl)
    for j, q in enumerate(QUERIES):
        h = eng.queries[f"q{j}"]
        start = h.start if h.start is not None else 0  # (a late query: the streams from its first instant)
        since = {n: [(t, r) for t, r in rows if t >= start] for n, rows in data.items()}
        want = evaluate(bind_query(cat, q), since, {}, start=start, until=until)
        diffs = diff_outputs(want, h.results())
        assert not diffs, (q, ddl, puncts, start, diffs[:5])


def _relation(q: Any) -> list[tuple[Any, ...]]:
    """A relation query's rows now."""
    return sorted((tuple(r.values())[2:] for r in q.contents().to_pylist()), key=repr)


# -- what it saves ---------------------------------------------------------------------------


def _orders(punctuate: str | None, n: int = 400) -> EmbeddedEngine:
    """STREAM §4.1's Orders ⋈ Fulfillments: an order, then its fulfillments — and, when the last
    one is in, a punctuation saying its oid is done (by value, or every oid up to it).
    """
    eng = EmbeddedEngine()
    eng.execute(DDL.format(o="UNIQUE BY oid"))
    eng.register_query("Istream(select O.oid, O.cust, F.qty from O, F where O.oid = F.oid)", name="j")
    eng.register_query("select oid, sum(qty) from F group by oid", name="g")
    rng, t = random.Random(3), 0
    for oid in range(n):
        t += 1
        eng.push("O", [(t, oid, oid % 7)])
        for _ in range(rng.randint(1, 3)):
            t += 1
            eng.push("F", [(t, oid, rng.randint(1, 9))])
        if punctuate == "values":
            eng.punctuate("F", "oid", values=[oid])
        elif punctuate == "upto":
            eng.punctuate("F", "oid", upto=oid)
        eng.run()
    return eng


def test_the_join_forgets_finished_orders_and_the_aggregate_their_groups() -> None:
    """Without punctuations the join keeps every order (F might still fulfil it) and the aggregate
    every group; with them, at most the open order and group — the same answers.
    """
    engines = {p: _orders(p) for p in (None, "values", "upto")}
    held = {}
    for p, eng in engines.items():
        eng.close()
        (j,) = [op for op in eng.operators if isinstance(op, Join)]
        (g,) = [op for op in eng.operators if isinstance(op, Aggregate)]
        held[p] = (len(j.left), len(j.right), len(g._counting.gid) if g._counting is not None else len(g.groups))
    assert held[None][0] == 400 and held[None][2] == 400  # every order and every group kept
    for p in ("values", "upto"):
        assert held[p][0] <= 1 and held[p][1] == 0 and held[p][2] <= 1, (p, held[p])
    answers = {p: [sorted(q.results()) for q in eng.queries.values()] for p, eng in engines.items()}
    assert answers["values"] == answers[None] == answers["upto"]
    assert "F PUNCTUATED BY oid: left rows whose key it closed not kept" in engines["values"].explain("j")
    assert "F PUNCTUATED BY oid: groups it closed forgotten" in engines["values"].explain("g")


def test_a_late_fulfillment_is_rejected_with_its_reason_and_the_engine_goes_on() -> None:
    eng = _orders("values", n=20)
    eng.push("F", [(1000, 5, 1), (1000, 25, 2)])  # order 5 was punctuated; 25 never was
    eng.close()
    assert eng.rejected() == [
        "F: element at ts 1000: oid = 5 violates PUNCTUATED BY oid: a punctuation before it excluded that value"
    ]
    f = [s for s in eng.statistics().sources if s.name == "F"][0]
    assert f.rejected == 1 and f.rejected_reasons == (("constraint", 1),)
    g = _relation(eng.queries["g"])
    assert (25, 2) in g and not any(row[0] == 5 and row[1] > 9 * 3 for row in g)


def test_a_punctuation_holds_from_its_stamp_not_from_when_it_was_given() -> None:
    """With a slack, an element stamped at or before the punctuation's ``ts`` but pushed after it
    is before it in the stream's order: admitted.  One stamped after it: rejected.
    """
    eng = EmbeddedEngine(slack=5)
    eng.execute(DDL.format(o=""))
    q = eng.register_query("select oid, count(*) from F group by oid")
    eng.push("F", [(10, 1, 1)])
    eng.punctuate("F", "oid", values=[1])  # at ts 10, the latest pushed
    eng.push("F", [(8, 1, 2), (11, 1, 3)])
    eng.close()
    assert _relation(q) == [(1, 2)]
    assert len(eng.rejected()) == 1 and "element at ts 11" in eng.rejected()[0]


def test_a_checkpoint_carries_the_punctuations(tmp_path) -> None:
    """Restored mid-run: the source still rejects by the punctuations given before, and joins
    and aggregates read the ones given after (their log is the source's, linked again).
    """
    outs = []
    for cut in (None, 10):
        eng = EmbeddedEngine()
        eng.execute(DDL.format(o="UNIQUE BY oid"))
        eng.register_query("Istream(select O.oid, F.qty from O, F where O.oid = F.oid)", name="j")
        for oid in range(20):
            if oid == cut:
                eng.checkpoint(tmp_path / "ck")
                eng = EmbeddedEngine.restore(tmp_path / "ck")
            eng.push("O", [(3 * oid + 1, oid, 0)])
            eng.push("F", [(3 * oid + 2, oid, oid), (3 * oid + 3, oid, -oid)])
            eng.punctuate("F", "oid", upto=oid)
            eng.run()
        eng.push("F", [(100, 4, 0)])  # punctuated before the checkpoint
        eng.close()
        (j,) = [op for op in eng.operators if isinstance(op, Join)]
        outs.append((sorted(eng.queries["j"].results()), eng.rejected(), len(j.left), len(j.right)))
    assert outs[0] == outs[1]
    assert len(outs[0][1]) == 1 and outs[0][2] == 0 and outs[0][3] == 0


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda e: e.punctuate("F", "qty", values=[1]), r"need the stream to declare PUNCTUATED BY qty"),
        (lambda e: e.punctuate("O", "oid", values=[1]), r"O: punctuations on oid need .* \(its constraints: none\)"),
        (lambda e: e.punctuate("F", "oid"), "gives values=.* or upto=.*, one of them"),
        (lambda e: e.punctuate("F", "oid", values=[1], upto=2), "one of them"),
        (lambda e: e.punctuate("F", "oid", values=["x"]), r"does not fit oid \(integer\)"),
        (lambda e: e.punctuate("F", "oid", values=[1.5]), r"does not fit oid \(integer\): 1.5 is not an integer"),
        (lambda e: e.punctuate("F", "oid", upto=-0.5), r"-0.5 is not an integer"),
        (lambda e: e.punctuate("F", "oid", values="12"), r"values=… is a list of values of oid, not '12'"),
        (lambda e: e.punctuate("F", "oid", values=[]), r"values=\[\] names nothing"),
        (lambda e: e.punctuate("F", "oid", values=[None]), "cannot name NULL"),
        (lambda e: e.punctuate("F", "oid", values=[1], ts=3), "behind tick 11, up to which F has released"),
        (lambda e: e.punctuate("X", "oid", values=[1]), "X"),
    ],
)
def test_bad_punctuations_are_refused_with_the_reason(call, message) -> None:
    eng = EmbeddedEngine()
    eng.execute(DDL.format(o=""))
    eng.register_query("select * from F")
    eng.push("F", [(10, 1, 1), (12, 1, 1)])
    eng.heartbeat(11)
    eng.run()
    with pytest.raises((SluiceError, KeyError), match=message):
        call(eng)
    eng.punctuate("F", "oid", values=[3], ts=11)  # at the released instant: fine
    eng.push("F", [(13, 2, 2)])
    eng.close()
    assert not eng.rejected()


@pytest.mark.parametrize(
    ("ddl", "error", "message"),
    [
        ("register stream F (oid integer) PUNCTUATED BY oid WITHIN 2", ParseError, "PUNCTUATED BY takes no WITHIN"),
        ("register stream F (oid integer) PUNCTUATED BY qty", BindError, "PUNCTUATED BY qty names no attribute"),
        ("register relation R (oid integer) PUNCTUATED BY oid", BindError, "a relation has none"),
    ],
)
def test_declaration_errors_are_clear(ddl, error, message) -> None:
    with pytest.raises(error, match=message):
        EmbeddedEngine().execute(ddl)


def test_null_is_never_punctuated_and_nan_cannot_be() -> None:
    """A NULL key is never closed (no punctuation can name it): such elements are admitted, with or
    without punctuations; a punctuation naming NaN (NULL for floats) is refused.  A violation's
    reason names the constraint it breaks, not the NULL let through.
    """
    eng = EmbeddedEngine()
    eng.execute("register stream F (oid integer, x float, k integer) PUNCTUATED BY oid PUNCTUATED BY x ORDERED BY k")
    q = eng.register_query("select oid, count(*) from F group by oid")
    eng.push("F", [(1, None, 1.0, 1), (2, 1, None, 2)])
    eng.punctuate("F", "oid", upto=5)
    eng.punctuate("F", "x", values=[1.0])
    eng.push("F", [(3, None, 2.0, 3), (4, None, None, 1), (5, 4, 2.0, 5), (6, 7, None, 6)])
    with pytest.raises(SluiceError, match="cannot name NULL"):
        eng.punctuate("F", "x", values=[float("nan")])
    eng.close()
    assert _relation(q) == sorted([(1, 1), (None, 2), (7, 1)], key=repr)
    assert eng.rejected() == [
        "F: element at ts 4: k = 1 violates ORDERED BY k WITHIN 0: below 3, which came more than 0 element(s) before it",
        "F: element at ts 5: oid = 4 violates PUNCTUATED BY oid: a punctuation before it excluded that value",
    ]


def test_a_punctuation_without_a_stamp_needs_something_pushed() -> None:
    eng = EmbeddedEngine()
    eng.execute(DDL.format(o=""))
    with pytest.raises(SluiceError, match="nothing was pushed to it yet.*give ts="):
        eng.punctuate("F", "oid", upto=3)
    assert eng.punctuate("F", "oid", upto=3, ts=0) == 0
    eng.push("F", [(0, 3, 1), (1, 3, 1), (1, 4, 1)])
    eng.close()
    assert [m.split(":")[1] for m in eng.rejected()] == [" element at ts 1"]


def test_the_declaration_round_trips_and_the_api_takes_it() -> None:
    eng = EmbeddedEngine()
    eng.execute("register stream F (oid integer, qty integer) PUNCTUATED BY oid UNIQUE BY qty")
    eng.register_stream("G", [("oid", "integer")], constraints=[("punctuated", "oid")])
    with pytest.raises(CatalogError, match="PUNCTUATED BY oid takes no adherence k"):
        eng.register_stream("H", [("oid", "integer")], constraints=[("punctuated", "oid", 2)])
    text = "REGISTER STREAM F (oid integer, qty integer) PUNCTUATED BY oid UNIQUE BY qty"
    (stmt,) = parse_script(text)
    assert to_cql(stmt) == text
    assert eng.catalog.lookup("G").constraints == (StreamConstraint("PUNCTUATED", "oid", 0),)
    eng.punctuate("G", "oid", upto=4, ts=0)


def test_sluice_run_reads_punctuations_from_a_file(tmp_path, capsys) -> None:
    """``--punctuations F=PATH`` (JSON lines): the same answers as without them where the data keeps
    them, a later element breaking one rejected, a bad line reported with file:line and skipped.
    """
    from sluice.cli import main

    cql = tmp_path / "q.cql"
    cql.write_text(
        DDL.format(o="UNIQUE BY oid") + ";\n"
        "register query j as Istream(select O.oid, F.qty from O, F where O.oid = F.oid);\n"
        "register query g as select oid, sum(qty) from F group by oid;\n"
    )
    orders = [(3 * k + 1, k, 0) for k in range(40)]
    fills = [(3 * k + 2, k, k) for k in range(40)] + [(3 * k + 3, k, 1) for k in range(40)]
    (tmp_path / "O.csv").write_text("".join(f"{t},{k},{v}\n" for t, k, v in orders))
    lines = [f'{{"ts": {3 * k + 3}, "column": "oid", "upto": {k}}}' for k in range(0, 40, 2)]
    lines.insert(3, '{"ts": 7, "column": "oid"}')  # neither values nor upto
    (tmp_path / "P.jsonl").write_bytes(b"\xef\xbb\xbf" + ("\n".join(lines) + "\n").encode())  # with a BOM
    outs = {}
    for punct in (False, True):
        rows = sorted(fills) + ([(200, 3, 99)] if punct else [])  # order 3 was punctuated long before
        (tmp_path / "F.csv").write_text("".join(f"{t},{k},{v}\n" for t, k, v in rows))
        out = tmp_path / ("p" if punct else "plain")
        argv = ["run", str(cql), "--source", f"O={tmp_path / 'O.csv'}", "--source", f"F={tmp_path / 'F.csv'}"]
        if punct:
            argv += ["--punctuations", f"F={tmp_path / 'P.jsonl'}"]
        assert main([*argv, "--out", str(out), "--until", "120"]) == 0
        outs[punct] = {p.name: p.read_text() for p in sorted(out.iterdir())}
    assert outs[True]["j.out"] == outs[False]["j.out"] and outs[True]["j.out"]
    err = capsys.readouterr().err
    assert f"{tmp_path / 'P.jsonl'}:4: a punctuation is" in err and err.count("(skipped)") == 1
    assert "F: element at ts 200: oid = 3 violates PUNCTUATED BY oid" in err
    argv = ["run", str(cql), "--source", f"O={tmp_path / 'O.csv'}", "--punctuations", f"X={tmp_path / 'P.jsonl'}"]
    assert main(argv) != 0
    assert "--punctuations x: no such stream" in capsys.readouterr().err


def test_the_feed_gives_each_punctuation_before_the_rows_after_it() -> None:
    """Files read 5 rows at a time: each round gives the punctuations up to what it pushes, so none
    is behind what the engine released and every element after one is checked against it.
    """
    from sluice.io.feed import Feeder
    from sluice.io.punctuations import Punctuation

    eng = EmbeddedEngine()
    eng.execute(DDL.format(o="UNIQUE BY oid"))
    q = eng.register_query("select oid, count(*) from F group by oid")
    d = eng.catalog.lookup("F")
    fills = [(t, t // 4, 1) for t in range(1, 80)] + [(80, 2, 1)]  # oid 2 is long done
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "F.csv"
        path.write_text("".join(f"{t},{k},{v}\n" for t, k, v in fills))
        ps = {"F": [Punctuation(f"p:{k}", 4 * k + 3, "oid", None, k) for k in range(19)]}
        feeder = Feeder(eng, [("F", str(path))], {"F": (d.schema, False)}, chunk=5, punctuations=ps)
        rounds = 0
        while feeder.round():
            rounds += 1
        eng.close()
    assert rounds > 10 and not feeder.notes and feeder.punctuated == {"F": 19}
    assert eng.rejected() == [
        "F: element at ts 80: oid = 2 violates PUNCTUATED BY oid: a punctuation before it excluded that value"
    ]
    assert _relation(q) == sorted([(k, 4 if k else 3) for k in range(20)], key=repr)
    (g,) = [op for op in eng.operators if isinstance(op, Aggregate)]
    assert len(g._counting.gid) <= 2  # the groups the punctuations closed are gone


def test_the_log_merges_what_its_source_has_passed() -> None:
    """400 punctuations (one value each) leave a handful of entries — the merged set, not one
    entry each — while the source still rejects every punctuated value and a query registered
    after the merge forgets by it (it applies the merged entry) with the same answers."""
    eng = _orders("values")
    log = eng.registry.source("F").punctuations
    # the entries after the merged one weigh less than it (else they merge): 2× the set at most,
    # where one entry a punctuation is 24 bytes each
    assert len(log.of("oid")) <= 100 and log.nbytes() <= 2 * (16 + 8 * 400) + 24 and log.start("oid") > 300
    late = eng.register_query("select oid, count(*) from F group by oid", name="late")
    eng.push("F", [(2000, 5, 1), (2000, 399, 2), (2000, 500, 3)])  # 5 and 399 punctuated, 500 not
    eng.punctuate("F", "oid", values=[500], ts=2000)
    eng.push("F", [(2001, 500, 4)])
    eng.close()
    assert [m.split(": ")[1].split(" violates")[0] for m in eng.rejected()] == [
        "element at ts 2000", "element at ts 2000", "element at ts 2001"
    ]  # fmt: skip
    # it reads F from its first instant: order 399's last fulfilment (stamped then) and 500's first
    assert [r for r in _relation(late) if r[0] != 399] == [(500, 1)] and len(_relation(late)) == 2


def test_bounds_merge_to_one_and_close_the_values_below_them() -> None:
    eng = _orders("upto")
    log = eng.registry.source("F").punctuations
    assert len(log.of("oid")) <= 2 and log.nbytes() <= 2 * 16
    eng.punctuate("F", "oid", values=[1000, 2])  # 2 is below the bound already
    eng.push("F", [(2000, 1000, 1)])
    eng.punctuate("F", "oid", upto=1500, ts=2000)
    eng.push("F", [(2001, 1000, 1), (2001, 1600, 1)])
    eng.close()
    assert [m.split(": ")[1].split(" violates")[0] for m in eng.rejected()] == [
        "element at ts 2000",
        "element at ts 2001",
    ]
    (merged,) = log.of("oid")  # all passed: one entry, the bound's, with no value below it
    assert merged[1] is None and merged[2] == 1500
