"""One input's JoinBuffer (Hammad et al. §3.4) and the window sizes it serves: the elements of a
stream in arrival order, as long as the largest window a shared operator serves can use them, with a
key index for the shared join.  The shared window join keeps one per input, the shared window one.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
from sluice import windows as W
from sluice.datatypes import DataType
from sluice.errors import InternalError
from sluice.runtime.batch import META, POS_INF, concat, empty, merge_newest_chunks, nbytes, ts_of
from sluice.runtime.key_index import KeyIndex, key_codes
from sluice.runtime.operators.base import Part
from sluice.runtime.synopsis import SynopsisStats
from sluice.runtime.tail import Tail


class Family(enum.Enum):
    """Windows whose contents at any instant are a suffix of one arrival-ordered buffer, the
    larger subsuming the smaller: each is a family of sizes one buffer serves.
    """

    TIME = "time"  # [Range T] without a slide, [Now], Unbounded: the elements of the last T ticks
    ROWS = "rows"  # [Rows N]: the last N elements


def family(w: W.WindowDef) -> Family | None:
    """The family of a window a shared operator serves; None for the others (Slide, Partition By:
    not nested suffixes of one buffer; a window that may shrink, ``At Least``: shrinking a shared
    buffer would change other queries' answers, STREAM §5.2.1).
    """
    if isinstance(w, W.Rows) and w.least is None:
        return Family.ROWS
    if isinstance(w, W.Range) and w.slide in (None, 1) and w.least is None:
        return Family.TIME
    if isinstance(w, W.Now | W.Unbounded):
        return Family.TIME
    return None


def extent(w: W.WindowDef) -> int:
    """The window's size on its axis: ticks (time windows) or elements (``[Rows N]``)."""
    if isinstance(w, W.Rows):
        return w.rows
    if isinstance(w, W.Range):
        return w.range
    if isinstance(w, W.Now):
        return 0
    if isinstance(w, W.Unbounded):
        return POS_INF
    raise InternalError(f"a shared join cannot serve the window {w!r}")


class JoinBuffer(Part):
    """One input's JoinBuffer (§3.4): its elements in arrival order (timestamp order), with their
    positions in the input queue and one mask per port with selections; absolute indices
    ``base …`` survive dropping the front.
    """

    STATE = ("table", "_ts", "_seq", "_masks", "base", "budget")  # (``Tail``s: ``ts`` is ``_ts.view``)
    # derived: rebuilt on restore (the index from the table; later/earlier as "unknown")
    CACHES = ("index", "_later", "_earlier", "_sized")

    def __init__(self, types: Sequence[DataType], key: tuple[int, bool] | None = None, partners: bool = False) -> None:
        self.types = list(types)
        self.table = empty(self.types).slice(0, 0)  # an object of its own (builds share no state)
        # (the table ``nbytes`` last measured, and its bytes: tables are immutable, and measuring one
        # with string columns costs tens of µs — every ``statistics()`` call reads it several times)
        self._sized: tuple[pa.Table, int] | None = None
        self._ts, self._seq = Tail(np.int64), Tail(np.int64)
        self._masks: list[Tail | None] = []  # per port; None: every element
        self.base = 0
        self.budget: int | None = None
        # the key column (and whether it is compared as a double) a KeyIndex is kept on (§3.4's hash
        # index over the window): None when the variant is the nested loop or keys have no codes
        self.key = key
        self.index: KeyIndex | None = None if key is None else KeyIndex()
        # per element, what the join steps met of its partners (the other input's positions): the
        # first that arrived later (POS_INF: none yet) and the last that arrived earlier (−1:
        # none); a leaving element with neither in its partner range has no deletion to find.
        # Kept for a join's buffers only (``partners``), not for a SharedWindow's.
        self._later: Tail | None = Tail(np.int64) if partners else None
        self._earlier: Tail | None = Tail(np.int64) if partners else None

    # the arrays (views: no copy) — what STATE saves and restores
    @property
    def ts(self) -> np.ndarray:
        return self._ts.view

    @ts.setter
    def ts(self, v: np.ndarray) -> None:
        self._ts = Tail(np.int64, v)

    @property
    def seq(self) -> np.ndarray:
        return self._seq.view

    @seq.setter
    def seq(self, v: np.ndarray) -> None:
        self._seq = Tail(np.int64, v)

    @property
    def later(self) -> np.ndarray:
        assert self._later is not None
        return self._later.view

    @property
    def earlier(self) -> np.ndarray:
        assert self._earlier is not None
        return self._earlier.view

    @property
    def masks(self) -> list[np.ndarray | None]:
        return [None if m is None else m.view for m in self._masks]

    @masks.setter
    def masks(self, v: list[np.ndarray | None]) -> None:
        self._masks = [None if m is None else Tail(bool, m) for m in v]

    def restore(self, state: dict[str, Any]) -> None:
        super().restore(state)
        if self._later is not None:  # unknown: every leaving element probes
            self._later = Tail(np.int64, np.full(len(self.ts), -1, np.int64))
            self._earlier = Tail(np.int64, np.full(len(self.ts), POS_INF, np.int64))
        if self.key is not None:
            self.index = KeyIndex(self.base)
            self.index.append(*key_codes(self.table.column(META + self.key[0]), self.key[1]))

    @property
    def end(self) -> int:
        return self.base + len(self.ts)

    def __len__(self) -> int:
        return len(self.ts)

    def append(self, b: pa.Table, seq0: int | np.ndarray, masks: list[np.ndarray | None]) -> None:
        """Elements ``b`` at input positions ``seq0…`` (or, an array, at those positions), with a
        mask per port.
        """
        n = b.num_rows
        if self.index is not None and self.key is not None:
            self.index.append(*key_codes(b.column(META + self.key[0]), self.key[1]))
        self.table = concat([self.table, b], self.types)
        self.table = merge_newest_chunks(self.table)
        held = len(self._ts)
        self._ts.extend(ts_of(b).astype(np.int64))
        if self._later is not None and self._earlier is not None:
            self._later.extend(np.full(n, POS_INF, np.int64))
            self._earlier.extend(np.full(n, -1, np.int64))
        if isinstance(seq0, np.ndarray):
            self._seq.extend(seq0.astype(np.int64))
        else:
            self._seq.extend(np.arange(seq0, seq0 + n, dtype=np.int64))
        for p, m in enumerate(masks):
            old = self._masks[p]
            if m is None and old is None:
                continue
            if old is None:
                old = self._masks[p] = Tail(bool, np.ones(held, bool))
            old.extend(np.ones(n, bool) if m is None else m)

    def add_port(self, filtered: bool) -> None:
        # elements already held precede the port's start: whatever the mask says of them is unused
        self._masks.append(Tail(bool, np.zeros(len(self._ts), bool)) if filtered else None)

    def forget_port(self, port: int) -> None:
        """A port that serves no query any more: its mask goes (it is never read again)."""
        self._masks[port] = None

    def drop_before(self, idx: int) -> None:
        k = idx - self.base
        if k <= 0:
            return
        k = min(k, len(self.ts))
        self.table = self.table.slice(k)
        for t in (self._ts, self._seq, self._later, self._earlier, *self._masks):
            if t is not None:
                t.drop(k)
        self.base += k
        if self.index is not None:
            self.index.drop_before(self.base)

    def met_later(self, idx: np.ndarray, partner: np.ndarray) -> None:
        """Elements ``idx`` were met by later partners (positions of the other input)."""
        np.minimum.at(self.later, idx - self.base, partner)

    def met_earlier(self, idx: np.ndarray, partner: np.ndarray) -> None:
        """Elements ``idx`` met earlier partners (positions of the other input)."""
        np.maximum.at(self.earlier, idx - self.base, partner)

    def codes_at(self, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """The index's key codes of elements ``idx`` (absolute), and which are not NULL (None: all)."""
        assert self.key is not None
        if len(idx) and idx[-1] - idx[0] == len(idx) - 1 and (np.diff(idx) == 1).all():  # a slice, no copy
            col = self.table.column(META + self.key[0]).slice(int(idx[0]) - self.base, len(idx))
        else:
            col = self.take(idx, [META + self.key[0]]).column(0)
        return key_codes(col, self.key[1])

    def take(self, idx: np.ndarray, columns: list[int] | None = None) -> pa.Table:
        """The rows at absolute positions ``idx`` (any order; of ``columns`` only, if given): a take
        per chunk they fall in (Arrow's take over many chunks combines them all first).
        """
        t = self.table if columns is None else self.table.select(columns)
        rel = np.asarray(idx, np.int64) - self.base
        chunks = t.column(0).num_chunks if t.num_columns else 0
        if chunks <= 1 or any(c.num_chunks != chunks for c in t.columns):
            return (t.combine_chunks() if chunks > 1 else t).take(pa.array(rel))
        lens = np.array([len(c) for c in t.column(0).chunks], np.int64)
        offs = np.concatenate(([0], np.cumsum(lens)))
        order = None if len(rel) < 2 or bool((rel[1:] >= rel[:-1]).all()) else np.argsort(rel, kind="stable")
        s = rel if order is None else rel[order]
        cut = np.searchsorted(s, offs)
        parts = [
            t.slice(int(offs[c]), int(lens[c])).take(pa.array(s[cut[c] : cut[c + 1]] - offs[c]))
            for c in range(len(lens))
            if cut[c + 1] > cut[c]
        ]
        if not parts:
            return t.slice(0, 0)
        out = parts[0] if len(parts) == 1 else pa.concat_tables(parts).combine_chunks()
        return out if order is None else out.take(pa.array(np.argsort(order)))

    def rows(self, lo: int, hi: int) -> pa.Table:
        return self.table.slice(lo - self.base, max(0, hi - lo))

    def count_upto(self, tau: np.ndarray | int, strict: bool = False) -> Any:
        """Absolute index one past the last element with ``ts ≤ tau`` (``< tau`` if strict)."""
        return np.searchsorted(self.ts, tau, side="left" if strict else "right") + self.base

    def window_start(self, fam: Family, ext: int, tau: np.ndarray) -> np.ndarray:
        """Absolute index of the first element in a window of extent ``ext`` at instants ``tau``
        (the window is this index up to the last element with ``ts ≤ tau``).
        """
        tau = np.asarray(tau, np.int64)
        if ext >= POS_INF:
            return np.full(len(tau), self.base, np.int64)
        if fam is Family.TIME:
            return np.searchsorted(self.ts, tau - ext, side="left").astype(np.int64) + self.base
        return np.asarray(self.count_upto(tau), np.int64) - ext

    def sees_all(self, port: int, start: int, since: int | None) -> bool:
        """The port sees every element held (``ok`` is true for all): no selection, no later start."""
        return self._masks[port] is None and since is None and (not len(self._seq) or self.seq[0] >= start)

    def ok(self, idx: np.ndarray, port: int, start: int, since: int | None) -> np.ndarray:
        """Which elements (absolute indices) the port sees: from its start, through its selections."""
        m = self._masks[port]
        if self.sees_all(port, start, since):
            return np.ones(len(idx), bool)
        loc = idx - self.base
        keep = self.seq[loc] >= start
        if since is not None:
            keep &= self.ts[loc] >= since
        if m is not None:
            keep &= m.view[loc]
        return keep

    @property
    def nbytes(self) -> int:
        masks = sum(len(m) for m in self._masks if m is not None)
        index = 0 if self.index is None else self.index.nbytes
        per = 32 if self._later is not None else 16  # ts and queue position (and met partners)
        sized = getattr(self, "_sized", None)  # (absent in a buffer restored from before it existed)
        if sized is None or sized[0] is not self.table:
            sized = self._sized = (self.table, nbytes(self.table))
        return sized[1] + per * len(self.ts) + masks + index

    def statistics(self) -> SynopsisStats:
        return SynopsisStats("JoinBuffer", len(self), self.nbytes, self.budget)

    def change_mem(self, nbytes: int | None) -> None:
        self.budget = nbytes
