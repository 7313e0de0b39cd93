"""Hammad, Franklin, Aref & Elmagarmid, *Scheduling for Shared Window Joins over Data Streams*
(2003), §5 and §3's response-time models — on the embedded engine's shared window join
(``docs/design/020``), not on a model of it.

Seven queries ``Istream(SELECT * FROM A [Range w], B [Range w] WHERE A.K = B.K)``, one per window
of a Table 1 mix, share one ``SharedWindowJoin`` (``shared_join="<policy>:unit=1,variant=…"``);
``virtual_time.play`` plays the arrivals on a virtual clock and times every output tuple.

* ``hammad-windows`` — Figs 7–9: per-query average and maximum response time per output tuple,
  four window mixes × LWO/SWF/Greedy × hash/nested loop, Poisson arrivals;
* ``hammad-burst`` — Fig 10: Pareto ON/OFF bursts of expected size 1–5, Small-Large, hash;
* ``hammad-memory`` — §5.3: the largest JoinBuffer against the largest input buffer (elements in
  the scheduling queues, ``pending_elements()``) and output buffer (rows held for ordered release);
* ``hammad-model`` — eq. (1) (LWO) and eq. (2) (SWF) against runs of a burst of ``m`` tuples
  arriving at once (the §3.1.1 setting), per window.

**Scaled down** (``Scale``): the paper runs 100 tuples/s per stream, windows 1–600 s, selectivity
0.002 and 100,000 tuples; in Python that is hours.  Windows become ``ms_per_second`` milliseconds
per paper second (600 s → 6 s), the rate ``rate`` tuples/s and the selectivity ``1/keys``, chosen so
each window's expected matches per arrival (α·λ·w, which set the join's output) stay near the
paper's (0.5 × 20 × w/100 = 0.1·w against 0.002 × 100 × w = 0.2·w); each run measures ``tuples``
arrivals per stream after a warm-up of the largest window (the paper's "fast forward").  Every JSON
states its scale.  ``QUICK`` is the test size (seconds).

**Clocks**: ``measured`` (wall time of each engine turn: the real engine, every operator), ``cpu``
(the engine thread's CPU time per turn: the same, without other processes' load) or ``work``
(deterministic: the join's work counter × a cost per unit of work, set for a mean load
``utilisation`` under LWO).  The join's turn is ``budget`` (8): elements read, then units of join
work; its output leaves when the turn ends, so a turn as long as an LWO scan would let no policy
release a small window first.  Each JSON compares the result with the paper's claims and says where
it agrees, where not, and why, from the measured figures only.  Method and results:
``docs/hammad-experiments.md``.
"""

from __future__ import annotations

import csv
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from sluice.experiments.shared_join_paper import (
    BURSTS,
    MIXES,
    MODEL_MIXES,
    PAPER,
    PAPER_MEMORY,
    POLICIES,
    VARIANTS,
    burst_agreement,
    eq1,
    eq1_engine,
    eq2,
    eq2_engine,
    memory_agreement,
    model_agreement,
    rnd,
    step_costs,
    windows_agreement,
)
from sluice.experiments.shared_join_plots import plot_burst, plot_memory, plot_model, plot_windows
from sluice.experiments.virtual_time import (
    Clock,
    CpuClock,
    MeasuredClock,
    PortTimes,
    RunResult,
    WorkClock,
    Workload,
    batch_of,
    build,
    join_work,
    play,
    turns,
)
from sluice.workloads.arrivals import poisson, poisson_pareto_flows


