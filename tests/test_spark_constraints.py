"""k-constraints, punctuations and references on Spark (design 023, "On Spark"): the driver holds
a constrained stream and releases it as the embedded engine's source does — the same elements
rejected, for the same reasons — so a native query and one run by the processors give the embedded
engine's answers, with any slack.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sluice.backends.embedded import EmbeddedEngine
from sluice.backends.spark.engine import SparkEngine
from sluice.errors import SluiceError

pytestmark = pytest.mark.spark

DDL = (
    "register stream O (oid integer, x integer) ordered by oid within 1 unique by oid; "
    "register stream F (oid integer, qty integer) clustered by oid"
)
QUERIES = {
    "native": "select * from O where x >= 0",
    "joined": "Istream(select O.oid, F.qty from O, F where O.oid = F.oid)",
}
O_ROWS = [(1, 1, 0), (2, 3, 0), (3, 2, 0), (4, 1, 0), (5, None, 0), (6, 4, 1)]  # (4, 1) and NULL violate
F_ROWS = [(1, 1, 5), (2, 1, 6), (3, 3, 7), (4, 1, 8), (5, 2, 9), (6, 4, 1)]  # (4, 1): its cluster closed


def _run(eng) -> dict[str, list]:
    eng.execute(DDL)
    for name, q in QUERIES.items():
        eng.register_query(q, name=name)
    eng.push("O", O_ROWS[:3])
    eng.push("F", F_ROWS[:3])
    eng.run()
    eng.push("O", O_ROWS[3:])
    eng.push("F", F_ROWS[3:])
    eng.close()
    eng.run()
    return {name: sorted(eng.results(name)) for name in QUERIES}


def test_the_driver_rejects_what_the_embedded_sources_reject(spark, tmp_path) -> None:
    embedded = EmbeddedEngine()
    want = _run(embedded)
    eng = SparkEngine(spark=spark, workdir=tmp_path)
    assert _run(eng) == want and want["joined"]
    stats = {s.name: (s.accepted, dict(s.rejected_reasons)) for s in eng.statistics()["sources"]}
    assert stats == {s.name: (s.accepted, dict(s.rejected_reasons)) for s in embedded.statistics().sources}
    assert stats["O"] == (4, {"constraint": 2}) and stats["F"] == (5, {"constraint": 1})
    assert sorted(eng.rejected()) == sorted(embedded.rejected())
    # the processors' engines read ORDERED BY and UNIQUE BY (true of one key's rows), not CLUSTERED BY
    assert eng.ddl["o"].endswith("ORDERED BY oid WITHIN 1 UNIQUE BY oid;") and "CLUSTERED" not in eng.ddl["f"]
    worker = EmbeddedEngine()  # a processor's engine is built from that DDL and the query's text
    worker.execute("\n".join(eng.ddl.values()))
    plan = worker.explain(worker.register_query(QUERIES["joined"]).name)
    assert "O UNIQUE BY oid: right rows whose key it closed not kept" in plan


def test_spark_refuses_only_what_it_cannot_check(spark, tmp_path) -> None:
    """Rows Spark reads itself (an attached source) pass no driver: a constrained, referenced or
    referencing one is refused with the reason; a slack is no reason any more (design 023, "On Spark").
    """
    eng = SparkEngine(spark=spark, workdir=tmp_path / "a", slack=2)
    eng.execute("register stream S (a integer) ordered by a")
    eng.register_stream("T", [("a", "integer")], constraints=[("punctuated", "a")])
    assert [c.kind for d in eng.catalog.sources for c in d.constraints] == ["ORDERED", "PUNCTUATED"]
    assert set(eng.inbox.gates) == {"s", "t"}  # (held and checked on the driver)
    eng = SparkEngine(spark=spark, workdir=tmp_path / "b")
    eng.register_stream("S", [("a", "integer")], constraints=[("clustered", "a", 2)])
    with pytest.raises(SluiceError, match="S declares k-constraints"):
        eng.attach_directory("S", tmp_path / "in")
    eng.execute("register stream O (oid integer); register stream F (oid integer) foreign key (oid) references O")
    with pytest.raises(SluiceError, match="O is referenced by a FOREIGN KEY"):
        eng.attach_directory("O", tmp_path / "in")
    eng.execute("register stream A (oid integer)")
    eng.attach_directory("A", tmp_path / "in")
    with pytest.raises(SluiceError, match=r"REFERENCES A: Spark reads its rows itself \(attached\)"):
        eng.execute("register stream G (oid integer) foreign key (oid) references A")
    assert [d.name for d in eng.catalog.sources] == ["S", "O", "F", "A"]


# -- the same calls, the same answers (punctuations and references on Spark) ------------------


def _play(eng, ddl: str, queries: dict[str, str], calls: list[tuple]) -> dict:
    """Run ``calls`` — (method, args, kwargs) — on ``eng``; what each returned or refused, then
    every query's answer, the sources' counts and the rejections.
    """
    eng.execute(ddl)
    said = []
    for method, args, kw in calls:
        if method == "register_query":
            eng.register_query(queries[args[0]], name=args[0])
            continue
        try:
            r = getattr(eng, method)(*args, **kw)
            said.append((method, r if method == "punctuate" else None))
        except SluiceError as e:
            said.append((method, str(e)))
    stats = eng.statistics()
    sources = stats["sources"] if isinstance(stats, dict) else stats.sources
    return {
        "said": said,
        "answers": {n: sorted(eng.results(n)) for n in queries},
        "sources": {s.name: (s.accepted, dict(s.rejected_reasons), s.buffered) for s in sources},
        "rejected": sorted(eng.rejected()),
    }


def _same_on_both(spark, tmp_path, ddl, queries, calls, slack) -> tuple[dict, SparkEngine]:
    want = _play(EmbeddedEngine(slack=slack), ddl, queries, calls)
    eng = SparkEngine(spark=spark, workdir=tmp_path, slack=slack)
    got = _play(eng, ddl, queries, calls)
    # (a source nothing was pushed to is listed by the embedded engine only)
    want["sources"] = {n: v for n, v in want["sources"].items() if n in got["sources"]}
    assert got == want
    return got, eng


def _worker_plan(eng: SparkEngine, query: str) -> str:
    """EXPLAIN of ``query`` in an engine built as a processor builds its own (the DDL it is given)."""
    worker = EmbeddedEngine()
    worker.execute("\n".join(eng.ddl.values()))
    return worker.explain(worker.register_query(query).name)


PUNCTUATED = (
    "register stream O (oid integer, cust integer); "
    "register stream F (oid integer, qty integer) punctuated by oid ordered by oid within 3"
)


def test_punctuations_on_spark_give_the_embedded_engines_answers(spark, tmp_path) -> None:
    """Pushed before the queries, with a slack: a punctuation applies to what was pushed before
    it but not yet released, holds from its stamp, is refused behind what was released — on the
    driver exactly as on the embedded engine's source; native and processor queries alike.
    """
    queries = {
        "g": "select oid, count(*), sum(qty) from F group by oid",
        "j": "Istream(select O.oid, F.qty from O, F where O.oid = F.oid)",
        "n": "select oid, qty from F where qty >= 0",
    }
    calls = [
        ("push", ("F", [(1, 1, 5), (2, 2, 6)]), {}),
        ("register_query", ("g",), {}),
        ("register_query", ("j",), {}),
        ("register_query", ("n",), {}),
        ("push", ("O", [(1, 1, 0), (2, 2, 0), (3, 3, 0)]), {}),
        ("punctuate", ("F", "oid"), {"values": [1]}),  # at ts 2, the latest pushed
        ("push", ("F", [(3, 1, 7), (3, 3, 8), (2, 1, 9)]), {}),  # (3, 1) after it: rejected; (2, 1) before
        ("run", (), {}),
        ("punctuate", ("F", "oid"), {"upto": 2, "ts": 4}),
        ("punctuate", ("F", "oid"), {"values": [9], "ts": 0}),  # behind what F released: refused
        ("punctuate", ("F", "qty"), {"values": [9]}),  # not declared: refused
        ("push", ("F", [(5, 2, 1), (5, 4, 2), (6, 3, 3), (4, 0, 4)]), {}),  # (5, 2) breaks upto 2; (4, 0) late
        ("heartbeat", (6,), {}),
        ("push", ("F", [(6, 5, 0)]), {}),  # late
        ("close", (), {}),
    ]
    got, eng = _same_on_both(spark, tmp_path, PUNCTUATED, queries, calls, slack=1)
    assert [s for s in got["said"] if s[0] == "punctuate"][:2] == [("punctuate", 2), ("punctuate", 4)]
    assert "behind tick 1, up to which F has released" in got["said"][-6][1]
    assert got["sources"]["F"] == (6, {"constraint": 2, "late": 2}, 0) and got["answers"]["j"]
    assert any("oid = 1 violates PUNCTUATED BY oid" in m for m in got["rejected"])
    # the processors' joins read the punctuations (each key gets them as markers: ``_punctuate``)
    assert "F PUNCTUATED BY oid: left rows whose key it closed not kept" in _worker_plan(eng, queries["j"])


REFERENCED = (
    "register stream Orders (oid integer, cust integer) unique by oid; "
    "register stream Fulfillments (oid integer, qty integer) foreign key (oid) references Orders(oid) within 2"
)


@pytest.mark.parametrize("slack", [0, 2])
def test_references_on_spark_give_the_embedded_engines_answers(spark, tmp_path, slack) -> None:
    """A late order (more than k after a fulfillment naming it) rejected; Orders released no
    further than Fulfillments, plus k — also to a query that reads only Orders.
    """
    queries = {
        "j": "Istream(select F.oid, O.cust, F.qty from Fulfillments as F, Orders as O where F.oid = O.oid)",
        "o": "select oid, cust from Orders where cust > 0",
        "c": "select cust, count(*) from Orders group by cust",
    }
    calls = [
        ("register_query", ("j",), {}),
        ("push", ("Orders", [(1, 1, 1)]), {}),
        ("register_query", ("o",), {}),
        ("push", ("Fulfillments", [(1, 1, 10), (2, 2, 20)]), {}),
        ("push", ("Orders", [(3, 2, 1), (4, 7, 2)]), {}),
        ("run", (), {}),
        ("register_query", ("c",), {}),
        ("push", ("Fulfillments", [(4, 3, 30), (3, 4, 40), (5, None, 50)]), {}),
        ("push", ("Orders", [(5, 4, 2), (8, 3, 1), (9, 1, 3)]), {}),  # oid 3: 8 > 4 + 2, late; oid 1 again
        ("run", (), {}),
        ("heartbeat", (9,), {}),
        ("push", ("Orders", [(12, 5, 1)]), {}),
        ("close", (), {}),
    ]
    got, eng = _same_on_both(spark, tmp_path / str(slack), REFERENCED, queries, calls, slack=slack)
    assert any("oid = 3 violates oid REFERENCED BY Fulfillments(oid) WITHIN 2" in m for m in got["rejected"])
    assert got["answers"]["j"] and got["answers"]["c"]
    assert "REFERENCED BY Fulfillments(oid) WITHIN 2: left rows whose key it closed not kept" in _worker_plan(
        eng, queries["j"]
    )


def test_a_processor_takes_a_punctuation_behind_what_its_key_released() -> None:
    """Spark may hand a key rows pushed after a punctuation before the punctuation itself: the
    key's engine has then released past its stamp.  The driver checked it, so it holds: the
    processor adds it anyway, and the key's join forgets by it (no Spark needed to show it).
    """
    from sluice.backends.spark.inbox import punctuation_note
    from sluice.backends.spark.processor import _punctuate
    from sluice.runtime.operators.join import Join

    eng = EmbeddedEngine()
    eng.execute(
        "register stream O (oid integer, cust integer); register stream F (oid integer, qty integer) punctuated by oid"
    )
    eng.register_query("Istream(select O.oid, F.qty from O, F where O.oid = F.oid)", name="j")
    eng.push("O", [(t, t % 3, t) for t in range(1, 10)])
    eng.push("F", [(1, 0, 1), (2, 1, 2)] + [(t, 2, t) for t in range(3, 10)])  # (after 2: no oid 0 or 1)
    eng.run()
    (join,) = [op for op in eng.operators if isinstance(op, Join)]
    before = len(join.left)
    with pytest.raises(SluiceError, match="behind tick"):
        eng.punctuate("F", "oid", values=[0, 1], ts=2)  # (what a user may not do)
    _punctuate(eng, "F", punctuation_note("oid", 2, np.array([0, 1]), None))
    eng.push("O", [(10, 2, 0)])
    eng.push("F", [(10, 2, 9)])
    eng.close()
    assert before == 8 and len(join.left) == 4  # (instant 9 was not complete) only oid 2's are kept
    assert eng.rejected() == []


def test_sluice_run_on_spark_reads_punctuations_and_references(spark, tmp_path, capsys) -> None:
    """``sluice run --backend spark`` with ``--punctuations`` and a FOREIGN KEY in the script: the
    embedded engine's answers and rejections (design 023, "On Spark").
    """
    from sluice.cli import main

    cql = tmp_path / "q.cql"
    cql.write_text(
        "register stream O (oid integer, cust integer) unique by oid;\n"
        "register stream F (oid integer, qty integer) punctuated by oid foreign key (oid) references O within 2;\n"
        "register query j as Istream(select O.oid, F.qty from O, F where O.oid = F.oid);\n"
        "register query g as select oid, sum(qty) from F group by oid;\n"
    )
    orders = [(3 * k + 1, k, 0) for k in range(20)] + [(70, 30, 1)]  # order 30: its fulfilment at 40
    fills = sorted([(3 * k + 2, k, k) for k in range(20)] + [(3 * k + 3, k, 1) for k in range(20)] + [(40, 30, 5)])
    fills.append((65, 3, 99))  # order 3 was punctuated long before
    (tmp_path / "O.csv").write_text("".join(f"{t},{k},{v}\n" for t, k, v in orders))
    (tmp_path / "F.csv").write_text("".join(f"{t},{k},{v}\n" for t, k, v in fills))
    (tmp_path / "P.jsonl").write_text(
        "".join(f'{{"ts": {3 * k + 3}, "column": "oid", "upto": {k}}}\n' for k in range(20))
    )
    argv = ["run", str(cql), "--source", f"O={tmp_path / 'O.csv'}", "--source", f"F={tmp_path / 'F.csv'}"]
    argv += ["--punctuations", f"F={tmp_path / 'P.jsonl'}", "--until", "80"]
    outs, errs = {}, {}
    for backend in ("embedded", "spark"):
        out = tmp_path / backend
        extra = ["--backend", "spark", "--master", "local[2]"] if backend == "spark" else []
        assert main([*argv, *extra, "--out", str(out)]) == 0
        outs[backend] = {p.name: p.read_text() for p in sorted(out.iterdir())}
        errs[backend] = sorted(line for line in capsys.readouterr().err.splitlines() if "violates" in line)
    assert outs["spark"] == outs["embedded"] and outs["embedded"]["j.out"]
    assert errs["spark"] == errs["embedded"] and len(errs["embedded"]) == 2
    assert any("oid = 3 violates PUNCTUATED BY oid" in e for e in errs["embedded"])
    assert any("oid = 30 violates oid REFERENCED BY F(oid) WITHIN 2" in e for e in errs["embedded"])


# -- a review's cases (2026-11-28): a stream referenced later, a query registered while another
# stream holds rows, unregistering a referencing stream, stop() with held rows ---------------

FK = "register stream F (oid integer, qty integer) foreign key (oid) references O(oid) within {k}"


def test_a_reference_declared_later_or_while_running_as_on_the_embedded_engine(spark, tmp_path) -> None:
    """O's rows pushed before F references it are still checked (the embedded source had not
    released them); F declared after O released up to 3 starts complete there (its early rows
    late); a query registered while O holds a row stamped before what X released does not read it
    (it starts after the latest instant released); F cannot go while a query forgets by it.
    """
    queries = {
        "o": "select oid, cust from O",
        "x": "select a from X",
        "late": "select oid, count(*) from O group by oid",
        "g": "select oid, count(*) from O group by oid",
    }
    calls = [
        ("register_query", ("o",), {}),
        ("register_query", ("x",), {}),
        ("push", ("O", [(5, 1, 1)]), {}),
        ("execute", (FK.format(k=0),), {}),
        ("push", ("F", [(1, 1, 10)]), {}),  # O's order 1 at 5: more than 0 after it, rejected
        ("push", ("X", [(10, 1), (100, 2)]), {}),
        ("push", ("O", [(50, 2, 2)]), {}),
        ("heartbeat", (40,), {}),
        ("run", (), {}),  # X released to 99, O held at 50 (F released to 40)
        ("register_query", ("late",), {}),  # starts at 100: O's 50 is not its input
        ("register_query", ("g",), {}),
        ("unregister_source", ("F",), {}),  # g forgets closed groups by F's references: refused
        ("push", ("F", [(60, 3, 1)]), {}),
        ("push", ("O", [(101, 3, 3), (102, 4, 4)]), {}),
        ("close", (), {}),
    ]
    got, _ = _same_on_both(
        spark,
        tmp_path,
        "register stream O (oid integer, cust integer); register stream X (a integer)",
        queries,
        calls,
        slack=0,
    )
    assert any("oid = 1 violates oid REFERENCED BY F(oid) WITHIN 0" in m for m in got["rejected"])
    assert got["answers"]["late"] and all(e.ts > 100 for e in got["answers"]["late"])
    assert any("queries g, late forget state by its references to O" in str(s[1]) for s in got["said"])


def test_a_reference_declared_while_running_makes_early_rows_late(spark, tmp_path) -> None:
    queries = {"o": "select oid, cust from O"}
    calls = [
        ("register_query", ("o",), {}),
        ("push", ("O", [(t, t, 0) for t in range(1, 11)]), {}),
        ("heartbeat", (3,), {}),
        ("run", (), {}),
        ("execute", (FK.format(k=2),), {}),
        ("push", ("F", [(4, 4, 1), (6, 6, 1), (9, 9, 1)]), {}),  # O released to 9: F's rows before 7 late
        ("close", (), {}),
    ]
    got, eng = _same_on_both(spark, tmp_path, "register stream O (oid integer, cust integer)", queries, calls, slack=0)
    assert got["sources"]["F"] == (1, {"late": 2}, 0)


def test_a_reference_to_a_stream_in_a_coarser_unit_as_on_the_embedded_engine(spark, tmp_path) -> None:
    """S counts minutes, G seconds: ``heartbeat(2)`` completes S to minute 2 (179 s) but the driver
    releases S only as far as G allows (G complete to 49 s, + 30 s): S's row at 120 s stays held,
    and S's Spark input and processors must not complete S past it — from the heartbeat they
    would (until 2026-11-28 such a reference was refused on Spark).
    """
    queries = {
        "s": "select oid, count(*), sum(v) from S group by oid",
        "j": "Istream(select G.oid, S.v from G [Range 400], S [Range 10 Minutes] where G.oid = S.oid)",
    }
    calls = [
        ("register_query", ("s",), {}),
        ("register_query", ("j",), {}),
        ("push", ("S", [(1, 1, 10), (2, 2, 20)]), {}),
        ("push", ("G", [(10, 5), (50, 6)]), {}),
        ("heartbeat", (2,), {}),
        ("run", (), {}),  # S released to 79 s: its row at 120 s held
        ("push", ("G", [(100, 7), (130, 8)]), {}),
        ("run", (), {}),
        ("push", ("S", [(3, 3, 30), (4, 6, 1)]), {}),  # (4, 6): order 6 more than 30 s after G's 50 s
        ("push", ("G", [(200, 1)]), {}),
        ("close", (), {}),
    ]
    ddl = (
        "register stream S (oid integer, v integer) unit minutes; "
        "register stream G (oid integer) foreign key (oid) references S(oid) within 30"
    )
    got, _ = _same_on_both(spark, tmp_path, ddl, queries, calls, slack=0)
    assert [(e.ts, e.row) for e in got["answers"]["j"]] == [(200, (1, 10))]
    assert [e.ts for e in got["answers"]["s"] if e.sign == "+"] == [60, 120, 180]
    assert got["sources"]["S"][:2] == (3, {"constraint": 1})


def test_rows_held_at_stop_reach_the_next_engine_on_the_work_directory(spark, tmp_path) -> None:
    """With a slack, the newest instants are held after ``run()``; ``stop()`` keeps them in the
    work directory and a new engine on it answers them (as one engine would have).
    """
    ddl = "register stream S (k integer, v integer)"
    query = "select k, sum(v) from S group by k"
    rows = [(t, t % 4, t) for t in range(1, 30)]
    want = EmbeddedEngine(slack=3)
    want.execute(ddl)
    want.register_query(query, name="q")
    want.push("S", rows)
    want.close()
    first = SparkEngine(spark=spark, workdir=tmp_path, slack=3)
    first.execute(ddl)
    first.register_query(query, name="q")
    first.push("S", rows[:20])
    first.run()
    assert first.inbox.held("S") == 4  # (stamped 17..20: not complete with a slack of 3)
    first.stop()
    second = SparkEngine(spark=spark, workdir=tmp_path, slack=3)
    second.execute(ddl)
    second.register_query(query, name="q")
    assert second.inbox.held("S") == 4
    second.push("S", rows[20:])
    second.close()
    got = sorted(first.results("q")) + sorted(second.results("q"))
    assert sorted(got) == sorted(want.queries["q"].results())
    second.stop()


def test_punctuations_reaching_a_key_out_of_order_are_all_read() -> None:
    """A later punctuation may reach a key first (Spark read the marker after its rows): the
    earlier one, added after it, is still read by the key's join (at the later stamp)."""
    from sluice.backends.spark.inbox import punctuation_note
    from sluice.backends.spark.processor import _punctuate
    from sluice.runtime.operators.join import Join

    eng = EmbeddedEngine()
    eng.execute(
        "register stream O (oid integer, cust integer); register stream F (oid integer, qty integer) punctuated by oid"
    )
    eng.register_query("Istream(select O.oid, F.qty from O, F where O.oid = F.oid)", name="j")
    eng.push("O", [(t, t % 4, t) for t in range(1, 13)])
    eng.push("F", [(t, 3, t) for t in range(1, 13)])
    eng.run()
    _punctuate(eng, "F", punctuation_note("oid", 10, np.array([1]), None))
    eng.push("O", [(20, 3, 0)])
    eng.push("F", [(20, 3, 0)])
    eng.run()
    _punctuate(eng, "F", punctuation_note("oid", 5, np.array([0, 2]), None))  # given before, arrived after
    eng.push("O", [(30, 3, 0)])
    eng.push("F", [(30, 3, 0)])
    eng.close()
    (join,) = [op for op in eng.operators if isinstance(op, Join)]
    assert len(join.left) == 5  # O's oid 3 only (3, 7, 11, 20, 30): 0, 1 and 2 all forgotten


