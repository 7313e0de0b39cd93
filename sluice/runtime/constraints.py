"""Constraints on a stream's elements — STREAM §4.1's k-constraints (Babu, Srivastava and Widom,
*Exploiting k-constraints to reduce memory overhead in continuous queries over data streams*) and
its many-one joins: checked where a source releases its elements, and what they promise, read
where a join or an aggregate keeps state.

A stream's order is the order its source releases it: by timestamp, ties in arrival order.
Positions count the elements *admitted* so far (a rejected element takes none), so whether an
element is admitted depends only on the stream's order, never on how it was batched:

* ``ORDERED BY a WITHIN k`` — an element's ``a`` is not below the ``a`` of any element more than
  ``k`` positions before it.  Every later element is therefore ≥ the *floor*: the largest ``a``
  of all but the last ``k`` elements.
* ``CLUSTERED BY a WITHIN k`` — between two elements with the same ``a`` come at most ``k``
  elements with another ``a``.  Once ``k + 1`` others followed the last ``v``, ``v`` is *closed*:
  no later element has it.
* ``UNIQUE BY a`` — no two elements have the same ``a`` (a join on it is many-one): a value is
  closed once it appeared.
* ``PUNCTUATED BY a`` — the stream's punctuations on ``a`` (Tucker et al., STREAM §4.1's "more
  dynamic technique"), each ``(τ, values or ≤ bound)``: no element stamped after ``τ`` has such an
  ``a``.  The promise is in the punctuations, not the data: a :class:`PunctuationLog` the source
  keeps, which operators read once they have read their input through ``τ``.

NULL has no place in any of them: an element with NULL in a constrained attribute violates it.
A subsequence of a stream that adheres to ``ORDERED BY`` or ``UNIQUE BY`` (what σ, a sample or a
late query's ``Since`` pass on) adheres too — positions only get closer — and one to ``CLUSTERED
BY`` if it keeps all or none of each value's elements; so an operator reading one through such
operators can track the promise itself, from what it has read (:class:`Constraints`, ``track``).

>>> import pyarrow as pa
>>> a = Constraints("S", [(StreamConstraint("ORDERED", "a", 1), 0)])
>>> b = pa.table({"__ts": pa.array([1, 2, 3, 4, 5]), "__sign": pa.array([1] * 5, pa.int8()),
...               "a": pa.array([3, 1, 2, 0, 4])})
>>> kept, why = a.check(b)
>>> kept.column("a").to_pylist(), a.checks[0].floor
([3, 1, 4], 3)
>>> print(why[0])
S: element at ts 3: a = 2 violates ORDERED BY a WITHIN 1: below 3, which came more than 1 element(s) before it
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sluice.cql.ast import StreamConstraint
from sluice.errors import InternalError, SluiceError
from sluice.runtime.batch import META, ts_of
from sluice.runtime.operators.base import Part

_VECTOR_TRIES = 8  # violations in one batch handled by re-checking the rest vectorised; then one by one


def _values(col: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """A column without NULLs as NumPy values (int64, float64, bool or str objects)."""
    return np.asarray(col.to_numpy(zero_copy_only=False))


class _Ordered:
    """``ORDERED BY a WITHIN k``: the last ``k`` values and the largest before them."""

    def __init__(self, k: int) -> None:
        self.k = k
        self.recent: np.ndarray | None = None  # the last min(k, n) values, oldest first
        self.floor: Any = None  # the largest value before them (None: none yet)

    def _after_recent(self, v: np.ndarray) -> np.ndarray:
        """The last ``k`` values admitted, then ``v``."""
        return v if self.recent is None else np.concatenate([self.recent.astype(v.dtype, copy=False), v])

    def floors(self, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For each of ``v``, as if all before it were admitted: whether a floor binds it, and the
        floor (the largest value more than ``k`` positions before it).
        """
        comb = self._after_recent(v)
        pm = np.maximum.accumulate(comb)
        idx = np.arange(len(v)) + len(comb) - len(v) - self.k - 1  # the last position binding each
        bound = idx >= 0
        f = pm[np.maximum(idx, 0)]
        if self.floor is not None:
            f = np.where(bound, np.maximum(f, self.floor), self.floor)
            bound = np.ones(len(v), dtype=bool)
        return bound, f

    def violations(self, v: np.ndarray, ts: np.ndarray | None = None) -> np.ndarray:
        bound, f = self.floors(v)
        return bound & (v < f)

    def explain(self, v: np.ndarray) -> str:
        f = self.floors(v)[1][0]
        return f"below {_py(f)!r}, which came more than {self.k} element(s) before it"

    def add(self, v: np.ndarray, ts: np.ndarray | None = None) -> bool:
        """Admit ``v`` (they adhere); True if the floor rose."""
        if not len(v):
            return False
        comb = self._after_recent(v)
        cut = len(comb) - self.k
        rose = False
        if cut > 0:
            top = _py(comb[:cut].max())
            if self.floor is None or top > self.floor:
                self.floor, rose = top, True
            self.recent = comb[cut:].copy()
        else:
            self.recent = comb.copy()
        return rose

    def closed(self, v: np.ndarray) -> np.ndarray:
        """Which of ``v`` no later element can have."""
        if self.floor is None or not len(v):
            return np.zeros(len(v), dtype=bool)
        return v < self.floor

    def nbytes(self) -> int:
        return 0 if self.recent is None else int(self.recent.nbytes)


