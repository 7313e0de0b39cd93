"""The tables of ``docs/hammad-experiments.md`` ("Results"), printed from the JSON the Hammad
experiments wrote on each clock (``sluice experiment hammad-* --clock C --out DIR/C``):

    .venv/bin/python -m sluice.experiments.shared_join_tables benchmarks/results/hammad

Figures as the page shows them: three significant digits below 100, whole numbers with thousands
separators above; in each row the lowest average of the three policies in bold (per output tuple,
then the mean of the per-query averages).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sluice.experiments.shared_join_paper import MIXES

CLOCKS = ("measured", "cpu", "work")
POLICIES = ("lwo", "swf", "greedy")
NAMES = {"lwo": "LWO", "swf": "SWF", "greedy": "Greedy"}  # (as the tables name them)


def num(x: float) -> str:
    """3.39, 10.8, 98.0; 131, 1,143."""
    return f"{round(x):,}" if abs(x) >= 99.95 else f"{x:#.3g}"  # (99.96 as 100, not "100.")


def _pair(runs: dict[str, Any]) -> list[str]:
    """Each policy's "avg / mean of per-query averages", the lowest of each in bold."""
    best = [min(runs[p][k] for p in POLICIES) for k in ("avg_ms", "avg_of_windows_ms")]

    def b(x: float, low: float) -> str:
        return f"**{num(x)}**" if x == low else num(x)

    return [f"{b(runs[p]['avg_ms'], best[0])} / {b(runs[p]['avg_of_windows_ms'], best[1])}" for p in POLICIES]


def _dash(runs: dict[str, Any], key: str, fmt: str = "{:.2f}") -> str:
    return "–".join(fmt.format(runs[p][key]) for p in POLICIES)


def _head(title: str, columns: list[str]) -> Iterator[str]:
    """A table's title line and header."""
    yield title
    yield ""
    yield "| " + " | ".join(columns) + " |"
    yield "|" + "---|" * len(columns)


def windows(d: dict[str, Any], clock: str) -> Iterator[str]:
    yield from _head(
        f"**Fig 7 / 9a, {clock} clock** — average response time (ms) per output tuple / mean of the seven "
        "per-query averages; load (busy share of virtual time) LWO–SWF–Greedy; (unit, band) steps per arrival:",
        ["mix", "variant", "LWO", "SWF", "Greedy", "load", "steps"],
    )
    for variant, mixes in d["results"].items():
        for mix, runs in mixes.items():
            cells = [mix, variant, *_pair(runs), _dash(runs, "utilisation"), _dash(runs, "steps_per_arrival", "{:.0f}")]
            yield "| " + " | ".join(cells) + " |"
    yield ""
    c, steps = d.get("contention"), d.get("cost_per_extra_step_ms")
    if c and steps:
        busy = "; ".join(
            f"{v}/{m} " + "–".join(str(runs[p]["busy_ms_per_arrival"]) for p in POLICIES)
            for v, mixes in d["results"].items()
            for m, runs in mixes.items()
        )
        yield (
            f"CPU time over busy time {c['cpu_over_busy_min']}-{c['cpu_over_busy_max']}; cost per extra step (ms): "
            + ", ".join(f"{k} {v}" for k, v in steps.items())
            + f"; busy ms per arrival LWO–SWF–Greedy: {busy}"
        )
        yield ""
    yield f"Run: {d['wall_s']} s; exact: {all(d['exact'].values())}"
    yield ""


def small_large(d: dict[str, Any], clock: str) -> Iterator[str]:
    ws = MIXES["small-large"]
    yield from _head(
        f"**Fig 8(d), Small-Large, hash, {clock} clock** — per-query average / maximum (ms), windows in paper seconds:",
        ["policy", *map(str, ws)],
    )
    runs = d["results"]["hash"]["small-large"]
    for p in POLICIES:
        r = runs[p]
        cells = [f"{num(a)} / {num(m)}" for a, m in zip(r["per_window_avg_ms"], r["per_window_max_ms"], strict=True)]
        yield f"| {NAMES[p]} | " + " | ".join(cells) + " |"
    yield ""


def bursts(d: dict[str, Any], clock: str) -> Iterator[str]:
    yield from _head(
        f"**Fig 10(a), {clock} clock** — Small-Large, hash; average per output tuple / mean of per-query "
        "averages (ms):",
        ["expected burst", "α", "LWO", "SWF", "Greedy"],
    )
    for e, runs in d["results"].items():
        alpha = d["bursts"][e]["alpha"]
        yield f"| {e} | {alpha:g} | " + " | ".join(_pair(runs)) + " |"
    yield ""
    last = d["results"][max(d["results"], key=int)]
    avg = ", ".join(f"{NAMES[p]} {num(last[p]['per_window_avg_ms'][-1])}" for p in POLICIES)
    most = ", ".join(f"{NAMES[p]} {num(last[p]['per_window_max_ms'][-1])}" for p in POLICIES)
    yield (
        f"burst {max(d['results'], key=int)}, largest window: average {avg}; maximum {most} ms. "
        f"Run: {d['wall_s']} s; exact: {all(d['exact'].values())}"
    )
    yield ""


