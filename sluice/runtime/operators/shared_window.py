"""Windows of different sizes over one stream, sharing one buffer (STREAM §3.2, synopsis sharing).

STREAM §3.2 leaves open who manages a synopsis several operators need, how one synopsis can
subsume another of another size, and how readers consuming at different rates cope.  Here: the
shared window operator manages it — one buffer of the stream's elements in arrival order, kept as
long as the largest window holds them (the larger window's contents subsume every smaller one's)
— and each window size has an output port of its own, so every reader consumes at its own rate
from its own queue (``docs/design/020-shared-window-joins.md``).

Port ``p`` carries exactly what ``TimeWindow``/``RowsWindow`` would for its window: each element
inserted at its timestamp, deleted at its leave time (``[Range T]``: ``ts + T + 1``; ``[Now]``:
``ts + 1``; ``[Rows N]``: when the element N after it arrives, at that one's timestamp;
Unbounded: never).  A query registered while the engine runs reads the stream from its first
instant on (as ``sources.Since``): its port starts at the queue's end then.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
from sluice import windows as W
from sluice.runtime.batch import NEG_INF, POS_INF, merge_in_time
from sluice.runtime.operators.base import Operator, OperatorSpec, PortHandle, new_port, port_line
from sluice.runtime.operators.join_buffer import Family, JoinBuffer, extent, family


@dataclass(frozen=True, slots=True)
class SharedWindowSpec(OperatorSpec):
    family: Family  # TIME (Range without a slide, Now, Unbounded) or ROWS (Rows N)


@dataclass
class WindowPort:
    """One window size and first instant (fixed once added; its cursor is the operator's state)."""

    index: int
    window: W.WindowDef
    since: int | None
    queries: set[str]
    handle: PortHandle


@dataclass
class SharedWindow(Operator):
    spec: SharedWindowSpec
    STATE = ("_starts", "_active", "_next_delete", "_last_ts")
    PARTS = ("buffer",)

    def __post_init__(self) -> None:
        super().__post_init__()
        self.stateful = True
        self.buffer = JoinBuffer(self.types)
        self.ports: list[WindowPort] = []
        self._starts: list[int] = []  # per port: the first queue position it sees
        self._active: list[bool] = []
        self._next_delete: list[int] = []  # per port: the absolute index of the next element to leave
        self._last_ts = NEG_INF

    # -- ports ---------------------------------------------------------------------------
    def add_port(self, window: W.WindowDef, since: int | None, start: int, query: str) -> PortHandle:
        for p in self.ports:
            if self._active[p.index] and p.window == window and p.since == since and self._starts[p.index] == start:
                p.queries.add(query)
                self.queries.add(query)
                return p.handle
        assert family(window) == self.spec.family
        index = len(self.ports)
        handle = new_port(self, index)
        handle.insert_only = window.insert_only and self.insert_only
        self.ports.append(WindowPort(index, window, since, {query}, handle))
        self._starts.append(start)
        self._active.append(True)
        self._next_delete.append(self.buffer.end)
        self.queries.add(query)
        return handle

    def add_query(self, index: int, query: str) -> None:
        """One more query reads port ``index`` (the planner reused the port for an equal subplan)."""
        self.ports[index].queries.add(query)
        self.queries.add(query)

    def port_active(self, index: int) -> bool:
        return self._active[index]

    def serves(self, index: int, query: str) -> bool:
        return query in self.ports[index].queries

    def forget_query(self, name: str) -> None:
        for p in self.ports:
            p.queries.discard(name)
            p.handle.queries.discard(name)  # (a handle is in no operator list: the registry cannot)
            if not p.queries:
                self._active[p.index] = False

    def declare(self, inputs: Sequence[Operator]) -> None:
        self.insert_only = inputs[0].insert_only

    def fifo(self) -> bool:
        """Each port deletes elements in the order it inserted them (if its input only inserts)."""
        return self.insert_only

    # -- running -------------------------------------------------------------------------
    def _run(self, budget: int) -> int:
        r = self.readers[0]
        seq0 = r.cursor
        b = r.read(budget)
        buf = self.buffer
        lo = buf.end
        if b.num_rows:
            buf.append(b, seq0, [])
            self._last_ts = max(self._last_ts, int(buf.ts[-1]))
        wm = r.watermark()
        bound = max(self._last_ts, wm)
        for p in self.ports:
            if self._active[p.index]:
                self._emit_port(p, lo, bound)
        self.advance(wm)
        self._retain()
        return b.num_rows

    def _visible(self, p: WindowPort, idx: np.ndarray) -> np.ndarray:
        """Which elements (absolute indices) the port's window ever holds: from its start on."""
        buf = self.buffer
        keep = buf.seq[idx - buf.base] >= self._starts[p.index]
        if p.since is not None:
            keep &= buf.ts[idx - buf.base] >= p.since
        return keep

    def _emit_port(self, p: WindowPort, new_from: int, bound: int) -> None:
        buf = self.buffer
        parts: list[pa.Table] = []
        times: list[np.ndarray] = []
        e = extent(p.window)
        if e < POS_INF:  # deletions due by ``bound`` (all their causes have arrived)
            first = max(self._next_delete[p.index], buf.base)
            if self.spec.family is Family.TIME:
                hi = int(buf.count_upto(bound - e - 1))
                x = np.arange(first, hi, dtype=np.int64)
                leave = buf.ts[x - buf.base] + e + 1
            else:  # [Rows N]: element x leaves when element x + N arrives
                x = np.arange(first, buf.end - e, dtype=np.int64)
                leave = buf.ts[x + e - buf.base]
            if len(x):
                self._next_delete[p.index] = int(x[-1]) + 1
                keep = self._visible(p, x)
                x, leave = x[keep], leave[keep]
                if len(x):
                    parts.append(self._signed(x, -1))
                    times.append(leave)
        if new_from < buf.end:
            x = np.arange(new_from, buf.end, dtype=np.int64)
            x = x[self._visible(p, x)]
            if len(x):
                parts.append(self._signed(x, 1))
                times.append(buf.ts[x - buf.base])
        if not parts:
            return
        if len(parts) == 1:
            self.emit(parts[0].set_column(0, "__ts", pa.array(times[0])), p.index)
        else:  # deletions first within an instant
            self.emit(merge_in_time((times[0], parts[0]), (times[1], parts[1])), p.index)

    def _signed(self, x: np.ndarray, sign: int) -> pa.Table:
        buf = self.buffer
        lo, hi = int(x[0]), int(x[-1]) + 1
        rows = buf.rows(lo, hi)
        if hi - lo != len(x):
            rows = rows.take(pa.array(x - lo))
        if sign < 0:
            rows = rows.set_column(1, "__sign", pa.array(np.full(rows.num_rows, -1, dtype=np.int8)))
        return rows

    def _retain(self) -> None:
        """Keep what some port may still delete (nothing, if every port is unbounded)."""
        bounded = [i for i, p in enumerate(self.ports) if self._active[i] and extent(p.window) < POS_INF]
        cut = min((self._next_delete[i] for i in bounded), default=self.buffer.end)
        self.buffer.drop_before(cut)

    # -- inspection ----------------------------------------------------------------------
    def explain_line(self) -> str:
        bits = [self.kind]
        for p in self.ports:
            if self._active[p.index]:
                bits.append(port_line(self, p.index, p.queries, f"[{p.window.describe()}]", p.since))
        bits.append(f"synopsis {self.state_bytes()} B")
        return " ".join(bits)

    def synopses(self) -> list[Any]:
        return [self.buffer]