def _distinct(v: np.ndarray) -> np.ndarray:
    """``v``'s values sorted, each once (a sort, not ``np.unique``'s hashing: faster on the
    nearly sorted runs merged here).
    """
    v = np.sort(v, kind="stable")
    keep = np.ones(len(v), dtype=bool)
    keep[1:] = v[1:] != v[:-1]
    return v[keep]


class _ValueSet:
    """A growing set of values as sorted NumPy runs (a binary counter of sizes: O(log n) runs),
    8 bytes a number — the closed values of a clustered stream, which can be many.
    """

    def __init__(self) -> None:
        self.runs: list[np.ndarray] = []

    def add(self, v: np.ndarray) -> None:
        if not len(v):
            return
        run = _distinct(v)
        while self.runs and len(self.runs[-1]) <= 2 * len(run):
            run = _distinct(np.concatenate([self.runs.pop(), run]))
        self.runs.append(run)

    def contains(self, v: np.ndarray) -> np.ndarray:
        out = np.zeros(len(v), dtype=bool)
        for run in self.runs:
            if not len(v):
                break
            i = np.minimum(np.searchsorted(run, v), len(run) - 1)
            out |= run[i] == v
        return out

    def __len__(self) -> int:
        return sum(len(r) for r in self.runs)

    def nbytes(self) -> int:
        return sum(int(r.nbytes) for r in self.runs)


