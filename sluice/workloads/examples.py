"""The seed papers' example streams, and trace replay with attribute values of chosen selectivity.

* ``requests`` / ``domains`` — the web proxy of the CQL paper (§2.1): a bursty Requests stream
  (Poisson session starts, Pareto session lengths) and the Domains relation.
* ``datacenter`` — Hammad et al. §1: Temperature and Humidity streams ``(LocationId, Value)`` from
  sensors at locations in a machine room; sensors are pull-based (one reading per period, with
  jitter), and a few locations run hot (readings drift up for a while, then recover).
* ``trace_stream`` — a real packet trace replayed with a speed-up factor, each packet an element
  whose attributes ``a0, a1, …`` are drawn so that ``a_i < threshold(σ_i)`` holds for exactly
  ``round(σ_i·n)`` elements: a selection on it has the chosen selectivity σ_i, on real burstiness.

All are seeded and deterministic.

>>> rows = trace_stream("dec-pkt-1-udp", 1000, selectivities=[0.25])
>>> threshold(0.25), sum(1 for r in rows if r[1] < threshold(0.25))
(25, 250)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from sluice.workloads.arrivals import trace_interarrivals

REQUESTS_DDL = """
REGISTER STREAM Requests (client_id integer, domain varchar(20), URL varchar(60));
REGISTER RELATION Domains (domain varchar(20), type varchar(12));
"""

DOMAINS = [
    ("stanford.edu", "education"),
    ("mit.edu", "education"),
    ("amazon.com", "commerce"),
    ("ebay.com", "commerce"),
    ("cnn.com", "news"),
]
PATHS = {
    "stanford.edu": ["http://cs.stanford.edu/", "http://cs.stanford.edu/people", "http://www.stanford.edu/"],
    "mit.edu": ["http://www.mit.edu/", "http://csail.mit.edu/"],
    "amazon.com": ["http://amazon.com/books", "http://amazon.com/cart"],
    "ebay.com": ["http://ebay.com/item", "http://ebay.com/search"],
    "cnn.com": ["http://cnn.com/", "http://cnn.com/world"],
}


def requests(n: int, seed: int = 7) -> list[tuple[int, tuple[Any, ...]]]:
    """``n`` requests ``(ts, (client_id, domain, URL))`` in bursts: Poisson session starts (one
    per 30 s on average), Pareto(1.4) session lengths, 2 s mean think time.
    """
    rng = np.random.default_rng(seed)
    out: list[tuple[int, tuple[Any, ...]]] = []
    t = 0.0
    while len(out) < n:
        t += rng.exponential(30.0)
        client = int(rng.integers(1, 1500))
        length = min(int(rng.pareto(1.4) * 3) + 1, 40)
        dom = DOMAINS[int(rng.integers(len(DOMAINS)))][0]
        at = t
        for _ in range(length):
            if rng.random() < 0.3:
                dom = DOMAINS[int(rng.integers(len(DOMAINS)))][0]
            url = PATHS[dom][int(rng.integers(len(PATHS[dom])))]
            out.append((int(at), (client, dom, url)))
            at += rng.exponential(2.0)
    return sorted(out[:n], key=lambda e: e[0])


def domains() -> list[tuple[int, str, tuple[Any, ...]]]:
    """The Domains relation's updates: every domain inserted at time 0."""
    return [(0, "+", d) for d in DOMAINS]


DATACENTER_DDL = """
REGISTER STREAM Temperature (LocationId integer, Value float);
REGISTER STREAM Humidity (LocationId integer, Value float);
"""


def datacenter(
    seconds: int, locations: int = 100, period: int = 10, hot: float = 0.05, seed: int = 3
) -> dict[str, list[tuple[int, tuple[Any, ...]]]]:
    """Readings ``(ts, (LocationId, Value))`` per stream for ``seconds`` of time.

    Every location reports temperature (°C, around 22) and relative humidity (%, around 45)
    every ``period`` seconds with jitter; at any time about ``hot`` of the locations are in a
    hot episode (temperature up to +15 °C, humidity down), lasting exponentially long (mean 5 min).
    """
    rng = np.random.default_rng(seed)
    base_t = rng.normal(22.0, 1.0, locations)
    base_h = rng.normal(45.0, 3.0, locations)
    temperature: list[tuple[int, tuple[Any, ...]]] = []
    humidity: list[tuple[int, tuple[Any, ...]]] = []
    heat = np.zeros(locations)
    for start in range(0, seconds, period):
        # episodes begin and end (a two-state Markov chain per location, one step per period)
        begin = rng.random(locations) < hot * period / 300.0
        end = rng.random(locations) < period / 300.0
        warmer = np.where(end, 0.0, np.minimum(heat + period / 60.0, 15.0))
        heat = np.where(heat > 0, warmer, np.where(begin, 1.0, 0.0))
        for loc in range(locations):
            for stream, value in (
                (temperature, base_t[loc] + heat[loc] + rng.normal(0, 0.3)),
                (humidity, base_h[loc] - 1.5 * heat[loc] + rng.normal(0, 1.0)),
            ):
                ts = start + int(rng.integers(0, period))
                if ts < seconds:
                    stream.append((ts, (loc, round(float(value), 2))))
    return {
        "Temperature": sorted(temperature, key=lambda e: e[0]),
        "Humidity": sorted(humidity, key=lambda e: e[0]),
    }


def trace_stream(
    name: str = "dec-pkt-1-udp",
    n: int = 100_000,
    *,
    speedup: float = 1.0,
    selectivities: list[float] | None = None,
    unit_seconds: float = 0.001,
    seed: int = 0,
) -> list[tuple[int, ...]]:
    """The first ``n`` packets of a trace as rows ``(ts, a0, a1, …)``.

    ``ts`` is the packet's arrival time divided by ``speedup``, in units of ``unit_seconds``
    (default milliseconds).  Attribute ``a_i`` is an integer in 0..99 with ``a_i < threshold(σ_i)``
    on exactly ``round(σ_i·n)`` rows, spread at random over the trace.
    """
    gaps = trace_interarrivals(name)[:n] / speedup
    if len(gaps) < n:
        raise ValueError(f"the trace {name} has only {len(gaps)} packets")
    ts = (np.cumsum(gaps) / unit_seconds).astype(np.int64)
    rng = np.random.default_rng(seed)
    cols = []
    for sel in selectivities or []:
        if not 0.0 <= sel <= 1.0:
            raise ValueError(f"a selectivity is between 0 and 1, not {sel}")
        t, hits = threshold(sel), round(sel * n)
        vals = np.empty(n, dtype=np.int64)
        order = rng.permutation(n)
        vals[order[:hits]] = rng.integers(0, t, hits)  # below the threshold for the chosen rows
        vals[order[hits:]] = rng.integers(t, 100, n - hits)  # at or above it for the rest
        cols.append(vals)
    return [(int(t), *(int(c[i]) for c in cols)) for i, t in enumerate(ts)]


def threshold(selectivity: float) -> int:
    """The bound ``t`` of the selection ``a < t`` that has this selectivity on ``trace_stream``'s attribute."""
    return min(99, max(1, round(100 * selectivity)))
