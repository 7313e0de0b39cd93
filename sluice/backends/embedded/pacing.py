"""Steps in pieces under a memory limit: what a step adds must fit the room the limit leaves.

The limit is governed at admission (``sluice.approx.manager``): what a batch will hold once its
run is over.  Within a run a step holds more for a while — a join's pairs in its output queue
until the next operator reads them — and one step of a join could add more than the whole limit
(design 021, "Memory within a run": 16 KB of pairs from a step reading 60 elements under
27.7 KB).  So under a limit a strategy's turn is run in pieces (``Pacer.step``), each reading
what the room left allows at the bytes an element read has been adding (a join's first piece:
at its bound, ``Operator.most_bytes_per_element``), held back to a few times the last piece where
it might not fit; and when a piece leaves the engine past the limit, the operators reading what
waits in queues run before the unit reads more (``Pacer._drain``).  This is the "emit its pairs
in pieces the next operator reads in turn" the session-40 notes asked for, at the level of the
scheduler: it changes when a step's elements are read, never what they produce (the budget of
a turn is already any number ≥ 1).  Design 021, "Steps in pieces", has the rules and figures.

What a join itself holds (its synopses, a shared join's held-back pairs) may still pass the
limit; what is held then is reported (``peak_memory_in_runs``), not hidden.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from sluice.approx.manager import ResourceManager
from sluice.backends.embedded.usage import UsageMeter
from sluice.runtime.operators.base import Operator
from sluice.runtime.units import EngineUnit

RECENT = 8  # pieces of a unit whose bytes per element read bound the next piece
IDLE = 64  # pieces in a row a turn may read nothing in (a shared join's owed pairing)
LEAST = 16  # elements a measured piece reads at the least: each piece repeats a turn's fixed work
FIRST = 4  # elements of a turn's first piece where the room is tight
GROWTH = 4  # how much larger a piece may be than the one before, where pieces are held back
TIGHT = 0.5  # the share of the limit left below which the room is tight
DRAIN_BUDGET = 1 << 30  # a drained operator reads all it can (what waits for it is already held)


class Pacer:
    """Runs a unit's turn in pieces that fit the memory limit's room (module docstring)."""

    _stepping = False  # inside ``step`` (an output's subscriber may run the engine); (a class
    # default: a pacer checkpointed before it existed restores without it — a review)
    _enabled = True  # (likewise: a pacer checkpointed before ``enabled`` was a property)

    def __init__(self, meter: UsageMeter, limits: ResourceManager) -> None:
        self.meter = meter
        self.limits = limits
        self._per: dict[tuple[str, ...], deque[float]] = {}  # unit (its operators) → bytes per element read
        self.enabled = True
        self.drained = False  # whether the last step ran operators outside its unit (the loop asks anew)
        self.pieces = 0  # pieces run, turns cut short, operators drained: what pacing did
        self.cut = 0
        self.drains = 0

    @property
    def enabled(self) -> bool:
        """False: each turn is run whole and measured after it, and a shared join queues its
        pairing as unpaced (``ExecContext.paced``) — as before pacing: a benchmark's comparison,
        ``benchmarks/limit_in_runs.py``.  Queries registered later read the context as it is then.
        """
        return self._enabled

    @enabled.setter
    def enabled(self, on: bool) -> None:
        self._enabled = self.meter.registry.ctx.paced = on

    def forget(self) -> None:
        """Another state was restored (a Spark key's): its units' bytes per element are not these."""
        self._per.clear()

    def __getstate__(self) -> dict[str, Any]:
        return dict(self.__dict__, _stepping=False)

    def step(self, u: EngineUnit, budget: int) -> int:
        """Run ``u`` for up to ``budget`` elements, in pieces; returns the elements read."""
        if not self.enabled or self._stepping:  # (a run nested in a step, by a subscriber: whole
            got = u.run(budget)  # turns — paced, each delivery nested another run, to Python's
            self._measure(u.ops)  # recursion limit: a review)
            return got
        self._stepping = True
        try:
            return self._pieces(u, budget)
        finally:
            self._stepping = False

    def _pieces(self, u: EngineUnit, budget: int) -> int:
        key = tuple(op.name for op in u.ops)
        seen = self._per.get(key)
        if seen is None:
            seen = self._per[key] = deque(maxlen=RECENT)
        limit, meter = self.limits.limit, self.meter
        # A unit that pairs (a join) bounds what an element adds by all the partners it could
        # meet (``Operator.most_bytes_per_element``): a turn's first piece is sized by that, and
        # where that bound does not show a piece fits, pieces grow at most ``GROWTH`` times from
        # one to the next, each sized by what the last one measured — what a backlog adds once
        # it meets its partner's first batch is not what the elements before it added.
        pairs = any(len(op.inputs()) > 1 for op in u.ops)
        most = sum(op.most_bytes_per_element() for op in u.ops) if pairs else 0.0
        done, cap, last, idle = 0, FIRST, None, 0
        grown, read = 0, 0  # bytes added since the last piece that read, and how many it read
        while done < budget:
            before = meter.last_total
            room, left = limit - before, budget - done
            per = last if last is not None else max(seen, default=None)
            if done == 0 and most > 0:
                per = max(per or 0.0, most)
            if per is None:  # nothing known of this unit yet: a one-element probe
                piece = 1
            elif per <= 0:  # its elements have not added to what is held
                piece = left
            else:
                piece = max(min(LEAST, left), min(left, int(room // per)))
            if done and pairs and piece > cap:  # (what it could meet grows as it reads; asked
                most = sum(op.most_bytes_per_element() for op in u.ops)  # only where it may cut)
            if (pairs and piece * most > room) or (room < limit * TIGHT and (per is None or per > 0)):
                # pairing beyond what surely fits, or little room: pieces grow by at most GROWTH
                # (one's bytes are not the next's)
                piece = min(piece, cap)
            got = u.run(piece)
            after = self._measure(u.ops)
            self.pieces += 1
            done += got
            if got > 0:  # (a shared join's pairs of what it read come in the pieces after)
                cap = max(FIRST, got) * GROWTH  # (the next may read GROWTH times what this one did)
                grown, read = after - before, got
                last = grown / read
                seen.append(last)
            elif read:  # what the elements it last read paired into, counted to them
                grown += after - before
                last = seen[-1] = max(seen[-1], grown / read)
            if after >= limit:  # what it emitted goes on before it reads more
                self._drain(u)
                if meter.last_total >= limit:
                    self.cut += 0 < got and done < budget
                    break
            # read all it could; a shared join working off the pairing it owes reads nothing but
            # goes on in the turn while that changes what is held (at most IDLE such pieces)
            idle = idle + 1 if got == 0 else 0
            if got < piece and not (got == 0 and after != before and idle < IDLE and u.has_work()):
                break
        return done

    def _measure(self, ops: tuple[Operator, ...]) -> int:
        after = self.meter.after_step(ops)
        self.limits.note_peak(after, in_run=True)
        return after

    def _drain(self, u: EngineUnit) -> None:
        """Over the limit: the operators reading what waits in queues — ``u``'s output first,
        then the fullest queues' — and below them to the queries' outputs, each run while it
        lowers what the engine holds (a projection, an aggregate, an Istream, the output itself:
        the pairs a join emitted leave; not a join, whose turn pairs what it reads), until the
        engine is under the limit: "the next operator reads in turn".  Any order of turns gives
        the same answers; the loop asks every unit anew after this.
        """
        self.drained = True  # (set first: a run nested in it asks every unit)
        meter = self.meter
        mine = {id(op) for op in u.ops}
        queued = [(sum(q.nbytes for q in op.outputs), op) for op in meter.registry.all_operators()]
        fullest = [op for b, op in sorted(queued, key=lambda t: -t[0]) if b > 0 and id(op) not in mine]
        todo = [r for op in [*u.ops, *fullest] for r in meter.readers(op)]  # (its own too: a path's)
        seen: set[int] = set()
        limit = self.limits.limit
        while todo and self.meter.last_total >= limit:
            op = todo.pop(0)
            if id(op) in seen or len(op.inputs()) != 1 or not op.has_work():  # (not a join: it pairs)
                continue
            seen.add(id(op))
            before = self.meter.last_total
            op.run(DRAIN_BUDGET)
            self.drains += 1
            if self._measure((op,)) <= before:  # it freed what it read: on below it
                todo[:0] = meter.readers(op)