class _Clustered:
    """``CLUSTERED BY a WITHIN k``: where each open value was last (sorted arrays: at most
    ``k + 1`` values, and those of the last batch), and the closed ones.
    """

    def __init__(self, k: int) -> None:
        self.k = k
        self.n = 0
        self.open_values: np.ndarray | None = None  # sorted
        self.open_last: np.ndarray = np.zeros(0, dtype=np.int64)  # each one's last position
        self.closed_set = _ValueSet()

    def _last_of(self, u: np.ndarray) -> np.ndarray:
        """The last position of each of ``u`` while open, else −1."""
        out = np.full(len(u), -1, dtype=np.int64)
        ov = self.open_values
        if ov is not None and len(ov) and len(u):
            i = np.minimum(np.searchsorted(ov, u), len(ov) - 1)
            hit = ov[i] == u
            out[hit] = self.open_last[i[hit]]
        return out

    def violations(self, v: np.ndarray, ts: np.ndarray | None = None) -> np.ndarray:
        m = len(v)
        if not m:
            return np.zeros(0, dtype=bool)
        pos = self.n + np.arange(m)
        uniq, inv = np.unique(v, return_inverse=True)
        order = np.argsort(inv, kind="stable")
        s = inv[order]
        first = np.ones(m, dtype=bool)
        first[1:] = s[1:] != s[:-1]
        prev = np.full(m, -1, dtype=np.int64)
        prev[order[1:]] = pos[order[:-1]]
        heads = order[first]  # each value's first element in this batch, in the order of ``uniq``
        prev[heads] = self._last_of(uniq)
        bad = np.zeros(m, dtype=bool)
        bad[heads] = self.closed_set.contains(uniq)
        bad |= (prev >= 0) & (pos - prev - 1 > self.k)
        return bad

    def explain(self, v: np.ndarray) -> str:
        return f"it came back after more than {self.k} element(s) with other values"

    def add(self, v: np.ndarray, ts: np.ndarray | None = None) -> bool:
        """Admit ``v`` (they adhere); True if a value closed."""
        m = len(v)
        if not m:
            return False
        uniq, inv = np.unique(v, return_inverse=True)
        last = np.full(len(uniq), -1, dtype=np.int64)
        np.maximum.at(last, inv, self.n + np.arange(m))
        self.n += m
        if self.open_values is not None and len(self.open_values):
            older = ~np.isin(self.open_values, uniq)  # (the batch's positions are the later ones)
            values = np.concatenate([self.open_values[older].astype(uniq.dtype, copy=False), uniq])
            last = np.concatenate([self.open_last[older], last])
            order = np.argsort(values, kind="stable")
            uniq, last = values[order], last[order]
        gone = last < self.n - 1 - self.k  # last seen more than k elements ago: closed
        self.closed_set.add(uniq[gone])
        self.open_values, self.open_last = uniq[~gone], last[~gone]
        return bool(gone.any())

    def closed(self, v: np.ndarray) -> np.ndarray:
        return self.closed_set.contains(v) if len(v) else np.zeros(0, dtype=bool)

    def nbytes(self) -> int:
        return self.closed_set.nbytes() + (0 if self.open_values is None else 16 * len(self.open_values))


class _Unique:
    """``UNIQUE BY a``: every value seen (each is closed once it appeared)."""

    def __init__(self) -> None:
        self.seen = _ValueSet()

    def violations(self, v: np.ndarray, ts: np.ndarray | None = None) -> np.ndarray:
        bad = self.seen.contains(v)
        if len(v) > 1:
            _, first = np.unique(v, return_index=True)
            again = np.ones(len(v), dtype=bool)
            again[first] = False
            bad |= again
        return bad

    def explain(self, v: np.ndarray) -> str:
        return "an element before it had it"

    def add(self, v: np.ndarray, ts: np.ndarray | None = None) -> bool:
        self.seen.add(v)
        return bool(len(v))

    def closed(self, v: np.ndarray) -> np.ndarray:
        return self.seen.contains(v) if len(v) else np.zeros(0, dtype=bool)

    def nbytes(self) -> int:
        return self.seen.nbytes()


# a punctuation: (τ, values or None, bound or None) — values sorted and distinct — and, from
# ``add_pairs``, each value's own τ and the earliest of them
Entry = tuple[Any, ...]


