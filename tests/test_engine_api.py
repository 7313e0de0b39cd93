"""The embedded engine as a user meets it: inputs, rejections, time, subscriptions, EXPLAIN, statistics."""

from __future__ import annotations

import pandas as pd
import pyarrow as pa
import pytest
from sluice.backends.embedded import EmbeddedEngine, UnknownNameError
from sluice.cli import main
from sluice.reference import Element


def _engine(**kw) -> EmbeddedEngine:
    eng = EmbeddedEngine(**kw)
    eng.execute("register stream S (A integer, B varchar(3)); register relation R (A integer)")
    return eng


def test_push_tuples_dicts_arrow_and_pandas_give_the_same_answer() -> None:
    outs = []
    for feed in ("tuples", "dicts", "arrow", "pandas"):
        eng = _engine()
        q = eng.register_query("select * from S")
        rows = [(1, 1, "a"), (2, 2, None)]
        if feed == "tuples":
            eng.push("S", rows)
        elif feed == "dicts":
            eng.push("S", [{"ts": t, "A": a, "B": b} for t, a, b in rows])
        elif feed == "arrow":
            eng.push("S", pa.table({"ts": [1, 2], "A": [1, 2], "B": ["a", None]}))
        else:
            eng.push("S", pd.DataFrame({"ts": [1, 2], "a": [1, 2], "b": ["a", None]}))
        eng.close()
        outs.append(q.results())
    assert all(o == [Element(1, "+", (1, "a")), Element(2, "+", (2, None))] for o in outs)


def test_bad_rows_are_rejected_with_reasons_and_the_rest_processed() -> None:
    eng = _engine()
    q = eng.register_query("select A from S")
    eng.push("S", [(1, 1, "ok"), (2, "x", "no"), (3, 3), (4, 4, "long!"), {"ts": 5, "A": 5, "Z": 1}, (6, 6, "ok")])
    eng.close()
    assert [e.row for e in q.results()] == [(1,), (6,)]
    (s,) = [x for x in eng.statistics().sources if x.name == "S"]
    assert s.accepted == 2 and s.rejected == 4 and dict(s.rejected_reasons) == {"malformed": 4}
    msgs = eng.rejected()
    assert "S, row 2: 'x' is not an integer" in msgs[0]
    assert "row 3: 3 values, expected 3" in msgs[1] or "values" in msgs[1]
    assert "longer than varchar(3)" in msgs[2]
    assert "unknown attribute(s) Z" in msgs[3]


def test_slack_accepts_out_of_order_and_late_elements_are_counted() -> None:
    eng = _engine(slack=2)
    q = eng.register_query("select A from S [Rows 1]")
    eng.push("S", [(5, 5, "a"), (4, 4, "b"), (3, 3, "c")])  # within 2 ticks of 5
    eng.run()
    eng.push("S", [(8, 8, "d")])
    eng.run()  # instants <= 5 complete now
    eng.push("S", [(2, 2, "old")])
    eng.close()
    assert [(e.ts, e.sign, e.row) for e in q.results()] == [
        (3, "+", (3,)),
        (4, "-", (3,)),
        (4, "+", (4,)),
        (5, "-", (4,)),
        (5, "+", (5,)),
        (8, "-", (5,)),
        (8, "+", (8,)),
    ]
    (s,) = [x for x in eng.statistics().sources if x.name == "S"]
    assert dict(s.rejected_reasons) == {"late": 1}
    assert "element at ts 2 arrived after instant 5 was complete (slack 2)" in eng.rejected()[0]


def test_heartbeats_complete_instants_and_subscribers_see_them() -> None:
    eng = _engine()
    seen: list[Element] = []
    q = eng.register_query("select count(*) from S [Range 1 Second]")
    q.subscribe(seen.extend)
    eng.push("S", [(1, 1, "a")])
    eng.run()
    assert seen == []  # instant 1 may still get elements
    eng.heartbeat(1)
    eng.run()
    assert seen == [Element(1, "+", (1,))]
    eng.heartbeat(3)  # the window empties at 3 without any new element
    eng.run()
    assert seen[-2:] == [Element(3, "-", (1,)), Element(3, "+", (0,))]


