"""What Hammad, Franklin, Aref & Elmagarmid (2003) report, for ``shared_joins.py`` to check its
runs against: Table 1's window mixes, the response-time models of §3 (eqs. 1 and 2, and the same
restated with the engine's accounting), and the claims of §5, each a function of the measured
figures that says whether they agree and why.

>>> eq1([1, 100, 600], m=50, tp=1.0)[0], eq2([1, 100, 600], m=50, tp=1.0)[0]
(14701.0, 25.5)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from sluice.experiments.results import claim

# Table 1 (seconds)
MIXES: dict[str, tuple[int, ...]] = {
    "uniform": (1, 100, 200, 300, 400, 500, 600),
    "mostly-small": (1, 5, 15, 30, 60, 300, 600),
    "mostly-large": (1, 60, 300, 420, 510, 570, 600),
    "small-large": (1, 5, 15, 300, 510, 570, 600),
}


POLICIES = ("lwo", "swf", "greedy")


VARIANTS = ("hash", "nested-loop")


BURSTS = (1, 2, 3, 4, 5)


PAPER = {"rate_per_stream": 100, "selectivity": 0.002, "tuples": 100_000, "windows_s": "1-600"}


MODEL_MIXES = ("uniform", "small-large")


def eq1(s: Sequence[float], m: int, tp: float) -> list[float]:
    """LWO (§3.1.1, eq. 1): AvgRT(Q_i) = t_p/2 ((S_i + 1) + (m − 1) S_max)."""
    return [tp / 2 * ((si + 1) + (m - 1) * s[-1]) for si in s]


def eq2(s: Sequence[float], m: int, tp: float) -> list[float]:
    """SWF (§3.2.1, eq. 2): AvgRT(Q_i) = m S_{i−1} t_p + (m + 1)/2 (S_i − S_{i−1}) t_p."""
    prev = [0.0, *s[:-1]]
    return [m * p * tp + (m + 1) / 2 * (si - p) * tp for si, p in zip(s, prev, strict=True)]


def eq1_engine(s: Sequence[float], m: int, tp: float) -> list[float]:
    """Eq. (1) as the engine does LWO: a unit's scan is one step of S_max pairs and its probe, and
    its output to every query leaves when the step ends: the k-th tuple's at k (S_max + 1) t_p.
    """
    return [(m + 1) / 2 * (s[-1] + 1) * tp for _ in s]


def eq2_engine(s: Sequence[float], m: int, tp: float) -> list[float]:
    """Eq. (2) with the engine's accounting: each (unit, band) step costs its band's pairs and one
    probe, so every band is one pair longer.
    """
    bands = [si - p + 1 for si, p in zip(s, [0.0, *s[:-1]], strict=True)]
    return [m * sum(bands[:i]) * tp + (m + 1) / 2 * b * tp for i, b in enumerate(bands)]


def rnd(x: float, nd: int = 2) -> float | None:
    return None if x != x else round(float(x), nd)


def _cost_note(rows: dict[str, dict[str, Any]]) -> str:
    """The measured busy time, (unit, band) steps and turns of the join per arrival of each policy."""
    return "; ".join(
        f"{p}: {rows[p]['busy_ms_per_arrival']} ms, {rows[p]['steps_per_arrival']} steps and "
        f"{rows[p].get('join_turns_per_arrival')} turns of the join per arrival, load {rows[p]['utilisation']}"
        for p in POLICIES
        if p in rows
    )


def _load(row: dict[str, Any]) -> float:
    u = row.get("utilisation")
    return float(u) if u is not None else 0.0


def _by(rows: dict[str, dict[str, Any]], key: str) -> Callable[[str], float]:
    """Sort key: a policy's figure ``key`` in ``rows`` (policy → figures)."""
    return lambda p: rows[p][key]


def _best(rows: dict[str, dict[str, Any]], key: str) -> str:
    return min(POLICIES, key=_by(rows, key))


def _small_large_halves(row: dict[str, Any]) -> tuple[float, float]:
    a = [x for x in row["per_window_avg_ms"][:3] if x is not None]
    b = [x for x in row["per_window_avg_ms"][3:] if x is not None]
    return float(np.mean(a)) if a else float("nan"), float(np.mean(b)) if b else float("nan")