class PunctuationLog(Part):
    """A stream's punctuations, per attribute (lower case) in order of ``τ`` (ticks): each says no
    element stamped after ``τ`` has one of ``values`` (a sorted array) and none a value ≤ ``upto``
    (either may be None).  Kept by the source (a part of its state); a punctuation is only ever
    added at or after the instants the source has released, so whoever has applied the ones up to
    some ``τ`` finds every later one after them.

    Readers (``_Punctuated``) count what they applied in *absolute* positions: ``compact`` merges
    the punctuations at or before an instant the source has released into one — the set union and
    the largest bound, at the latest ``τ`` — and ``start`` says the absolute position of the first
    entry kept, so a reader behind the merge applies the merged one again (a union and a maximum:
    applying twice changes nothing).  Merged later than some of its parts, a punctuation closes a
    value for a reader no earlier than the parts did (a join forgets no sooner); the source's own
    check needs none of them early, having released every element stamped at or before it.
    """

    STATE = ("entries", "starts")

    def __init__(self, stream: str) -> None:
        self.stream = stream
        self.entries: dict[str, list[Entry]] = {}  # column → (τ, values, upto[, each value's τ])
        self.starts: dict[str, int] = {}  # column → the absolute position of its first entry kept
        self._weights: dict[str, int] | None = None  # column → its entries' bytes (kept as they change)

    def restore(self, state: dict[str, Any]) -> None:
        super().restore(state)
        self._weights = None

    def __setstate__(self, state: dict[str, Any]) -> None:  # (the whole engine pickled: a checkpoint)
        self.__dict__.update(state)
        self._weights = None

    def weights(self) -> dict[str, int]:
        if self._weights is None:
            self._weights = {c: sum(_weight(e) for e in es) for c, es in self.entries.items()}
        return self._weights

    def of(self, column: str) -> list[Entry]:
        return self.entries.setdefault(column.lower(), [])

    def start(self, column: str) -> int:
        return self.starts.get(column.lower(), 0)

    def compact(self, through: int) -> None:
        """Merge each attribute's punctuations with ``τ`` ≤ ``through`` (the source released every
        element stamped ≤ it) into one, once those after the first weigh as much as it (so a log
        of many punctuations costs its merged size, not one entry each, and merging stays linear).
        """
        weights = self.weights()
        for column, es in self.entries.items():
            n = bisect.bisect_right(es, through, key=lambda e: e[0])
            if n < 2:
                continue
            head, later = _weight(es[0]), sum(_weight(e) for e in es[n:])  # (those after: a few instants')
            if weights.get(column, 0) - head - later < head:
                continue
            bounds = [e[2] for e in es[:n] if e[2] is not None]
            bound = max(bounds) if bounds else None
            sets = [e[1] for e in es[:n] if e[1] is not None]
            values = np.unique(np.concatenate(sets)) if sets else None
            if values is not None and bound is not None:
                values = values[~(values <= bound)]  # (the bound closes them already)
            merged = (es[n - 1][0], values if values is not None and len(values) else None, bound)
            es[:n] = [merged]
            self.starts[column] = self.start(column) + n - 1
            weights[column] = _weight(merged) + later

    def add(self, column: str, tau: int, values: np.ndarray | None, upto: Any) -> None:
        self._insert(column, (tau, None if values is None else np.unique(values), upto))

    def add_pairs(self, column: str, taus: np.ndarray, values: np.ndarray) -> None:
        """Many punctuations at once, one a value: no element stamped after ``taus[i]`` has
        ``values[i]`` (a referencing stream's released elements: ``sources.Reference``).  Kept as
        one entry at the latest ``τ``, with each value's own: a reader applies it whole once past
        that τ (forgetting no sooner than its parts would), the source's check reads each pair.
        """
        if len(taus):  # each value once, sorted, at its earliest τ (what the check reads)
            order = _by_value_then(taus, values)
            values, taus = values[order], taus[order]
            head = np.ones(len(values), dtype=bool)
            head[1:] = values[1:] != values[:-1]
            self._insert(column, (int(taus.max()), values[head], None, taus[head], int(taus.min())))

    def _insert(self, column: str, entry: Entry) -> None:
        weights, entries = self.weights(), self.of(column)
        i = len(entries)
        while i and entries[i - 1][0] > entry[0]:
            i -= 1
        entries.insert(i, entry)
        weights[column.lower()] = weights.get(column.lower(), 0) + _weight(entry)

    def drop(self, column: str) -> None:
        """Forget every punctuation on ``column`` (a reference's, once its stream is gone)."""
        self.entries.pop(column.lower(), None)
        self.starts.pop(column.lower(), None)
        self._weights = None

    def nbytes(self) -> int:
        return sum(self.weights().values())


