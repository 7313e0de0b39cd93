"""The scheduling papers' results, checked on the simulator.

* STREAM §4.2 (= Chain Example 1): total queue, in units of n, for FIFO and Chain, exactly.
* Chain Thm 1: on lower-envelope charts, Chain's memory is never above any other strategy's.
* Chain Thm 2: all selectivities ≤ 1 ⇒ Chain on the real charts stays within the LP bound + n.
* Jiang Table 2 (§2.2): FIFO and Chain's queue size, tuple latency and throughput, t = 1..10, exactly.
* Jiang Thm 1: among path-based schedules, path capacity has the least total tuple latency.
* Jiang Thm 2: among path-based schedules, path capacity holds the least memory at every instant,
  with memory as the proof counts it (eq. 2.3); with queue memory as it is held, a pinned counterexample.
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


class FixedOrder(Strategy):
    """A path-based schedule serving paths in a fixed order (the 'other path-based strategy')."""

    name = "fixed"
    granularity = "path"

    def __init__(self, order) -> None:
        super().__init__()
        self.rank = {p: r for r, p in enumerate(order)}

    def choose(self, ready, view):
        return min(ready, key=lambda u: (self.rank[u.path], view.oldest(u)))


# -- Jiang & Chakravarthy §2.2, Tables 1 and 2 ---------------------------------------------
# Figure 1 (lost from the text) is a select on each of two streams feeding a join; Table 1: O1, O2
# the selects (selectivity 0.2, capacity 1 tuple per time unit), O3 the join (0.8 per semi-join
# side, capacity 0.2).  A join is two semi-joins (§2.1), so each stream's path is select → join.
TABLE1 = [
    Path("s1", (Op("O1", 1.0, 0.2), Op("O3@s1", 5.0, 0.8))),
    Path("s2", (Op("O2", 1.0, 0.2), Op("O3@s2", 5.0, 0.8))),
]
TABLE2_INPUT = {"s1": [0, 1, 0, 1, 0, 0, 0, 0, 0, 0, 1], "s2": [0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0]}
# time: (queue size, tuple latency or None, throughput) for t = 1..10, as printed
TABLE2 = {
    "fifo": [(1.0, None, 0), (1.2, None, 0), (3.0, 2, 0.16), (2.2, None, 0), (2.0, 3, 0.16),
             (1.2, None, 0), (1.0, 4, 0.16), (0.2, None, 0), (0, 6, 0.16), (1.0, None, 0)],
    "chain": [(1.0, None, 0), (1.2, None, 0), (2.4, None, 0), (1.6, None, 0), (0.8, None, 0),
              (0.6, 5, 0.16), (0.4, 5, 0.16), (0.2, 5, 0.16), (0, 6, 0.16), (1.0, None, 0)],
}  # fmt: skip


@pytest.mark.parametrize("name", ["fifo", "chain"])
def test_jiang_table_2(name: str) -> None:
    r = simulate(TABLE1, TABLE2_INPUT, make(name), horizon=13)
    done = {int(d): int(d - a) for a, d, _ in r.completions.values()}  # one tuple leaves per instant
    assert len(done) == len(r.completions) == 5
    got = [
        (round(r.memory[t], 9), done.get(t), round(r.output[t - 1] * 0.2 * 0.8, 9))  # output of slot t-1
        for t in range(1, 11)
    ]
    assert got == TABLE2[name]


def unfinished(r, t: float) -> int:
    """Tuples arrived by ``t`` and not yet out: memory as Jiang eq. 2.3 counts it (a tuple holds
    its input size until its path releases it)."""
    return sum(1 for a, d, _ in r.completions.values() if a <= t and d > t + 1e-9)


def test_jiang_thm2_fails_for_queue_memory_as_held() -> None:
    """With memory as the queues hold it (a tuple shrinks as it moves along its path), a path of
    lower capacity whose first operator is fast and selective frees more by t = 1: path capacity
    serves p0 (capacity 1/1.5) before p1 (1/1.6) and holds 1.333 where p1-first holds 1.004.  The
    proof compares tuples consumed per unit time, which is memory only under eq. 2.3's premise that
    a path releases a tuple's memory when the tuple leaves it (docs/design/006)."""
    ps = [Path("p0", (Op("a", 1.5, 1.0),)), Path("p1", (Op("b0", 0.1, 0.01), Op("b1", 150.0, 1.0)))]
    arrivals = {"p0": [1], "p1": [1]}
    pc = simulate(ps, arrivals, make("path-capacity"), 6)
    p1_first = simulate(ps, arrivals, FixedOrder((1, 0)), 6)
    assert [round(m, 4) for m in pc.memory[:3]] == [2.0, 1.3333, 0.0073]
    assert [round(m, 4) for m in p1_first.memory[:3]] == [2.0, 1.004, 0.7333]
    assert unfinished(pc, 1.0) == unfinished(p1_first, 1.0) == 2  # as eq. 2.3 counts: equal


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