def test_deleting_an_absent_relation_tuple_is_rejected() -> None:
    eng = _engine()
    q = eng.register_query("select * from R")
    eng.push("R", [(1, "+", 1), (2, "-", 7), (3, "-", 1)])
    eng.close()
    assert [(e.ts, e.sign, e.row) for e in q.results()] == [(1, "+", (1,)), (3, "-", (1,))]
    assert "deletion of (7,) at 2, which is not in it" in eng.rejected()[0]


def test_sharing_reuses_operators_and_explain_says_so() -> None:
    eng = _engine()
    a = eng.register_query("select A, count(*) from S [Range 5 Seconds] group by A")
    b = eng.register_query("select B, count(*) from S [Range 5 Seconds] group by B")
    text = eng.explain(b)
    assert "SharedWindow port 0 → q1, q2: [Range 5 ticks]" in text and "shared with q1" in text
    private = _engine(sharing=False)
    private.register_query(a.bound.text)
    assert "shared with" not in private.explain("q1").split("StreamSource")[0]
    assert len(eng.operators) < 2 * len(private.operators) + 2


def test_statistics_report_memory_and_operator_counts() -> None:
    eng = _engine()
    eng.register_query("select A from S [Rows 2] where A > 1")
    eng.push("S", [(t, t, "x") for t in range(10)])
    eng.close()
    st = eng.statistics()
    ops = {o.kind: o for o in st.operators}
    assert ops["SharedWindow"].tuples_in == 10 and ops["SharedWindow"].state_bytes > 0
    sel = ops["Select"]
    # 10 insertions + 8 deletions in; A > 1 keeps insertions of 2..9 and deletions of 2..7
    assert sel.tuples_in == 18 and sel.tuples_out == 14 and 0 < sel.selectivity < 1
    assert st.memory_bytes == st.queue_bytes + st.synopsis_bytes and st.steps > 0


def test_unknown_stream_is_a_clear_error() -> None:
    eng = _engine()
    with pytest.raises(UnknownNameError, match=r"no stream or relation named 'T' \(registered: R, S\)"):
        eng.push("T", [(1, 1)])


def test_cli_run_prints_results_and_reports_rejections(tmp_path, capsys) -> None:
    (tmp_path / "q.cql").write_text("REGISTER STREAM S (A integer);\nselect A from S [Rows 1];\n")
    (tmp_path / "s.csv").write_text("ts,A\n1,1\n2,x\n3,3\n")
    assert main(["run", str(tmp_path / "q.cql"), "--source", f"S={tmp_path / 's.csv'}"]) == 0
    out, err = capsys.readouterr()
    assert "[1]:+:1\n[3]:-:1\n[3]:+:3" in out
    assert "s.csv:3: 'x' is not an integer" in err and "1 rejected" in err


def test_a_stream_may_count_time_in_a_coarser_unit_than_the_tick() -> None:
    from sluice.cql.ast import TimeUnit

    eng = EmbeddedEngine(time_unit=TimeUnit.MILLISECOND)
    eng.execute("register stream Fast (A integer); register stream Slow (B integer) UNIT second")
    q = eng.register_query("select A, B from Fast [Range 500 Milliseconds], Slow [Now] where A = B")
    eng.push("Slow", [(2, 7)])  # second 2 = tick 2000
    eng.push("Fast", [(1600, 7), (2000, 7), (2600, 7)])
    eng.close(2999)
    assert [(e.ts, e.sign, e.row) for e in q.results()] == [
        (2000, "+", (7, 7)),
        (2000, "+", (7, 7)),
        (2001, "-", (7, 7)),
        (2001, "-", (7, 7)),
    ]
    with pytest.raises(Exception, match="finer than the catalog's tick"):
        EmbeddedEngine().execute("register stream T (A integer) UNIT millisecond")


def test_rows_window_over_a_derived_stream_reads_it_in_canonical_order() -> None:
    """Found by the differential test: Istream over an insert-only input was a pass-through, which
    kept arrival order; a derived stream lists each instant in canonical order (NULLs last)."""
    eng = EmbeddedEngine()
    eng.execute("register stream S (K integer, V integer)")
    q = eng.register_query("select count(*), max(T.V) from Istream(select K, V from S) [Rows 2] T")
    eng.push("S", [(0, 0, None), (0, 0, None), (0, 0, 0)])
    eng.close()
    assert [tuple(e) for e in q.results()] == [(0, "+", (2, None))]


