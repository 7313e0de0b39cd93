"""Exact sums of doubles as rows of int64 *limbs*, vectorised with NumPy (design 011).

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
>>> base, k = layout(*span(m, low, high))
>>> block = digits(m, low, np.ones(3, dtype=np.int64), base, k).sum(axis=0, keepdims=True)
>>> to_double(block, base).tolist(), float_sum([(0.1, 1), (0.2, 1), (-0.3, 1)])
([2.7755575615628914e-17], 2.7755575615628914e-17)
>>> to_double(block, base, count=np.array([3])).tolist()
[9.25185853854297e-18]
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from sluice.plan.numeric import to_float

R = 32  # bits a limb (digits are below 2^R); a power of two, so a bit position splits by shifts
MASK = (1 << R) - 1
MAX_ROWS = (1 << 31) - 1  # running sums of this many digits stay within int64: (2^31 − 1 + 1) · 2^32 ≤ 2^63
MAX_COUNT = 1 << 31  # AVG's long division: a remainder (< count) · 2^R stays within int64
_LOG_R = 5
_PAD = 3  # zero rows below the lowest limb in :func:`magnitude`'s digits: rounding reads three below the top
_TINY = 2.0**-1022  # below it a double is subnormal: scaling a rounded value would round again
_NO_LOW, _NO_HIGH = 1 << 20, -(1 << 20)  # the ``low`` and ``high`` of no value (beyond any double's)


def split(x: np.ndarray, finite: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Doubles as exact ``m · 2^low``: (m, low, high), int64 arrays with ``|m| < 2^53`` and
    ``|x| < 2^high``.  Zero and a value that is not finite (±inf, NaN) give ``m = 0``, a ``high``
    below and a ``low`` above any double's (``finite``: ``np.isfinite(x)`` if known).
    """
    if finite is None:
        finite = np.isfinite(x)
    mant, ex = np.frexp(x if finite.all() else np.where(finite, x, 0.0))
    m = (mant * 2.0**53).astype(np.int64)
    e = ex.astype(np.int64)
    zero = m == 0
    return m, np.where(zero, _NO_LOW, e - 53), np.where(zero, _NO_HIGH, e)


def span(m: np.ndarray, low: np.ndarray, high: np.ndarray, floor: int | None = None) -> tuple[int, int] | None:
    """(lowest set bit, highest bit + 1) over the nonzero values; None when there are none.  With
    ``floor`` (the current base) the lowest set bit is exact only when it is below ``floor`` —
    otherwise any bit ≥ ``floor`` is returned.
    """
    hi = int(high.max(initial=_NO_HIGH))
    if hi == _NO_HIGH:
        return None
    if floor is not None:
        shift = low - floor
        if shift.min() >= -63:  # no set bit below floor: every m · 2^shift an integer (as a
            # double, exact: 2^shift ≥ 2^-63 keeps it normal and the bits below floor its fraction)
            with np.errstate(over="ignore"):  # ±inf: far above floor, an integer all the same
                y = np.ldexp(m.astype(np.float64), np.minimum(shift, 4096).astype(np.int32))
            if np.array_equal(y, np.floor(y)):
                return floor, hi
    nz = m != 0
    lows = low[nz]
    lo = int(lows.min())
    if floor is not None and lo >= floor:
        return lo, hi
    sel = lows < floor if floor is not None else np.ones(len(lows), dtype=bool)
    return int((lows[sel] + _trailing_zeros(m[nz][sel])).min()), hi


def layout(lo: int, hi: int) -> tuple[int, int]:
    """(base, limbs) of a new layout holding bits [lo, hi) in its digit limbs (all but the top one,
    which takes only carries).
    """
    return lo, (hi - 1 - lo) // R + 2


