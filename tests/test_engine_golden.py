"""The golden files on the embedded engine, in four execution modes, against the hand-checked outputs.

Modes: all input pushed then run; one element at a time with a tuple budget of 1 (every
operator sees partial input and partial instants); and beside a second query that shares
its subplans (the shared queues must not change either answer); and one element at a time with
the engine's state snapshotted and restored into a new engine after each (operator protocol v2).
"""

from __future__ import annotations

import pytest
from sluice.reference.compare import diff_outputs
from sluice.runtime.vexpr import UnsupportedError

import golden
from engine_runner import run_engine

# Constructs the embedded engine does not run yet; each gap is named (strict: a fix must remove it).
GAPS: dict[str, str] = {}

MODES = {
    "bulk": {},
    "trickle": {"chunk": 1, "budget": 1},
    "shared": {"extra_queries": ("__SAME__",)},
    # every element in its own piece, the state pickled and restored into a new engine after each
    "snapshots": {"chunk": 1, "snapshots": True},
}


def _cases():
    for path in golden.all_files():
        g = golden.load(path)
        for i, case in enumerate(g.cases):
            if case.kind != "query":
                continue
            for mode in MODES:
                marks = []
                gap = None
                if gap:
                    marks.append(pytest.mark.xfail(raises=UnsupportedError, strict=True, reason=gap))
                yield pytest.param(path, i, mode, id=f"{path.stem}:{case.line}:{mode}", marks=marks)


@pytest.mark.parametrize(("path", "index", "mode"), list(_cases()))
def test_engine_golden(path, index, mode) -> None:
    g = golden.load(path)
    case = g.cases[index]
    opts = dict(MODES[mode])
    if opts.get("extra_queries") == ("__SAME__",):
        opts["extra_queries"] = (case.query,)
    got = run_engine(
        g.catalog(),
        case.query,
        g.streams,
        g.relations,
        start=case.options.get("start"),
        until=case.options.get("until"),
        **opts,
    )
    diffs = diff_outputs(golden.parse_expected(g, case), got)
    assert not diffs, f"{path.name}:{case.line} [{mode}]\n" + "\n".join(diffs)
