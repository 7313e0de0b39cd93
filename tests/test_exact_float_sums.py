"""Exact float sums in int64 limbs (``sluice.plan.limbs``, design 022) against ``fractions``.

Two levels, both with insertions and deletions of random doubles — huge (±1e308, the largest),
tiny (subnormals, 2^-1074), negative, zero, ±inf, NaN and NULL mixed:

* the limbs alone: a layout widened batch by batch as the engine does it, every running sum (one
  ``cumsum`` over the batch, carries propagated only between batches) rounded to a double, for SUM
  and for AVG, equal to the exact sum (a ``Fraction``) rounded once;
* the counting path (``Counting``, the engine's vectorised SUM/AVG): every row it emits, batch after
  batch, equal to SUM/AVG by definition — the exact sum rounded once, NaN as NULL (admission's
  rule), NULL with both infinities, ±inf with one.
"""

from __future__ import annotations

import math
from collections import defaultdict
from fractions import Fraction
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from sluice.datatypes import BIGINT, FLOAT
from sluice.plan import limbs
from sluice.plan.expr import AggCall, AggKind, ColRef
from sluice.plan.numeric import canonical_floats, to_float
from sluice.runtime.operators.counting import Counting

SPECIAL = [
    1e308,
    -1e308,
    1.7976931348623157e308,
    -1.7976931348623157e308,
    5e-324,
    -5e-324,
    3 * 2.0**-1074,
    2.0**-1022,
    2.0**-1060,
    2.2250738585072014e-308 - 5e-324,
    0.1,
    -0.3,
    0.0,
    1.0,
    2.0**53 + 2,
    -(2.0**70),
    123456.789,
]
# integers × powers of two: sums near ties (a half-way point broken only by a far-away bit), which
# random doubles almost never make
scaled = st.builds(lambda m, e: math.ldexp(m, e), st.integers(-(2**53), 2**53), st.integers(-80, 120))
finite = st.one_of(st.floats(allow_nan=False, allow_infinity=False), st.sampled_from(SPECIAL), scaled)
anything = st.one_of(
    finite, st.sampled_from([math.inf, -math.inf, math.nan, None]), st.floats(allow_nan=True, allow_infinity=True)
)


def _ops(values: st.SearchStrategy[Any]) -> st.SearchStrategy[list[tuple[int, Any, bool, int]]]:
    """(group, value, delete?, which alive value a deletion takes)"""
    return st.lists(st.tuples(st.integers(0, 2), values, st.booleans(), st.integers(0, 50)), max_size=40)


def _signed(ops: list[tuple[int, Any, bool, int]]) -> list[tuple[int, Any, int]]:
    """The operations as (group, value, ±1): a deletion retracts a value its group holds."""
    alive: dict[int, list[Any]] = defaultdict(list)
    out = []
    for g, v, delete, k in ops:
        if delete and alive[g]:
            out.append((g, alive[g].pop(k % len(alive[g])), -1))
        else:
            alive[g].append(v)
            out.append((g, v, 1))
    return out


def _batches(rows: list[Any], cuts: list[int]) -> list[list[Any]]:
    bounds = sorted({0, len(rows), *(c % (len(rows) + 1) for c in cuts)})
    return [rows[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]


def _rounded(total: Fraction, n: int) -> tuple[float, float]:
    return to_float(total), to_float(total / n) if n else 0.0


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_ops(finite), st.lists(st.integers(0, 40), max_size=4))
# a mean just below the smallest normal double, which the scaling rounded up to it
@example(ops=[(0, 2.2250738585072014e-308, False, 0), (0, 2.225073858507201e-308, False, 0)] * 2, cuts=[])
@example(ops=[(0, 2.2250738585072014e-308, False, 0), (0, 2.225073858507201e-308, False, 0),
              (0, 2.225073858507201e-308, False, 0)], cuts=[])  # fmt: skip
