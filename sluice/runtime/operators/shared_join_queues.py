"""The shared window join's scheduling queues (Hammad et al. §3; design 020): its join work as
*units* — elements of one input read together (or at most ``unit`` of them) with the extent of the
windows they have scanned, the resume pointer of §3.2 — what a pending unit's scans share
(``UnitView``), and how a policy picks the next (unit, band):

* ``LWO`` (§3.1): the oldest unit scans the largest window in one go;
* ``SWF`` (§3.2): the unit whose next band completes the smallest window, oldest first (new units
  start at the smallest);
* ``GREEDY`` (§3.3): the unit whose next band is the narrowest (priority inversely proportional to
  the partial window), then the smaller window, then the oldest.

>>> old, new = Unit(0, 0, 1, 0, order=0, done=10), Unit(0, 1, 2, 5, order=1)
>>> bands = ([1, 10, 12], [1, 10, 12])
>>> [pick(p, [old, new], bands) == (u, e) for p, u, e in
...  ((Policy.LWO, old, 12), (Policy.SWF, new, 1), (Policy.GREEDY, new, 1))]
[True, True, True]
>>> pick(Policy.GREEDY, [old, Unit(0, 1, 2, 5, order=1, done=1)], bands)[0] is old  # 2 wide, not 9
True
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from sluice.runtime.operators.join_buffer import Family, JoinBuffer
from sluice.runtime.operators.shared_join_spec import RIGHT, Policy


@dataclass
class Unit:
    """Join work owed by elements ``lo … hi`` of one input: they have scanned the other input's
    windows up to extent ``done`` (−1: none yet) — the resume pointer of §3.2.
    """

    side: int
    lo: int
    hi: int
    first_ts: int
    order: int
    done: int = -1


def next_band(bands: tuple[list[int], list[int]], u: Unit) -> int | None:
    """The extent the unit's next band completes (None: it has scanned every window)."""
    for e in bands[u.side]:
        if e > u.done:
            return e
    return None


def pick(policy: Policy, units: Sequence[Unit], bands: tuple[list[int], list[int]]) -> tuple[Unit, int]:
    """The next (unit, extent to scan up to) under the policy; ``bands``: per input, the window
    extents its elements scan, smallest first.
    """
    if policy is Policy.LWO:
        u = min(units, key=lambda u: u.order)
        return u, bands[u.side][-1]
    best: tuple[Any, ...] | None = None
    chosen: tuple[Unit, int] | None = None
    for u in units:
        e = next_band(bands, u)
        if e is None:
            continue
        if policy is Policy.SWF:
            key: tuple[Any, ...] = (e, u.order)
        else:  # GREEDY: the narrowest partial window first (§3.3)
            key = (e - max(u.done, 0) if u.done >= 0 else e, e, u.order)
        if best is None or key < best:
            best, chosen = key, (u, e)
    assert chosen is not None
    return chosen


class UnitView:
    """What the scans of one pending unit share, derived from the buffers (a cache: rebuilt when
    missing, e.g. after a restore): its elements' instants, how far the other input reached at
    each (``hz``; ties: the left finds), where each window extent starts there, and — with an
    index — the matches over the largest extent, probed once (``_band_candidates``).  Every bound
    is fixed once the unit exists: its read was a timestamp prefix of both inputs
    (``read_aligned``), and the buffers keep what a pending unit still scans (``_retain``).
    """

    def __init__(self, u: Unit, own: JoinBuffer, other: JoinBuffer, own_fam: Family, fam: Family) -> None:
        self.own, self.other, self.own_fam, self.fam = own, other, own_fam, fam
        self.idx = np.arange(u.lo, u.hi, dtype=np.int64)
        self.tau = own.ts[self.idx - own.base]
        self.hz = np.asarray(other.count_upto(self.tau, strict=u.side == RIGHT), np.int64)
        self._starts: dict[int, np.ndarray] = {}
        self._own_starts: dict[int, np.ndarray] = {}
        self.matches: tuple[int, np.ndarray, np.ndarray] | None = None

    def start(self, e: int) -> np.ndarray:
        """Where a window of extent ``e`` over the other input starts, per element's instant."""
        got = self._starts.get(e)
        if got is None:
            got = np.maximum(self.other.window_start(self.fam, e, self.tau), self.other.base)
            self._starts[e] = got
        return got

    def own_start(self, e: int) -> np.ndarray:
        got = self._own_starts.get(e)
        if got is None:
            got = self._own_starts[e] = self.own.window_start(self.own_fam, e, self.tau)
        return got