@dataclass(frozen=True)
class Scale:
    """How the paper is scaled down (see the module docstring)."""

    ms_per_second: float = 10.0  # a paper second of window is this many ms of stream time
    rate: float = 20.0  # tuples per (virtual) second per stream
    keys: int = 2  # join keys drawn uniformly: selectivity 1/keys
    tuples: int = 200  # measured arrivals per stream, after the warm-up
    budget: int = 8  # the join's turn: elements read, then join work (an LWO scan of w_max is ≈ 61)
    utilisation: float = 0.6  # work clock: the cost per unit of work gives LWO this mean load
    burst_m: int = 50  # hammad-model: tuples arriving at once (the paper's m)
    model_tuples_per_second: float = 1.0  # hammad-model: B's tuples per paper second of window
    seed: int = 1
    # what to run (tests run subsets)
    mixes: tuple[str, ...] = tuple(MIXES)
    variants: tuple[str, ...] = VARIANTS
    bursts: tuple[int, ...] = BURSTS
    memory: tuple[tuple[str, float | None], ...] = (("uniform", None), ("small-large", None), ("small-large", 5.0))
    model_mixes: tuple[str, ...] = MODEL_MIXES

    def windows(self, mix: str) -> list[int]:
        return [max(1, round(w * self.ms_per_second)) for w in MIXES[mix]]

    def lwo_work_per_arrival(self, mix: str, variant: str) -> float:
        """Expected join work of one arrival under LWO: one probe plus the pairs its scan of the
        largest window finds (hash) or examines (nested loop).
        """
        s_max = self.rate * self.windows(mix)[-1] / 1000.0
        return 1.0 + (s_max / self.keys if variant == "hash" else s_max)

    def work_clock(self, mix: str, variant: str) -> WorkClock:
        per_arrival = self.lwo_work_per_arrival(mix, variant)
        return WorkClock(self.utilisation * 1000.0 / (2 * self.rate * per_arrival))

    def describe(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "paper": PAPER,
            "how": (
                f"windows: {self.ms_per_second:g} ms per paper second "
                f"(600 s -> {600 * self.ms_per_second / 1000:g} s); "
                f"arrivals: {self.rate:g}/s per stream (paper 100/s); selectivity 1/{self.keys} (paper 0.002), so "
                f"alpha*lambda*w = {self.rate / self.keys * self.ms_per_second / 1000:g}*w matches per arrival "
                f"(paper 0.2*w, w in paper seconds); {self.tuples} measured arrivals per stream after a warm-up "
                f"of the largest window (paper: 100,000 tuples); the join's turn: {self.budget} elements read, then "
                f"join work until {self.budget} units are spent (an LWO scan of the largest window is about "
                f"{self.lwo_work_per_arrival('uniform', 'hash'):.0f}); work clock: a cost per unit of work that "
                f"gives LWO an expected load of {self.utilisation:g} once the windows are full; "
                "response times in virtual milliseconds"
            ),
        }


FULL = Scale()
QUICK = Scale(
    ms_per_second=0.5, rate=25.0, keys=2, tuples=20, budget=8, burst_m=8, model_tuples_per_second=0.05
)  # tests: seconds per run


CLOCKS = ("measured", "cpu", "work")


def _clock(scale: Scale, kind: str, mix: str, variant: str) -> Clock:
    if kind == "work":
        return scale.work_clock(mix, variant)
    if kind == "measured":
        return MeasuredClock()
    if kind == "cpu":
        return CpuClock()
    raise ValueError(f"unknown clock {kind!r}: {', '.join(CLOCKS)}")


# -- workloads --------------------------------------------------------------------------------
def _stamps(counts: Sequence[float]) -> np.ndarray:
    """Arrival timestamps (ms) from arrivals per 1-ms slot; fractional counts are carried over."""
    c = np.floor(np.cumsum(np.asarray(counts, np.float64)) + 1e-9)
    n = np.diff(np.concatenate([[0.0], c])).astype(np.int64)
    return np.repeat(np.arange(len(n), dtype=np.int64), n)