def test_an_injected_clock_measures_the_costs_the_strategies_read() -> None:
    """The scheduler loop's costs come from the engine's clock: a deterministic clock gives the
    same measurements, hence the same decisions, on every run (the default is time.perf_counter).
    """
    ticks = iter(range(10**6))

    def runs(sched: str) -> tuple[list[tuple[str, float, int]], int, list[Element]]:
        nonlocal ticks
        ticks = iter(range(10**6))
        eng = _engine(scheduler=sched, clock=lambda: float(next(ticks)), budget=2)
        q = eng.register_query("select A from S [Range 2] where A > 1")
        eng.register_query("select count(*) from S [Rows 3]")
        eng.push("S", [(t, t % 4, "x") for t in range(30)])
        eng.close()
        stats = eng.statistics()
        return [(o.name, o.seconds, o.runs) for o in stats.operators], stats.steps, q.results()

    first = runs("chain")
    ops, steps, _ = first
    # each run of an operator reads the clock twice, one tick apart
    assert [s for _, s, n in ops if n] == [float(n) for _, _, n in ops if n]
    assert runs("chain") == first
    assert runs("round-robin")[2] == first[2]


def test_unregister_takes_several_names_all_or_none_as_on_spark() -> None:
    eng = EmbeddedEngine()
    eng.execute("register stream S (K integer)")
    eng.register_query("select K from S [Now]", "a")
    eng.register_query("select K from S [Range 2]", "b")
    with pytest.raises(UnknownNameError, match="no query named .nope."):
        eng.unregister("a", "nope")
    assert set(eng.queries) == {"a", "b"}  # nothing went
    eng.unregister("a", "b", "a")
    assert not eng.queries


def test_cli_run_takes_static_relations(tmp_path, capsys) -> None:
    """``--static NAME=CSV``: the relation holds the file's rows (v1,v2,…; header optional) at
    every instant; a row that does not fit refuses the run with file:line, before anything runs.
    """
    (tmp_path / "q.cql").write_text(
        "REGISTER STREAM S (K integer, V integer);\nREGISTER RELATION R (K integer, N varchar(4));\n"
        "select S.V, R.N from S, R where S.K = R.K;\n"
    )
    (tmp_path / "s.csv").write_text("1,1,10\n2,2,20\n3,3,30\n")
    (tmp_path / "r.csv").write_text("K,N\n1,one\n3,thr\n")
    args = ["run", str(tmp_path / "q.cql"), "--source", f"S={tmp_path / 's.csv'}"]
    assert main([*args, "--static", f"R={tmp_path / 'r.csv'}"]) == 0
    out, _ = capsys.readouterr()
    assert "[1]:+:10, one\n[3]:+:30, thr" in out and "20" not in out
    (tmp_path / "bad.csv").write_text("1,one\nx,two\n3\n")
    assert main([*args, "--static", f"R={tmp_path / 'bad.csv'}"]) != 0
    out, err = capsys.readouterr()
    assert "bad.csv:2: 'x' is not an integer" in err and "bad.csv:3: 1 fields, expected 2" in err and not out
    assert main([*args, "--static", f"S={tmp_path / 'r.csv'}"]) != 0
    assert "--static S: only a registered relation can be static (S is a stream)" in capsys.readouterr().err
    (tmp_path / "bom.csv").write_bytes("\ufeffK,N\n1,one\n".encode())  # a spreadsheet's BOM
    assert main([*args, "--static", f"R={tmp_path / 'bom.csv'}"]) == 0
    assert "[1]:+:10, one" in capsys.readouterr().out
    assert main([*args, "--static", f"R={tmp_path / 'r.csv'}", "--source", f"R={tmp_path / 'r.csv'}"]) != 0
    assert "--static R: also given as --source" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("s.csv", "ts,A\n1,1\n2,2\n"),  # a header after the mark
        ("s.csv", "1,1\n2,2\n"),  # data on the first line
        ("s.jsonl", '{"ts": 1, "A": 1}\n{"ts": 2, "A": 2}\n'),
    ],
)
def test_a_byte_order_mark_is_not_data(tmp_path, capsys, name, text) -> None:
    """A file a spreadsheet saved starts with a UTF-8 byte-order mark: its first line was
    rejected (a header as a bad timestamp, a row as lost) — review of --static."""
    from sluice.catalog import Catalog
    from sluice.io.csv_input import read_csv
    from sluice.plan.ddl import execute as ddl

    (tmp_path / "q.cql").write_text("REGISTER STREAM S (A integer);\nselect A from S;\n")
    (tmp_path / name).write_bytes("\ufeff".encode() + text.encode())
    assert main(["run", str(tmp_path / "q.cql"), "--source", f"S={tmp_path / name}"]) == 0
    out, err = capsys.readouterr()
    assert "[1]:+:1\n[2]:+:2" in out and "rejected" not in err
    if name.endswith(".csv"):  # the line-by-line reader (sluice reference) too
        cat = Catalog()
        ddl(cat, "REGISTER STREAM S (A integer)")
        rows, errors = read_csv(tmp_path / name, cat.lookup("S").schema, False)
        assert rows == [(1, (1,)), (2, (2,))] and not errors