def _weight(entry: Entry) -> int:
    """An entry's bytes: its instant and bound, and its values (and their own instants)."""
    return 16 + (0 if entry[1] is None else int(entry[1].nbytes)) + (int(entry[3].nbytes) if len(entry) > 3 else 0)


def _by_value_then(at: np.ndarray, values: np.ndarray) -> np.ndarray:
    """The order by value, ties by ``at`` (``np.lexsort`` takes no strings)."""
    order = np.argsort(at, kind="stable")
    return order[np.argsort(values[order], kind="stable")]


class _Punctuated:
    """``PUNCTUATED BY a``: the punctuations applied so far (those with ``τ`` before what was
    read), merged — a set of values and the largest ``≤`` bound — and how many of the log's.
    The log itself is not state of this check (the source saves it): :meth:`Constraints.restore`
    links it again.
    """

    def __init__(self, log: PunctuationLog, column: str) -> None:
        self.log: PunctuationLog | None = log
        self.column = column
        self.applied = 0
        self.closed_set = _ValueSet()
        self.floor: Any = None
        self._cache: tuple[tuple[Entry, ...], np.ndarray, np.ndarray] | None = None  # (``_earliest``)

    def __getstate__(self) -> dict[str, Any]:
        return {"column": self.column, "applied": self.applied, "closed_set": self.closed_set, "floor": self.floor}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.log, self.column, self._cache = None, state["column"], None
        self.applied, self.closed_set, self.floor = state["applied"], state["closed_set"], state["floor"]

    def _entries(self) -> tuple[list[Entry], int]:
        """The log's entries for the column, and the absolute position of the first of them."""
        if self.log is None:
            raise InternalError("a punctuation check restored without its stream's log")
        return self.log.of(self.column), self.log.start(self.column)

    def advance(self, through: int, strict: bool = False) -> bool:
        """Apply the punctuations with ``τ`` ≤ ``through`` (< if ``strict``); True if any."""
        entries, first = self._entries()
        n = begin = max(self.applied - first, 0)
        sets = []
        while n < len(entries) and (entries[n][0] < through if strict else entries[n][0] <= through):
            values, upto = entries[n][1], entries[n][2]
            if upto is not None:
                self.floor = upto if self.floor is None else max(self.floor, upto)
            if values is not None:
                sets.append(values)
            n += 1
        if sets:  # (one union for all: a referencing stream punctuates once an instant)
            self.closed_set.add(sets[0] if len(sets) == 1 else np.concatenate(sets))
        if n > begin:
            self.applied = first + n
        return n > begin

    def violations(self, v: np.ndarray, ts: np.ndarray | None = None) -> np.ndarray:
        """Elements (values ``v`` stamped ``ts``, in the stream's order) a punctuation before them excludes."""
        if not len(v):
            return np.zeros(0, dtype=bool)
        assert ts is not None
        self.advance(int(ts[0]), strict=True)  # (what follows is stamped ≥ ts[0])
        bad = self.closed(v)
        (entries, first), last = self._entries(), int(ts[-1])
        among = []
        for e in entries[max(self.applied - first, 0) :]:
            if (e[0] if len(e) < 5 else e[4]) >= last:
                continue  # (about elements after these only: ``add_pairs`` keeps its earliest τ last)
            if e[2] is not None:
                bad |= (ts > e[0]) & np.asarray(v <= e[2], dtype=bool)
            if e[1] is not None:
                among.append(e)
        if among:  # each value's earliest punctuation among these
            values, at = self._earliest(among)
            i = np.minimum(np.searchsorted(values, v), len(values) - 1)
            bad |= (values[i] == v) & (ts > at[i])
        return bad

    def _earliest(self, among: list[Entry]) -> tuple[np.ndarray, np.ndarray]:
        """The values of ``among`` sorted, each once, with its earliest τ — kept for the same
        entries (a batch checked element by element past a few violations asks again and again).
        """
        c = self._cache  # (it holds the entries themselves: compared by identity, never a reused id)
        if c is not None and len(c[0]) == len(among) and all(a is b for a, b in zip(c[0], among, strict=True)):
            return c[1], c[2]
        sets = [e[1] for e in among]
        taus = [np.full(len(e[1]), e[0], dtype=np.int64) if len(e) < 5 else e[3] for e in among]
        values, at = sets[0], taus[0]  # (each entry's values are sorted and distinct already)
        if len(among) > 1:
            values, at = np.concatenate(sets), np.concatenate(taus)
            order = _by_value_then(at, values)
            values, at = values[order], at[order]
            head = np.ones(len(values), dtype=bool)
            head[1:] = values[1:] != values[:-1]
            values, at = values[head], at[head]
        self._cache = (tuple(among), values, at)
        return values, at

    def explain(self, v: np.ndarray) -> str:
        return "a punctuation before it excluded that value"

    def add(self, v: np.ndarray, ts: np.ndarray | None = None) -> bool:
        return False if ts is None or not len(ts) else self.advance(int(ts[-1]), strict=True)

    def closed(self, v: np.ndarray) -> np.ndarray:
        out = self.closed_set.contains(v) if len(v) else np.zeros(0, dtype=bool)
        if self.floor is not None and len(v):
            out |= np.asarray(v <= self.floor, dtype=bool)
        return out

    def nbytes(self) -> int:
        return self.closed_set.nbytes()


