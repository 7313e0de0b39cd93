"""When each stream's elements were kept (``sluice.approx.timeline``; design 021, "Drops that
depend on time"): a join's reported recall follows the pairs its kept elements can form, where
the whole-run fractions multiplied assume drops independent of time.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sluice.approx.timeline import MAX, Timeline, joint


def formed_pairs(ts: np.ndarray, ks: np.ndarray, kt: np.ndarray, before: int, after: int) -> float:
    """Brute force: kept pairs over all pairs (s at x, t at y, ``-before <= y - x <= after``),
    one element of each stream at every tick of ``ts`` (0..n-1)."""
    n = len(ts)
    ct, ca = np.concatenate([[0], np.cumsum(kt)]), np.arange(n + 1)
    lo, hi = np.clip(ts - before, 0, n), np.clip(ts + after + 1, 0, n)
    return float((ks * (ct[hi] - ct[lo])).sum() / (ca[hi] - ca[lo]).sum())


@settings(max_examples=40, deadline=None)
@given(
    rates=st.lists(st.tuples(st.floats(0, 1), st.floats(0, 1)), min_size=2, max_size=12),
    horizon=st.sampled_from([40, 100, 250]),
    seed=st.integers(0, 10_000),
)
def test_a_joins_recall_is_the_pairs_its_kept_elements_form(
    rates: list[tuple[float, float]], horizon: int, seed: int
) -> None:
    """Each stream kept at a rate that changes every few windows (the shape shedding has): the
    model's recall is within 3% (relative, or 0.005) of the pairs the kept elements form,
    counted one by one — which the whole-run fractions multiplied miss.
    """
    rng = np.random.default_rng(seed)
    step = 3 * horizon  # (each rate held for three windows)
    n = step * len(rates)
    ts = np.arange(n)
    ks = rng.random(n) < np.repeat([r for r, _ in rates], step)
    kt = rng.random(n) < np.repeat([r for _, r in rates[::-1]], step)  # (T's rates in reverse: correlated)
    s, t = Timeline(), Timeline()
    s.add(ts, ks)
    t.add(ts, kt)
    want = formed_pairs(ts, ks, kt, horizon, horizon)
    got = joint([s, t], {}, spans=(horizon + 1, horizon + 1))  # ([Range horizon] each)
    assert got is not None
    assert abs(got - want) <= max(0.03 * want, 0.005), (got, want, ks.mean() * kt.mean())


def test_a_timeline_keeps_its_totals_as_it_coarsens_and_unkeeps() -> None:
    """Past ``MAX`` buckets it merges each two (bounded state), losing no count; an element shed
    from a queue leaves its own bucket."""
    line = Timeline()
    ts = np.arange(0, 100_000, 7)
    keep = (ts // 1000) % 2 == 0
    line.add(ts[::-1], keep[::-1])  # (out of order: the front grows too)
    assert len(line.offered) <= MAX and line.shift > 7
    assert line.offered.sum() == len(ts) and line.kept.sum() == keep.sum()
    one = Timeline()  # (a few elements at a time: the one-row path)
    for i in range(len(ts) - 1, -1, -3):
        one.add(ts[max(i - 2, 0) : i + 1], keep[max(i - 2, 0) : i + 1])
    assert one == line
    line.unkeep(ts[keep][:100])
    assert line.kept.sum() == keep.sum() - 100
    lo, offered, kept = line.at(line.shift + 1, since=50_000)
    assert (lo << (line.shift + 1)) > 50_000 and offered.sum() == pytest.approx((ts >= (lo << (line.shift + 1))).sum())
    assert joint([line], {}) == pytest.approx((keep.sum() - 100) / len(ts))


def test_more_than_two_reads_or_timelines_far_apart_are_left_to_the_product() -> None:
    """A 3-way join's triples are not modelled (counted within one bucket they were 20% low, and
    none where the drops lined up with the buckets: a review); two streams a day apart form no
    pair (the lags between them are those where the two timelines meet, not every bucket of the
    day between them: that took 20 s)."""
    lines = [Timeline() for _ in range(3)]
    ts = np.arange(300)
    for i, line in enumerate(lines):
        line.add(ts, ts // 100 == i)
    assert joint(lines, {}, spans=(8, 8, 8)) is None
    assert joint(lines[:1], {}) == pytest.approx(1 / 3)
    assert joint([], {}) == 1.0
    s, t = Timeline(), Timeline()
    s.add(np.arange(0, 60_000), np.ones(60_000, bool))
    t.add(np.arange(0, 60_000) + 86_400_000, np.ones(60_000, bool))
    assert joint([s, t], {}, spans=(1001, 1001)) is None


def test_past_its_cap_a_timeline_folds_its_oldest_buckets_rather_than_widen() -> None:
    """Buckets no wider than ``2^cap`` ticks: one element a day before 50 s of data made them
    262 s wide, and a backlog in the last seconds looked admitted at a 15th of its rate (28% of
    a join's pairs lost, a review); the day-old element is counted before the buckets kept."""
    line = Timeline(cap=7)
    line.add(np.array([0]), np.array([True]))
    ts = np.arange(86_400_000, 86_450_000)
    line.add(ts, ts % 2 == 0)
    assert line.shift == 7 and len(line.offered) <= MAX and line.old[0] + line.offered.sum() == len(ts) + 1
    assert line.old[0] >= 1 and line.offered_since(86_449_000) == pytest.approx(1000, abs=128)
    assert joint([line], {}) == pytest.approx(0.5, abs=0.01)


def test_a_joins_correction_reads_its_own_windows_and_skips_unions_and_derived_streams() -> None:
    """``estimate`` asks ``joint`` for each read with the window over it in this join — not the
    stream's largest in any query (4.6x the truth when another query read S over 100 s) — and
    leaves a join over a UNION or a derived stream to the product (a union's elements are
    alternatives; a Dstream stamps its elements a window after they came: both reviews' cases)."""
    from sluice.approx.precision import estimate
    from sluice.catalog import Catalog
    from sluice.plan import bind_query

    cat = Catalog()
    for s in ("S", "T", "U"):
        cat.register_stream(s, [("K", "integer")])
    asked: list[tuple[list[str], list[float]]] = []

    def halving(reads: list[str], spans: list[float]) -> float:
        asked.append((reads, spans))
        return 0.5 ** max(len(reads) - 1, 0)  # (pairs kept: half of the product)

    def fn(text: str) -> float:
        p = estimate(bind_query(cat, text).plan, {"s": 0.5, "t": 0.5, "u": 0.5}, joint=halving)
        assert p is not None
        return p.fn

    asked.clear()
    assert fn("select * from S [Range 10], T [Range 1000] where S.K = T.K") == pytest.approx(1 - 0.25 * 0.5)
    assert (["s", "t"], [11.0, 1001.0]) in asked  # ([Range N]: N + 1 ticks)
    union = "select * from (select K from S [Range 10] union all select K from T [Range 10]) as X, U [Range 10] where X.K = U.K"
    assert fn(union) == pytest.approx(1 - 0.25)  # (the product: 0.5 worse of the union, 0.5 of U)
    derived = "select * from (Dstream(select K from S [Range 5])) as X [Now], T [Now] where X.K = T.K"
    assert fn(derived) == pytest.approx(1 - 0.25)
