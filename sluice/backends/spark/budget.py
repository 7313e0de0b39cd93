"""A memory limit per key on Spark (``SparkEngine(key_memory_limit=…)``; issue #13, design 021
"On Spark"): each processor key's engine holds its queues and synopses within the limit by the
embedded engine's own resource manager — dynamic sampling and load shedding at the key's input,
the rates chosen by weighted precision (STREAM §5.2.2, §5.3) — its rates and counters kept with
the key's operator state.  What each key dropped travels back to the driver as a note row whose
text starts with ``PREFIX`` (a report, not a rejection): per stream the elements offered, kept,
sampled out and shed in that turn, the key's rates now, the most memory it measured, per query
its windows shrunk, its precision (§5.3, from its own kept fractions) and the output rows of the
turn, and its manager's new events.  The driver sums them into each query's ``approximation`` and
``statistics()``: a key's latest figures are those of its highest ``seq`` (the key's adjustment
count), whatever order the notes are read in.

>>> a = report("7", 3, {"s": (10, 8, 2, 0)}, {"s": 0.8}, 4096, precision={"q": (0.0, 0.2, None)}, out={"q": 8})
>>> b = report("8", 1, {"s": (5, 5, 0, 0)}, {"s": 1.0}, 512, precision={"q": (0.0, 0.0, None)}, out={"q": 5})
>>> t = tally([a, b])
>>> t.streams["s"].kept, t.streams["s"].rate, t.peak, t.keys
(13, 0.8, 4096, 2)
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from sluice.approx.limits import QueryLimits
from sluice.approx.precision import Precision, base_streams, estimate, unsafe_streams, window_key
from sluice.approx.report import Approximation
from sluice.approx.streams import StreamShedding
from sluice.plan import logical as L
from sluice.runtime.bloom import Bloom

PREFIX = "sluice:key-budget "

Counts = tuple[int, int, int, int]  # offered, kept, sampled out, shed
Est = tuple[float, float, float | None] | None  # (FP, FN, FN's low end) of a key's answer; None: unknown


def counters(eng: Any) -> dict[str, Counts]:
    """A key engine's per-stream counters under its memory limit."""
    if eng.limits is None:
        return {}
    return {n: (s.offered, s.kept, s.sampled_out, s.shed) for n, s in eng.limits.streams.items()}


def report(
    key: str,
    seq: int,
    delta: dict[str, Counts],
    rates: dict[str, float],
    peak: int,
    windows: dict[str, dict[str, tuple[int, float]]] | None = None,
    events: list[tuple[str, str]] | None = None,
    precision: dict[str, Est] | None = None,
    out: dict[str, int] | None = None,
    synopses: dict[str, dict[str, dict[str, float]]] | None = None,
    peak_in_runs: int | None = None,
) -> str:
    """The note one key writes after a turn (see the module docstring)."""
    r = {
        "key": key,
        "seq": seq,
        "streams": delta,
        "rates": rates,
        "peak": peak,
        "windows": windows or {},
        "events": events or [],
        "precision": precision or {},
        "out": out or {},
        "synopses": synopses or {},
        "peak_in_runs": peak if peak_in_runs is None else peak_in_runs,
    }
    return PREFIX + json.dumps(r, separators=(",", ":"))


def key_report(eng: Any, key: str, before: dict[str, Counts]) -> str | None:
    """After a key's turn under a limit: its report, when it was offered elements or its manager
    did something (a timer's turn may choose rates or shrink windows); None otherwise.  The
    events reported leave the key's state (they are the driver's now).
    """
    m = eng.limits
    if m is None:
        return None
    delta = {}
    for n, c in counters(eng).items():
        c0 = before.get(n, (0, 0, 0, 0))
        if c[0] > c0[0]:
            delta[n] = (c[0] - c0[0], c[1] - c0[1], c[2] - c0[2], c[3] - c0[3])
    if not delta and not m.events:
        return None
    windows, precision, out, synopses = {}, {}, {}, {}
    for name, q in eng.queries.items():
        a = m.approximation(name) if name in m.readers else None  # (its shrunk windows too)
        if a is not None and a.windows:
            windows[name] = a.windows
        if a is not None and a.synopses:
            synopses[name] = {d: asdict(b) for d, b in a.synopses.items()}
        p = None if a is None else a.precision
        precision[name] = None if p is None else (p.fp, p.fn, a.fn_low if a is not None else None)
        out[name] = sum(b.num_rows for b in q.batches)
    events = [(e.action, e.detail) for e in m.events]
    m.events = []
    rates = {n: s.rate for n, s in m.streams.items()}
    return report(key, m.adjustments, delta, rates, m.peak, windows, events, precision, out, synopses, m.peak_in_runs)


def is_report(note: str | None) -> bool:
    return note is not None and note.startswith(PREFIX)


@dataclass
class _Key:
    """One key's latest report (by ``seq``) and its output rows so far, per query."""

    seq: int = -1
    rates: dict[str, float] = field(default_factory=dict)
    windows: dict[str, dict[str, tuple[int, float]]] = field(default_factory=dict)
    precision: dict[str, Est] = field(default_factory=dict)
    out: dict[str, int] = field(default_factory=dict)
    synopses: dict[str, dict[str, Bloom]] = field(default_factory=dict)  # per query: its compressed DISTINCTs