def log_column(c: StreamConstraint) -> str:
    """Where in its stream's log a ``PUNCTUATED BY`` reads: the attribute, or — implied by a
    referencing stream — that reference's own entries (a user's punctuations and each reference
    are told apart: each check names its own cause).
    """
    return f"{c.column} referenced by {c.ref}.{c.ref_column}".lower() if c.ref else c.column


class _Referenced(_Punctuated):
    """What a referencing stream's ``FOREIGN KEY … REFERENCES`` says of this one: its released
    elements' values as punctuations (``sources.Reference``, under ``log_column``), checked as the
    stream's own.
    """

    def __init__(self, log: PunctuationLog, c: StreamConstraint) -> None:
        super().__init__(log, log_column(c))
        self.by, self.k = c.ref, c.k

    def __getstate__(self) -> dict[str, Any]:
        return {**super().__getstate__(), "by": self.by, "k": self.k}

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        self.by, self.k = state["by"], state["k"]

    def explain(self, v: np.ndarray) -> str:
        return f"an element of {self.by} with that value came more than {self.k} time unit(s) of {self.by} before it"


_Check = _Ordered | _Clustered | _Unique | _Punctuated


def _check(c: StreamConstraint, log: PunctuationLog | None = None) -> _Check:
    if c.kind == "PUNCTUATED":
        if log is None:
            raise InternalError(f"PUNCTUATED BY {c.column} checked without the stream's punctuations")
        return _Referenced(log, c) if c.ref else _Punctuated(log, c.column)
    if c.kind == "UNIQUE":
        return _Unique()
    if c.kind not in ("ORDERED", "CLUSTERED"):
        raise InternalError(f"{c.sql()} is not checked on its own stream's elements")
    return _Ordered(c.k) if c.kind == "ORDERED" else _Clustered(c.k)