def workload(scale: Scale, mix: str, burst: float | None = None, seed: int | None = None) -> Workload:
    """Both streams: a warm-up as long as the largest window, then ``scale.tuples`` arrivals per
    stream on average; Poisson (§5.1) or, with ``burst``, Pareto bursts of that expected size (§5.2).
    """
    seed = scale.seed if seed is None else seed
    warm = scale.windows(mix)[-1]
    slots = warm + int(round(scale.tuples / scale.rate * 1000))
    per_ms = scale.rate / 1000.0
    streams = {}
    for k, s in enumerate(("A", "B")):
        if burst is None:
            counts = poisson(slots, per_ms, seed=seed * 101 + k)
        else:
            counts = poisson_pareto_flows(slots, per_ms, alpha=burst_alpha(burst), k=1.0, seed=seed * 101 + k)
        ts = _stamps(counts)
        keys = np.random.default_rng(seed * 7 + k).integers(0, scale.keys, len(ts))
        streams[s] = (ts, keys)
    return Workload(streams, since=warm)


def burst_alpha(expected: float) -> float:
    """Pareto shape with expected burst ``expected`` for bursts of at least one tuple
    (E = α·b/(α−1), b = 1 tuple per 1-ms slot, §5.2); E = 1 is α → ∞ (here 1000: E = 1.001).
    """
    return 1000.0 if expected <= 1 else expected / (expected - 1)


# -- one run's figures ------------------------------------------------------------------------
def _run_row(r: RunResult, arrivals: int) -> dict[str, Any]:
    return {
        "policy": r.policy,
        "variant": r.variant,
        "outputs": r.outputs,
        "avg_ms": rnd(r.mean),
        "avg_of_windows_ms": rnd(float(np.nanmean([p.mean for p in r.ports]))),
        "max_ms": rnd(max(p.peak for p in r.ports)),
        "per_window_avg_ms": [rnd(p.mean) for p in r.ports],
        "per_window_max_ms": [rnd(p.peak) for p in r.ports],
        "per_window_outputs": [p.count for p in r.ports],
        "utilisation": rnd(r.utilisation, 3),
        "busy_ms_per_arrival": rnd(r.busy_ms / max(arrivals, 1), 3),
        "cpu_over_busy": rnd(r.cpu_ms / r.busy_ms, 3) if r.cpu_ms and r.busy_ms else None,
        "steps_per_arrival": rnd(r.steps / max(arrivals, 1), 2),
        "join_turns_per_arrival": rnd(r.join_turns / max(arrivals, 1), 2),
        "join_buffer_peak": r.join_buffer_peak,
        "pending_peak": r.pending_peak,
        "unread_peak": r.unread_peak,
        "held_peak": r.held_peak,
        "held_peak_in_turn": r.held_peak_in_turn,
        "wall_s": rnd(r.wall_s, 2),
        "checksum": [(p.count_all, p.checksum) for p in r.ports],
    }


