"""Experiments run end to end (small) and write their CSV, PNG and JSON; the engine takes strategies."""

from __future__ import annotations

import json
from typing import Any

import pytest
from sluice.backends.embedded import EmbeddedEngine
from sluice.errors import SluiceError
from sluice.experiments import jiang, on_engine, on_engine_claims, page
from sluice.experiments.scheduling import CHAIN_SETUPS, EXPERIMENTS, run, two_ops_sensitivity
from sluice.scheduling.model import lower_envelope


@pytest.mark.parametrize("name", [e for e in EXPERIMENTS if e != "chain-lp-excess"])
def test_experiment_writes_its_outputs(name: str, tmp_path) -> None:
    summary = run(name, tmp_path, slots=300, progress=False, seeds=2)
    for ext in ("csv", "png", "json"):
        assert (tmp_path / f"{name}.{ext}").stat().st_size > 0
    assert json.loads((tmp_path / f"{name}.json").read_text())["experiment"] == name
    peaks = summary["peak_memory"]
    assert all(v >= 0 for v in peaks.values()) and len(peaks) >= 4


def test_lp_excess_is_within_chains_guarantee(tmp_path) -> None:
    res = run("chain-lp-excess", tmp_path, slots=40, progress=False)
    (verdict,) = res.pop("agreement")
    for r in res.values():
        assert -1e-7 <= r["max_excess"] <= r["n_paths"] + 1e-7
    assert verdict["agrees"] is True


def test_chain_charts_follow_the_papers_prose() -> None:
    """§6.2: "the first three operators comprise a single chain"; §6.1: the second operator consumes
    much fewer tuples per unit time than the first (not Example 1's chart, where round-robin is FIFO)."""
    (q,) = CHAIN_SETUPS["chain-stored-join"].paths()
    assert lower_envelope(q.chart())[:2] == [0, 3]
    (two,) = CHAIN_SETUPS["chain-two-ops"].paths()
    assert two.unit_costs()[1] > 5 * two.unit_costs()[0]
    multi = CHAIN_SETUPS["chain-multi-query"]
    assert {multi.stream_of(p) for p in multi.paths()} == {"R", "S"}  # the single-stream queries read R


def test_chain_experiment_reports_ratios_over_seeds_and_claims(tmp_path) -> None:
    s = run("chain-stored-join", tmp_path, slots=300, progress=False, seeds=2)
    assert s["seeds"] == [1, 2]
    r = s["ratio_to_chain"]["synthetic"]["greedy"]
    assert r["peak"]["min"] <= r["peak"]["median"] <= r["peak"]["max"]
    assert r["mean"]["median"] > 1.0  # Greedy leaves the join's input full during bursts
    claims = s["agreement"]
    assert claims and all({"claim", "paper", "agrees", "measured", "why"} <= set(c) for c in claims)
    assert claims[0]["measured"]["synthetic"]["mean"] == r["mean"]["median"]


def test_two_ops_sensitivity_shows_round_robin_is_fifo_on_example_1(tmp_path) -> None:
    rows = two_ops_sensitivity(400, 1, 1)
    ex1 = [row for row in rows if row["slow"] == 1.0]
    # Example 1's chart: round-robin's half share cannot keep the first operator up in a burst
    assert all(abs(row["round_robin"] - row["fifo"]) <= 0.05 * row["fifo"] for row in ex1)


def test_jiang_workload_is_the_papers_size() -> None:
    w = jiang.queries()
    assert (w.operators, len(set(w.stream_of))) == (116, 5)
    assert w.joins == 20 and len(w.paths) == 36
    assert max(sum(1 for o in p.ops if ".join" in o.name) for p in w.paths) == 4  # 4 joins over 5 streams
    assert any(o.sel > 1 for p in w.paths for o in p.ops if ".join" in o.name)


