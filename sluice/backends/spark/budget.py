"""A memory limit per key on Spark (``SparkEngine(key_memory_limit=…)``; issue #13, design 021
"On Spark"): each processor key's engine holds its queues and synopses within the limit by the
embedded engine's own resource manager — dynamic sampling and load shedding at the key's input,
the rates chosen by weighted precision (STREAM §5.2.2, §5.3) — its rates and counters kept with
the key's operator state.  What each key dropped travels back to the driver as a note row whose
text starts with ``PREFIX`` (a report, not a rejection): per stream the elements offered, kept,
sampled out and shed in that micro-batch, the key's rate now and the most memory it measured.
The driver sums them into each query's ``approximation`` and ``statistics()``.

>>> r = report("7", {"s": (10, 8, 2, 0, 0.8)}, 4096)
>>> tally([r, report("8", {"s": (5, 5, 0, 0, 1.0)}, 512)]).streams["s"].kept
13
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from sluice.approx.limits import QueryLimits
from sluice.approx.manager import StreamShedding
from sluice.approx.precision import base_streams, estimate, unsafe_streams, window_key
from sluice.approx.report import Approximation, shrunk_windows
from sluice.plan import logical as L

PREFIX = "sluice:key-budget "


def counters(eng: Any) -> dict[str, tuple[int, int, int, int, float]]:
    """A key engine's per-stream (offered, kept, sampled out, shed, rate) under its memory limit."""
    if eng.limits is None:
        return {}
    return {n: (s.offered, s.kept, s.sampled_out, s.shed, s.rate) for n, s in eng.limits.streams.items()}


def report(
    key: str,
    delta: dict[str, tuple[int, int, int, int, float]],
    peak: int,
    windows: dict[str, dict[str, tuple[int, float]]] | None = None,
    events: list[tuple[str, str]] | None = None,
) -> str:
    """The note one key writes after a micro-batch: what its streams were offered and what it
    dropped in it (``delta``: offered, kept, sampled out, shed, the rate now), its peak memory,
    and per query the windows it let shrink (``[Range T At Least t]``: the range now, the
    fraction of the full window's contents held over time), and what its manager did, and why
    (``Event``: load shedding began, rates chosen, the limit passed for an exact-only query).
    """
    r = {"key": key, "streams": delta, "peak": peak, "windows": windows or {}, "events": events or []}
    return PREFIX + json.dumps(r, separators=(",", ":"))


def shrunk(eng: Any) -> dict[str, dict[str, tuple[int, float]]]:
    """Per query of a key engine, the windows its memory limit shrank (``shrunk_windows``)."""
    if eng.limits is None or eng.limits.measure is None:
        return {}
    found = eng.limits.measure().windows
    if not found:
        return {}
    out = {name: shrunk_windows(name, found)[1] for name in eng.queries}
    return {name: w for name, w in out.items() if w}


def since(eng: Any, before: dict[str, tuple[int, int, int, int, float]]) -> dict[str, tuple[int, int, int, int, float]]:
    """What changed since ``counters`` gave ``before``: only streams offered something."""
    out = {}
    for n, (o, k, d, s, rate) in counters(eng).items():
        o0, k0, d0, s0, _ = before.get(n, (0, 0, 0, 0, 1.0))
        if o > o0:
            out[n] = (o - o0, k - k0, d - d0, s - s0, rate)
    return out


def is_report(note: str | None) -> bool:
    return note is not None and note.startswith(PREFIX)


@dataclass
class Tally:
    """Every report of a query's keys, summed: per stream what its keys were offered and
    dropped, the lowest rate a key samples it at now, and the most memory one key held.
    """

    streams: dict[str, StreamShedding] = field(default_factory=dict)
    peak: int = 0
    keys: int = 0  # keys that reported
    rates: dict[str, dict[str, float]] = field(default_factory=dict)  # stream → key → its latest rate
    # query ("q" alone) → window → key → (range now, fraction held): each key's latest
    windows: dict[str, dict[str, dict[str, tuple[int, float]]]] = field(default_factory=dict)
    events: list[str] = field(default_factory=list)  # what the keys' managers did ("key k: action: detail")

    def add(self, note: str) -> None:
        r = json.loads(note[len(PREFIX) :])
        self.peak = max(self.peak, int(r["peak"]))
        for name, (o, k, d, s, rate) in r["streams"].items():
            st = self.streams.setdefault(name, StreamShedding(name))
            st.offered += o
            st.kept += k
            st.sampled_out += d
            st.shed += s
            self.rates.setdefault(name, {})[r["key"]] = rate
        self.keys = len({k for by_key in self.rates.values() for k in by_key})
        for name, st in self.streams.items():
            st.rate = min(self.rates[name].values())
        self.events += [f"key {r['key']}: {action}: {detail}" for action, detail in r.get("events", [])]
        for query, ws in r.get("windows", {}).items():
            for w, (size, frac) in ws.items():
                self.windows.setdefault(query, {}).setdefault(w, {})[r["key"]] = (int(size), float(frac))

    def approximation(self, plan: L.LogicalNode, limits: QueryLimits, query: str) -> Approximation:
        """What ``query`` (its name in the processor: "q" when it runs alone) got over all its
        keys (``Query.approximation``, as the embedded engine's): the fraction of each stream's
        elements kept, summed over keys; each window shrunk on some key at its smallest range and
        least fraction held over the keys; the precision that gives (§5.3, from those: a bound),
        or none where approximation is unsafe (the keys never drop those streams' elements).
        """
        reads = set(base_streams(plan))
        mine = [st for n, st in self.streams.items() if n in reads]
        kept = {st.name: st.kept / st.offered for st in mine if st.offered}
        dropped = sum(st.dropped for st in mine)
        windows = {
            w: (min(s for s, _ in by_key.values()), min(f for _, f in by_key.values()))
            for w, by_key in self.windows.get(query, {}).items()
        }
        if not dropped and not windows:
            return Approximation.none(limits)
        keys = {  # (named as ``shrunk_windows`` names them)
            f"[{n.spec.describe()}] over {', '.join(window_key(n)[1])}": window_key(n)
            for n in L.walk_plan(plan)
            if isinstance(n, L.Window)
        }
        held: dict[object, float] = {keys[w]: f for w, (_, f) in windows.items() if w in keys}
        rates = {st.name: st.rate for st in mine}
        precision = estimate(plan, kept, held)
        return Approximation(rates, kept, dropped, precision, unsafe_streams(plan), limits, None, windows)


def tally(notes: Iterable[str | None]) -> Tally:
    t = Tally()
    for n in notes:
        if is_report(n):
            assert n is not None
            t.add(n)
    return t