def windows_agreement(results: dict[str, Any], clock: str) -> list[dict[str, Any]]:
    """The claims of §5.1 checked on ``results[variant][mix][policy]`` (the mixes and variants run)."""
    claims = []
    for variant, res in results.items():
        mixes = list(res)
        fig = "Fig 7" if variant == "hash" else "Fig 9a"
        for key, label in (("avg_ms", "per output tuple"), ("avg_of_windows_ms", "mean of the per-query averages")):
            best = {mix: _best(res[mix], key) for mix in mixes}
            ok = all(b == "greedy" for b in best.values())
            why = "Greedy is best in every mix." if ok else _why_not_greedy(res, best, key, clock)
            claims.append(
                claim(
                    f"{variant}: Greedy has the best average response time ({label}) in every window mix",
                    f"§5.1, {fig}",
                    ok,
                    {mix: {p: res[mix][p][key] for p in POLICIES} for mix in mixes},
                    why,
                )
            )
        spreads, slowest = {}, {}
        for mix in mixes:
            row = res[mix]["lwo"]
            pairs = zip(row["per_window_avg_ms"], row["per_window_outputs"], strict=True)
            avgs = {i + 1: a for i, (a, n) in enumerate(pairs) if a and n >= 20}
            if avgs:
                spreads[mix] = rnd(max(avgs.values()) / min(avgs.values()), 3)
                k = max(avgs, key=avgs.__getitem__)
                slowest[mix] = f"window {k} ({avgs[k]} ms over {row['per_window_outputs'][k - 1]} tuples)"
            else:
                spreads[mix] = None
        ok = all(s is not None and s <= 1.5 for s in spreads.values())
        claims.append(
            claim(
                f"{variant}: LWO's response time is nearly the same for every window "
                "(max/min of its per-query averages over windows with 20 tuples or more ≤ 1.5)",
                "§5.1.1, Fig 8 top row; eq. (1)",
                ok,
                spreads,
                "Every LWO unit scans the largest window in one step and its output to every query leaves when "
                "that step ends: a pair reaches every query at the same moment (tests/test_experiments_hammad.py), "
                "so the per-query averages differ only by which pairs each window holds. Slowest: "
                + "; ".join(f"{m}: {w}" for m, w in slowest.items())
                + ". A pair of a small window exists only when its two elements arrive close together, which "
                "is when the second finds the first's work still queued.",
            )
        )
        favour = {}
        for p in ("swf", "greedy"):
            for mix in mixes:
                small, large = _small_large_halves(res[mix][p])
                favour[f"{p}/{mix}"] = [rnd(small), rnd(res[mix][p]["per_window_avg_ms"][-1])]
        ok = all(v[0] is not None and v[1] is not None and v[0] < v[1] for v in favour.values())
        claims.append(
            claim(
                f"{variant}: SWF and Greedy favour small windows "
                "(the three smallest windows' average below the largest's)",
                "§5.1.1, Fig 8",
                ok,
                favour,
                "Both scan every new unit's smallest window first; the largest window's band waits behind the "
                "newer units' small bands."
                if ok
                else "Not in every mix: see the per-window averages.",
            )
        )
        claims += _mix_claims(variant, res)
    if len(results) == 2:
        claims.append(_variants_claim(results))
    return claims