@settings(max_examples=60, deadline=None)
@given(paths, st.data())
def test_path_capacity_least_memory_among_path_schedules_as_counted_by_eq_2_3(ps: list[Path], data) -> None:
    # Jiang Thm 2 in its proof's setting: whole tuples wait at one instant, a path consumes its
    # tuples whole, and memory is released when a tuple leaves its path (eq. 2.3).
    counts = data.draw(st.lists(st.integers(1, 3), min_size=len(ps), max_size=len(ps)))
    arrivals = {p.name: [c] for p, c in zip(ps, counts, strict=True)}
    best = simulate(ps, arrivals, make("path-capacity"), 400)
    ends = sorted({d for _, d, _ in best.completions.values()})
    for order in itertools.permutations(range(len(ps))):
        other = simulate(ps, arrivals, FixedOrder(order), 400)
        instants = ends + sorted({d for _, d, _ in other.completions.values()})
        for t in instants:
            assert unfinished(best, t) <= unfinished(other, t), (order, t)


def test_whole_tuples_pass_every_fifth_and_hold_a_unit_each() -> None:
    """Engine-like accounting: past o1 (0.2) one tuple in five goes on, whole (the k-th when
    ⌊k·0.2 + ½⌋ grows: the 3rd and the 8th); o2 takes 5 per tuple, after o1's arrivals (Chain)."""
    r = simulate([EXAMPLE], {"p": [0] + [1] * 10}, make("chain"), 60, whole=True)
    assert sum(n for _, n, _ in r.latencies) == 2
    assert (r.completions[2][1], r.completions[7][1]) == (16.0, 21.0)  # the 3rd and the 8th, through o2
    assert [round(m, 6) for m in r.memory[1:11]] == [1, 1, 1, 2, 2, 2, 2, 2, 3, 3]  # each waits whole at o2
    assert len(r.completions) == 10 and r.memory[-1] == 0


def test_non_preemptive_finishes_a_begun_tuple() -> None:
    """Chain prefers o1 (slope 0.5) to o2 (0.1). Tuple 1 begins at o2 at t = 2; tuples 2, 3 arrive at
    t = 3. Preemptive, o1 takes them at once (tuple 2 is dropped at t = 4) and o2's tuple finishes at
    14; non-preemptive, o2 finishes first (12) and both wait whole at o1's input meanwhile."""
    p = Path("p", (Op("o1", 1.0, 0.5), Op("o2", 10.0, 1.0)))
    arrivals = {"p": [2, 0, 0, 2]}
    every_other = {"o1": [0, 1, 0, 1]}  # (o1 passes tuples 1 and 3, as the story needs)
    pre = simulate([p], arrivals, make("chain"), 40, whole=True, passes=every_other)
    non = simulate([p], arrivals, make("chain"), 40, preemptive=False, whole=True, passes=every_other)
    assert (pre.completions[1][1], pre.completions[2][1]) == (14.0, 4.0)
    assert (non.completions[1][1], non.completions[2][1]) == (12.0, 13.0)
    assert pre.memory[3:13] == [3.0] + [2.0] * 9 and non.memory[3:13] == [3.0] * 9 + [2.0]
    assert pre.completions[3][1] == non.completions[3][1] == 24.0  # the same work either way


def test_whole_tuples_a_join_passes_stay_apart() -> None:
    """A tuple past a join of selectivity 2 is two tuples: under round-robin the next operator (5 per
    tuple, quantum 1) finishes the one it began (1→6) and lets the ready others run before the second
    (6→7, then 7→12); kept as one batch of two, both went through in one uninterruptible 1→11."""
    p = Path("p", (Op("j", 1.0, 2.0), Op("slow", 5.0, 1.0)))
    q = Path("q", (Op("fast", 1.0, 1.0),))
    r = simulate([p, q], {"p": [1], "q": [0] * 6 + [1]}, make("round-robin"), 30, preemptive=False, whole=True)
    assert r.completions[1][1] == 7.0  # q's tuple, arrived at 6, between the two halves
    assert r.completions[0][1] == 12.0  # the p tuple's last part
    assert r.memory[6] == 2.0  # the second half waiting, and q's arrival


def test_given_passes_replace_the_every_kth_rule() -> None:
    """``passes``: the k-th tuple an operator finishes passes ``passes[k]`` (the data's pattern);
    past the list's end, ⌊k·s + ½⌋ again."""
    p = Path("p", (Op("s", 1.0, 0.5), Op("o", 1.0, 1.0)))
    even = simulate([p], {"p": [4]}, make("fifo"), 20, whole=True)
    given = simulate([p], {"p": [4]}, make("fifo"), 20, whole=True, passes={"s": [1, 1]})
    assert sum(n for _, n, _ in even.latencies) == 2  # tuples 1 and 3 pass
    assert sum(n for _, n, _ in given.latencies) == 3  # 1, 2 as given; 3 by ⌊k·s + ½⌋ (3 · 0.5 + ½ grows)
    assert sorted(given.completions) == [0, 1, 2, 3]


def test_a_tuple_has_left_only_when_its_last_part_has() -> None:
    """Whole tuples: past a join (selectivity 2) a tuple is two parts; the first filtered out at 2
    does not make the tuple done while the second is still queued — it leaves at 4, delivered."""
    p = Path("p", (Op("j", 1.0, 2.0), Op("s", 1.0, 0.5), Op("o", 1.0, 1.0)))
    cut = simulate([p], {"p": [1]}, make("fifo"), 3, whole=True)
    assert 0 not in cut.completions  # at 3 its second part waits at o
    full = simulate([p], {"p": [1]}, make("fifo"), 10, whole=True)
    assert full.completions[0] == (0.0, 4.0, 0)
