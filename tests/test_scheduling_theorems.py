"""The scheduling papers' results, checked on the simulator.

* STREAM §4.2 (= Chain Example 1): total queue, in units of n, for FIFO and Chain, exactly.
* Chain Thm 1: on lower-envelope charts, Chain's memory is never above any other strategy's.
* Chain Thm 2: all selectivities ≤ 1 ⇒ Chain on the real charts stays within the LP bound + n.
* Jiang Thm 1: among path-based schedules, path capacity has the least total tuple latency.
* Jiang Thm 3: segment scheduling's maximum memory is at most Chain's.
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sluice.scheduling.bound import envelope_bound, lp_bounds
from sluice.scheduling.model import Op, Path, envelope_path
from sluice.scheduling.simulator import simulate
from sluice.scheduling.strategies import STRATEGIES, Segment, Strategy, make

EXAMPLE = Path("p", (Op("o1", 1.0, 0.2), Op("o2", 5.0, 1.0)))
ARRIVALS = {"p": [0] + [1] * 7}


@pytest.mark.parametrize(
    ("name", "expected"),
    [("fifo", [1, 1.2, 2, 2.2, 3, 3.2, 4]), ("chain", [1, 1.2, 1.4, 1.6, 1.8, 2.0, 2.2])],
)
def test_stream_section_4_2_example(name: str, expected: list[float]) -> None:
    r = simulate([EXAMPLE], ARRIVALS, make(name), horizon=16)
    assert [round(m, 9) for m in r.memory[1:8]] == expected
    assert r.memory[15] == 0.0 and r.memory[14] > 0  # both empty at t = 15, not before


# -- random workloads ---------------------------------------------------------------------
ops = st.tuples(st.sampled_from([0.25, 0.5, 1.0, 2.0, 4.0]), st.sampled_from([0.1, 0.25, 0.5, 0.8, 1.0]))
paths = st.lists(st.lists(ops, min_size=1, max_size=4), min_size=1, max_size=3).map(
    lambda ps: [Path(f"p{k}", tuple(Op(f"p{k}o{i}", c, s) for i, (c, s) in enumerate(p))) for k, p in enumerate(ps)]
)


def bursty(n_paths: int, horizon: int):
    """ON/OFF bursts per path: whole units in bursts, idle gaps."""
    return st.lists(
        st.lists(st.sampled_from([0, 0, 0, 1, 1, 2]), min_size=horizon, max_size=horizon),
        min_size=n_paths,
        max_size=n_paths,
    )


def draw_arrivals(data, ps: list[Path], horizon: int) -> dict[str, list[int]]:
    """Bursty arrivals over ``horizon`` slots, by path name."""
    return {p.name: a for p, a in zip(ps, data.draw(bursty(len(ps), horizon)), strict=True)}


class Random(Strategy):
    """An arbitrary (seeded) work-conserving schedule: the 'any other strategy' of Thm 1."""

    name = "random"

    def __init__(self, seed: int) -> None:
        super().__init__()
        import random

        self.rng = random.Random(seed)

    def choose(self, ready, view):
        return self.rng.choice(list(ready))


OTHERS = ["fifo", "greedy", "round-robin", "path-capacity", "segment", "simplified-segment"]


@settings(max_examples=150, deadline=None)
@given(paths, st.data())
def test_chain_is_optimal_on_lower_envelopes(ps: list[Path], data) -> None:
    horizon = 14
    env = [envelope_path(p) for p in ps]
    arrivals = draw_arrivals(data, env, horizon)
    chain = simulate(env, arrivals, make("chain"), horizon + 40).memory
    for other in [make(n) for n in OTHERS] + [Random(data.draw(st.integers(0, 10**6)))]:
        mem = simulate(env, arrivals, other, horizon + 40).memory
        for t, (c, o) in enumerate(zip(chain, mem, strict=True)):
            assert c <= o + 1e-9, f"t={t}: chain {c} > {other.name} {o}"


@settings(max_examples=40, deadline=None)
@given(paths, st.data())
def test_chain_within_lp_bound_plus_n(ps: list[Path], data) -> None:
    horizon = 10
    arrivals = draw_arrivals(data, ps, horizon)
    chain = simulate(ps, arrivals, make("chain"), horizon + 6).memory
    bounds = lp_bounds(ps, arrivals, horizon + 6)
    env = envelope_bound(ps, arrivals, horizon + 6)
    for t, (c, lp, e) in enumerate(zip(chain, bounds, env, strict=True)):
        assert lp <= c + 1e-7, f"t={t}: the LP bound {lp} exceeds a feasible schedule {c}"
        assert e <= c + 1e-7
        assert c <= lp + len(ps) + 1e-7, f"t={t}: chain {c} > LP {lp} + n={len(ps)}"


@settings(max_examples=60, deadline=None)
@given(paths, st.data())
def test_path_capacity_has_least_total_latency_among_path_schedules(ps: list[Path], data) -> None:
    # Jiang Thm 1's setting: N_i ≥ 1 whole tuples wait at each path at one instant.  (When tuples
    # arrive while another path holds a nearly finished one, finishing it first can be better:
    # the static capacity order is not optimal for partially processed tuples.)
    counts = data.draw(st.lists(st.integers(1, 3), min_size=len(ps), max_size=len(ps)))
    arr_lists = [[c] for c in counts]
    arrivals = {p.name: a for p, a in zip(ps, arr_lists, strict=True)}
    best = simulate(ps, arrivals, make("path-capacity"), 400)
    assert sum(best.output) == pytest.approx(sum(sum(a) for a in arr_lists))

    class FixedOrder(Strategy):
        name = "fixed"
        granularity = "path"

        def __init__(self, order) -> None:
            super().__init__()
            self.rank = {p: r for r, p in enumerate(order)}

        def choose(self, ready, view):
            return min(ready, key=lambda u: (self.rank[u.path], view.oldest(u)))

    for order in itertools.permutations(range(len(ps))):
        other = simulate(ps, arrivals, FixedOrder(order), 400)
        assert best.total_latency() <= other.total_latency() + 1e-6, order


@settings(max_examples=150, deadline=None)
@given(paths, st.data())
def test_segment_peak_memory_at_most_chains(ps: list[Path], data) -> None:
    # Jiang Thm 3 as its proof argues it: segments are Chain's lower-envelope segments.
    horizon = 14
    arrivals = draw_arrivals(data, ps, horizon)
    seg = simulate(ps, arrivals, Segment(envelope=True), horizon + 40)
    chain = simulate(ps, arrivals, make("chain"), horizon + 40)
    assert seg.peak <= chain.peak + 1e-9


def test_segment_thm3_fails_with_the_published_construction() -> None:
    """Found by the property test above when it used Jiang's construction (runs of non-decreasing
    release capacity): that cuts p1 into [o0], [o1], [o2, o3] where the lower envelope is one
    segment, and segment scheduling then peaks above Chain.  Kept as evidence (docs/design/006)."""
    ps = [
        Path("p0", (Op("p0o0", 0.25, 0.1),)),
        Path("p1", (Op("p1o0", 0.5, 0.8), Op("p1o1", 2.0, 0.25), Op("p1o2", 0.25, 1.0), Op("p1o3", 0.25, 0.1))),
    ]
    arrivals = {"p0": [0] * 14, "p1": [0] * 11 + [2, 0, 1]}
    seg = simulate(ps, arrivals, make("segment"), 60)
    chain = simulate(ps, arrivals, make("chain"), 60)
    assert Segment().segments_of(ps[1]) == [(0, 0), (1, 1), (2, 3)]
    assert Segment(envelope=True).segments_of(ps[1]) == [(0, 3)]
    assert round(seg.peak, 6) == 2.225 and round(chain.peak, 6) == 2.186719
    assert simulate(ps, arrivals, Segment(envelope=True), 60).peak <= chain.peak + 1e-9


def test_every_strategy_drains_the_same_work() -> None:
    arrivals = {"p": [0] + [1] * 7}
    for name in list(STRATEGIES) + ["chain+oldest-first", "chain+dynamic", "fifo+exhaustive", "greedy+limited"]:
        kw = {"memory": 3.0} if name == "threshold" else {}
        r = simulate([EXAMPLE], arrivals, make(name, **kw), horizon=40)
        assert sum(r.output) == pytest.approx(7.0), name
        assert r.memory[-1] == 0.0, name