@dataclass
class Tally:
    """Every report of a query's keys, summed: per stream what its keys were offered and
    dropped (and the lowest rate a key samples it at now), the most memory one key held, the
    keys' events ("key k: action: detail"; in a processor several queries share, each member
    sees the events of the shared input) and each key's latest figures.
    """

    streams: dict[str, StreamShedding] = field(default_factory=dict)
    peak: int = 0
    peak_in_runs: int = 0  # the most one key held at any step of its runs (design 021, "Memory within a run")
    events: list[str] = field(default_factory=list)
    by_key: dict[str, _Key] = field(default_factory=dict)

    @property
    def keys(self) -> int:
        """Keys that reported."""
        return len(self.by_key)

    def add(self, note: str) -> None:
        r = json.loads(note[len(PREFIX) :])
        self.peak = max(self.peak, int(r["peak"]))
        self.peak_in_runs = max(self.peak_in_runs, int(r.get("peak_in_runs", r["peak"])))
        for name, c in r["streams"].items():
            o, k, d, s = c[:4]  # (a report of 1b350d3 also carried the rate here)
            st = self.streams.setdefault(name, StreamShedding(name))
            st.offered += o
            st.kept += k
            st.sampled_out += d
            st.shed += s
        self.events += [f"key {r['key']}: {action}: {detail}" for action, detail in r.get("events", [])]
        mine = self.by_key.setdefault(r["key"], _Key())
        for query, n in r.get("out", {}).items():
            mine.out[query] = mine.out.get(query, 0) + int(n)
        seq = r.get("seq", 0)
        if seq >= mine.seq:  # (file sinks are read in no particular order)
            mine.seq, mine.rates, mine.windows = seq, r.get("rates", {}), r.get("windows", {})
            mine.precision = {q: None if p is None else tuple(p) for q, p in r.get("precision", {}).items()}
            mine.synopses = {q: {d: Bloom(**b) for d, b in v.items()} for q, v in r.get("synopses", {}).items()}

    def approximation(self, plan: L.LogicalNode, limits: QueryLimits, query: str) -> Approximation:
        """What ``query`` (its name in the processor: "q" when it runs alone) got over all its
        keys (``Query.approximation``, as the embedded engine's): the fraction of each stream's
        elements kept, summed over keys; each window shrunk on some key at its smallest range and
        least fraction held over the keys; and the precision (§5.3) of the whole answer from each
        key's own — a key's recall weighs as the exact output it stands for (its output rows over
        its recall): a join split by key that samples a hot key and keeps the cold ones is not
        the product of the summed fractions.  None where approximation is unsafe.
        """
        reads = set(base_streams(plan))
        mine = [st for n, st in self.streams.items() if n in reads]
        kept = {st.name: st.kept / st.offered for st in mine if st.offered}
        dropped = sum(st.dropped for st in mine)
        shrunk: dict[str, list[tuple[int, float]]] = {}
        for k in self.by_key.values():
            for w, (size, frac) in k.windows.get(query, {}).items():
                shrunk.setdefault(w, []).append((int(size), float(frac)))
        windows = {w: (min(s for s, _ in v), min(f for _, f in v)) for w, v in shrunk.items()}
        compressed: dict[str, list[Bloom]] = {}
        for k in self.by_key.values():
            for d, b in k.synopses.get(query, {}).items():
                compressed.setdefault(d, []).append(b)
        blooms = {d: Bloom.total(v) for d, v in compressed.items()}
        if not dropped and not windows and not blooms:
            return Approximation.none(limits)
        rates = {st.name: st.rate for st in mine}
        precision, fn_low = self._precision(plan, query, kept, windows, blooms)
        return Approximation(rates, kept, dropped, precision, unsafe_streams(plan), limits, fn_low, windows, (), blooms)

    def _precision(
        self,
        plan: L.LogicalNode,
        query: str,
        kept: dict[str, float],
        windows: dict[str, tuple[int, float]],
        blooms: dict[str, Bloom],
    ) -> tuple[Precision | None, float | None]:
        ests = [(k.out.get(query, 0), k.precision.get(query)) for k in self.by_key.values()]
        if any(e is None for _, e in ests):
            return None, None  # (a key outside the model: the whole answer is)
        live = [(n, e) for n, e in ests if n > 0 and e is not None and e[1] < 1.0]
        if not live:  # no key wrote output yet: the model from the fractions summed over keys
            keys = {
                f"[{n.spec.describe()}] over {', '.join(window_key(n)[1])}": window_key(n)
                for n in L.walk_plan(plan)
                if isinstance(n, L.Window)
            }
            held: dict[object, float] = {keys[w]: f for w, (_, f) in windows.items() if w in keys}
            return estimate(plan, kept, held, blooms), None
        rows = sum(n for n, _ in live)
        fp = sum(n * e[0] for n, e in live) / rows

        def fn(low: bool) -> float:
            exact = sum(n / (1 - (e[2] if low and e[2] is not None else e[1])) for n, e in live)
            return 1 - rows / exact

        has_low = any(e[2] is not None for _, e in live)
        return Precision(fp, fn(False)), fn(True) if has_low else None


def tally(notes: Iterable[str | None]) -> Tally:
    t = Tally()
    for n in notes:
        if is_report(n):
            assert n is not None
            t.add(n)
    for name, st in t.streams.items():  # (once all are read: each key's latest rate)
        st.rate = min((k.rates[name] for k in t.by_key.values() if name in k.rates), default=1.0)
    return t
