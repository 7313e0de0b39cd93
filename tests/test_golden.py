"""Every golden file, every case: the reference evaluator must give the hand-checked output."""

from __future__ import annotations

import pytest

import golden

FILES = golden.all_files()


def _cases():
    for path in FILES:
        g = golden.load(path)
        for i, case in enumerate(g.cases):
            yield pytest.param(path, i, id=f"{path.stem}:{case.line}")


@pytest.fixture(scope="session", autouse=True)
def _maybe_update(request: pytest.FixtureRequest) -> None:
    if request.config.getoption("--update-golden"):
        for path in FILES:
            golden.update(golden.load(path))


def test_golden_files_exist() -> None:
    assert len(FILES) >= 10, "the golden suite has gone missing"


@pytest.mark.parametrize(("path", "index"), list(_cases()))
def test_golden(path, index) -> None:
    g = golden.load(path)
    case = g.cases[index]
    actual = golden.run_case(g, case)
    if case.kind == "query":
        from sluice.reference.compare import diff_outputs
        from sluice.reference.evaluator import Element

        got = [Element(e.ts, e.sign, e.row) for e in golden.parse_expected(g, golden.Case("query", "", actual, 0))]
        diffs = diff_outputs(golden.parse_expected(g, case), got)
        assert not diffs, f"{path.name}:{case.line}\n" + "\n".join(diffs)
    else:
        assert actual == case.expected, f"{path.name}:{case.line}"