def _mix_claims(variant: str, res: dict[str, Any]) -> list[dict[str, Any]]:
    """The claims about one mix (Mostly-Large, Small-Large), where that mix was run."""
    claims = []
    if "mostly-large" in res:
        ml = res["mostly-large"]
        worst = max(POLICIES, key=_by(ml, "avg_ms"))
        claims.append(
            claim(
                f"{variant}: SWF is the worst of the three on Mostly-Large",
                "§5.1.1, Fig 8(c)",
                worst == "swf",
                {p: ml[p]["avg_ms"] for p in POLICIES},
                "SWF keeps preempting the many large windows' bands to start new units on the small ones."
                if worst == "swf"
                else f"{worst} is worse here; {_cost_note(ml)}"
                + (" (near saturation)." if _load(ml[worst]) > 0.9 else "."),
            )
        )
    if "small-large" in res:
        sl = res["small-large"]
        g_small, g_large = _small_large_halves(sl["greedy"])
        s_small, _ = _small_large_halves(sl["swf"])
        _, l_large = _small_large_halves(sl["lwo"])
        ok = g_small <= 1.25 * s_small and g_large <= 1.25 * l_large
        claims.append(
            claim(
                f"{variant}: on Small-Large Greedy is like SWF on the small windows "
                "and like LWO on the large ones (within 25%)",
                "§5.1.1, Fig 8(d)",
                ok,
                {
                    "greedy_small": rnd(g_small),
                    "swf_small": rnd(s_small),
                    "greedy_large": rnd(g_large),
                    "lwo_large": rnd(l_large),
                },
                "Greedy's narrowest band first starts new units on the tiny windows (as SWF) and finishes a unit's "
                "narrow bands between 510 and 600 s before the wide 300-510 s ones."
                if ok
                else f"{_cost_note(sl)}.",
            )
        )
    return claims


def _variants_claim(results: dict[str, Any]) -> dict[str, Any]:
    mixes = [m for m in results["hash"] if m in results["nested-loop"]]
    ranks = {mix: [sorted(POLICIES, key=_by(results[v][mix], "avg_ms")) for v in VARIANTS] for mix in mixes}
    same = {mix: r[0] == r[1] for mix, r in ranks.items()}
    return claim(
        "nested loop resembles hash: the same order of the three policies' averages in every mix",
        "§5.1.2, Fig 9",
        all(same.values()),
        {mix: {"hash": r[0], "nested-loop": r[1]} for mix, r in ranks.items()},
        "The policies order the same work; the variants change what a band scan costs."
        + ("" if all(same.values()) else " The averages are in the results: where the order differs, compare them."),
    )


def step_costs(results: dict[str, dict[str, dict[str, dict[str, Any]]]]) -> dict[str, Any]:
    """Measured clocks: what one more (unit, band) step per arrival cost — SWF's busy time per
    arrival less LWO's, over its steps per arrival less LWO's (the same pairs are found either way;
    SWF's extra turns and held rows are in it too).
    """
    return {f"{variant}/{mix}": _extra_step_ms(rows) for variant, res in results.items() for mix, rows in res.items()}


def _extra_step_ms(rows: dict[str, dict[str, Any]]) -> float | None:
    extra = rows["swf"]["steps_per_arrival"] - rows["lwo"]["steps_per_arrival"]
    if extra <= 0:
        return None
    return rnd((rows["swf"]["busy_ms_per_arrival"] - rows["lwo"]["busy_ms_per_arrival"]) / extra, 3)


