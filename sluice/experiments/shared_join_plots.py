"""The figures of ``shared_joins.py`` (matplotlib, Agg): Figs 3/5, 7-10 and §5.3 as the paper
draws them, from the experiments' result dictionaries.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from sluice.experiments.shared_join_paper import MIXES, POLICIES


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


COLOURS = {"lwo": "tab:blue", "swf": "tab:orange", "greedy": "tab:green"}


def _bars(ax: Any, groups: Sequence[str], values: dict[str, list[float]], title: str) -> None:
    x = np.arange(len(groups))
    for k, p in enumerate(POLICIES):
        ax.bar(x + (k - 1) * 0.27, [v or 0 for v in values[p]], 0.27, label=p.upper(), color=COLOURS[p])
    ax.set_xticks(x, groups, fontsize=7)
    ax.set_title(title, fontsize=9)
    ax.set_ylabel("ms")
    ax.legend(fontsize=7)


def _per_window(ax: Any, wins_s: Sequence[int], rows: dict[str, dict[str, Any]], key: str, title: str) -> None:
    for p in POLICIES:
        ax.plot(
            range(1, len(wins_s) + 1),
            [v if v is not None else np.nan for v in rows[p][key]],
            "o-",
            label=p.upper(),
            color=COLOURS[p],
            ms=3,
        )
    ax.set_xticks(range(1, len(wins_s) + 1), [str(w) for w in wins_s], fontsize=7)
    ax.set_xlabel("window (paper seconds)", fontsize=7)
    ax.set_title(title, fontsize=9)
    ax.set_ylabel("ms")
    ax.legend(fontsize=7)


def plot_windows(path: Path, results: dict[str, Any], how: str, clock: str) -> None:
    """Fig 7/9a (averages per mix), Fig 8 (per window, hash) and Fig 9b/c (per window, nested loop)."""
    plt = _plt()
    fig, axes = plt.subplots(3, 5, figsize=(22, 11))
    for ax in axes.flat:
        ax.axis("off")
    for col, (variant, res) in enumerate(results.items()):
        axes[0, col].axis("on")
        _bars(
            axes[0, col],
            list(res),
            {p: [res[m][p]["avg_ms"] for m in res] for p in POLICIES},
            f"Fig {'7' if variant == 'hash' else '9a'}: average over all windows ({variant})",
        )
    fig.text(0.01, 0.005, f"{clock} clock. {how}", fontsize=8, wrap=True)
    first = next(iter(results))
    for col, mix in enumerate(list(results[first])[:4]):
        for row, key, what in ((1, "per_window_avg_ms", "average"), (2, "per_window_max_ms", "maximum")):
            axes[row, col].axis("on")
            _per_window(axes[row, col], MIXES[mix], results[first][mix], key, f"Fig 8: {mix}, {what} ({first})")
    if "uniform" in results.get("nested-loop", {}):
        rows = results["nested-loop"]["uniform"]
        for row, key, fig_no, what in (
            (1, "per_window_avg_ms", "9b", "average"),
            (2, "per_window_max_ms", "9c", "maximum"),
        ):
            axes[row, 4].axis("on")
            _per_window(axes[row, 4], MIXES["uniform"], rows, key, f"Fig {fig_no}: uniform, {what} (nested loop)")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    fig.savefig(path, dpi=90)
    plt.close(fig)


def plot_burst(path: Path, results: dict[int, dict[str, dict[str, Any]]], clock: str) -> None:
    plt = _plt()
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.5))
    bursts = sorted(results)
    for p in POLICIES:
        axes[0].plot(bursts, [results[e][p]["avg_ms"] for e in bursts], "o-", label=p.upper(), color=COLOURS[p])
    axes[0].set_xlabel("expected burst size")
    axes[0].set_ylabel("ms")
    axes[0].set_title(f"Fig 10a: average over all windows ({clock} clock)", fontsize=9)
    axes[0].legend(fontsize=7)
    top = results[bursts[-1]]
    _per_window(axes[1], MIXES["small-large"], top, "per_window_avg_ms", f"Fig 10b: burst {bursts[-1]}, average")
    _per_window(axes[2], MIXES["small-large"], top, "per_window_max_ms", f"Fig 10c: burst {bursts[-1]}, maximum")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def plot_memory(path: Path, rows: list[dict[str, Any]]) -> None:
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.5))
    loads = list(dict.fromkeys(r["workload"] for r in rows))
    for ax, key, title in (
        (axes[0], "input_over_join_buffer", "input buffer / JoinBuffer"),
        (axes[1], "output_over_join_buffer", "output buffer / JoinBuffer"),
    ):
        vals = {
            p: [next(r[key] for r in rows if r["workload"] == w and r["policy"] == p) for w in loads] for p in POLICIES
        }
        _bars(ax, loads, vals, f"§5.3: {title}")
        ax.set_ylabel("ratio")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def plot_model(path: Path, results: dict[str, Any]) -> None:
    plt = _plt()
    fig, axes = plt.subplots(1, len(results), figsize=(7 * len(results), 4.5), squeeze=False)
    for ax, mix in zip(axes[0], results, strict=True):
        x = range(1, len(MIXES[mix]) + 1)
        for p in POLICIES:
            ax.plot(x, results[mix][p]["measured_avg_ms"], "o-", color=COLOURS[p], label=f"{p.upper()} measured", ms=3)
            if results[mix][p]["model_avg_ms"]:
                ax.plot(
                    x,
                    results[mix][p]["model_avg_ms"],
                    "--",
                    color=COLOURS[p],
                    label=f"{p.upper()} eq. ({1 if p == 'lwo' else 2})",
                )
        ax.set_xticks(list(x), [str(w) for w in MIXES[mix]], fontsize=7)
        ax.set_xlabel("window (paper seconds)")
        ax.set_ylabel("ms")
        ax.set_title(f"Figs 3/5: a burst of m tuples, {mix}", fontsize=9)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
