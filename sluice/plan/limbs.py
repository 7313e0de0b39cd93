"""Exact sums of doubles as rows of int64 *limbs*, vectorised with NumPy (design 022).

Every finite double is an integer multiple of 2^-1074, so a sum of doubles taken with integer
counts (insertions +1, deletions −1) is an exact integer — beyond 64 bits (design 011).  Here such
a sum is a row of int64 limbs, ``Σ_j limb[j] · 2^(base + R·j)`` with ``R = 30`` bits a limb: a
fixed-point accumulator over the exponent band the data has used (``base`` is the lowest set bit
seen; the band widens when a value falls outside it).

* A value ``m · 2^low`` (``|m| < 2^53``, :func:`split`) lands as at most three digits, each below
  2^R, in the limbs its bits fall in (:func:`digits`): a few array passes for a whole batch.
* Adding and subtracting digits is plain int64 arithmetic, so a batch's running sums are one
  ``numpy.cumsum``: with every limb but the top in [0, 2^R) before the batch (:func:`carry`, done
  lazily after each batch) no running sum leaves int64 within :data:`MAX_ROWS` rows.  The top limb
  takes only carries, so it stays as small as the count of values.
* A sum becomes a double once per output value (:func:`to_double`): carries propagated, the top 62
  bits of the magnitude and a sticky bit for any bit below, converted by the correctly rounded
  int64 → double conversion and scaled by a power of two — the exact sum rounded once, as
  :func:`sluice.plan.numeric.float_sum` defines it.  AVG first divides the limbs by the count (long
  division, exact, the remainder a sticky bit).  A result in the subnormal range (where scaling
  would round a second time) takes the exact integer path; so does a count of 2^33 or more.

>>> from sluice.plan.numeric import float_sum
>>> m, low, high = split(np.array([0.1, 0.2, -0.3]))
>>> base, k, _ = fit(None, 0, *span(m, low, high))
>>> block = digits(m, low, np.ones(3, dtype=np.int64), base, k).sum(axis=0, keepdims=True)
>>> to_double(block, base).tolist(), float_sum([(0.1, 1), (0.2, 1), (-0.3, 1)])
([2.7755575615628914e-17], 2.7755575615628914e-17)
>>> to_double(block, base, count=np.array([3])).tolist()
[9.25185853854297e-18]
"""

from __future__ import annotations

from fractions import Fraction
from typing import NamedTuple

import numpy as np

from sluice.plan.numeric import to_float

R = 32  # bits a limb (digits are below 2^R); a power of two, so a bit position splits by shifts
MASK = (1 << R) - 1
MAX_ROWS = (1 << 31) - 1  # running sums of this many digits stay within int64: (2^31 − 1 + 1) · 2^32 ≤ 2^63
MAX_COUNT = 1 << 31  # AVG's long division: a remainder (< count) · 2^R stays within int64
_LOG_R = 5
_PAD = 3  # zero rows below the lowest limb in :func:`magnitude`'s digits: rounding reads three below the top
_TINY = 2.0**-1022  # below it a double is subnormal: scaling a rounded value would round again


