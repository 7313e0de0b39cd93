"""Bad input files and bad options: each bad line rejected alone with file:line, the rest kept;
each bad option a one-line error (issue: nothing lost, nothing crashes)."""

from __future__ import annotations

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