def rebase(block: np.ndarray, base: int, lo: int, hi: int) -> tuple[np.ndarray, int]:
    """``block`` (carried: :func:`carry`) laid out anew so that its digit limbs also hold bits
    [lo, hi): (new block, carried; new base).  The base moves down to ``lo`` by shifting the limbs'
    bits (no limb wasted below), or up by whole limbs that are zero in every row and that [lo, hi)
    does not need; limbs are added above as needed, and top limbs holding only a sign dropped.
    """
    rows, k = block.shape
    e = np.zeros((rows, k + 2), dtype=np.int64)  # room for a shift's carry and for the sign
    e[:, :k] = block
    carry(e)  # every limb but the last in [0, 2^R); the last 0 or −1
    up = 0
    while up < k and lo >= base + R * (up + 1) and not e[:, up].any():
        up += 1
    e, base = e[:, up:], base + R * up
    q, r = divmod(base - lo, R) if lo < base else (0, 0)
    if r:  # every limb's bits r higher: what leaves a limb's top enters the next one's bottom
        moved = e >> (R - r)
        e = e << r
        e[:, :-1] &= MASK
        e[:, 1:] += moved[:, :-1]
    nb = base - q * R - r
    need = (hi - 1 - nb) // R + 2
    out = np.zeros((rows, max(need, q + e.shape[1])), dtype=np.int64)
    out[:, q : q + e.shape[1]] = e
    carry(out)
    while out.shape[1] > need:  # a top limb that holds only the sign of the one below it goes
        t, u = out[:, -1], out[:, -2]
        pos, neg = (t == 0) & (u < 1 << (R - 1)), (t == -1) & (u >= 1 << (R - 1))
        if not (pos | neg).all():
            break
        out = out[:, :-1]
        out[:, -1] -= neg.astype(np.int64) << R
    return np.ascontiguousarray(out), nb


def digits(m: np.ndarray, low: np.ndarray, sign: np.ndarray, base: int, k: int) -> np.ndarray:
    """(rows, k) int64: row i holds ``sign[i] · m[i] · 2^low[i]`` as digits on the layout
    ``(base, k)`` (which must hold every nonzero value's bits: :func:`layout`, :func:`rebase`) — the lower two in
    [0, 2^R), the third signed.
    """
    n = len(m)
    m = m * sign
    p = np.where(m != 0, low - base, 0)
    if p.min(initial=0) < 0:  # only where the bits below base are zeros (span's lo): exact shifts
        under = p < 0
        m = np.where(under, m >> np.where(under, -p, 0), m)
        p[under] = 0
    o = p & (R - 1)
    # m · 2^o = (m >> (R − o)) · 2^R + (m's low R − o bits) · 2^o, arithmetic shifts: signed m too;
    # digits in [0, 2^R) but the third, which is signed (a negative value's sign extension)
    rest = m >> (R - o)
    out = np.zeros((n, k + 1), dtype=np.int64)  # a spare column for digits above the top limb
    at = np.arange(0, n * (k + 1), k + 1, dtype=np.int64) + (p >> _LOG_R)
    flat = out.reshape(-1)
    flat[at] = (m & (MASK >> o)) << o
    at += 1
    flat[at] = rest & MASK
    at += 1
    flat[at] = rest >> R
    # a value's bits lie below the top limb (the layout), so what landed on it and above is its sign
    # extension, 0 or −1: folded into the top limb (int64 arithmetic wraps; the sum fits)
    out[:, k - 1] += out[:, k] << R
    return out[:, :k]


def carry(block: np.ndarray) -> np.ndarray:
    """Propagate carries in place: every limb but the top in [0, 2^R), each row's sum unchanged."""
    for j in range(block.shape[1] - 1):
        c = block[:, j] >> R
        block[:, j] &= MASK
        block[:, j + 1] += c
    return block