def test_queries_registered_while_running_start_where_the_embedded_engines_do(spark, tmp_path) -> None:
    """A second review's case: a late query's operators start at its first instant (no output
    before it) and it reads a relation's contents at that instant, as the embedded ``Since``."""
    queries = {
        "c": "select count(*) from S [Range 3]",
        "r": "select * from R",
        "j": "Istream(select S.a, R.k from S [Now], R where S.a = R.k)",
        "early": "select a from S",
    }
    calls = [
        ("register_query", ("early",), {}),
        ("push", ("R", [(1, "+", 1), (2, "+", 6), (3, "-", 1)]), {}),
        ("push", ("S", [(1, 1), (2, 6), (4, 6)]), {}),
        ("heartbeat", (4,), {}),
        ("run", (), {}),
        ("register_query", ("c",), {}),
        ("register_query", ("r",), {}),
        ("register_query", ("j",), {}),
        ("push", ("R", [(6, "+", 7)]), {}),
        ("push", ("S", [(5, 6), (7, 7), (9, 1)]), {}),
        ("close", (), {}),
    ]
    ddl = "register stream S (a integer); register relation R (k integer)"
    got, _ = _same_on_both(spark, tmp_path, ddl, queries, calls, slack=0)
    assert got["answers"]["c"][0].ts == 5 and got["answers"]["r"] and got["answers"]["j"]