def memory(d: dict[str, Any], clock: str) -> Iterator[str]:
    yield from _head(
        f"**§5.3, {clock} clock** — peaks: JoinBuffer (elements, λ·w_max = 120), input buffer (elements; s of "
        "arrivals), output buffer (rows; ms of output):",
        ["workload", "policy", "JoinBuffer", "input buffer", "output buffer"],
    )
    for r in d["results"]:
        yield (
            f"| {r['workload']} | {NAMES[r['policy']]} | {r['join_buffer_peak']} | {r['input_buffer_peak']}; "
            f"{r['input_buffer_s_of_arrivals']:g} s | {r['output_buffer_peak']:,}; "
            f"{r['output_buffer_ms_of_output']:g} ms |"
        )
    yield ""
    yield f"Run: {d['wall_s']} s"
    yield ""


def model(d: dict[str, Any], clock: str) -> Iterator[str]:
    r = d["results"]["uniform"]
    yield from _head(
        f"**Eqs. (1), (2), {clock} clock** — Uniform, m = 50 at once, S_i = {r['S_i']}; per-window average (ms), "
        "measured / model:",
        ["", *(f"w{i + 1}" for i in range(len(r["S_i"])))],
    )
    rows = [
        ("LWO measured", r["lwo"]["measured_avg_ms"]),
        ("eq. (1)", r["lwo"]["model_avg_ms"]),
        ("SWF measured", r["swf"]["measured_avg_ms"]),
        ("eq. (2)", r["swf"]["model_avg_ms"]),
        ("Greedy measured", r["greedy"]["measured_avg_ms"]),
    ]
    for name, xs in rows:
        yield f"| {name} | " + " | ".join(num(x) for x in xs) + " |"
    yield ""
    yield f"t_p: LWO {r['lwo']['t_p_ms']}, SWF {r['swf']['t_p_ms']} ms. Run: {d['wall_s']} s"
    yield ""


def claims(by_clock: dict[str, dict[str, dict[str, Any]]]) -> Iterator[str]:
    yield from _head("**Claims**", ["claim", *by_clock])
    seen: dict[str, dict[str, Any]] = {}
    tolerance: dict[str, dict[str, list[str]]] = {}  # a claim whose tolerance differs by clock: clocks by it
    for clock, runs in by_clock.items():
        for exp in ("hammad-windows", "hammad-burst", "hammad-memory", "hammad-model"):
            for a in runs[exp]["agreement"]:
                key, _, within = a["claim"].partition(" (engine_model_avg_ms; within ")
                seen.setdefault(key, {})[clock] = a["agrees"]
                if within:
                    tolerance.setdefault(key, {}).setdefault(within.rstrip(")"), []).append(clock)
    word = {True: "yes", False: "no", None: "n/a"}
    for key, c in seen.items():
        if key in tolerance:
            ts = tolerance[key]
            key += (
                " (engine_model_avg_ms; within "
                + "; ".join(
                    t if len(ts) == 1 else f"{t} on the {', '.join(cs)} clock{'s' if len(cs) > 1 else ''}"
                    for t, cs in ts.items()
                )
                + ")"
            )
        yield f"| {key} | " + " | ".join(word[c.get(k)] for k in by_clock) + " |"
    yield ""


def page(root: Path) -> str:
    runs = {
        c: {
            e: json.loads((root / c / f"{e}.json").read_text())
            for e in ("hammad-windows", "hammad-burst", "hammad-memory", "hammad-model")
        }
        for c in CLOCKS
        if (root / c).is_dir()
    }
    out: list[str] = []
    for section, exp in ((windows, "hammad-windows"), (small_large, "hammad-windows"), (bursts, "hammad-burst")):
        for clock, r in runs.items():
            out += section(r[exp], clock)
    for section, exp in ((memory, "hammad-memory"), (model, "hammad-model")):
        for clock, r in runs.items():
            out += section(r[exp], clock)
    out += claims(runs)
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("root", nargs="?", default="benchmarks/results/hammad", help="holds measured/, cpu/, work/")
    print(page(Path(ap.parse_args().root)))


if __name__ == "__main__":
    main()