def contention(rows: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """Measured clocks: the range of CPU time over busy (wall or CPU) time across runs."""
    shares = [r["cpu_over_busy"] for r in rows if r.get("cpu_over_busy") is not None]
    return {"cpu_over_busy_min": min(shares), "cpu_over_busy_max": max(shares)} if shares else None


def _progress(total: int, label: str, on: bool) -> Callable[[str], None]:
    from sluice.experiments.scheduling import Progress

    bar = Progress(total, label) if on else None
    return (lambda what: bar.step(what)) if bar else (lambda what: None)


def _csv(path: Path, header: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)


def _window_rows(
    prefix: Sequence[Any], windows_s: Sequence[int], windows_ms: Sequence[int], row: dict[str, Any]
) -> list[list[Any]]:
    out = []
    for i, (ws, wm) in enumerate(zip(windows_s, windows_ms, strict=True)):
        n, avg, mx = row["per_window_outputs"][i], row["per_window_avg_ms"][i], row["per_window_max_ms"][i]
        out.append([*prefix, i + 1, ws, wm, n, avg, mx])
    out.append([*prefix, "all", "", "", row["outputs"], row["avg_ms"], row["max_ms"]])
    return out


# -- hammad-windows (Figs 7-9) ----------------------------------------------------------------
def run_windows(out: Path, scale: Scale = FULL, clock: str = "measured", progress: bool = True) -> dict[str, Any]:
    step = _progress(len(scale.variants) * len(scale.mixes) * len(POLICIES), "hammad-windows", progress)
    t0 = time.perf_counter()
    results: dict[str, dict[str, dict[str, dict[str, Any]]]] = {}
    csv_rows: list[list[Any]] = []
    exact: dict[str, bool] = {}
    for variant in scale.variants:
        for mix in scale.mixes:
            w = workload(scale, mix)
            wins = scale.windows(mix)
            for policy in POLICIES:
                r = play(w, wins, policy, variant, budget=scale.budget, clock=_clock(scale, clock, mix, variant))
                row = _run_row(r, len(w))
                results.setdefault(variant, {}).setdefault(mix, {})[policy] = row
                csv_rows += _window_rows([clock, variant, mix, policy], MIXES[mix], wins, row)
                step(f"{variant}/{mix}/{policy}")
            sums = {tuple(map(tuple, results[variant][mix][p]["checksum"])) for p in POLICIES}
            exact[f"{variant}/{mix}"] = len(sums) == 1
    for mix in scale.mixes if len(scale.variants) == 2 else ():  # hash and nested loop: the same answers
        exact[f"hash=nested-loop/{mix}"] = (
            results["hash"][mix]["lwo"]["checksum"] == results["nested-loop"][mix]["lwo"]["checksum"]
        )
    out.mkdir(parents=True, exist_ok=True)
    _csv(
        out / "hammad-windows.csv",
        ["clock", "variant", "mix", "policy", "window", "window_s_paper", "window_ms", "outputs", "avg_ms", "max_ms"],
        csv_rows,
    )
    summary = {
        "experiment": "hammad-windows",
        "paper": "Hammad et al. 2003, §5.1, Figs 7-9 (Table 1 mixes)",
        "clock": clock,
        "scale": scale.describe(),
        "queries": "Istream(SELECT * FROM A [Range w], B [Range w] WHERE A.K = B.K), one per window",
        "engine": f"EmbeddedEngine(shared_join='<policy>:unit=1,variant=<variant>'), join budget {scale.budget}",
        "averages": "avg_ms: over every output tuple of the seven queries (Fig 7); "
        "avg_of_windows_ms: mean of the seven per-query averages",
        "exact": exact,
        "contention": contention([r for v in results.values() for m in v.values() for r in m.values()]),
        "cost_per_extra_step_ms": step_costs(results) if clock != "work" else None,
        "results": _strip(results),
        "agreement": windows_agreement(results, clock),
        "wall_s": round(time.perf_counter() - t0, 1),
    }
    _write_json(out / "hammad-windows.json", summary)
    plot_windows(out / "hammad-windows.png", results, scale.describe()["how"], clock)
    return summary


def _strip(results: Any) -> Any:
    """Results without the checksums (they are compared, not reported)."""
    if isinstance(results, dict):
        return {k: _strip(v) for k, v in results.items() if k != "checksum"}
    return results


def _write_json(path: Path, doc: dict[str, Any]) -> None:
    from sluice.experiments.results import write_results

    name = doc.pop("experiment")
    write_results(path, name, experiment=name, **doc)


# -- hammad-burst (Fig 10) ----------------------------------------------------------------------
def run_burst(out: Path, scale: Scale = FULL, clock: str = "measured", progress: bool = True) -> dict[str, Any]:
    mix, variant = "small-large", "hash"
    step = _progress(len(scale.bursts) * len(POLICIES), "hammad-burst", progress)
    t0 = time.perf_counter()
    wins = scale.windows(mix)
    results: dict[int, dict[str, dict[str, Any]]] = {}
    csv_rows: list[list[Any]] = []
    workloads = {}
    for e in scale.bursts:
        w = workloads[e] = workload(scale, mix, burst=e)
        for policy in POLICIES:
            r = play(w, wins, policy, variant, budget=scale.budget, clock=_clock(scale, clock, mix, variant))
            results.setdefault(e, {})[policy] = row = _run_row(r, len(w))
            csv_rows += _window_rows([clock, e, policy], MIXES[mix], wins, row)
            step(f"burst {e}/{policy}")
    out.mkdir(parents=True, exist_ok=True)
    _csv(
        out / "hammad-burst.csv",
        ["clock", "expected_burst", "policy", "window", "window_s_paper", "window_ms", "outputs", "avg_ms", "max_ms"],
        csv_rows,
    )
    observed = {e: burstiness(w) for e, w in workloads.items()}
    summary = {
        "experiment": "hammad-burst",
        "paper": "Hammad et al. 2003, §5.2, Fig 10 (Small-Large, hash)",
        "clock": clock,
        "scale": scale.describe(),
        "arrivals": (
            "sluice.workloads.arrivals.poisson_pareto_flows on 1-ms slots: bursts start as a Poisson process and "
            "send one tuple per ms for a Pareto(alpha, 1) number of ms, alpha = E/(E-1) (E = 1: alpha 1000); the "
            "mean rate is fixed"
        ),
        "bursts": {e: {"alpha": rnd(burst_alpha(e), 3), **observed[e]} for e in scale.bursts},
        "exact": {e: len({tuple(map(tuple, results[e][p]["checksum"])) for p in POLICIES}) == 1 for e in scale.bursts},
        "contention": contention([r for v in results.values() for r in v.values()]),
        "results": _strip(results),
        "agreement": burst_agreement(results, clock),
        "wall_s": round(time.perf_counter() - t0, 1),
    }
    _write_json(out / "hammad-burst.json", summary)
    plot_burst(out / "hammad-burst.png", results, clock)
    return summary


def burstiness(w: Workload, bin_ms: int = 10) -> dict[str, Any]:
    """Observed: arrivals, the most on one stream within ``bin_ms``, and the index of dispersion
    (variance / mean) of a stream's arrivals per ``bin_ms`` (1 for Poisson, more for bursts).
    """
    most, disp = 0, 0.0
    for ts, _ in w.streams.values():
        if len(ts):
            c = np.bincount(ts // bin_ms)
            most, disp = max(most, int(c.max())), max(disp, float(c.var() / c.mean()))
    return {"arrivals": len(w), f"most_in_{bin_ms}_ms": most, f"dispersion_{bin_ms}_ms": round(disp, 3)}


# -- hammad-memory (§5.3) ----------------------------------------------------------------------
def run_memory(out: Path, scale: Scale = FULL, clock: str = "measured", progress: bool = True) -> dict[str, Any]:
    variant = "hash"
    step = _progress(len(scale.memory) * len(POLICIES), "hammad-memory", progress)
    t0 = time.perf_counter()
    rows: list[dict[str, Any]] = []
    for mix, burst in scale.memory:
        w = workload(scale, mix, burst=burst)
        wins = scale.windows(mix)
        expected = scale.rate * wins[-1] / 1000.0
        for policy in POLICIES:
            r = play(w, wins, policy, variant, budget=scale.budget, clock=_clock(scale, clock, mix, variant))
            jb = max(r.join_buffer_peak.values())
            rows_per_ms = sum(p.rows_all for p in r.ports) / r.span_ms if r.span_ms else 0.0
            rows.append(
                {
                    "workload": f"{mix}" + (f", bursts of {burst:g}" if burst else ", Poisson"),
                    "policy": policy,
                    "join_buffer_peak": jb,
                    "lambda_w_max": rnd(expected, 1),
                    "input_buffer_peak": r.pending_peak,
                    "unread_peak": r.unread_peak,
                    "output_buffer_peak": r.held_peak,
                    "output_buffer_peak_in_turn": r.held_peak_in_turn,
                    "input_over_join_buffer": rnd(r.pending_peak / jb, 4),
                    "output_over_join_buffer": rnd(r.held_peak / jb, 4),
                    # scale-free: the input buffer in seconds of arrivals, the output buffer in ms of output
                    "input_buffer_s_of_arrivals": rnd(r.pending_peak / (2 * scale.rate), 3),
                    "output_buffer_ms_of_output": rnd(r.held_peak / rows_per_ms, 2) if rows_per_ms else None,
                    "avg_ms": rnd(r.mean),
                    "utilisation": rnd(r.utilisation, 3),
                    "cpu_over_busy": rnd(r.cpu_ms / r.busy_ms, 3) if r.cpu_ms and r.busy_ms else None,
                }
            )
            step(f"{mix}/{burst or 'poisson'}/{policy}")
    out.mkdir(parents=True, exist_ok=True)
    _csv(out / "hammad-memory.csv", list(rows[0]), [list(r.values()) for r in rows])
    summary = {
        "experiment": "hammad-memory",
        "paper": "Hammad et al. 2003, §5.3",
        "clock": clock,
        "scale": scale.describe(),
        "measures": {
            "join_buffer_peak": "most elements ever in one input's JoinBuffer (after each engine turn)",
            "input_buffer_peak": "most elements waiting in the scheduling queues (SharedWindowJoin.pending_elements())",
            "unread_peak": "most elements arrived but not yet read by the join (its input queues)",
            "output_buffer_peak": "most rows held for ordered release between turns (held_rows(); deletions included)",
            "output_buffer_peak_in_turn": (
                "the operator's statistics().held_peak: also rows found and released within one turn"
            ),
            "input_buffer_s_of_arrivals": "input_buffer_peak / (2 streams x rate): seconds of arrivals",
            "output_buffer_ms_of_output": "output_buffer_peak / (rows the join released per ms, both signs, all ports)",
        },
        "paper_without_join_buffer": PAPER_MEMORY,
        "contention": contention(rows),
        "results": rows,
        "agreement": memory_agreement(rows),
        "wall_s": round(time.perf_counter() - t0, 1),
    }
    _write_json(out / "hammad-memory.json", summary)
    plot_memory(out / "hammad-memory.png", rows)
    return summary


# -- hammad-model (eqs 1 and 2) --------------------------------------------------------------------
def model_sizes(windows_s: Sequence[int], per_second: float) -> list[int]:
    """S_i: B's tuples in each window (at least one more than the next smaller window's)."""
    out: list[int] = []
    for w in windows_s:
        out.append(max(round(w * per_second), out[-1] + 1 if out else 1))
    return out


def model_run(
    windows_s: Sequence[int], policy: str, scale: Scale, clock: Clock, variant: str = "nested-loop"
) -> tuple[list[float], float, int]:
    """§3.1.1's setting: B holds S_i tuples within each window w_i (every pair joins, α = 1), then m
    tuples arrive on A at once.  Returns each query's average response time (ms, from the moment
    the m tuples arrive), the busy time and the join's work.

    B's tuples are m ticks apart and A's m tuples take the m ticks after B's last, so each A tuple
    finds exactly S_i of B's tuples in window w_i (w_i = m·S_i + m − 1 ticks); they are pushed together.
    """
    m = scale.burst_m
    s = model_sizes(windows_s, scale.model_tuples_per_second)
    wins = [m * si + m - 1 for si in s]
    eng, op, _ = build(wins, policy, variant, budget=1)
    n_b = s[-1]
    b_ts = np.arange(n_b, dtype=np.int64) * m
    a_ts = n_b * m + np.arange(m, dtype=np.int64)
    eng.push_batch("B", batch_of(b_ts, np.zeros(n_b, np.int64)))
    eng.heartbeat(int(b_ts[-1]))
    eng.run()  # B's tuples find nothing to join: not timed
    clock.start(op)
    w0 = join_work(op)
    eng.push_batch("A", batch_of(a_ts, np.zeros(m, np.int64)))
    eng.heartbeat(int(a_ts[-1]))
    ports = [PortTimes(x) for x in wins]
    busy, _, _, _ = turns(eng, op, clock, ports, start=0.0, arrival=0.0)
    work = join_work(op) - w0
    return [p.mean for p in ports], busy, work


def run_model(out: Path, scale: Scale = FULL, clock: str = "measured", progress: bool = True) -> dict[str, Any]:
    step = _progress(len(scale.model_mixes) * len(POLICIES), "hammad-model", progress)
    t0 = time.perf_counter()
    m = scale.burst_m
    results: dict[str, Any] = {}
    csv_rows: list[list[Any]] = []
    for mix in scale.model_mixes:
        s = model_sizes(MIXES[mix], scale.model_tuples_per_second)
        per: dict[str, Any] = {}
        for policy in POLICIES:
            ck: Clock = WorkClock(1.0) if clock == "work" else _clock(scale, clock, mix, "nested-loop")
            avgs, busy, work = model_run(MIXES[mix], policy, scale, ck)
            tp = 1.0 if clock == "work" else busy / max(work, 1)  # ms per pair: fitted on the measured clock
            model = eq1(s, m, tp) if policy == "lwo" else eq2(s, m, tp) if policy == "swf" else None
            engine = eq1_engine(s, m, tp) if policy == "lwo" else eq2_engine(s, m, tp) if policy == "swf" else None
            per[policy] = {
                "t_p_ms": rnd(tp, 6),
                "measured_avg_ms": [rnd(a, 4) for a in avgs],
                "model_avg_ms": [rnd(x, 4) for x in model] if model else None,
                "measured_over_model": [rnd(a / x, 3) for a, x in zip(avgs, model, strict=True)] if model else None,
                "engine_model_avg_ms": [rnd(x, 4) for x in engine] if engine else None,
                "measured_over_engine_model": (
                    [rnd(a / x, 3) for a, x in zip(avgs, engine, strict=True)] if engine else None
                ),
            }
            for i, a in enumerate(avgs):
                csv_rows.append(
                    [
                        clock,
                        mix,
                        policy,
                        i + 1,
                        MIXES[mix][i],
                        s[i],
                        rnd(a, 4),
                        per[policy]["model_avg_ms"][i] if model else "",
                    ]
                )
            step(f"{mix}/{policy}")
        results[mix] = {"S_i": s, **per}
    out.mkdir(parents=True, exist_ok=True)
    _csv(
        out / "hammad-model.csv",
        ["clock", "mix", "policy", "window", "window_s_paper", "S_i", "measured_avg_ms", "model_avg_ms"],
        csv_rows,
    )
    summary = {
        "experiment": "hammad-model",
        "paper": "Hammad et al. 2003, §3.1.1 eq. (1) (LWO), §3.2.1 eq. (2) (SWF); Figs 3 and 5",
        "clock": clock,
        "setting": (
            f"m = {m} tuples arrive on A at once; B holds S_i = {scale.model_tuples_per_second:g} tuple(s) per paper "
            "second of each window; every pair joins (alpha = 1); nested-loop variant, unit=1, budget 1 (one "
            "(unit, band) step per turn, as the paper's loop); response from the moment the m tuples arrive"
        ),
        "t_p": "work clock: 1 ms per unit of work (a pair examined; one more per (unit, band) probed); measured clock: "
        "busy time / work",
        "scale": scale.describe(),
        "results": results,
        "agreement": model_agreement(results, clock),
        "wall_s": round(time.perf_counter() - t0, 1),
    }
    _write_json(out / "hammad-model.json", summary)
    plot_model(out / "hammad-model.png", results)
    return summary


# -- registry -------------------------------------------------------------------------------------
RUNNERS: dict[str, Callable[..., dict[str, Any]]] = {
    "hammad-windows": run_windows,
    "hammad-burst": run_burst,
    "hammad-memory": run_memory,
    "hammad-model": run_model,
}
EXPERIMENTS = list(RUNNERS)


def run(
    name: str,
    out: str | Path = "out/experiments",
    *,
    quick: bool = False,
    clock: str = "measured",
    seed: int = 1,
    progress: bool = True,
) -> dict[str, Any]:
    """Run one experiment; writes ``NAME.csv``, ``NAME.png`` and ``NAME.json`` under ``out``."""
    if name not in RUNNERS:
        raise ValueError(f"unknown experiment {name!r}; known: {', '.join(EXPERIMENTS)}")
    scale = replace(QUICK if quick else FULL, seed=seed)
    return RUNNERS[name](Path(out), scale, clock, progress)