def test_rows_held_at_stop_are_kept_once_and_go_with_their_stream(tmp_path) -> None:
    """The driver's ``held/`` files (no Spark needed): rewritten or removed at every ``stop()``,
    removed with their stream, skipped with a warning when the stream came back with another schema.
    """
    from sluice.backends.spark.inbox import Inbox
    from sluice.catalog import Catalog
    from sluice.plan.ddl import execute

    cat = Catalog()
    execute(cat, "register stream S (a integer)")
    first = Inbox(cat, tmp_path, 0)
    first.declare(cat.lookup("S"))
    first.push("S", [(5, 1)])
    first.save_held()  # (stop(): instant 5 not complete)
    first.complete("h", 5, None)
    first.fix_first()
    first.release()  # released now: a second stop() leaves no stale file
    first.save_held()
    assert not (tmp_path / "held" / "s.parquet").exists()
    first.push("S", [(7, 2)])
    first.save_held()
    first.forget(cat.lookup("S"))  # (unregistered: its held rows go with it)
    assert not (tmp_path / "held" / "s.parquet").exists()
    first.declare(cat.lookup("S"))
    first.push("S", [(9, 3)])
    first.save_held()
    cat.unregister("S")
    execute(cat, "register stream S (a varchar(4))")  # another schema under the name
    with pytest.warns(UserWarning, match="of another schema"):
        Inbox(cat, tmp_path, 0).declare(cat.lookup("S"))


