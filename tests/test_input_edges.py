"""Bad input files and bad options: each bad line rejected alone with file:line, the rest kept;
each bad option a one-line error (issue: nothing lost, nothing crashes)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sluice.catalog import Schema
from sluice.cli import main
from sluice.datatypes import FLOAT, INTEGER
from sluice.io.csv_input import read_csv

SCHEMA = Schema.of(("A", INTEGER), ("B", FLOAT))
CQL = "register stream S (A integer, B float);\nselect A, B from S;\n"


def _write(tmp_path: Path, name: str, data: bytes | str) -> Path:
    p = tmp_path / name
    p.write_bytes(data.encode() if isinstance(data, str) else data)
    return p


def test_an_unterminated_quote_loses_only_its_line(tmp_path: Path) -> None:
    p = _write(tmp_path, "s.csv", '1,1,1.0\n2,"2,2.0\n3,3,3.0\n4,4,4.0\n')
    rows, errors = read_csv(p, SCHEMA, False)
    assert rows == [(1, (1, 1.0)), (3, (3, 3.0)), (4, (4, 4.0))]
    assert errors == [f"{p}:2: unterminated quote"]


def test_a_bad_first_line_is_reported_not_taken_as_a_header(tmp_path: Path) -> None:
    p = _write(tmp_path, "s.csv", "garbage,1,2\n1,1,1.0\n")
    rows, errors = read_csv(p, SCHEMA, False)
    assert rows == [(1, (1, 1.0))] and errors == [f"{p}:1: timestamp 'garbage' is not an integer"]
    h = _write(tmp_path, "h.csv", "TS,a,b\n1,1,1.0\n")
    assert read_csv(h, SCHEMA, False) == ([(1, (1, 1.0))], [])


def test_a_non_utf8_line_is_rejected_alone(tmp_path: Path) -> None:
    p = _write(tmp_path, "s.csv", b"1,1,1.0\n2,2,\xff\n3,3,3.0\n")
    rows, errors = read_csv(p, SCHEMA, False)
    assert rows == [(1, (1, 1.0)), (3, (3, 3.0))]
    assert errors == [f"{p}:2: not UTF-8 (byte 0xff at column 5)"]


def test_run_keeps_good_rows_and_reports_bad_ones(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cql = _write(tmp_path, "q.cql", CQL)
    a = _write(tmp_path, "a.csv", "1,1,1.0\n3,3,nan\n5,99999999999999999999,1\n")
    b = _write(tmp_path, "b.csv", "2,2,2.0\n4,4,inf\n")  # one stream, two files: both read, merged by time
    j = _write(
        tmp_path, "c.jsonl", '{"ts": 6, "A": 6, "B": 6.5}\n{"ts": 7, "A": 18446744073709551616, "B": 1}\nnot json\n'
    )
    assert main(["run", str(cql), "--source", f"S={a}", "--source", f"S={b}", "--source", f"s={j}"]) == 0
    out, err = capsys.readouterr()
    assert out.splitlines()[1:] == ["[1]:+:1, 1", "[2]:+:2, 2", "[3]:+:3, NULL", "[4]:+:4, inf", "[6]:+:6, 6.5"]
    assert "S: 5 accepted, 3 rejected (3 malformed)" in err
    assert f"{a}:3: 99999999999999999999 is outside integer's range" in err
    assert f"{j}:2: 18446744073709551616 is outside" in err and f"{j}:3: Expecting value" in err


def test_a_non_utf8_cql_file_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cql = _write(tmp_path, "q.cql", b"register stream S (A integer);\nselect \xe9 from S;\n")
    assert main(["check", str(cql)]) == 1
    err = capsys.readouterr().err.strip()
    assert err == f"sluice: {cql}:2:8: not UTF-8 (byte 0xe9)"


@pytest.mark.parametrize(
    "argv",
    [
        ["experiment", "chain", "--slots", "-5"],
        ["gen", "nexmark", "--rate", "0"],
        ["gen", "trace", "--selectivities", "2.0,abc"],
        ["bench", "--events", "x"],
    ],
)
def test_bad_options_are_one_line_errors(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("sluice ") and "error: argument" in err[-1] and "Traceback" not in "".join(err)


def test_a_bad_scheduler_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cql = _write(tmp_path, "q.cql", CQL)
    assert main(["run", str(cql), "--scheduler", "bogus"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("sluice: ") and "bogus" in err and "\n" not in err


def test_feed_in_small_chunks_equals_the_definition(tmp_path: Path) -> None:
    """Chunked reading, merged by time across sources and files, gives the oracle's answer."""
    import random

    from sluice.backends.embedded import EmbeddedEngine
    from sluice.io.feed import feed
    from sluice.plan import bind_query
    from sluice.reference import evaluate
    from sluice.reference.compare import diff_outputs

    rnd = random.Random(3)
    ddl = "register stream S (A integer, B float); register stream T (A integer);"
    query = "select S.A, count(*), sum(S.B) from S [Range 3], T [Rows 2] where S.A = T.A group by S.A"
    s_rows = sorted((rnd.randint(0, 60), rnd.randint(0, 3), rnd.random()) for _ in range(200))
    t_rows = sorted((rnd.randint(0, 60), rnd.randint(0, 3)) for _ in range(80))
    half = len(s_rows) // 2
    _write(tmp_path, "s1.csv", "".join(f"{t},{a},{b!r}\n" for t, a, b in s_rows[:half]))
    _write(tmp_path, "s2.csv", "".join(f"{t},{a},{b!r}\n" for t, a, b in s_rows[half:]))
    _write(tmp_path, "t.jsonl", "".join(f'{{"ts": {t}, "A": {a}}}\n' for t, a in t_rows))
    eng = EmbeddedEngine(start=0)
    eng.execute(ddl)
    q = eng.register_query(query)
    schemas = {d.name: (d.schema, False) for d in eng.catalog.sources}
    files = [("S", tmp_path / "s2.csv"), ("S", tmp_path / "s1.csv"), ("T", tmp_path / "t.jsonl")]
    feed(eng, files, schemas, chunk=7)
    eng.close(60)
    assert eng.rejected() == []
    ref = evaluate(
        bind_query(eng.catalog, query),
        {"S": [(t, (a, b)) for t, a, b in s_rows], "T": [(t, (a,)) for t, a in t_rows]},
        start=0,
        until=60,
    )
    assert not diff_outputs(ref, q.results())