def split(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Doubles as exact ``m · 2^low``: (m, low, high), int64 arrays with ``|m| < 2^53`` and
    ``|x| < 2^high``.  Zero and a value that is not finite (±inf, NaN) give ``m = 0``.
    """
    mant, ex = np.frexp(np.where(np.isfinite(x), x, 0.0))
    e = ex.astype(np.int64)
    return (mant * 2.0**53).astype(np.int64), e - 53, e


def span(m: np.ndarray, low: np.ndarray, high: np.ndarray, floor: int | None = None) -> tuple[int, int] | None:
    """(lowest set bit, highest bit + 1) over the nonzero values; None when there are none.  With
    ``floor`` (the current base) the lowest set bit is exact only when it is below ``floor`` —
    otherwise any bit ≥ ``floor`` is returned (the trailing zeros are counted only where needed).
    """
    nz = m != 0
    if not nz.any():
        return None
    lows, hi = low[nz], int(high[nz].max())
    lo = int(lows.min())
    if floor is not None and lo >= floor:
        return lo, hi
    sel = lows < floor if floor is not None else np.ones(len(lows), dtype=bool)
    lo = int((lows[sel] + _trailing_zeros(m[nz][sel])).min())
    return lo, hi


def fit(base: int | None, k: int, lo: int, hi: int) -> tuple[int, int, int]:
    """The limb layout ``(base, k, added below)`` that holds bits [lo, hi) in its digit limbs (all
    but the top one, which takes only carries), grown from ``(base, k)`` (``k = 0``: none yet).
    """
    if base is None or k == 0:
        return lo, (hi - 1 - lo) // R + 2, 0
    pre = max(0, -((lo - base) // R))  # whole limbs below: ceil((base − lo) / R)
    nb = base - pre * R
    return nb, max(k + pre, (hi - 1 - nb) // R + 2), pre


def digits(m: np.ndarray, low: np.ndarray, sign: np.ndarray, base: int, k: int) -> np.ndarray:
    """(rows, k) int64: row i holds ``sign[i] · m[i] · 2^low[i]`` as digits on the layout
    ``(base, k)`` (which must hold every nonzero value's bits: :func:`fit`).
    """
    n = len(m)
    p = low - base
    p[m == 0] = 0
    under = p < 0  # only where the bits below base are zeros (fit's lo): the shift is exact
    if under.any():
        m = np.where(under, m >> np.where(under, -p, 0), m)
        p[under] = 0
    a = np.abs(m)
    o = p & (R - 1)
    rest = a >> (R - o)  # the bits above the first limb's
    sgn = np.where(m < 0, -sign, sign)
    out = np.zeros((n, k + 2), dtype=np.int64)  # two spare columns for a value's zero top digits
    at = np.arange(0, n * (k + 2), k + 2, dtype=np.int64) + (p >> _LOG_R)
    flat = out.reshape(-1)
    flat[at] = ((a & (MASK >> o)) << o) * sgn
    at += 1
    flat[at] = (rest & MASK) * sgn
    at += 1
    flat[at] = (rest >> R) * sgn
    return out[:, :k]


def carry(block: np.ndarray) -> np.ndarray:
    """Propagate carries in place: every limb but the top in [0, 2^R), each row's sum unchanged."""
    for j in range(block.shape[1] - 1):
        c = block[:, j] >> R
        block[:, j] &= MASK
        block[:, j + 1] += c
    return block


class Magnitude(NamedTuple):
    """Rows of limbs as sign and magnitude, what rounding reads (:func:`magnitude`)."""

    digits: np.ndarray  # limb-major, all in [0, 2^R): limb j of the block is row j + _PAD
    negative: np.ndarray  # whether the row's sum is negative
    top: np.ndarray  # each row's highest nonzero row of ``digits`` (a zero sum: _PAD)
    nonzero: np.ndarray  # how many rows of ``digits`` are nonzero


def magnitude(block: np.ndarray) -> Magnitude:
    """Each row's |sum| as limb-major digits, all in [0, 2^R) (zero rows below, two rows above for
    the carries), whether the sum is negative, and where its highest digit is.
    """
    rows, k = block.shape
    d = np.zeros((k + 2 + _PAD, rows), dtype=np.int64)
    d[_PAD : _PAD + k] = block.T
    _carry_rows(d[_PAD:])
    neg = d[-1] < 0
    if neg.any():
        sub = -d[:, neg]
        _carry_rows(sub[_PAD:])
        d[:, neg] = sub
    nz = d != 0
    top = np.full(rows, _PAD, dtype=np.int64)
    for j in range(_PAD + 1, d.shape[0]):
        np.copyto(top, j, where=nz[j])
    return Magnitude(d, neg, top, nz.view(np.int8).sum(axis=0, dtype=np.int64))


def to_double(
    block: np.ndarray, base: int, count: np.ndarray | None = None, mag: Magnitude | None = None
) -> np.ndarray:
    """Each row's sum (÷ ``count`` when given; a count of 0 gives 0.0) as the nearest double,
    ±inf beyond the largest; ``mag``: :func:`magnitude` of ``block`` if already computed.
    """
    d, neg, h, nonzero = magnitude(block) if mag is None else mag
    rows = d.shape[1]
    flat = d.reshape(-1)
    at = h * rows + np.arange(rows)
    top = [flat.take(at - i * rows) for i in range(4 if count is not None else 3)]  # rows h, h−1, …
    below = nonzero - sum((x != 0).view(np.int8) for x in top) > 0  # a nonzero digit below those read
    exp = base + R * (h - _PAD)  # the weight of row h
    odd = None
    if count is not None:
        count = np.asarray(count, dtype=np.int64)
        odd = count >= MAX_COUNT
        den = np.where((count > 0) & ~odd, count, 1)
        # long division of rows h … h−3 (the rest is in ``below``): the first two quotient digits
        # hold the top one (the dividend passes 2^32 > den by the second), so q[0] or q[1] leads
        # 65 bits or more — well past the 53 kept, with the remainder as a sticky bit
        q, r = [], np.zeros(rows, dtype=np.int64)
        for x in top:
            cur = (r << R) + x
            qi = cur // den
            r = cur - qi * den
            q.append(qi)
        lead = q[0] != 0
        top = [np.where(lead, q[i], q[i + 1]) for i in range(3)]
        below |= (r != 0) | (lead & (q[3] != 0))
        exp = exp - np.where(lead, 0, R)
    with np.errstate(over="ignore", under="ignore"):
        out = _round(top[0], top[1], top[2], below, exp)
    tiny = (np.abs(out) < _TINY) & (out != 0)
    odd = tiny if odd is None else odd | tiny
    out = np.where(neg, -out, out)
    for i in np.flatnonzero(odd).tolist():  # subnormal results and huge counts: exact, rounded once
        c = 1 if count is None else int(count[i])
        out[i] = to_float(value(block[i], base) / c) if c else 0.0
    return out if count is None else np.where(count > 0, out, 0.0)


def value(row: np.ndarray, base: int) -> Fraction:
    """One row of limbs as the exact number it holds."""
    total = sum(int(x) << (R * j) for j, x in enumerate(row.tolist()))
    return Fraction(total) * Fraction(2) ** base


def _carry_rows(d: np.ndarray) -> None:
    """:func:`carry` on limb-major digits (each limb a contiguous row)."""
    for j in range(d.shape[0] - 1):
        c = d[j] >> R
        d[j] &= MASK
        d[j + 1] += c


def _round(dh: np.ndarray, d1: np.ndarray, d2: np.ndarray, below: np.ndarray, exp: np.ndarray) -> np.ndarray:
    """The nearest double of ``(dh + d1 · 2^-R + d2 · 2^-2R + ε) · 2^exp``, digits in [0, 2^R),
    ``dh`` nonzero unless all are, ε in (0, 2^-2R) where ``below`` and 0 elsewhere: the top 62 bits
    with a sticky bit or-ed into the lowest (nine bits below the rounding position), converted by
    the correctly rounded int64 → double, then scaled — exact while the result is a normal double
    (subnormal ones are the caller's to redo).
    """
    bits = np.frexp(dh.astype(np.float64))[1].astype(np.int64)  # dh's bit length (exact: dh < 2^53)
    s1 = 30 - bits  # d1's shift into the window: left while ≥ 0, right by at most 2 otherwise
    right1 = np.maximum(-s1, 0)
    w = (dh << (62 - bits)) + ((d1 << np.maximum(s1, 0)) >> right1) + (d2 >> (bits + 2))
    lost = (d1 & ((1 << right1) - 1)) | (d2 & ((1 << (bits + 2)) - 1))  # bits shifted out
    w |= (lost != 0) | below
    return np.ldexp(w.astype(np.float64), (exp + bits - 62).astype(np.int32))


def _trailing_zeros(m: np.ndarray) -> np.ndarray:
    """Trailing zero bits of nonzero int64 values (|m| < 2^63): the lowest set bit's position."""
    a = np.abs(m)
    return np.log2((a & -a).astype(np.float64)).astype(np.int64)


__all__ = [
    "MAX_COUNT",
    "MAX_ROWS",
    "R",
    "Magnitude",
    "carry",
    "digits",
    "fit",
    "magnitude",
    "span",
    "split",
    "to_double",
    "value",
]