def test_what_the_checks_have_seen_outlives_stop(tmp_path) -> None:
    """The driver's checks (no Spark needed) go on where the engine before them on the work
    directory stopped, as one engine's would: a value UNIQUE BY saw, a punctuation given, what a
    referencing stream told; not for a stream that came back with other constraints.
    """

    def engine(ddl: list[str]) -> tuple[Any, Any]:
        return _driver(tmp_path, ddl)

    ddl = [
        "register stream P (id integer, n integer) unique by id punctuated by n",
        "register stream B (p integer) foreign key (p) references P(id) within 2",
    ]
    cat, first = engine(ddl)
    first.push("P", [(1, 10, 0)])
    first.push("B", [(3, 7)])  # (no P with id 7 stamped after 3 + 2)
    first.punctuate(cat.lookup("P"), "n", np.array([5]), None, 3)
    _released(first, 3)
    first.save_held()
    assert sorted(p.name for p in (tmp_path / "held").iterdir()) == ["b.checks", "p.checks"]
    cat, second = engine(ddl)
    assert (second.first, second.guessed) == (first.first, False)  # (fixed there: kept)
    second.push("P", [(4, 10, 1), (6, 11, 5), (6, 7, 2), (6, 12, 2)])
    second.push("B", [(6, 12)])
    _released(second, 6)
    p = second.admission["p"]
    assert p.rejected["constraint"] == 3, p.messages
    said = " ".join(p.messages)
    assert "id" in said and "n" in said and "7" in said
    second.push("P", [(5, 13, 0)])  # (behind what the first engine released: late, as on one engine)
    _released(second, 7)
    assert p.rejected["late"] == 1, p.messages
    second.save_held()
    other = ["register stream P (id integer, n varchar(4)) unique by id punctuated by n", ddl[1]]
    with pytest.warns(UserWarning, match="other constraints or types"):
        engine(other)  # (same constraints, another type: afresh)
    (tmp_path / "held" / "p.checks").write_bytes(b"not a pickle")
    with pytest.warns(UserWarning, match="unreadable"):
        cat, third = engine(ddl)
    assert third.gates["p"].referenced_by and not (tmp_path / "held" / "p.checks").exists()


