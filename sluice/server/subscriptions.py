"""Subscribers to a query's output, each with a bounded backlog.

The engine thread hands every output batch to :meth:`Subscription.offer` (it never waits for a
client); each subscriber's sender takes batches off its own backlog at the client's pace.  A
subscriber that falls behind by more than ``limit`` elements loses the oldest ones — counted, and
told to it in a ``gap`` event (how many, which instants) before the next batch, so nothing is
dropped silently and a slow client can neither stall the others nor grow the server's memory
(a backlog holds at most ``limit`` elements besides the newest batch).
It can read the current answer again with ``GET /queries/NAME/results``.

Every element has a position in its query's output (0, 1, …; ``delivered`` counts them), and each
SSE ``elements`` event's ``id`` is ``EPOCH:P``: the query's run (new at each registration, and at
each engine start where positions start again) and the position after its last element.  A client
that reconnects with ``Last-Event-ID`` (a browser's ``EventSource`` does it by itself) or
``?after=`` first gets what it missed from the query's kept output (``--retain``) — a ``gap`` event
for any part it cannot have, a count of None for output of another run — then the live output:
nothing lost unless a gap says so.

Elements travel as ``(ts, JSON text)``: each output element is encoded once, and the same text is
shared by every subscriber's backlog.

>>> s = Subscription("q", limit=2)
>>> s.offer([(1, '{"ts": 1}')]); s.offer([(2, '{"ts": 2}'), (3, '{"ts": 3}')])
>>> s.take_json()
([{'ts': 2}, {'ts': 3}], {'dropped': 1, 'from_ts': 1, 'to_ts': 1})
"""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
from collections import deque
from typing import Any

Element = tuple[int, str]  # (its timestamp, its JSON text)

_ids = itertools.count(1)


class Subscription:
    def __init__(
        self,
        query: str,
        limit: int,
        loop: asyncio.AbstractEventLoop | None = None,
        position: int = 0,
        epoch: str = "",
    ) -> None:
        self.id = next(_ids)
        self.query = query
        self.limit = limit
        self.loop = loop
        self.backlog: deque[list[Element]] = deque()
        self.held = 0  # elements in the backlog
        self.peak = 0  # the most it ever held
        self.offered = 0  # elements the query produced since it subscribed
        self.delivered = 0  # taken by its sender (written to the client)
        self.dropped = 0  # in all (offered = delivered + dropped + held)
        self._gap: dict[str, Any] | None = None  # dropped since the client last took
        self.position = position  # in the query's output, after the last element offered
        self.taken = position  # after the last element taken (an SSE event's id: ``epoch:taken``)
        self.epoch = epoch  # the query's run its positions count (``ServerSession.epoch``)
        self.closed = False
        self._lock = threading.Lock()
        self.ready = asyncio.Event() if loop is not None else None

    def offer(self, elements: list[Element]) -> None:
        """A batch of output (called by the engine's thread; never blocks on the client)."""
        if not elements:
            return
        with self._lock:
            self.backlog.append(elements)
            self.held += len(elements)
            self.offered += len(elements)
            self.position += len(elements)
            # over the limit the oldest go first, counted; the newest batch is kept whole (it is the
            # engine's output batch, one list shared by every subscriber: it costs this one nothing)
            while self.held > self.limit and len(self.backlog) > 1:
                old = self.backlog[0]
                cut = min(len(old), self.held - self.limit)
                gap = self._gap or {"dropped": 0, "from_ts": old[0][0], "to_ts": old[0][0]}
                gap["dropped"] += cut
                gap["to_ts"] = old[cut - 1][0]
                self._gap = gap
                self.dropped += cut
                self.held -= cut
                if cut == len(old):
                    self.backlog.popleft()
                else:
                    self.backlog[0] = old[cut:]
            self.peak = max(self.peak, self.held)
        self._wake()

    def missed(self, count: int | None, reason: str) -> None:
        """Elements before this subscriber's first that it asked for and cannot have (``count``
        None: unknown), told to it in a ``gap`` event before the first batch.
        """
        with self._lock:
            self._gap = {"dropped": count, "from_ts": None, "to_ts": None, "reason": reason}
        self._wake()  # told now, not with the next output (an idle query may have none)

    @property
    def gap(self) -> dict[str, Any] | None:
        return self._gap

    def close(self) -> None:
        """The query went away (or the server stops): the sender ends after the backlog."""
        self.closed = True
        self._wake()

    def _wake(self) -> None:
        if self.loop is not None and self.ready is not None:
            try:
                self.loop.call_soon_threadsafe(self.ready.set)
            except RuntimeError:  # the loop is closed: the client is gone
                pass

    def take(self) -> tuple[list[Element], dict[str, Any] | None]:
        """Everything held now, and the gap before it (None if nothing was dropped)."""
        with self._lock:
            out = [e for b in self.backlog for e in b]
            gap, self._gap = self._gap, None
            self.backlog.clear()
            self.held = 0
            self.taken = self.position
            self.delivered += len(out)
            if self.ready is not None:
                self.ready.clear()
            return out, gap

    def take_json(self) -> tuple[list[Any], dict[str, Any] | None]:
        """As :meth:`take`, the elements decoded (in-process readers and tests)."""
        items, gap = self.take()
        return [json.loads(text) for _, text in items], gap

    @staticmethod
    def event_data(items: list[Element]) -> str:
        """The elements as one JSON array (an SSE ``elements`` event's data), without re-encoding."""
        return "[" + ", ".join(text for _, text in items) + "]"

    def statistics(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "query": self.query,
            "held": self.held,
            "peak": self.peak,
            "limit": self.limit,
            "offered": self.offered,
            "delivered": self.delivered,
            "dropped": self.dropped,
        }