def test_limb_running_sums_round_exactly(ops: list[Any], cuts: list[int]) -> None:
    """Every running sum of a group, held in limbs, rounds as its exact value does."""
    rows = _signed(ops)
    base: int | None = None
    k = 0
    state = np.zeros((3, 0), dtype=np.int64)
    exact: dict[int, Fraction] = defaultdict(Fraction)
    count: dict[int, int] = defaultdict(int)
    for batch in _batches(rows, cuts):
        g = np.array([r[0] for r in batch], dtype=np.int64)
        x = np.array([r[1] for r in batch], dtype=np.float64)
        sign = np.array([r[2] for r in batch], dtype=np.int64)
        m, low, high = limbs.split(x)
        band = limbs.span(m, low, high, base if k else None)
        if band is not None:  # widen the layout as Counting does (narrowing too, where it may)
            if k:
                state, base = limbs.rebase(state, base, *band)
            else:
                base, k = limbs.layout(*band)
                state = np.zeros((3, k), dtype=np.int64)
            k = state.shape[1]
        if not k:
            continue
        assert base is not None
        d = limbs.digits(m, low, sign, base, k)
        for grp in range(3):  # one group's rows, cumulated from its state before the batch
            sel = np.flatnonzero(g == grp)
            if not len(sel):
                continue
            run = state[grp] + np.cumsum(d[sel], axis=0)
            n = np.array([count[grp] + int(sign[sel[: j + 1]].sum()) for j in range(len(sel))])
            got_sum = limbs.to_double(run, base).tolist()
            got_avg = limbs.to_double(run, base, n).tolist()
            for j, i in enumerate(sel.tolist()):
                exact[grp] += Fraction(x[i]) * int(sign[i])
                assert limbs.value(run[j], base) == exact[grp]
                want_sum, want_avg = _rounded(exact[grp], int(n[j]))
                assert repr(got_sum[j]) == repr(want_sum), (exact[grp], got_sum[j], want_sum)
                assert repr(got_avg[j]) == repr(want_avg), (exact[grp], n[j], got_avg[j], want_avg)
            count[grp] = int(n[-1])
            state[grp] = limbs.carry(run[-1:].copy())[0]
        # carried state: every limb but the top in [0, 2^R)
        assert ((state[:, :-1] >= 0) & (state[:, :-1] < 2**limbs.R)).all()


# sums and means exactly half-way between two doubles (ties to even: down) but for one bit far
# below, each where a different part of the rounding must see it: (values, mean?, the answer)
TIES = [
    # the 2^32 is the lowest bit of the limb below the top one
    ([(2.0**31 + 1) * 2.0**64, 1025 * 2.0**32], False, 2.0**95 + 2.0**64 + 2.0**43),
    # 2^5 lies in the 32 bits after the top 64
    ([(2.0**52 + 2) * 2.0**44, 2.0**43, 2.0**5], False, (2.0**52 + 3) * 2.0**44),
    # 2^0 lies in a limb below the four read
    ([(2.0**52 + 2) * 2.0**200, 2.0**199, 1.0], False, (2.0**52 + 3) * 2.0**200),
    # (2^52 + 2.5) · 2^60 + 1/3: the 1 is below the 96-bit window
    ([3 * 2.0**112, 15 * 2.0**59, 1.0], True, (2.0**52 + 3) * 2.0**60),
    # 2^53 + 5 + 1/3: only the division's remainder breaks the tie
    ([3 * 2.0**53, 15.0, 1.0], True, 2.0**53 + 6),
]


@pytest.mark.parametrize(("values", "mean", "want"), TIES)
def test_a_bit_far_below_breaks_a_tie(values: list[float], mean: bool, want: float) -> None:
    x = np.array(values)
    m, low, high = limbs.split(x)
    base, k = limbs.layout(*limbs.span(m, low, high))
    total = limbs.digits(m, low, np.ones(len(x), dtype=np.int64), base, k).sum(axis=0, keepdims=True)
    exact = sum(Fraction(v) for v in values) / (len(values) if mean else 1)
    got = limbs.to_double(total, base, np.array([len(values)]) if mean else None)
    assert got.tolist() == [to_float(exact)] == [want]


# means of a sum S over a count whose quotient is half-way but for: the division's remainder;
# the quotient's bits below the 64 kept; the remainder of one step (S found by search, held
# directly as limbs)
QUOTIENT_TIES = [
    (28376566857089663502785945994, 1000003),
    (55784097208427934584367420235, 1031693131),
    (6898952967237941216, 124),  # a count below 2^9: one division step
]


@pytest.mark.parametrize(("total", "count"), QUOTIENT_TIES)
def test_a_quotient_bit_far_below_breaks_a_tie(total: int, count: int) -> None:
    block = np.array([[(total >> (limbs.R * j)) & (2**limbs.R - 1) for j in range(4)]], dtype=np.int64)
    assert limbs.to_double(block, 0, np.array([count])).tolist() == [to_float(Fraction(total, count))]


