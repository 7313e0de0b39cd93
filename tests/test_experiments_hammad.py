"""The shared-window-join experiments (Hammad et al. 2003; ``sluice/experiments/shared_joins.py``),
at test size on the deterministic work clock: they write their files with their fields; every
query's answer is the same under every policy and variant; and what holds by construction of the
policies holds — LWO releases a pair to every query at once, SWF and Greedy never later to a smaller
window than to a larger one, and eqs. (1) and (2) restated with the engine's accounting are exact.
No assertion reads the wall clock.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from sluice.experiments import shared_joins as SJ
from sluice.experiments.shared_join_paper import MIXES, POLICIES, eq1_engine, eq2_engine
from sluice.experiments.virtual_time import Feed, PortTimes, WorkClock, build, play, turns
from sluice.runtime.batch import SIGN, ts_of

# small subsets of each experiment: seconds, not minutes
SUBSETS: dict[str, dict[str, Any]] = {
    "hammad-windows": {"mixes": ("small-large",)},
    "hammad-burst": {"bursts": (1, 5)},
    "hammad-memory": {"memory": (("small-large", 5.0),)},
    "hammad-model": {"model_mixes": ("uniform",)},
}
FIELDS = {"experiment", "benchmark", "machine", "clock", "scale", "results", "agreement", "wall_s"}


@pytest.mark.parametrize("name", SJ.EXPERIMENTS)
def test_each_experiment_writes_csv_png_and_json_with_its_fields(name: str, tmp_path: Any) -> None:
    scale = replace(SJ.QUICK, **SUBSETS[name])
    SJ.RUNNERS[name](tmp_path, scale, "work", False)
    for ext in ("csv", "png", "json"):
        assert (tmp_path / f"{name}.{ext}").stat().st_size > 0
    doc = json.loads((tmp_path / f"{name}.json").read_text())
    assert FIELDS <= set(doc) and doc["experiment"] == name and doc["clock"] == "work"
    assert doc["scale"]["how"] and doc["scale"]["paper"]["rate_per_stream"] == 100
    for c in doc["agreement"]:
        assert set(c) == {"claim", "paper", "agrees", "measured", "why"} and c["agrees"] in (True, False, None)
        assert c["why"]
    if "exact" in doc:
        assert doc["exact"] and all(doc["exact"].values())
    header = (tmp_path / f"{name}.csv").read_text().splitlines()[0]
    assert header.startswith("clock,") or header.startswith("workload,")


def test_windows_results_have_every_policy_and_window(tmp_path: Any) -> None:
    scale = replace(SJ.QUICK, mixes=("uniform",), variants=("hash",))
    s = SJ.run_windows(tmp_path, scale, "work", progress=False)
    rows = s["results"]["hash"]["uniform"]
    assert set(rows) == set(POLICIES)
    for r in rows.values():
        assert len(r["per_window_avg_ms"]) == len(r["per_window_max_ms"]) == 7
        assert r["outputs"] == sum(r["per_window_outputs"]) > 0
        assert r["max_ms"] >= r["avg_ms"] > 0
        assert r["join_buffer_peak"]["A"] > 0 and r["pending_peak"] >= 0 and r["held_peak"] >= 0
        assert r["join_turns_per_arrival"] > 0
    # read from the join's statistics(): LWO one (unit, band) step per arrival (unit=1), the others one per band
    assert (
        rows["lwo"]["steps_per_arrival"] == 1 < rows["swf"]["steps_per_arrival"] == rows["greedy"]["steps_per_arrival"]
    )
    # every policy sees the same pairs
    assert len({tuple(r["per_window_outputs"]) for r in rows.values()}) == 1


def test_every_query_gets_the_same_answer_under_every_policy_and_variant() -> None:
    scale = SJ.QUICK
    w = SJ.workload(scale, "mostly-small")
    wins = scale.windows("mostly-small")
    answers = {}
    for variant in ("hash", "nested-loop"):
        for policy in POLICIES:
            got: list[list[Any]] = []
            play(w, wins, policy, variant, budget=2, clock=scale.work_clock("mostly-small", variant), keep=got)
            answers[policy, variant] = [[tuple(e) for e in q] for q in got]
    first = answers["lwo", "hash"]
    assert all(len(q) for q in first[1:]) and len(first) == 7
    assert all(a == first for a in answers.values())


class PairTimes(PortTimes):
    """Records each output pair's response time (the test's own view of the release hook)."""

    def __init__(self, window_ms: int) -> None:
        super().__init__(window_ms)
        self.pairs: dict[tuple[int, int, int], float] = {}

    def add(self, rows: pa.Table, at: float, since: int, arrival: float | None = None) -> None:
        super().add(rows, at, since, arrival)
        plus = np.asarray(rows.column(SIGN).to_numpy()) > 0
        ts = ts_of(rows)[plus]
        v = rows.column(3).to_numpy()[plus]
        w = rows.column(5).to_numpy()[plus]
        for key in zip(ts.tolist(), v.tolist(), w.tolist(), strict=True):
            self.pairs[key] = at - key[0]


def _pair_times(policy: str, mix: str = "uniform") -> list[dict[tuple[int, int, int], float]]:
    scale = SJ.QUICK
    w = SJ.workload(scale, mix, burst=3)
    wins = scale.windows(mix)
    eng, op, _ = build(wins, policy, "hash", budget=scale.budget)
    clock = scale.work_clock(mix, "hash")
    clock.start(op)
    ports = [PairTimes(x) for x in wins]
    feed = Feed(eng, w)
    turns(eng, op, clock, list(ports), start=feed.first(), feed=feed)
    return [p.pairs for p in ports]


def test_lwo_releases_each_pair_to_every_query_at_the_same_time() -> None:
    ports = _pair_times("lwo")
    assert all(len(p) for p in ports[1:])
    for small, large in zip(ports, ports[1:], strict=False):
        assert set(small) <= set(large)  # containment (§2.2)
        assert all(large[k] == t for k, t in small.items())


@pytest.mark.parametrize("policy", ["swf", "greedy"])
def test_swf_and_greedy_never_release_a_pair_later_to_a_smaller_window(policy: str) -> None:
    ports = _pair_times(policy)
    later = 0
    for small, large in zip(ports, ports[1:], strict=False):
        assert set(small) <= set(large)
        assert all(large[k] >= t for k, t in small.items())
        later += sum(large[k] > t for k, t in small.items())
    if policy == "swf":  # and some pairs do reach the smaller window first (under Greedy the key
        assert later > 0  # index's cheap later bands let one turn finish them: the same instant)


@pytest.mark.parametrize("mix", ["uniform", "small-large"])
def test_the_burst_model_restated_with_the_engines_accounting_is_exact(mix: str) -> None:
    scale = SJ.QUICK
    s = SJ.model_sizes(MIXES[mix], scale.model_tuples_per_second)
    m = scale.burst_m
    for policy, model in (("lwo", eq1_engine), ("swf", eq2_engine)):
        avgs, busy, work = SJ.model_run(MIXES[mix], policy, scale, WorkClock(1.0))
        assert avgs == pytest.approx(model(s, m, 1.0), rel=1e-12)
        assert busy == work  # 1 ms per unit of work
    # LWO: the same average for every window (eq. 1's S_max term; here exactly)
    lwo, _, _ = SJ.model_run(MIXES[mix], "lwo", scale, WorkClock(1.0))
    assert max(lwo) == min(lwo)


def test_the_work_clock_gives_the_same_figures_on_every_run() -> None:
    scale = SJ.QUICK
    w = SJ.workload(scale, "small-large", burst=5)
    runs = [
        play(
            w,
            scale.windows("small-large"),
            "greedy",
            "nested-loop",
            budget=scale.budget,
            clock=scale.work_clock("small-large", "nested-loop"),
        )
        for _ in range(2)
    ]
    a, b = runs
    assert a.mean == b.mean and [p.peak for p in a.ports] == [p.peak for p in b.ports]
    assert (a.work, a.steps, a.pending_peak, a.held_peak) == (b.work, b.steps, b.pending_peak, b.held_peak)


def test_the_nested_loop_work_clock_charges_every_pair_of_the_band() -> None:
    # A's two elements meet B's three (one key matches): the nested loop examines all three pairs each
    w = SJ.Workload({"A": (np.array([5, 6]), np.array([1, 1])), "B": (np.array([0, 1, 2]), np.array([1, 2, 3]))})
    hashed = play(w, [10], "lwo", "hash", budget=8, clock=WorkClock(1.0))
    looped = play(w, [10], "lwo", "nested-loop", budget=8, clock=WorkClock(1.0))
    assert hashed.ports[0].count == looped.ports[0].count == 2
    # probes: 3 (B, nothing to find) + 2 (A); pairs: hash finds 2, the nested loop examines 6
    assert (hashed.work, looped.work) == (7, 11)


def test_workloads_keep_their_rate_and_bursts_their_expected_size() -> None:
    assert SJ.burst_alpha(5) == pytest.approx(1.25) and SJ.burst_alpha(2) == pytest.approx(2.0)
    counts = [0.5, 0.5, 2.0, 0.0, 1.0]
    assert SJ._stamps(counts).tolist() == [1, 2, 2, 4]  # fractions carried over, the total kept
    scale = replace(SJ.QUICK, tuples=400)
    smooth = SJ.workload(scale, "uniform")
    bursty = SJ.workload(scale, "uniform", burst=5)
    for w in (smooth, bursty):
        ts, keys = w.streams["A"]
        assert np.all(np.diff(ts) >= 0) and set(np.unique(keys)) <= set(range(scale.keys))
        assert w.since == scale.windows("uniform")[-1]
    smooth_d, bursty_d = (SJ.burstiness(w)["dispersion_10_ms"] for w in (smooth, bursty))
    assert 0.8 < smooth_d < 1.2 < bursty_d  # Poisson: variance = mean


def test_scale_is_stated_and_windows_keep_table_1s_order() -> None:
    d = SJ.FULL.describe()
    assert "ms per paper second" in d["how"] and d["tuples"] == SJ.FULL.tuples
    for mix in MIXES:
        for scale in (SJ.FULL, SJ.QUICK):
            wins = scale.windows(mix)
            assert wins == sorted(set(wins)) and len(wins) == 7


def test_cli_lists_and_runs_them(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    from sluice.cli import main

    assert main(["experiment", "list"]) == 0
    listed = capsys.readouterr().out.split()
    assert set(SJ.EXPERIMENTS) <= set(listed)
    assert main(["experiment", "hammad-model", "--quick", "--clock", "work", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "eq. (1)" in out and (tmp_path / "hammad-model.json").exists()
    with pytest.raises(SystemExit) as e:
        main(["experiment", "hammad-model", "--clock", "wall"])
    assert e.value.code == 2


def test_the_pages_tables_are_the_committed_runs() -> None:
    """docs/hammad-experiments.md's "Results" tables are what ``shared_join_tables`` prints from
    the JSON in benchmarks/results/hammad/: re-run an experiment and the page must follow.
    """
    from pathlib import Path

    from sluice.experiments.shared_join_tables import page

    root = Path(__file__).resolve().parents[1]
    doc = (root / "docs" / "hammad-experiments.md").read_text()
    section = doc.split("## Results (seed 1)\n", 1)[1].split("\n## ", 1)[0]
    printed = page(root / "benchmarks" / "results" / "hammad")
    assert [x for x in section.splitlines() if x] == [x for x in printed.splitlines() if x]