def test_a_reference_declared_again_with_another_k_starts_afresh(tmp_path) -> None:
    """What a referencing stream promised under ``WITHIN 2`` is not read by its reference declared
    again ``WITHIN 5`` after a restart (one engine would have had to unregister it), nor comes back
    when it is declared ``WITHIN 2`` once more.
    """

    def engine(k: int) -> tuple[Any, Any]:
        ddl = f"register stream B (p integer) foreign key (p) references P(id) within {k}"
        return _driver(tmp_path, ["register stream P (id integer)", ddl])

    _, first = engine(2)
    first.push("B", [(3, 7)])  # (no P with id 7 after 5)
    _released(first, 3)
    first.save_held()
    cat, second = engine(5)
    assert not second.gates["p"].punctuations.entries and not second.gates["p"].resumable
    second.forget(cat.lookup("B"))
    second.save_held()
    _, third = engine(2)
    third.push("P", [(11, 7)])
    _released(third, 11)
    assert third.admission["p"].rejected["constraint"] == 0, third.admission["p"].messages


def _driver(workdir: Path, ddl: list[str]) -> tuple[Any, Any]:
    """A Spark driver's catalog and inbox on ``workdir``, without Spark: streams P then B."""
    from sluice.backends.spark.inbox import Inbox
    from sluice.catalog import Catalog
    from sluice.plan.ddl import execute

    cat = Catalog()
    for line in ddl:
        execute(cat, line)
    inbox = Inbox(cat, workdir, 0)
    for name in ("P", "B"):  # (in registration order, as the engine declares them)
        inbox.declare(cat.lookup(name))
    return cat, inbox


