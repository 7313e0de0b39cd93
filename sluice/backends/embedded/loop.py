"""The embedded engine's scheduler loop: which unit of work runs next, and for how long.

Sources release what is due and outputs take what is ready at every step (the root consumes at
once, Jiang §2.1); the strategy picks among the other units — operators, segments or paths
(Chain §4, Jiang §3) — from per-operator (cost, selectivity) measured over recent runs or given
(``set_estimates``).  Costs are measured with the clock of the engine's ``ExecContext``
(``time.perf_counter`` unless a test injects another).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from sluice.backends.embedded.pacing import Pacer
from sluice.backends.embedded.registry import QueryRegistry
from sluice.errors import SluiceError
from sluice.runtime.operators.base import OperatorFailure
from sluice.runtime.units import EngineUnit, EngineView, OnlineStats, make_units, model_paths, operator_paths
from sluice.scheduling.model import unit_capacity
from sluice.scheduling.strategies import Strategy, make
from sluice.scheduling.units import Granularity, SchedulingView

REPREPARE_EVERY = 200  # decisions between priority recomputations


class SchedulerLoop:
    """Runs the registry's operators under a scheduling strategy until none has work."""

    # time moved through operators that only move it (``_move_time``) at once; False leaves those
    # turns to the strategy, as before (the experiments compare the two: docs/design/026)
    move_time_at_once: bool = True

    def __init__(self, registry: QueryRegistry, scheduler: str | Strategy, budget: int) -> None:
        self.registry = registry
        self.budget = budget
        self.steps = 0  # decisions made so far
        self.stats = OnlineStats()
        self.view: SchedulingView[EngineUnit] = EngineView(registry.sources, registry.queues)
        self.reprepare_every = REPREPARE_EVERY
        self._units: list[EngineUnit] | None = None
        self._built_for = -1  # the registry's version the units were built for
        self._granularity: Granularity | None = None
        self._since_prepare = 0
        self._given = False  # whether set_estimates covers every operator (then no periodic re-prepare)
        self._affects: list[list[int]] = []  # per unit: the units whose work running it may change
        self._after_source: dict[str, list[int]] = {}  # the same for each source (by name)
        self._entered = 0  # calls of run() so far (to notice one nested in another)
        # per unit of ``_units``, whether it has work: kept from one run() to the next (a caller
        # stepping the engine one decision at a time, as the experiments do, asked every unit at
        # every call: with 256 units that was 0.4 ms a decision) and checked whole before a run ends
        self._work: list[bool] = []
        self._work_for: list[EngineUnit] | None = None
        self._position: dict[int, int] = {}
        self._dirty: set[int] = set()  # units whose answer may have changed since asked
        self._outputs: tuple[int, list[Any]] = (-1, [])  # (registry version, its output operators)
        # per unit of ``_units``: the tuples one time unit of the strategies' model gives it
        # (``_per_time_unit``); a time unit is ``time_unit_seconds`` when set, else the time of
        # ``budget`` tuples at the units' mean cost per tuple
        self._scale: list[float] = []
        self._time_unit: float | None = None
        self.last: EngineUnit | None = None  # the unit this run's last decision ran (None: none yet)
        self.moved: dict[int, Any] = {}  # operators the last run() ran only to move time on (by id)
        self.set_scheduler(scheduler)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        # keyed by ids: asked anew
        state.update(_work=[], _work_for=None, _position={}, _dirty=set(), last=None, moved={})
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        # units built anew from a checkpoint of before ``_scale`` (format 15) or ``EngineUnit.copies``
        if "_scale" not in state:
            self.__dict__.update(_scale=[], _time_unit=None, _units=None)
        elif any(not hasattr(u, "copies") for u in state.get("_units") or ()):
            self.__dict__.update(_units=None)

    @property
    def time_unit_seconds(self) -> float | None:
        """Seconds in one time unit of the strategies' model (a quantum is time: Chain §4.3); None:
        the time of ``budget`` tuples at the units' mean cost per tuple.
        """
        return self._time_unit

    @time_unit_seconds.setter
    def time_unit_seconds(self, seconds: float | None) -> None:
        if seconds is not None and not (math.isfinite(seconds) and seconds > 0):
            raise SluiceError(f"a time unit must be a positive number of seconds, not {seconds}")
        self._time_unit = seconds
        self._units = None  # (the units' tuples per time unit change)

    def set_scheduler(self, scheduler: str | Strategy, **options: Any) -> None:
        """A name from ``sluice.scheduling.strategies.STRATEGIES`` (with modifiers) or a strategy."""
        if isinstance(scheduler, str):
            try:
                scheduler = make(scheduler, budget=self.budget, **options)
            except (ValueError, TypeError) as e:
                raise SluiceError(str(e)) from None
        self.strategy = scheduler
        self._units = None

    def set_estimates(self, estimates: dict[str, tuple[float, float]]) -> None:
        for name, (cost, sel) in estimates.items():
            if not (math.isfinite(cost) and math.isfinite(sel) and cost >= 0 and sel >= 0):
                raise SluiceError(f"estimate of {name!r}: cost and selectivity must be finite and ≥ 0: {cost}, {sel}")
        self.stats.static.update(estimates)
        self._units = None

    def forget_measurements(self) -> None:
        """Operators' counters went back or forth (a restored snapshot): measure again."""
        self.stats = OnlineStats(self.stats.window, static=self.stats.static)
        self._units = None

    def _prepare(self) -> list[EngineUnit]:
        reg = self.registry
        inner = [u for u in reg.operators if u.kind != "Output"]
        paths = operator_paths(list(reg.sources.values()), reg.operators)
        self.stats.observe(inner)
        model = model_paths(paths, self.stats)
        self.strategy.prepare(model)
        granularity = self.strategy.granularity
        units = make_units(paths, model, granularity, self.strategy.segments_of)
        covered = {id(o) for u in units for o in u.ops}
        # operators on no path to an output (none today) still get run
        units += [EngineUnit((o,), -1, 0, 0, o.name) for o in inner if id(o) not in covered]
        self._units = units
        self._scale = _per_time_unit(units, model, self.budget, self._time_unit)
        # every operator's (cost, selectivity) given: re-preparing would compute the same priorities
        self._given = bool(inner) and all(o.name in self.stats.static for o in inner)
        self._index_units(units, list(reg.sources.values()))
        self._built_for = reg.version
        self._granularity = granularity
        self._since_prepare = 0
        return units

    def _index_units(self, units: list[EngineUnit], sources: list[Any]) -> None:
        """Which units' ``has_work`` running a unit (or a source) can change: those sharing one of
        its operators, and those reading a queue it writes.  Nothing else changes between two
        steps of one ``run``, so the loop asks only these again (with hundreds of operators the
        scan of every unit at every step was most of a small batch's cost: issue #11).
        """
        holders: dict[int, set[int]] = {}  # operator → the units holding it
        readers: dict[int, set[int]] = {}  # queue → the units reading it
        for i, u in enumerate(units):
            for op in u.ops:
                holders.setdefault(id(op), set()).add(i)
                for r in op.readers:
                    readers.setdefault(id(r.queue), set()).add(i)

        def touched(op: Any) -> set[int]:
            return set().union(*(readers.get(id(q), set()) for q in op.outputs))

        self._affects = [sorted(set().union(*(holders[id(op)] | touched(op) for op in u.ops))) for u in units]
        self._after_source = {s.name: sorted(touched(s)) for s in sources}

    def _stale(self) -> bool:
        return (
            self._units is None
            or self._built_for != self.registry.version
            or (self._since_prepare >= self.reprepare_every and not self._given)
            or self._granularity != self.strategy.granularity
        )

    def _current_outputs(self) -> list[Any]:
        """The registry's output operators, looked up again only when its DAG changed."""
        if self._outputs[0] != self.registry.version:
            self._outputs = (self.registry.version, self.registry.outputs())
        return self._outputs[1]

    def _ask_all(self, units: list[EngineUnit]) -> None:
        self._work = [u.has_work() for u in units]
        self._position = {id(u): i for i, u in enumerate(units)}  # (not kept: ids change when pickled)
        self._work_for = units
        self._dirty.clear()

    def _move_time(self, units: list[EngineUnit], asked: Sequence[int]) -> bool:
        """Move time on, at once, through every operator of the ``asked`` units whose turn would
        only do that (``Operator.moves_time_quietly``: σ, π, a ``[Rows N]`` window … with nothing
        to read), and on through the units that lets move — not a strategy's decision.  False if
        an operator failed (the registry has dropped its queries: the units are stale).

        Time is a heartbeat's element (STREAM §3), and a join processes its inputs in strict
        timestamp order (Chain §5): an element waits at a join until the other input's time has
        passed it.  Left to the strategy, the turn moving that time through a selection with
        nothing to read was ranked like any work — under path capacity behind every path of
        higher capacity — and the other side's elements waited at the join for it (measured on
        the Jiang §5 plan: 1.4 of the 1.7 elements a join held, docs/design/026).  Such a turn
        reads no tuple and emits none: in the papers' models it is no work at all (Chain §5: a
        join blocks only while the other queue is empty and tuples may still reach it).
        """
        if not self.move_time_at_once:
            return True
        moved = self.moved
        todo = [i for i in asked if self._work[i]]
        while todo:
            i = todo.pop()
            u = units[i]
            went = False
            for op in u.ops:  # bottom-up: time moved through one may let the next move
                if op.moves_time_quietly() and op.has_work():
                    try:
                        op.run(self.budget)
                    except OperatorFailure as f:  # (reads no row: not expected, handled as any turn's)
                        self.registry.fail(f)
                        return False
                    moved[id(op)] = op
                    went = True
            if went:
                for j in self._affects[i]:
                    self._work[j] = units[j].has_work()
                    if j != i and self._work[j]:
                        todo.append(j)
        return True

    def run(
        self,
        max_steps: int | None = None,
        pacer: Pacer | None = None,
    ) -> int:
        """Run until no operator has work; returns the number of scheduling decisions.
        ``pacer`` (under a memory limit) runs each decision's unit in pieces that fit the limit,
        the readers of what it emitted between them (``sluice.backends.embedded.pacing``).
        """
        reg = self.registry
        reg.fix_start()
        sources = list(reg.sources.values())
        outputs = self._current_outputs()
        steps = 0
        self._entered += 1
        entered = self._entered
        asked_all = False  # whether every unit was asked in this call (the kept answers may be stale)
        self.last = None
        self.moved = {}  # operators this call ran only to move time on (``_move_time``), by id
        if pacer is not None and pacer.drained:  # (nested in a drain: queues changed under the kept answers)
            self._work_for = None
        dirty = self._dirty
        while max_steps is None or steps < max_steps:
            if entered != self._entered:  # a run nested in a callback (a push from a subscriber)
                self._work_for, entered = None, self._entered  # changed what any unit has to do: ask all
                outputs = self._current_outputs()  # (it may have registered a query)
            reg.fix_start()  # (a push from a subscriber's callback may make the first element releasable)
            for s in sources:
                if s.has_work():
                    s.run(self.budget)
                    dirty.update(self._after_source.get(s.name, ()))
            if self._stale() or self._units is None:
                self._prepare()
            units = self._units
            assert units is not None
            if self._work_for is not units:  # (re)built: here, by a run nested in a callback, or asked anew
                self._ask_all(units)
                asked_all = True
                asked: list[int] | range = range(len(units))
            else:
                for i in dirty:
                    self._work[i] = units[i].has_work()
                asked = sorted(dirty)
                dirty.clear()
            if not self._move_time(units, asked):
                outputs = self._current_outputs()  # (the failed query's output is gone)
                continue
            work, affects = self._work, self._affects
            ready = [u for u, w in zip(units, work, strict=True) if w]
            if ready:
                u = self.strategy.choose(ready, self.view)
                # One time unit of the strategies' model is the time of `budget` tuples at the units'
                # mean cost per tuple: a quantum (round-robin's, a `+limited` discipline's) is time
                # (Chain §4.3, Jiang §3.2), so a unit gets as many tuples of it as its own cost
                # allows, and is charged the fraction of a time unit it used.
                pos = self._position[id(u)]
                budget = self.strategy.budget(u)
                per_unit = float(budget)  # tuples one time unit gives the unit
                scale = self._scale[pos]  # (0: no cost to go by)
                if scale > 0:  # seconds given: its own; else relative to the engine's budget
                    per_unit = scale if self._time_unit else budget * scale / self.budget
                quantum = self.strategy.quantum(u)
                if quantum is not None:
                    budget = max(1, round(per_unit * quantum))
                dirty.update(affects[pos])
                try:
                    done = u.run(budget) if pacer is None else pacer.step(u, budget)
                except OperatorFailure as f:
                    reg.fail(f)
                    outputs = self._current_outputs()  # (the failed query's output is gone)
                    continue
                self.last = u
                if pacer is not None and pacer.drained:  # (it ran operators of other units too)
                    pacer.drained = False
                    self._work_for = None
                self.strategy.charge(u, max(done, 1) / per_unit, self.view)
                self._since_prepare += 1
                steps += 1
            done_out = False
            for o in outputs:
                if o.has_work():
                    try:
                        o.run(self.budget)
                    except OperatorFailure as f:
                        reg.fail(f)
                        outputs = self._current_outputs()
                        break
                    done_out = True
            if not ready and not done_out and not any(s.has_work() for s in sources):
                if not asked_all:  # answers kept from an earlier call: ask every unit before stopping
                    self._work_for = None
                    continue
                break
        self.steps += steps
        return steps


def _per_time_unit(units: list[EngineUnit], model: list[Any], budget: int, seconds: float | None) -> list[float]:
    """Per unit, the tuples one time unit gives it: ``seconds`` over its cost per input tuple (its
    operators' costs, each weighted by what reaches it), or without ``seconds`` ``budget`` times the
    units' mean cost over its own; 0 for a unit on no path or of unbounded cost (its turn is then the
    strategy's budget).  So a time quantum is the same time for every unit, not the same tuples (an operator
    below one of selectivity above 1 would otherwise receive more a turn than it takes).
    """
    caps = []  # tuples per second (Jiang's processing capacity, eq. 2.2; the model's costs are > 0)
    for u in units:
        cap = unit_capacity(model[u.path], u.first, u.last) if 0 <= u.path < len(model) else 0.0
        caps.append(cap if math.isfinite(cap) and cap > 0 else 0.0)
    known = [1 / c for c in caps if c > 0]
    mean = sum(known) / len(known) if known else 0.0
    unit = seconds if seconds else budget * mean
    return [unit * c for c in caps]