def _why_not_greedy(res: dict[str, Any], best: dict[str, str], key: str, clock: str) -> str:
    """Who beat Greedy where, on which windows Greedy was still ahead, and what each policy cost."""
    lost = {m: b for m, b in best.items() if b != "greedy"}
    parts = []
    for m, b in lost.items():
        g, w = res[m]["greedy"]["per_window_avg_ms"], res[m][b]["per_window_avg_ms"]
        ahead = [i + 1 for i, (x, y) in enumerate(zip(g, w, strict=True)) if x is not None and y is not None and x < y]
        parts.append(
            f"{m}: {b} {res[m][b][key]} ms vs Greedy {res[m]['greedy'][key]} ms; Greedy's per-query average is "
            f"below {b}'s on windows {ahead or 'none'} of 1-{len(g)} (largest: {g[-1]} vs {w[-1]} ms)."
        )
    m0 = next(iter(lost))
    parts.append(f"Cost in {m0}: {_cost_note(res[m0])}.")
    hot = [f"{m}/{p} ({res[m][p]['utilisation']})" for m in lost for p in POLICIES if _load(res[m][p]) > 0.9]
    if hot:
        parts.append(
            f"Loads above 0.9 ({', '.join(hot)}): near saturation, where waiting grows without bound and a few "
            "per cent more work per arrival multiplies the response time."
        )
    if all(b == "lwo" for b in lost.values()):
        parts.append(
            "LWO finishes each unit's whole scan in arrival order, so a large window's output waits only for "
            "older units, while SWF and Greedy put it behind every newer unit's small bands; the large windows "
            "hold most of the output tuples."
        )
    shares = [res[m][p].get("cpu_over_busy") for m in lost for p in POLICIES]
    shares = [x for x in shares if x is not None]
    if clock == "measured" and shares and min(shares) < 0.9:
        parts.append(
            f"The wall clock also counted waits for a core: this thread's CPU time was {min(shares)}-{max(shares)} "
            "of the busy time (cpu_over_busy; the machine is shared), which adds noise the policies did not cause."
        )
    if clock != "work":
        per_step = [x for x in (_extra_step_ms(res[m]) for m in lost) if x is not None]
        turns = {p: [res[m][p].get("join_turns_per_arrival") for m in lost] for p in POLICIES}
        spread = {p: f"{min(v)}-{max(v)}" for p, v in turns.items() if v and None not in v}
        parts.append(
            "On a measured clock every (unit, band) step and every turn of the join also has a fixed cost in "
            "this engine (Python, Arrow calls, finding the deletions due and releasing each port's output in "
            "order, whatever the band's size) that the paper's cost model, proportional to the tuples scanned, "
            "does not have; SWF and Greedy make up to seven steps per arrival where LWO makes one "
            "(steps_per_arrival)"
            + (
                f", spread over {spread['swf']} (SWF) and {spread['greedy']} (Greedy) turns of the join per "
                f"arrival against LWO's {spread['lwo']} (join_turns_per_arrival)"
                if len(spread) == 3
                else ""
            )
            + (
                f", and each step more per arrival cost SWF {min(per_step)}-{max(per_step)} ms of busy time "
                "(cost_per_extra_step_ms)."
                if per_step
                else "."
            )
        )
    else:
        parts.append(
            "On the work clock each (unit, band) step costs at least one unit of work (the first its probe besides "
            "its pairs; with the key index a later band only its pairs, and one if it finds none), so SWF and "
            "Greedy carry up to six more units per arrival than LWO: a higher load (utilisation)."
        )
    return " ".join(parts)


def burst_agreement(results: dict[int, dict[str, dict[str, Any]]], clock: str) -> list[dict[str, Any]]:
    claims = []
    bursts = sorted(results)
    for key, label in (("avg_ms", "per output tuple"), ("avg_of_windows_ms", "mean of the per-query averages")):
        best = {e: _best(results[e], key) for e in bursts}
        ok = all(b == "greedy" for b in best.values())
        gain = {e: rnd(1 - results[e]["greedy"][key] / results[e]["lwo"][key], 3) for e in bursts}
        claims.append(
            claim(
                f"Greedy has the best average response time ({label}) at every burst size",
                "§5.2, Fig 10(a); Greedy's improvement over LWO up to 80% (burst 4)",
                ok,
                {
                    "averages": {e: {p: results[e][p][key] for p in POLICIES} for e in bursts},
                    "greedy_improvement_over_lwo": gain,
                },
                "Greedy is best at every size."
                if ok
                else _why_not_greedy(
                    {str(e): results[e] for e in bursts}, {str(e): b for e, b in best.items()}, key, clock
                ),
            )
        )
    lo, hi = bursts[0], bursts[-1]

    def gap(e: int) -> float:
        v = [results[e][p]["avg_ms"] for p in POLICIES]
        return max(v) / min(v)

    growth = {p: rnd(results[hi][p]["avg_ms"] / results[lo][p]["avg_ms"], 1) for p in POLICIES}
    claims.append(
        claim(
            f"burstiness widens the gaps between the policies (max/min of their averages at E={hi} above E={lo})",
            "§5.2: 'as the burst size increases, the scheduling becomes more important'",
            gap(hi) > gap(lo),
            {e: rnd(gap(e), 3) for e in bursts},
            "Bursts queue work, and the policies only differ in the order of queued work."
            + (
                ""
                if gap(hi) > gap(lo)
                else f" Not here: the gap is {rnd(gap(lo), 2)} at E={lo} and {rnd(gap(hi), 2)} at E={hi}; the "
                f"bursts raised every policy's average about alike (E={hi} over E={lo}: "
                + ", ".join(f"{p} {g}x" for p, g in growth.items())
                + ")."
            ),
        )
    )
    top = results[hi]
    ratio = top["swf"]["per_window_max_ms"][-1] / top["greedy"]["per_window_max_ms"][-1]
    claims.append(
        claim(
            f"at E={hi} SWF's maximum response time for the largest window is well above Greedy's "
            "(Fig 10(c): 125 s vs 25 s)",
            "§5.2, Fig 10(c)",
            ratio > 1.5,
            {p: top[p]["per_window_max_ms"][-1] for p in POLICIES},
            "SWF starts every new unit before any older unit's last band; Greedy finishes narrow last bands first."
            + (
                ""
                if ratio > 1.5
                else f" Here SWF's maximum is {rnd(ratio, 2)} times Greedy's (the check asks for more than 1.5; "
                "the paper's is 5): above it, as the order predicts, but not by the paper's factor."
            ),
        )
    )
    return claims