def test_sigterm_leaves_partial_outputs_never_a_truncated_out(tmp_path: Path) -> None:
    """A run stopped by SIGTERM writes what completed to NAME.out.partial (whole lines), exits
    143, and never leaves a NAME.out that could pass for a complete answer."""
    import signal
    import subprocess
    import sys
    import time

    cql = _write(tmp_path, "q.cql", CQL)
    big = tmp_path / "big.csv"
    with big.open("w") as f:
        for t in range(3_000_000):
            f.write(f"{t},{t % 7},{t}.5\n")
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [sys.executable, "-m", "sluice", "run", str(cql), "--source", f"S={big}", "--out", str(out)],
        stderr=subprocess.PIPE,
        text=True,
    )
    partial = out / "q1.out.partial"
    deadline = time.monotonic() + 120  # killed as soon as the first round's checkpoint lands
    while time.monotonic() < deadline and not (partial.exists() and partial.stat().st_size > 0):
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert not (out / "q1.out").exists() and partial.exists()
    lines = partial.read_text().splitlines()
    assert 0 < len(lines) < 3_000_000
    assert lines[0] == "[0]:+:0, 0.5" and all(line.count(":") == 2 for line in lines)
    assert "interrupted (SIGTERM)" in err


def test_gen_nexmark_writes_its_schema_and_category_relation(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Regression: NEXMark Q4 needs Category; gen writes it and schema.cql, so the files run as is."""
    out = tmp_path / "nx"
    assert main(["gen", "nexmark", "--events", "3000", "--out", str(out)]) == 0
    q = tmp_path / "q4.cql"
    q.write_text(
        (out / "schema.cql").read_text()
        + "select C.name, count(*) from Auction [Range Unbounded] A, Category C where A.category = C.id group by C.name;"
    )
    capsys.readouterr()
    argv = ["run", str(q), "--time-unit", "millisecond"]
    argv += ["--source", f"Auction={out / 'Auction.parquet'}", "--source", f"Category={out / 'Category.parquet'}"]
    assert main(argv) == 0
    out_text, err = capsys.readouterr()
    finals: dict[str, int] = {}
    for line in out_text.splitlines()[1:]:
        _, sign, row = line.split(":", 2)
        name, n = row.split(", ")
        if sign == "+":
            finals[name] = int(n)
    assert sorted(finals) == [f"category{i}" for i in range(5)] and "rejected" not in err


def test_a_killed_run_resumes_from_its_checkpoint_with_identical_output(tmp_path: Path) -> None:
    """SIGKILL part-way through a stateful file-to-file run; the same command again resumes from
    the checkpoint; the output equals an uninterrupted run's, byte for byte."""
    import signal
    import subprocess
    import sys
    import time

    cql = _write(
        tmp_path,
        "q.cql",
        "register stream S (A integer, B float);\n"
        "select A, count(*), sum(B) from S [Range 50] group by A;\n"
        "Istream(select A, B from S [Rows 3] where B > 900.0);\n",
    )
    data = tmp_path / "s.csv"
    with data.open("w") as f:
        for t in range(250_000):  # four rounds of 65,536 rows
            f.write(f"{t // 3},{t % 5},{(t * 7919) % 1000}.25\n")

    def cmd(out: Path, *extra: str) -> list[str]:
        return [sys.executable, "-m", "sluice", "run", str(cql), "--source", f"S={data}", "--out", str(out), *extra]

    subprocess.run(cmd(tmp_path / "whole"), check=True, capture_output=True)
    out, ck = tmp_path / "out", tmp_path / "ck"
    args = cmd(out, "--checkpoint", str(ck), "--checkpoint-every", "0")
    proc = subprocess.Popen(args, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120  # killed as soon as the first round's checkpoint lands
    while time.monotonic() < deadline and not (ck / "run.ckpt").exists():
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert (ck / "run.ckpt").exists() and not (out / "q1.out").exists()
    resumed = subprocess.run(args, capture_output=True, text=True, check=True)
    assert "resuming from" in resumed.stderr
    for name in ("q1.out", "q2.out"):
        assert (out / name).read_bytes() == (tmp_path / "whole" / name).read_bytes()
    assert not (ck / "run.ckpt").exists()  # complete: a new run starts over


_FIELDS = {
    "ts": ["1", "7", "-3", "x", "", "4611686018427387904", " 2", "1_0"],
    "sign": ["+", "-", "x", "", " +"],
    "int": ["5", "-12", "", "NULL", "null", "1.5", "9223372036854775808", "+3", "a", "0", " 4"],
    "float": ["2.5", "nan", "inf", "-inf", "1e400", "", "Null", "x", "1_0", "3", "-0.0"],
    "bool": ["true", "T", "yes", "NO", "0", "1", "f", "maybe", "", " true"],
    "str": ["ab", "abcdef", "", "NULL", "x y", "é", "NA"],
}


@pytest.mark.parametrize("relation", [False, True])
def test_the_vectorised_csv_reader_gives_the_per_line_answer(relation: bool) -> None:
    """Whatever the lines, a block read by pyarrow gives exactly the rows and messages of the
    per-line rules (the reader falls back to them for blocks pyarrow cannot take)."""
    from hypothesis import given, settings
    from hypothesis import strategies as st
    from sluice.backends.rows import rows_to_batch
    from sluice.datatypes import BOOLEAN, DataType, TypeKind
    from sluice.io.csv_input import csv_block, parse_csv_lines

    schema = Schema.of(("A", INTEGER), ("B", FLOAT), ("C", BOOLEAN), ("D", DataType(TypeKind.VARCHAR, 4)))
    kinds = ["ts", *(["sign"] if relation else []), "int", "float", "bool", "str"]
    good = st.tuples(*(st.sampled_from(_FIELDS[k][:2]) for k in kinds)).map(",".join)
    any_line = st.one_of(
        st.tuples(*(st.sampled_from(_FIELDS[k]) for k in kinds)).map(",".join),
        st.sampled_from(["", "1,2", '1,"2', "1,+,2,2.0,t,ab,extra"]),
    )

    @settings(max_examples=300, deadline=None)
    @given(st.lists(st.one_of(good, good, any_line), min_size=1, max_size=12), st.booleans())
    def check(lines: list[str], newline_at_end: bool) -> None:
        data = ("\n".join(lines) + ("\n" if newline_at_end else "")).encode()
        got, got_errors = csv_block(data, schema, relation, "f.csv", 1)
        numbers: list[int] = []
        rows, errors = parse_csv_lines(data.split(b"\n"), schema, relation, "f.csv", 1, numbers)
        flat = [(t, s, *r) for t, s, r in rows] if relation else [(t, *r) for t, r in rows]
        want, more = rows_to_batch(flat, schema, relation, "f.csv", locate=lambda i: f"f.csv:{numbers[i]}")
        assert got.to_pylist() == want.to_pylist()
        assert sorted(got_errors) == sorted(errors + more)

    check()


def test_a_big_csv_is_read_by_pyarrow_in_blocks(tmp_path: Path) -> None:
    """Blocks of whole lines, numbered across the file; a bad line costs only its block the
    vectorised path, never a row."""
    from sluice.io.feed import read_chunks

    p = tmp_path / "s.csv"
    lines = [f"{t},{t % 7},{t / 4}" for t in range(1, 1001)]
    lines[500] = "501,oops,1.0"
    p.write_text("ts,A,B\n" + "\n".join(lines) + "\n")
    chunks = list(read_chunks(p, SCHEMA, False, "S", chunk=300))
    assert [pos for _, _, pos in chunks][-1] == (p.stat().st_size, 1002)
    rows = [r for b, _, _ in chunks for r in b.to_pylist()]
    assert len(rows) == 999 and [m for _, ms, _ in chunks for m in ms] == [f"{p}:502: 'oops' is not an integer"]
    assert rows[-1] == {"__ts": 1000, "__sign": 1, "c0": 1000 % 7, "c1": 250.0}


_JSON_VALUES = {
    "ts": ["1", "7", "-3", '"x"', "null", "4611686018427387904", "1.0", "true"],
    "sign": ['"+"', '"-"', '"x"', "1", "null"],
    "int": ["5", "-12", "null", "1.5", "9223372036854775808", '"3"', "true", "NaN"],
    "float": ["2.5", "3", "NaN", "Infinity", "null", '"x"', "1e400", "false"],
    "bool": ["true", "false", "null", "1", '"t"'],
    "str": ['"ab"', '"abcdef"', '""', "null", "5", '"\\u00e9"'],
}


@pytest.mark.parametrize("relation", [False, True])
def test_the_vectorised_jsonl_reader_gives_the_per_line_answer(relation: bool) -> None:
    """As for CSV: a JSONL block read by pyarrow gives exactly the per-line rows and messages."""
    import json

    from hypothesis import given, settings
    from hypothesis import strategies as st
    from sluice.backends.rows import rows_to_batch
    from sluice.datatypes import BOOLEAN, DataType, TypeKind
    from sluice.io.jsonl_input import jsonl_block

    schema = Schema.of(("A", INTEGER), ("B", FLOAT), ("C", BOOLEAN), ("D", DataType(TypeKind.VARCHAR, 4)))
    keys = ["ts", *(["sign"] if relation else []), "A", "B", "C", "D"]
    kinds = ["ts", *(["sign"] if relation else []), "int", "float", "bool", "str"]

    def obj(vals: tuple[str, ...]) -> str:
        return "{" + ", ".join(f'"{k}": {v}' for k, v in zip(keys, vals, strict=True)) + "}"

    good = st.tuples(*(st.sampled_from(_JSON_VALUES[k][:2]) for k in kinds)).map(obj)
    any_line = st.one_of(
        st.tuples(*(st.sampled_from(_JSON_VALUES[k]) for k in kinds)).map(obj),
        st.sampled_from(["", "[1, 2]", "not json", '{"ts": 1, "Z": 2}', '{"A": 1}', '{"ts": 2, "a": 3}']),
    )

    @settings(max_examples=300, deadline=None)
    @given(st.lists(st.one_of(good, good, any_line), min_size=1, max_size=10), st.booleans())
    def check(lines: list[str], newline_at_end: bool) -> None:
        data = ("\n".join(lines) + ("\n" if newline_at_end else "")).encode()
        got, got_errors = jsonl_block(data, schema, relation, "f.jsonl", 1)
        objs, errors, numbers = [], [], []
        for k, raw in enumerate(data.split(b"\n"), 1):
            if raw.strip():
                try:
                    o = json.loads(raw)
                except ValueError as e:
                    errors.append(f"f.jsonl:{k}: {e}")
                    continue
                if isinstance(o, dict):
                    objs.append(o)
                    numbers.append(k)
                else:
                    errors.append(f"f.jsonl:{k}: not an object")
        want, more = rows_to_batch(objs, schema, relation, "f.jsonl", locate=lambda i: f"f.jsonl:{numbers[i]}")
        assert got.to_pylist() == want.to_pylist()
        assert sorted(got_errors) == sorted(errors + more)

    check()


def test_demo_takes_the_engine_options(capsys: pytest.CaptureFixture[str]) -> None:
    """`sluice demo` takes every command's engine options: the chosen scheduler runs it, the
    engine's --seed is Sample()'s (the reference gets the same), the stream's is --data-seed."""
    assert main(["demo", "--requests", "400", "--data-seed", "3", "--scheduler", "chain", "--seed", "5"]) == 0
    out = capsys.readouterr().out
    assert "scheduler steps (chain)" in out
    assert out.count("identical to the reference evaluator") == 6 and "DIFFERS" not in out


def test_demo_under_a_memory_limit_reports_its_approximation(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--requests", "3000", "--memory-limit", "100KB"]) == 0
    out = capsys.readouterr().out
    assert "kept" in out and "differences from the exact answer (the approximation's)" in out
    assert "DIFFERS" not in out  # an approximated answer is reported as one, not as a wrong answer


def test_bench_takes_the_engine_options_that_keep_answers_exact(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "b.json"
    argv = ["bench", "--queries", "q1", "--events", "2000", "--check", "500", "--engines", "embedded"]
    assert main([*argv, "--scheduler", "chain", "--sharing", "off", "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["options"]["scheduler"] == "chain" and doc["options"]["sharing"] is False
    assert doc["results"]["q1"]["duckdb"]["answer_equal"] is True
    with pytest.raises(SystemExit):  # an approximating engine could not be checked equal to DuckDB
        main([*argv, "--memory-limit", "1MB"])
    assert "unrecognized arguments: --memory-limit" in capsys.readouterr().err