class Constraints(Part):
    """The k-constraints over one sequence of rows: a source's (``check``: violations rejected)
    or what an operator reads (``track``: the input adheres, checked where it entered).
    ``constraints`` pairs each with the attribute (0-based, after the timestamp and sign) it reads.
    """

    STATE = ("checks",)

    def __init__(
        self,
        name: str,
        constraints: Sequence[tuple[StreamConstraint, int]],
        logs: Sequence[PunctuationLog | None] = (),
    ) -> None:
        self.name = name
        self.constraints = list(constraints)
        # per constraint: the punctuations a PUNCTUATED BY reads (None for the others)
        self.logs = list(logs) or [None] * len(self.constraints)
        self.checks: list[_Check] = [_check(c, g) for (c, _), g in zip(self.constraints, self.logs, strict=True)]

    def add(self, c: StreamConstraint, index: int, log: PunctuationLog | None = None) -> None:
        """One more constraint, reading attribute ``index`` (a referenced stream's implied one)."""
        self.constraints.append((c, index))
        self.logs.append(log)
        self.checks.append(_check(c, log))

    def resume(self, c: StreamConstraint, check: _Check) -> None:
        """Check ``c`` from where ``check`` (what an earlier engine had seen, unpickled) left off."""
        i = [o for o, _ in self.constraints].index(c)
        self.checks[i] = check
        self._link()

    def remove(self, c: StreamConstraint) -> None:
        """Stop checking ``c`` (a reference whose referencing stream is gone)."""
        i = [o for o, _ in self.constraints].index(c)
        del self.constraints[i], self.logs[i], self.checks[i]

    @classmethod
    def of_stream(
        cls, name: str, schema: Any, constraints: Sequence[StreamConstraint], log: PunctuationLog | None = None
    ) -> Constraints:
        """A stream's constraints, each reading the attribute it names (``log``: its punctuations)."""
        return cls(name, [(c, schema.index(c.column)) for c in constraints], [log] * len(constraints))

    def restore(self, state: dict[str, Any]) -> None:
        if len(state["checks"]) != len(self.checks):
            raise SluiceError(
                f"{self.name}: the snapshot checks {len(state['checks'])} constraint(s), this engine "
                f"{len(self.checks)} ({', '.join(c.sql() for c, _ in self.constraints) or 'none'}): "
                "restore into an engine with the same streams and references"
            )
        super().restore(state)
        self._link()

    def __setstate__(self, state: dict[str, Any]) -> None:  # (the whole engine pickled: a checkpoint)
        self.__dict__.update(state)
        self._link()

    def _link(self) -> None:
        """Each punctuation check reads its stream's log again (the source's state, saved there)."""
        for o, log in zip(self.checks, self.logs, strict=True):
            if isinstance(o, _Punctuated):
                o.log = log

    def __bool__(self) -> bool:
        return bool(self.constraints)

    def _columns(self, b: pa.Table) -> list[pa.ChunkedArray]:
        return [b.column(META + i) for _, i in self.constraints]

    def check(self, b: pa.Table) -> tuple[pa.Table, list[str]]:
        """The elements of ``b`` (in the stream's order) that adhere — each checked against the
        elements admitted before it — and why the first five of the rest violate.
        """
        why: list[str] = []
        if not self.constraints or b.num_rows == 0:
            return b, why
        cols = self._columns(b)
        keep = np.ones(b.num_rows, dtype=bool)
        for j, ((c, _), col) in enumerate(zip(self.constraints, cols, strict=True)):
            if col.null_count and c.kind == "PUNCTUATED":  # a NULL is never punctuated: never closed
                valid = col.drop_null()
                cols[j] = pc.fill_null(col, valid[0]) if len(valid) else None  # (checked, then let through)
                continue
            if col.null_count:
                nulls = np.asarray(col.is_null().to_numpy(zero_copy_only=False))
                for i in np.flatnonzero(nulls & keep)[: 5 - len(why)]:
                    why.append(self._note(b, int(i), f"NULL {c.column} violates {c.sql()}"))
                keep &= ~nulls
        idx = np.flatnonzero(keep)
        # per constraint: None where a punctuated column is all NULL here (nothing to check), else
        # which rows are NULL (only a punctuated column keeps any: the others' were taken out above)
        none = np.zeros(b.num_rows, dtype=bool)
        nullmasks = [
            None if col is None else self._nulls(b, j) if c.kind == "PUNCTUATED" else none
            for j, ((c, _), col) in enumerate(zip(self.constraints, cols, strict=True))
        ]
        vals = [_values((col if col is not None else b.column(0)).take(pa.array(idx))) for col in cols]
        stamps = ts_of(b)[idx]
        lo, seen = 0, 0
        while lo < len(idx):
            # vectorised over the rest of the batch, re-checked after each violation; past a few
            # violations in one batch, one element at a time
            end = len(idx) if seen < _VECTOR_TRIES else lo + 1
            part, ts = [v[lo:end] for v in vals], stamps[lo:end]
            bad = np.zeros(end - lo, dtype=bool)
            for o, v, null in zip(self.checks, part, nullmasks, strict=True):
                if null is None:  # (a punctuated column all NULL here: nothing to check)
                    continue
                bad |= o.violations(v, ts) & ~null[idx[lo:end]]
            first = int(np.argmax(bad)) if bad.any() else end - lo
            for o, v in zip(self.checks, part, strict=True):
                o.add(v[:first], ts[:first])
            if first == end - lo:
                lo = end
                continue
            at = lo + first
            seen += 1
            if len(why) < 5:
                live = [null is not None and not null[idx[at]] for null in nullmasks]
                why.append(self._why(b, int(idx[at]), [v[at : at + 1] for v in vals], stamps[at : at + 1], live))
            keep[idx[at]] = False
            lo = at + 1
        return (b if keep.all() else b.filter(pa.array(keep))), why

    def _nulls(self, b: pa.Table, j: int) -> np.ndarray:
        """Which rows of ``b`` have NULL in constraint ``j``'s attribute."""
        col = b.column(META + self.constraints[j][1])
        if not col.null_count:
            return np.zeros(b.num_rows, dtype=bool)
        return np.asarray(col.is_null().to_numpy(zero_copy_only=False), dtype=bool)

    def _why(self, b: pa.Table, i: int, values: list[np.ndarray], ts: np.ndarray, live: list[bool]) -> str:
        """Why element ``i`` of ``b`` (its constrained values and stamp: one-element arrays; ``live``:
        per constraint, whether it reads a value, not a NULL punctuations let through) violates.
        """
        for (c, _), o, v, on in zip(self.constraints, self.checks, values, live, strict=True):
            if on and o.violations(v, ts)[0]:
                return self._note(b, i, f"{c.column} = {_py(v[0])!r} violates {c.sql()}: {o.explain(v)}")
        raise InternalError(f"{self.name}: no constraint rejects {values!r}")

    def _note(self, b: pa.Table, i: int, what: str) -> str:
        return f"{self.name}: element at ts {int(ts_of(b)[i])}: {what}"

    def track(self, b: pa.Table, through: int | None = None) -> bool:
        """Read ``b`` (it adheres: checked where it entered); True if more values closed.
        ``through``: every input element stamped ≤ it has now been read (an operator reading whole
        instants: ``read_aligned``) — the punctuations up to it apply.
        """
        changed = False
        for o, col in zip(self.checks, self._columns(b), strict=True):
            if isinstance(o, _Punctuated):
                changed |= through is not None and o.advance(through)
                continue
            if col.null_count:
                col = col.filter(col.is_valid())
            changed |= o.add(_values(col))
        return changed

    def closed(self, j: int, col: pa.ChunkedArray | pa.Array) -> np.ndarray:
        """Which values of ``col`` constraint ``j``'s sequence will never have again."""
        valid = np.asarray(col.is_valid().to_numpy(zero_copy_only=False)) if col.null_count else None
        if valid is not None:
            out = np.zeros(len(col), dtype=bool)
            out[valid] = self.checks[j].closed(_values(col.filter(pa.array(valid))))
            return out
        return self.checks[j].closed(_values(col))

    def nbytes(self) -> int:
        return sum(o.nbytes() for o in self.checks)


def _py(v: Any) -> Any:
    return v.item() if hasattr(v, "item") else v