def _near_tie(m: int, shift: int, count: int, r: int) -> int:
    """count × (a 53-bit even mantissa plus a half, shifted) + r: a mean half-way but for r."""
    t = ((((m | 1 << 52) & ~1) << 1) | 1) << shift
    return count * t + r % count


totals = st.one_of(
    st.integers(-(2**300), 2**300),
    st.integers(-(2**70), 2**70),
    st.builds(_near_tie, st.integers(0, 2**52), st.integers(0, 80), st.integers(1, 2**31 - 1), st.integers(0)),
    st.builds(_near_tie, st.integers(0, 2**52), st.integers(0, 80), st.integers(1, 511), st.integers(0)),
)
counts = st.one_of(st.integers(1, 2**31 - 1), st.integers(1, 511), st.just(0))


@settings(max_examples=400, deadline=None)
@given(
    st.lists(st.tuples(totals, counts), min_size=1, max_size=6),
    st.sampled_from([0, -60, -1100, -1074, 700, 800]),  # scales to subnormal results and past the largest
)
def test_any_integer_sum_and_mean_round_once(rows: list[tuple[int, int]], base: int) -> None:
    """Any sums the limbs can hold (negative, subnormal, beyond the largest double), and their
    means over any count below 2^31 (0: 0.0), round as the exact numbers do — rows of a block
    alike or of different sizes."""
    k = 11
    block = np.array(
        [[(total >> (limbs.R * j)) & (2**limbs.R - 1) for j in range(k)] for total, _ in rows], dtype=np.int64
    )
    block[:, -1] = [total >> (limbs.R * (k - 1)) for total, _ in rows]  # the top limb signed
    got_sum, got_mean = limbs.sum_and_mean(block, base, np.array([c for _, c in rows]))
    assert got_mean is not None
    for (total, count), s, m in zip(rows, got_sum.tolist(), got_mean.tolist(), strict=True):
        exact = Fraction(total) * Fraction(2) ** base
        assert repr(s) == repr(to_float(exact)), (total, count)
        assert repr(m) == repr(to_float(exact / count) if count else 0.0), (total, count)


def _by_definition(values: list[Any]) -> tuple[Any, Any]:
    vals = [v for v in values if v is not None and v == v]  # NaN is NULL
    if not vals:
        return None, None
    pos, neg = math.inf in vals, -math.inf in vals
    if pos and neg:
        return None, None
    if pos or neg:
        return (math.inf, math.inf) if pos else (-math.inf, -math.inf)
    return _rounded(sum((Fraction(v) for v in vals), Fraction(0)), len(vals))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_ops(anything), st.lists(st.integers(0, 40), max_size=4))
def test_counting_float_sums_equal_the_definition(ops: list[Any], cuts: list[int]) -> None:
    """The engine's vectorised SUM/AVG of a float column, every emitted row, exact."""
    arg = ColRef(1, FLOAT)
    aggs = (AggCall(AggKind.SUM, arg, False, FLOAT), AggCall(AggKind.AVG, arg, False, FLOAT))
    c = Counting(aggs, 1)
    rows = _signed(ops)
    alive: dict[int, list[Any]] = defaultdict(list)
    shown: dict[int, tuple[Any, Any]] = {}
    expected: dict[tuple[int, int], tuple[Any, Any] | None] = {}  # (instant, group) → its row after
    t = 0
    for batch in _batches(rows, cuts):
        ts = np.arange(t, t + len(batch), dtype=np.int64)
        for i, (g, v, s) in enumerate(batch):
            if s > 0:
                alive[g].append(v)
            else:
                alive[g].remove(v)  # the very object inserted (a NaN too: identity first)
            expected[(t + i, g)] = _by_definition(alive[g]) if alive[g] else None
        t += len(batch)
        col = canonical_floats(pa.array([r[1] for r in batch], pa.float64(), from_pandas=False))
        out = c.apply(
            ts,
            np.array([r[2] for r in batch], dtype=np.int8),
            [pa.array([r[0] for r in batch], pa.int64())],
            [col, col],
            [BIGINT, FLOAT, FLOAT],
        )
        if out is None:
            continue
        for at, sg, g, sm, avg in zip(*(out.column(i).to_pylist() for i in range(5)), strict=True):
            if sg < 0:
                assert shown.pop(g) == (sm, avg)
                continue
            assert repr((sm, avg)) == repr(expected[(at, g)]), (at, g, alive[g])
            shown[g] = (sm, avg)
    assert {g: repr(r) for g, r in shown.items()} == {g: repr(_by_definition(vs)) for g, vs in alive.items() if vs}