# §5.3's bounds restated without the JoinBuffer, whose size a scaled run changes (windows / 100)
PAPER_MEMORY = {
    "input_buffer_s_of_arrivals": 30.0,  # < 10% of 60,000 tuples = 6,000 tuples, at 2 x 100 arrivals/s
    "output_buffer_ms_of_output": 21.0,  # < 3% of 60,000 = 1,800 tuples; Uniform: 0.002 x 100 x 2,101 s
    # = 420 tuples per arrival, 84,000/s at 200 arrivals/s
}


def memory_agreement(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """§5.3 on ``rows`` (one per workload and policy): the ratios to the JoinBuffer as the paper
    states them, and the same bounds without the JoinBuffer (``PAPER_MEMORY``).
    """

    def peak(key: str, policy: str) -> float:
        return max(r[key] or 0.0 for r in rows if r["policy"] == policy)

    jb_ok = all(r["join_buffer_peak"] <= 2.0 * r["lambda_w_max"] for r in rows)
    in_ratio = {p: peak("input_over_join_buffer", p) for p in POLICIES}
    out_ratio = {p: peak("output_over_join_buffer", p) for p in ("swf", "greedy")}
    in_s = {p: peak("input_buffer_s_of_arrivals", p) for p in POLICIES}
    out_ms = {p: peak("output_buffer_ms_of_output", p) for p in ("swf", "greedy")}
    scaled = (
        " A scaled run's JoinBuffer is 100 times smaller (windows / 100) while the delays that fill the other "
        "buffers come from the engine's costs, so the ratio to the JoinBuffer grows with the scaling; "
    )
    return [
        claim(
            "the JoinBuffer holds about lambda*w_max elements per stream (at most twice)",
            "§5.3",
            jb_ok,
            {f"{r['workload']}/{r['policy']}": [r["join_buffer_peak"], r["lambda_w_max"]] for r in rows},
            "An element stays until it has left the largest window and no queued unit still has it to scan; "
            "a burst puts more than lambda*w_max elements in a window.",
        ),
        claim(
            "SWF's input buffer (scheduling queues) stays below 10% of the JoinBuffer",
            "§5.3",
            in_ratio["swf"] < 0.10,
            {"max_ratio": in_ratio, "max_seconds_of_arrivals": in_s},
            "Units queue only while the join is behind."
            + (
                ""
                if in_ratio["swf"] < 0.10
                else scaled + f"in seconds of arrivals SWF's largest input buffer is {in_s['swf']} s, where the "
                f"paper's bound is {PAPER_MEMORY['input_buffer_s_of_arrivals']:g} s."
            ),
        ),
        claim(
            "SWF's and Greedy's output buffers stay below 3% of the JoinBuffer",
            "§5.3",
            all(v < 0.03 for v in out_ratio.values()),
            {"max_ratio": out_ratio, "max_ms_of_output": out_ms},
            "Rows are held until no earlier instant can still produce output for their query; the held rows also "
            "include the CQL window join's deletions (a pair leaving a window), which the paper's join does not "
            "produce, and a row counts once per query it is routed to."
            + (
                ""
                if all(v < 0.03 for v in out_ratio.values())
                else scaled + f"in time, the largest output buffer holds {max(out_ms.values())} ms of the join's "
                f"output, where the paper's bound is about {PAPER_MEMORY['output_buffer_ms_of_output']:g} ms."
            ),
        ),
    ]


def model_agreement(results: dict[str, Any], clock: str) -> list[dict[str, Any]]:
    claims = []
    for policy, eq in (("lwo", "eq. (1)"), ("swf", "eq. (2)")):
        ratios = {mix: results[mix][policy]["measured_over_model"] for mix in results}
        # where a band holds few pairs, the probe each (unit, band) step costs weighs: left out
        wide = {
            mix: [r for r, b in zip(rs, bands(results[mix]["S_i"]), strict=True) if b >= 20]
            for mix, rs in ratios.items()
        }
        checked = [r for rs in wide.values() for r in rs]
        ok: bool | None = all(0.85 <= r <= 1.15 for r in checked) if checked else None
        claims.append(
            claim(
                f"{policy.upper()}'s per-window average response time follows {eq} "
                "(within 15%, windows whose band holds at least 20 of B's tuples)",
                f"§3.{'1.1' if policy == 'lwo' else '2.1'}, {eq}",
                ok,
                ratios,
                "The engine charges one unit of work per (unit, band) step besides the pairs (the probe), which the "
                "model does not count; it weighs on narrow bands, so windows whose band holds fewer than 20 tuples "
                "are not checked (agrees is null when none is left). "
                + (
                    "LWO also releases a unit's output when its scan of the largest window ends, so every window "
                    "waits (m+1)/2·(S_max+1)·t_p, where eq. (1) lets a small window's pairs out part-way through "
                    "the scan: above the model by at most about (m+1)/(m-1)."
                    if policy == "lwo"
                    else "SWF releases a query's output for a tuple once that tuple has scanned the query's window, "
                    "as eq. (2) assumes."
                )
                + (
                    ""
                    if ok or clock == "work"
                    else " On a measured clock t_p is not a constant per pair: each step "
                    "has a fixed cost besides its pairs, so the fitted t_p (busy time / work) misprices narrow bands."
                ),
            )
        )
        exact = {mix: results[mix][policy]["measured_over_engine_model"] for mix in results}
        tol = 0.01 if clock == "work" else 0.5
        claims.append(
            claim(
                f"{policy.upper()} follows {eq} restated with the engine's accounting "
                f"(engine_model_avg_ms; within {tol:.0%})",
                f"{eq}, one probe per (unit, band) step"
                + (", output released when the unit's scan ends" if policy == "lwo" else ""),
                all(abs(r - 1) <= tol for rs in exact.values() for r in rs),
                exact,
                "The restated model charges what the engine's work counter charges, so on the work clock it is "
                "exact; on a measured clock a step's cost is not proportional to its work."
                if clock == "work"
                else "On a measured clock a step's cost is not proportional to its work (fixed costs per step).",
            )
        )
    g_better = {
        mix: rnd(
            float(np.mean(results[mix]["greedy"]["measured_avg_ms"]))
            / float(np.mean(results[mix]["swf"]["measured_avg_ms"])),
            3,
        )
        for mix in results
    }
    ok = all(v is not None and v <= 1.0 for v in g_better.values())
    claims.append(
        claim(
            "Greedy's mean of the per-window averages is at most SWF's in the burst setting (§3.3)",
            "§3.3",
            ok,
            {"greedy_over_swf": g_better},
            "Greedy finishes narrower partial windows first and releases output before the tuple has scanned the "
            "whole window."
            + (
                ""
                if ok or clock == "work"
                else " Not on this clock: Greedy does the same work as SWF here in about the same order (in Uniform, "
                "where every band but the first is as wide, in the same order), so what its steps and turns cost "
                "on a measured clock decides, not the order."
            ),
        )
    )
    return claims


def bands(s: Sequence[int]) -> list[int]:
    return [si - p for si, p in zip(s, [0, *s[:-1]], strict=True)]
