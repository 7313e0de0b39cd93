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
from hypothesis import HealthCheck, given, settings
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
        if band is not None:  # widen the layout as Counting does: limbs added below or above
            nb, nk, pre = limbs.fit(base, k, *band)
            grown = np.zeros((3, nk), dtype=np.int64)
            grown[:, pre : pre + k] = state
            state, base, k = limbs.carry(grown), nb, nk
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


def test_a_remainder_breaks_a_tie() -> None:
    """AVG of 3·2^112, 15·2^59 and 1: the quotient is (2^52 + 2.5) · 2^60 + 1/3 — exactly half-way
    between two doubles (to even: down) but for the division's remainder, which rounds it up.
    """
    x = np.array([3 * 2.0**112, 15 * 2.0**59, 1.0])
    m, low, high = limbs.split(x)
    base, k, _ = limbs.fit(None, 0, *limbs.span(m, low, high))
    total = limbs.digits(m, low, np.ones(3, dtype=np.int64), base, k).sum(axis=0, keepdims=True)
    exact = sum(Fraction(v) for v in x.tolist()) / 3
    assert limbs.to_double(total, base, np.array([3])).tolist() == [to_float(exact)] == [(2.0**52 + 3) * 2.0**60]


def test_a_low_bit_breaks_a_tie() -> None:
    """SUM of (2^31 + 1)·2^64 and 1025·2^32 is 2^95 + 2^64 + 2^42 + 2^32: just above half-way
    (2^42) between two doubles — the 2^32 is the lowest bit of the limb below the top one.
    """
    x = np.array([(2.0**31 + 1) * 2.0**64, 1025 * 2.0**32])
    m, low, high = limbs.split(x)
    base, k, _ = limbs.fit(None, 0, *limbs.span(m, low, high))
    total = limbs.digits(m, low, np.ones(2, dtype=np.int64), base, k).sum(axis=0, keepdims=True)
    assert (
        limbs.to_double(total, base).tolist()
        == [to_float(Fraction(x[0]) + Fraction(x[1]))]
        == [2.0**95 + 2.0**64 + 2.0**43]
    )


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