def _released(inbox: Any, upto: int) -> None:
    """Heartbeat to ``upto``, then ``run()``'s release."""
    inbox.complete("h", upto, None)
    inbox.fix_first()
    inbox.release()


def test_a_processor_is_sent_the_columns_the_answer_and_the_constraints_need(spark, tmp_path) -> None:
    """Each column crosses into Python (frames._sent): an unread one arrives as NULL — but one a
    constraint names is sent, or the processor's engine would check and forget state by NULLs.
    """
    from sluice.backends.spark.frames import input_frame

    ddl = "register stream S (A integer, K integer, B integer, N varchar(8)) ordered by B within 1"
    query = "select K, count(*), sum(A) from S [Range 3] group by K"
    rows = [(t, t % 5, t % 2, t // 2, "n" * (t % 3)) for t in range(12)]
    answers = []
    for eng in (EmbeddedEngine(), SparkEngine(spark=spark, workdir=tmp_path)):
        eng.execute(ddl)
        h = eng.register_query(query, name="q")
        eng.push("S", rows)
        eng.close()
        answers.append(sorted(eng.results(h)))
    assert answers[0] and answers[0] == answers[1]
    q = eng.queries["q"]
    columns = input_frame(eng, q).columns
    # A, K read; B constrained; N neither: not sent.  Streams only: no sign; no punctuation: no note
    assert [c for c in columns if c.startswith("s0c")] == ["s0c0", "s0c1", "s0c2"]
    assert "sign" not in columns and "note" not in columns
    eng.stop()
