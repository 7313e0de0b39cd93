"""Experiments run end to end (small) and write their CSV, PNG and JSON; the engine takes strategies."""

from __future__ import annotations

import json

import pytest
from sluice.backends.embedded import EmbeddedEngine
from sluice.errors import SluiceError
from sluice.experiments.scheduling import EXPERIMENTS, run


@pytest.mark.parametrize("name", [e for e in EXPERIMENTS if e != "chain-lp-excess"])
def test_experiment_writes_its_outputs(name: str, tmp_path) -> None:
    summary = run(name, tmp_path, slots=300, progress=False)
    for ext in ("csv", "png", "json"):
        assert (tmp_path / f"{name}.{ext}").stat().st_size > 0
    assert json.loads((tmp_path / f"{name}.json").read_text())["experiment"] == name
    peaks = summary["peak_memory"]
    assert all(v >= 0 for v in peaks.values()) and len(peaks) >= 4


def test_lp_excess_is_within_chains_guarantee(tmp_path) -> None:
    res = run("chain-lp-excess", tmp_path, slots=40, progress=False)
    for r in res.values():
        assert -1e-7 <= r["max_excess"] <= r["n_paths"] + 1e-7


def test_static_estimates_and_switching_scheduler_at_run_time() -> None:
    eng = EmbeddedEngine(scheduler="fifo")
    eng.execute("register stream S (A integer)")
    q = eng.register_query("select A from S [Rows 2] where A > 1")
    eng.push("S", [(t, t) for t in range(5)])
    eng.run()
    eng.set_scheduler("chain")
    eng.set_estimates({"select#2": (1e-3, 0.5)})
    eng.push("S", [(t, t) for t in range(5, 10)])
    eng.close()
    assert eng.strategy.name == "chain"
    assert [e.row for e in q.results() if e.sign == "+"] == [(t,) for t in range(2, 10)]
    with pytest.raises(SluiceError, match="unknown scheduler"):
        eng.set_scheduler("lottery")
