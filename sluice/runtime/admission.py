"""The lateness rule, one per source, shared by the embedded engine's sources and the Spark
driver's admission check (``docs/design/014``).

A stream accepts elements up to ``slack`` ticks out of order.  Having seen timestamp M, every
instant ≤ M − slack − 1 is complete (an automatic heartbeat); an explicit heartbeat(τ) says the
same of τ.  An element stamped at or before a complete instant is *late*: rejected and counted
with its reason, never silently dropped.

>>> import pyarrow as pa
>>> a = Admission("S", slack=1)
>>> b = pa.table({"__ts": pa.array([5, 3, 4, 2], pa.int64()), "__sign": pa.array([1] * 4, pa.int8())})
>>> a.admit(b).column(0).to_pylist(), a.complete_upto(), a.rejected["late"]
([5, 4], 3, 2)
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

import numpy as np
import pyarrow as pa

from sluice.errors import SluiceError
from sluice.runtime.batch import NEG_INF, POS_INF, ts_of
from sluice.runtime.constraints import Constraints
from sluice.runtime.operators.base import Part
from sluice.runtime.stats import SourceStats

MAX_MESSAGES = 100  # per source: the rest are counted only


class Admission(Part):
    """What one source has seen and rejected; ``scale`` is ticks per unit of its timestamps."""

    STATE = ("max_seen", "heartbeat_ts", "accepted", "rejected", "messages")

    def __init__(self, name: str, slack: int = 0, scale: int = 1) -> None:
        self.name = name
        self.slack = slack
        self.scale = scale
        self.max_seen = NEG_INF
        self.heartbeat_ts = NEG_INF
        self.accepted = 0
        self.rejected: Counter[str] = Counter()
        self.messages: list[str] = []

    def reject(self, reason: str, message: str, n: int = 1) -> None:
        self.rejected[reason] += n
        if len(self.messages) < MAX_MESSAGES:
            self.messages.append(message)

    def complete_upto(self) -> int:
        """Every instant ≤ this is complete."""
        auto = self.max_seen - self.slack - 1 if self.max_seen > NEG_INF else NEG_INF
        return max(self.heartbeat_ts, auto)

    def admit(self, batch: pa.Table, where: str = "") -> pa.Table:
        """The elements of a typed batch that are not late, with timestamps in ticks; late ones
        are rejected with their reason and the rest count as seen (for the slack's completion).
        """
        if batch.num_rows == 0:
            return batch
        if self.scale != 1:
            batch = batch.set_column(0, "__ts", pa.array(ts_of(batch) * self.scale))
        ts = ts_of(batch)
        if ts[0] > self.complete_upto() and (len(ts) == 1 or bool((ts[1:] >= ts[:-1]).all())):
            # in time order and after every complete instant: none is late (the usual batch)
            self.max_seen = max(self.max_seen, int(ts[-1]))
            return batch
        late, done = self._late(ts)
        if late.any():
            idx = np.flatnonzero(late)
            for i in idx[:5]:
                self.reject(
                    "late",
                    f"{self.name}{where}: element at ts {int(ts[i])} arrived after instant {int(done[i])} was "
                    f"complete (slack {self.slack})",
                    1,
                )
            if len(idx) > 5:
                self.rejected["late"] += len(idx) - 5
            batch = batch.filter(pa.array(~late))
            ts = ts[~late]
        if batch.num_rows:
            self.max_seen = max(self.max_seen, int(ts.max()))
        return batch

    def _late(self, ts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Which of the timestamps (ticks, in arrival order) are late, and the instant complete
        when each arrived: each against what was complete then — the elements before it in its
        batch count as seen — so the answer does not depend on how the input was batched.
        """
        seen = np.maximum.accumulate(np.concatenate(([self.max_seen], ts[:-1])))
        wide = self.slack >= 2**62  # seen − slack − 1 may not fit 64 bits: Python integers
        lag = seen.astype(object) if wide else np.where(seen > NEG_INF, seen, 0)
        auto = np.where(seen > NEG_INF, lag - (self.slack + 1), NEG_INF)
        done = np.maximum(auto, self.heartbeat_ts)
        return ts <= done, done

    def earliest_kept(self, ts: np.ndarray) -> int | None:
        """The earliest of the timestamps (ticks, in arrival order) that ``admit`` would not
        reject as late, judged now (nothing counted); None: all late.
        """
        if not len(ts):
            return None
        kept = ts[~self._late(ts)[0]]
        return int(kept.min()) if len(kept) else None

    def from_start(self, batch: pa.Table, start: int | None, relation: bool, where: str = "") -> pa.Table:
        """Admitted elements (ticks) against the engine's first instant: once it is fixed, a stream
        element stamped before it is late — the answers begin there, and by definition no derived
        stream has anything before it (design 004, "The first instant").  A relation's change
        before it is kept: it applies at it, in the order of its own stamp (``Source._run``
        raises the stamp when it releases the change, after sorting).
        """
        if start is None or relation or batch.num_rows == 0:
            return batch
        ts = ts_of(batch)
        early = ts < start
        if not early.any():
            return batch
        idx = np.flatnonzero(early)
        for i in idx[:5]:
            self.reject("late", f"{self.name}{where}: element at ts {int(ts[i])} is before the first instant {start}")
        if len(idx) > 5:
            self.rejected["late"] += len(idx) - 5
        return batch.filter(pa.array(~early))

    def constrained(self, checker: Constraints, batch: pa.Table) -> pa.Table:
        """The elements of ``batch`` (in the stream's order) that keep its k-constraints
        (``sluice.runtime.constraints``); the rest rejected with their reason, "constraint".
        """
        kept, why = checker.check(batch)
        for msg in why:
            self.reject("constraint", msg)
        if batch.num_rows - kept.num_rows > len(why):
            self.rejected["constraint"] += batch.num_rows - kept.num_rows - len(why)
        return kept

    def heartbeat(self, ts: int, scaled: bool = False) -> None:
        """Instants up to ``ts`` (in the source's unit; in ticks if ``scaled``) are complete."""
        if isinstance(ts, bool) or not isinstance(ts, int | np.integer):
            raise SluiceError(f"{self.name}: a heartbeat is an integer timestamp, not {ts!r}")
        tick = int(ts) if scaled else (int(ts) + 1) * self.scale - 1
        if not NEG_INF <= tick < POS_INF:
            raise SluiceError(
                f"{self.name}: heartbeat {ts} is outside the timestamps an element may have "
                f"({NEG_INF + 1}..{POS_INF - 1} ticks)"
            )
        self.heartbeat_ts = max(self.heartbeat_ts, tick)

    def close(self, until: int | None = None) -> None:
        """End of input: every instant up to ``until`` (ticks; default: the last seen) completes."""
        last = self.max_seen if until is None else max(until, self.max_seen)
        self.heartbeat(last, scaled=True)

    def statistics(self, buffered: int = 0) -> SourceStats:
        return SourceStats(
            self.name,
            self.accepted,
            sum(self.rejected.values()),
            tuple(sorted(self.rejected.items())),
            self.complete_upto(),
            buffered,
        )


def first_instant(waiting: Iterable[tuple[int, int]], completed: Iterable[int]) -> int | None:
    """The first instant by design 004's rule, for both backends (``QueryRegistry.fix_start``,
    ``Inbox.fix_first``): ``waiting`` holds (earliest waiting stamp, completed instant) for each
    source with elements waiting; once one of them is in an instant its source completed, the
    earliest of them all.  With nothing waiting anywhere, the earliest instant a source completed
    (``completed``: each source's; read only then).  None: nothing can be released yet.
    """
    firsts = list(waiting)
    if firsts:
        return min(lo for lo, _ in firsts) if any(lo <= done for lo, done in firsts) else None
    beats = [done for done in completed if done > NEG_INF]
    return min(beats) if beats else None