def magnitude(block: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """(digits, negative): each row's |sum| as limb-major digits, all in [0, 2^R) — limb j of the
    block is row ``j + _PAD`` (zero rows below it, one above for the top limb's carry) — and
    which sums are negative (None: none is).
    """
    rows, k = block.shape
    d = np.empty((k + 1 + _PAD, rows), dtype=np.int64)
    d[:_PAD] = 0
    d[_PAD : _PAD + k] = block.T
    d[-1] = 0
    _carry_rows(d[_PAD:])
    neg = d[-1] < 0  # the top limb's carry is below 2^31 in magnitude: one row holds it
    if not neg.any():
        return d, None
    sub = -d[:, neg]
    _carry_rows(sub[_PAD:])
    d[:, neg] = sub
    return d, neg


def _leading(d: np.ndarray) -> tuple[list[np.ndarray], np.ndarray | int, np.ndarray | None]:
    """(the digits of rows h, h − 1, h − 2, h − 3; h; whether a digit below those is nonzero —
    None: none is)
    for each column of ``d`` (:func:`magnitude`), h its highest nonzero row (a zero: _PAD).
    Usually every column has the same h — the sums of a batch are of a size — and the four
    rows are views; otherwise each column's are gathered.
    """
    used = np.flatnonzero(d.any(axis=1))
    top = max(int(used[-1]) if len(used) else _PAD, _PAD)
    if d[top].all() or top == _PAD:
        below = np.asarray(d[_PAD : top - 3].any(axis=0)) if top - 3 > _PAD else None
        return [d[top], d[top - 1], d[top - 2], d[top - 3]], top, below
    rows = d.shape[1]
    nz = d[: top + 1] != 0
    h = np.full(rows, _PAD, dtype=np.int64)
    for j in range(_PAD + 1, top + 1):
        np.copyto(h, j, where=nz[j])
    flat = d.reshape(-1)
    at = h * rows + np.arange(rows)
    digits = [flat.take(at)]
    for _ in range(3):
        at -= rows
        digits.append(flat.take(at))
    if top - 3 <= _PAD:
        return digits, h, None
    counted = nz.view(np.int8).sum(axis=0, dtype=np.int64)
    return digits, h, np.asarray(counted - sum((x != 0).view(np.int8) for x in digits) > 0)


def to_double(block: np.ndarray, base: int, count: np.ndarray | None = None) -> np.ndarray:
    """Each row's sum (÷ ``count`` when given; a count of 0 gives 0.0) as the nearest double,
    ±inf beyond the largest.
    """
    s, mean = sum_and_mean(block, base, count)
    return s if mean is None else mean


def sum_and_mean(block: np.ndarray, base: int, count: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray | None]:
    """Each row's sum, and its mean over ``count`` (a count of 0 gives 0.0; None without counts),
    as the nearest doubles (±inf beyond the largest) — sharing the carries and the digits read.

    Both round a window: the magnitude's top 64 bits (``hi``), and a sticky bit for anything
    nonzero below.  A sum is ``hi`` with the sticky bit or-ed into its lowest bit — eleven bits
    below the rounding position, so the correctly rounded integer → double conversion rounds it
    as it rounds the whole magnitude — scaled by a power of two, exact while the result is a
    normal double (subnormal ones are redone exactly).  A mean divides the window by the count:
    one integer division when the count is below 2^9 (a quotient of 55 bits or more), else two
    steps of long division over 96 bits (65 or more), the remainder one more sticky bit.
    """
    d, neg = magnitude(block)
    (dh, d1, d2, d3), h, below = _leading(d)
    dh, d1, d2, d3 = (x.view(np.uint64) for x in (dh, d1, d2, d3))
    bits = np.frexp(dh.astype(np.float64))[1]  # dh's bit length (exact: dh < 2^53); 0 for a zero sum
    b = bits.astype(np.uint64)
    c = np.uint64(R) - b
    hi = (dh << (np.uint64(64) - b)) | (d1 << c) | (d2 >> b)  # from dh's top bit: 2^63 ≤ hi < 2^64
    sticky = ((d2 << (np.uint64(64) - b)) | d3) != 0  # d2's bits below hi, or d3's
    if below is not None:
        sticky |= below
    unit = base + R * (h - _PAD) - 64  # hi's unit, for dh a 1 bit
    exp = (unit.astype(np.int32) if isinstance(unit, np.ndarray) else np.int32(unit)) + bits
    # a result may be subnormal only if the smallest unit read is that small (then redone exactly)
    tiny = base + R * (int(np.min(h)) - _PAD) - 2 * R < -1022
    with np.errstate(over="ignore", under="ignore"):
        sums = _scaled(hi, sticky, exp)
        mean = slow = None
        if count is not None:
            count = np.asarray(count, dtype=np.int64)
            least, most = (int(count.min()), int(count.max())) if len(count) else (1, 1)
            if least > 0 and most < MAX_COUNT:
                den = count.view(np.uint64)
            else:
                slow = count >= MAX_COUNT
                den = np.where((count > 0) & ~slow, count, 1).view(np.uint64)
            q1 = hi // den
            if most < 512:  # q1 > 2^54: its bits and a sticky bit (the remainder's) suffice
                mean = _scaled(q1, sticky | (hi != q1 * den), exp)
            else:  # long division on: the remainder and the next 32 bits of the magnitude
                lo = ((d2 << c) & np.uint64(MASK)) | (d3 >> b)
                cur = ((hi - q1 * den) << np.uint64(R)) | lo
                q2 = cur // den
                s = np.frexp((q1 >> np.uint64(R)).astype(np.float64))[1]  # bits of q1 above 32
                su = s.astype(np.uint64)
                w = (q1 << (np.uint64(R) - su)) | (q2 >> su)  # the quotient's top 64 bits
                lost = (q2 & ((np.uint64(1) << su) - np.uint64(1))) | (cur - q2 * den)
                st = ((d3 & ((np.uint64(1) << b) - np.uint64(1))) | lost) != 0
                if below is not None:
                    st |= below
                mean = _scaled(w, st, exp - R + s)
    out = _finish(sums, neg, block, base, 1, None, tiny)
    if mean is not None:
        assert count is not None
        mean = _finish(mean, neg, block, base, count, slow, tiny)
        if least <= 0:
            mean[count <= 0] = 0.0
    return out, mean


def _scaled(w: np.ndarray, sticky: np.ndarray, exp: np.ndarray) -> np.ndarray:
    """The nearest double of ``(w + ε) · 2^exp`` (w unsigned, 2^55 ≤ w < 2^64 or 0; ε in (0, 1)
    where ``sticky``, else 0): exact while the result is a normal double.
    """
    return np.ldexp((w | sticky).astype(np.float64), exp)


def _finish(
    out: np.ndarray,
    neg: np.ndarray | None,
    block: np.ndarray,
    base: int,
    count: np.ndarray | int,
    slow: np.ndarray | None,
    tiny: bool,
) -> np.ndarray:
    """Signs applied; subnormal results (which scaling rounded twice) and rows marked ``slow``
    redone exactly (rare).
    """
    # (≤: a result just below the smallest normal double can round up to it through the scaling —
    # found by Hypothesis: (2^-1022 + 2·(2^-1022 − 2^-1074)) / 3 came out 2^-1022)
    odd = (np.abs(out) <= _TINY) & (out != 0) if tiny else None
    if slow is not None and slow.any():
        odd = slow if odd is None else odd | slow
    if neg is not None:
        out = np.where(neg, -out, out)
    if odd is not None:
        for i in np.flatnonzero(odd).tolist():
            c = count if isinstance(count, int) else int(count[i])
            out[i] = to_float(value(block[i], base) / c) if c > 0 else 0.0
    return out


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


def _trailing_zeros(m: np.ndarray) -> np.ndarray:
    """Trailing zero bits of nonzero int64 values (|m| < 2^63): the lowest set bit's position."""
    a = np.abs(m)
    return np.log2((a & -a).astype(np.float64)).astype(np.int64)


__all__ = [
    "MAX_COUNT",
    "MAX_ROWS",
    "R",
    "carry",
    "digits",
    "layout",
    "rebase",
    "magnitude",
    "span",
    "split",
    "sum_and_mean",
    "to_double",
    "value",
]