def test_on_engine_reports_engine_beside_model(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(on_engine, "ON_ENGINE", ("chain-four-ops", "chain-window-join"))
    monkeypatch.setattr(on_engine, "SLOT", 0.0005)  # small: the test checks the plumbing, not the figures
    s = on_engine.run(tmp_path, slots=120, progress=False)
    rows = s["results"]["chain-four-ops"]
    assert set(rows) == {"chain", "fifo", "greedy", "round-robin"}
    for row in rows.values():
        ((_, ops),) = row["measured_paths"].items()  # one stream, one path
        names = [n for n, _, _ in ops]
        assert names[-1].startswith("output") and sum(n.startswith("select") for n in names) == 4
        assert set(row["ratio_to_model"]) == {"peak_queue", "mean_queue", "mean_latency"}
    # the window join: a path per stream, through the same join, each the other's partner
    paths = s["results"]["chain-window-join"]["chain"]["measured_paths"]
    assert len(paths) == 2
    joins = [[n for n, _, _ in ops if "join#" in n] for ops in paths.values()]
    assert all(len(j) == 1 for j in joins) and joins[0][0].split("@")[0] == joins[1][0].split("@")[0]
    assert len(s["agreement"]) == 8 and (tmp_path / "chain-on-engine.json").exists()  # 4 claims per experiment
    for row in rows.values():
        assert set(row["ratio_to_passes_model"]) == {"peak_queue", "mean_queue", "mean_latency"}
        assert (row["replay"]["mean_queue"] > 0) == (row["engine"]["mean_queue"] > 0) and "engine_over_replay" in row


def test_engine_memory_counts_what_each_operator_has_to_read() -> None:
    """A turn-by-turn check of the harness's queue count on a tiny run: rows pushed but not yet
    released by the source count, once per operator that will read them."""
    arrivals = {"q": [3, 0, 0, 0, 0, 0]}
    e = on_engine.play("chain-two-ops", arrivals, "fifo", on_engine.calibrate(20_000), 1)
    assert e["memory"][0] == 3  # pushed at slot 0, none read yet
    assert len(e["memory"]) == 6 and e["memory"][-1] <= 3


def test_results_page_lists_every_claim(tmp_path) -> None:
    out = tmp_path / "experiments"
    s = run("chain-two-ops", out, slots=200, progress=False, seeds=1)
    written = page.write(out, {"chain-two-ops": s}, "sluice experiment all --out x")
    text = written.read_text()
    assert written == tmp_path / "experiments.md"
    assert "## chain-two-ops" in text and "experiments/chain-two-ops.png" in text
    assert text.count("| **agrees** |") + text.count("| **disagrees** |") == len(s["agreement"])
    assert "test_jiang_table_2" in text


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


@pytest.mark.slow  # (~110 s on 2 cores: four strategies over 240 slots; ``on_engine.play`` is tested fast in this file)
def test_jiang_on_engine_runs_the_116_operators_as_cql(tmp_path, monkeypatch) -> None:
    from sluice.experiments import jiang_engine

    monkeypatch.setattr(jiang_engine, "PROBE_SLOTS", 40)
    s = jiang_engine.run(tmp_path, slots=240, progress=False, slot=0.0004)  # the plumbing, not the figures
    assert set(s["results"]) == {"path-capacity", "simplified-segment", "chain", "threshold"}
    for r in s["results"].values():
        assert r["paths"] == 36  # a path per (query, stream), as the model has
        assert r["operators"] > 116  # each chart operator is a stage: a selection, its window, an Istream
        assert len(r["engine"]) == len(r["model"]) == 4  # the four load phases
        assert r["fixed_work_per_slot"] > 0  # heartbeats move time through every operator
        assert r["outputs"] > 0
        assert len(r["turns_per_tuple_by_phase"]) == 4 and r["cost_scale_to_match"] is not None
    shares = s["results"]["threshold"]["saving_share_by_phase"]
    assert len(shares) == 4 and all(0 <= x <= 1 for x in shares)
    assert s["results"]["chain"]["saving_share_by_phase"] is None and s["cost_spread"] >= 1
    assert s["setup"]["chart_operators"] == 116 and s["setup"]["sharing"] is False
    assert len(s["agreement"]) == 7 and all(c["agrees"] in (True, False, None) for c in s["agreement"])
    for name, r in s["results"].items():
        assert r["ordered_model_mean_queue"] > 0 and r["queue_ratio_to_ordered_model"] is not None
        assert (name == "threshold") == ("model_would_choose_otherwise_on_estimates" not in r)
    assert (tmp_path / "jiang-on-engine.json").exists()


def test_the_model_of_an_exact_plan_waits_where_the_engine_does() -> None:
    """``on_engine.waits_for``: a join's copies wait for everything below either copy; an Istream
    over a window (deletions) waits for its instant; a selection, and an Istream passing an
    insert-only stream through, do not wait."""
    eng, handles = on_engine.build("chain-window-join", "chain", 1e-6, 1)
    paths = on_engine.engine_paths(eng, handles)
    waits = on_engine.waits_for(paths)
    names = {f"{o.name}@{k}" for k, (_, chain) in enumerate(paths) for o in chain}
    assert set(waits) <= names and all(set(w) <= names for w in waits.values())
    joins = sorted(n for n in waits if "join#" in n)
    assert len(joins) == 2 and waits[joins[0]] == waits[joins[1]]  # (one operator: a copy per side)
    for k, (_, chain) in enumerate(paths):  # below the join on either path: waited for by both copies
        at = next(i for i, o in enumerate(chain) if "join#" in o.name)
        assert {f"{o.name}@{k}" for o in chain[:at]} <= set(waits[joins[0]])
        assert not {f"{o.name}@{k}" for o in chain[at:]} & set(waits[joins[0]])
    kinds = {type(o).__name__ for _, chain in paths for o in chain if f"{o.name}@0" in waits}
    assert kinds == {"IDstream", "SharedWindowJoin"}
    passing = [o for _, chain in paths for o in chain if type(o).__name__ == "IDstream" and o.spec.passthrough]
    assert passing and not any(on_engine.orders(o) for o in passing)
    eng.close()


def test_heartbeat_work_is_fixed_per_slot_not_charged_per_tuple() -> None:
    """With no arrivals every turn only moves time on: all of it is fixed work, no operator read a tuple."""
    e = on_engine.play("chain-two-ops", {"q": [0] * 20}, "fifo", on_engine.calibrate(20_000), 1)
    assert e["outputs"] == 0 and e["fixed_work_per_slot"] > 0
    assert all(o.cost == 1e-9 for p in e["paths"] for o in p.ops)  # nothing read: no cost per tuple


def test_cost_to_match_recovers_the_scale_that_made_the_queue() -> None:
    """The model's queue at costs × 1.25 is the target: the bisection finds 1.25 again (and says
    when no factor in 0.5–2 reaches the target)."""
    import statistics

    from sluice.scheduling.model import Op, Path
    from sluice.scheduling.simulator import simulate
    from sluice.scheduling.strategies import make

    paths = [Path("q", (Op("a", 0.3, 0.5), Op("b", 1.2, 1.0)))]
    arrivals = {"q": [1, 2, 0, 1, 3, 0, 0, 1, 2, 1] * 20}
    scaled = [Path("q", (Op("a", 0.375, 0.5), Op("b", 1.5, 1.0)))]
    target = statistics.fmean(simulate(scaled, arrivals, make("fifo"), 200, preemptive=False, whole=True).memory)
    assert on_engine_claims.cost_to_match(paths, arrivals, "fifo", 200, target) == pytest.approx(1.25, abs=0.01)
    assert on_engine_claims.cost_to_match(paths, arrivals, "fifo", 200, 1e9) == ">2.0"
    rows = {
        s: {"measured_paths": {"q#0": [["a@0", c, 0.5], ["b@0", 1.0, 1.0], ["w@0", 0.01, 1.0]]}}
        for s, c in (("chain", 0.4), ("fifo", 0.5))
    }
    assert on_engine_claims.cost_spread(rows) == 1.25  # a's 0.5 over 0.4; w (a hundredth of the work) left out


def test_jiang_joins_get_small_windows_meeting_both_selectivities() -> None:
    from sluice.experiments.jiang_engine import join_shape

    for left, right in [(0.2, 0.3), (0.5, 1.7), (0.77, 0.41), (1.9, 1.2), (1.0, 1.0)]:
        m, rows_l, rows_r = join_shape(left, right)
        assert m <= 20 and max(rows_l, rows_r) <= 40
        # an arrival on the left meets rows_r/m partners on average, one on the right rows_l/m
        assert rows_r / m == pytest.approx(left, rel=0.1) and rows_l / m == pytest.approx(right, rel=0.1)


def test_warm_up_rows_fill_windows_but_are_not_measured() -> None:
    """Rows before slot 0 reach the join's windows (more output from the first arrivals) but no
    output, cost or selectivity of theirs is counted."""

    def build(strategy: str, per_round: float, budget: int | None) -> tuple[Any, list[Any]]:
        eng = on_engine.engine(strategy, budget, 2, ["L", "R"], start=-50)
        q = eng.register_query("Istream(SELECT L.A0 FROM L [Rows 10], R [Rows 10] WHERE L.K % 2 = R.K % 2)")
        return eng, [q]

    arrivals = {"L": [1, 0, 1, 0], "R": [0, 1, 0, 1]}
    cold = on_engine.play(build, arrivals, "fifo", on_engine.calibrate(20_000), 1, width=2)
    warm = on_engine.play(build, arrivals, "fifo", on_engine.calibrate(20_000), 1, width=2,
                          warm=lambda rng, n: {}, warm_rows=50)  # fmt: skip
    assert cold["outputs"] < warm["outputs"] <= 4 * 10  # four arrivals, each meeting ≤ 10 rows
    joins = [o for p in warm["paths"] for o in p.ops if "join" in o.name]  # its two sides
    assert len(joins) == 2 and all(0 < o.sel <= 10 for o in joins)
    (join,) = [n for n in warm["tuples_in"] if "join" in n]
    assert warm["tuples_in"][join] == 4  # the four arrivals from slot 0, not the warm-up's hundred rows
    assert len(warm["memory"]) == 4 and min(warm["memory"]) >= 0 and warm["memory"][0] <= 1


def test_replay_of_the_engines_own_turns_reproduces_its_queue() -> None:
    """The replay (``on_engine.replay``) with each turn's measured cost is the engine's own count,
    slot by slot; with every tuple at its operator's mean cost the total work is the same. The
    passes recorded per operator are what it wrote per tuple read."""
    arrivals = {"q": [3, 0, 2, 0, 0, 1, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0]}
    e = on_engine.play("chain-two-ops", arrivals, "fifo", on_engine.calibrate(20_000), 1)
    assert on_engine.replay(e["trace"], e["done_before"], e["arrived"]) == e["memory"]
    # at mean costs the turns' total work is the measured total: only its spread over the turns differs
    reads: dict[int, int] = {}
    for _, _, rd, _ in e["trace"]:
        for k, n in rd.items():
            reads[k] = reads.get(k, 0) + n
    mean = {k: e["charged"][e["op_names"][k]] / n for k, n in reads.items()}
    at_mean = [c - ch + sum(n * mean[k] for k, n in rd.items()) for _, c, rd, ch in e["trace"]]
    assert sum(at_mean) == pytest.approx(sum(c for _, c, _, _ in e["trace"]))
    assert len(e["replay_spread_memory"]) == len(e["memory"])
    assert e["arrived"][-1] == 10  # one operator reads the stream
    select = e["passes"]["select#1@0"]
    assert len(select) == 10 and set(select) <= {0, 1}
    path = e["paths"][0]
    assert sum(select) == round(path.ops[0].sel * 10)


def test_stored_relation_rows_are_not_the_joins_work_per_stream_tuple() -> None:
    """The stored relation (2 rows per key) is loaded before slot 0: the join's selectivity per
    stream element is 2, not diluted by its own 200 insertions."""
    arrivals = {"q": [2, 1, 0, 3] + [0] * 30}
    e = on_engine.play("chain-stored-join", arrivals, "fifo", on_engine.calibrate(20_000), 1)
    joins = [o for p in e["paths"] for o in p.ops if o.name.startswith("join#")]
    assert joins and all(o.sel == 2.0 for o in joins)


def test_an_operator_shared_by_two_queries_is_charged_once_in_the_model() -> None:
    """chain-multi-query's join path and four-ops path begin with the same selection, which the
    engine shares: the model has a copy on each path, each charged half its measured work (the two
    copies see the same tuples), where each charged all of it, doubling that operator's work."""
    arrivals = {"R": [2, 1, 0, 3] + [0] * 40, "S": [1, 0, 1] + [0] * 41}
    e = on_engine.play("chain-multi-query", arrivals, "fifo", on_engine.calibrate(20_000), 1)
    copies = [o for p in e["paths"] for o in p.ops if o.name.startswith("select#1@")]
    assert len(copies) == 2 and copies[0].cost == copies[1].cost
    per_tuple = e["charged"]["select#1"] / e["tuples_in"]["select#1"] / (1 - e["fixed_work_per_slot"])
    assert copies[0].cost == pytest.approx(per_tuple / 2)
    assert e["shared"] == ["select#1"]
    # and an element waiting there counts once per copy, as the model counts it: R's 6 rows on three
    # paths (two through the shared selection), S's 2 on one
    assert e["arrived"][-1] == 6 * 3 + 2


def test_past_a_join_of_two_streams_copies_get_no_pass_pattern_and_their_whole_cost() -> None:
    """Above chain-window-join's join every operator is on both streams' paths, each copy seeing its
    side's tuples: no copy is charged half, and none takes the engine's passes (one list for both)."""
    arrivals = {"R": [2, 1, 0, 3] + [0] * 40, "S": [1, 2, 1] + [0] * 41}
    e = on_engine.play("chain-window-join", arrivals, "fifo", on_engine.calibrate(20_000), 1)
    assert e["shared"] == []
    above = {o.name for p in e["paths"] for o in p.ops if o.name.startswith("select#7@")}
    assert len(above) == 2 and not above & set(e["passes"])
    assert "select#1@0" in e["passes"]  # below the join, on R's path alone
    assert e["arrived"][-1] == 6 + 4  # each stream's rows once: no operator shared before the join


def test_strategies_closer_than_the_run_to_run_difference_are_not_ranked() -> None:
    def rows(engine: dict[str, float], model: dict[str, float]) -> dict[str, Any]:
        return {s: {"engine": {"mean_queue": engine[s]}, "model": {"mean_queue": model[s]}} for s in engine}

    # chain/greedy 1% apart on the engine: a tie, whatever the model says
    assert on_engine_claims.opposed(rows({"chain": 2.45, "greedy": 2.47}, {"chain": 2.6, "greedy": 2.2})) == []
    # both sides apart by more than 10%, in opposite orders: counted against
    opp = on_engine_claims.opposed(rows({"chain": 2.0, "fifo": 3.0, "rr": 3.1}, {"chain": 3.0, "fifo": 2.0, "rr": 4.0}))
    assert opp == [("chain", "fifo")]


def test_an_order_closer_than_the_run_to_run_difference_is_not_decided() -> None:
    from sluice.experiments.jiang_engine import _decide

    assert _decide([(1.0, 1.5), (1.5, 2.0)], noise=0.17) is True
    assert _decide([(1.5, 1.0)], noise=0.17) is False  # reversed by 50%
    assert _decide([(1.0, 1.5), (2.0, 1.9)], noise=0.17) is None  # the second pair 5% apart
    assert _decide([(1.0, 1.5), (2.0, 1.9), (3.0, 1.0)], noise=0.17) is False


def test_the_ranking_claim_is_na_when_the_model_separates_no_strategies() -> None:
    """On the committed chain-on-engine rows with the model's queues made equal, nothing is ranked."""
    import copy
    from pathlib import Path

    d = json.loads((Path(__file__).parents[1] / "docs/experiments/chain-on-engine.json").read_text())
    rows = copy.deepcopy(d["results"]["chain-four-ops"])
    for r in rows.values():
        r["model"]["mean_queue"] = 2.0
    claims = on_engine_claims.engine_agreement("chain-four-ops", rows, d["chain_whole_queue_turns"]["chain-four-ops"])
    (ranking,) = [c for c in claims if "ranks the strategies" in c["claim"]]
    assert ranking["agrees"] is None and ranking["measured"]["opposed"] == []


def test_jiang_claims_are_judged_again_on_other_draws_and_a_longer_run() -> None:
    rob = jiang.robustness(400, 1, 3, longer=2)
    assert rob["draws"] + len(rob["not_run"]) == 2 and rob["long_slots"] == 800
    assert len(rob["claims"]) == 4 and len(rob["verdicts"]) == rob["draws"] == len(rob["leaf_load_peak"])
    for i, c in enumerate(rob["claims"]):
        assert c["holds_in"] == sum(1 for v in rob["verdicts"] if v[i]) and c["long_run"] in (True, False)


def test_the_output_latency_turn_is_told_apart_from_each_runs_costs() -> None:
    """``latency_why``: the models on each run's own measured costs rank Chain lowest; on one set
    of costs for every strategy (the static estimates) path capacity's lowest — the costs, not
    the plan; ranked as on their own costs — not separated; the engine's figures within the
    run-to-run noise are not ranked."""
    own = {"path-capacity": 4.8, "simplified-segment": 3.6, "chain": 2.5, "threshold": 2.8}
    engine = {"path-capacity": 5.4, "simplified-segment": 5.0, "chain": 5.5, "threshold": 5.4}

    def rows(same: dict[str, float]) -> dict[str, dict[str, float]]:
        return {
            s: {
                "engine_mean_latency": engine[s],
                "model_output_latency": v,
                "ordered_model_output_latency": v + 1,
                "estimates_model_output_latency": same[s],
            }
            for s, v in own.items()
        }

    why = on_engine_claims.latency_why
    costs = why(rows({"path-capacity": 2.7, "simplified-segment": 2.8, "chain": 2.9, "threshold": 2.6}), 1.3, 0.17)
    assert "the turn is the measurement's, not the plan's" in costs and "×1.3" in costs
    assert "the engine ['simplified-segment', 'path-capacity', 'chain']" in costs and "not ranked" in costs
    assert "not separated" in why(rows(own), 1.3)
    mixed = why(rows({"path-capacity": 3.0, "simplified-segment": 2.8, "chain": 2.9, "threshold": 2.6}), 1.3, 0.05)
    assert "turn" not in mixed and "not ranked" not in mixed and "not separated" not in mixed


def test_the_cli_seeds_option_sets_jiang_compares_draws(tmp_path) -> None:
    from sluice.cli import main

    assert main(["experiment", "jiang-compare", "--slots", "300", "--seeds", "2", "--out", str(tmp_path)]) == 0
    rob = json.loads((tmp_path / "jiang-compare.json").read_text())["robustness"]
    assert rob["draws"] + len(rob["not_run"]) == 1 and rob["long_slots"] == 1200