def test_sluice_reference_reads_parquet_and_json_lines_as_sluice_run_does(tmp_path, capsys) -> None:
    """``sluice reference`` on the files ``sluice run`` takes: Parquet and JSON lines read by the
    same reader (a Parquet file read as CSV had every row rejected as not UTF-8), the same answer.
    """
    import json as js

    import pyarrow as pa
    import pyarrow.parquet as pq

    (tmp_path / "q.cql").write_text(
        "REGISTER STREAM S (K integer, V integer); REGISTER RELATION R (K integer, N varchar(4));\n"
        "Select R.N, Count(*) From S [Range 3], R Where S.K = R.K Group By R.N;\n"
    )
    pq.write_table(
        pa.table({"ts": [1, 2, 2, 5, 9], "K": [1, 2, 1, 1, 2], "V": [3, 4, 5, 6, 7]}), tmp_path / "s.parquet"
    )
    rel = [{"ts": 0, "sign": "+", "K": 1, "N": "a"}, {"ts": 0, "sign": "+", "K": 2, "N": "b"}]
    (tmp_path / "r.jsonl").write_text("\n".join(js.dumps(r) for r in rel) + "\n")
    src = [f"S={tmp_path / 's.parquet'}", f"R={tmp_path / 'r.jsonl'}"]
    assert main(["run", str(tmp_path / "q.cql"), "--source", src[0], "--source", src[1]]) == 0
    ran = [line for line in capsys.readouterr().out.splitlines() if not line.startswith("#")]
    assert main(["reference", str(tmp_path / "q.cql"), "--stream", src[0], "--relation", src[1]]) == 0
    out = capsys.readouterr()
    assert "rejected" not in out.err
    assert ran and sorted(line for line in out.out.splitlines() if not line.startswith("#")) == sorted(ran)
    # datetimes in ``ts``: ticks of the file's unit (seconds here), as run reads them (a review)
    when = pa.array([1, 2, 2, 5, 9], pa.timestamp("s"))
    pq.write_table(pq.read_table(tmp_path / "s.parquet").set_column(0, "ts", when), tmp_path / "t.parquet")
    assert (
        main(["reference", str(tmp_path / "q.cql"), "--stream", f"S={tmp_path / 't.parquet'}", "--relation", src[1]])
        == 0
    )
    assert sorted(line for line in capsys.readouterr().out.splitlines() if not line.startswith("#")) == sorted(ran)
    (tmp_path / "e.parquet").write_bytes(b"")  # an empty file: said, with its source
    assert main(["reference", str(tmp_path / "q.cql"), "--stream", f"S={tmp_path / 'e.parquet'}"]) != 0
    assert "e.parquet: cannot be read as Parquet" in capsys.readouterr().err


def test_sluice_reference_takes_runs_time_unit(tmp_path, capsys) -> None:
    """``--time-unit`` on ``reference`` as on ``run``: a window of seconds over millisecond stamps
    gives both the same answer (without it, ``reference`` read 10 Seconds as 10 ticks of seconds).
    """
    (tmp_path / "q.cql").write_text("REGISTER STREAM S (K integer); Select Count(*) From S [Range 1 Second];\n")
    (tmp_path / "s.csv").write_text("ts,K\n0,1\n400,2\n900,3\n1500,4\n2600,5\n")
    out = {}
    for cmd, flag in (("run", "--source"), ("reference", "--stream")):
        args = [cmd, str(tmp_path / "q.cql"), flag, f"S={tmp_path / 's.csv'}", "--time-unit", "millisecond"]
        assert main(args) == 0
        out[cmd] = sorted(line for line in capsys.readouterr().out.splitlines() if not line.startswith("#"))
    assert out["run"] and out["run"] == out["reference"]
