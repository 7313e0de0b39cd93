"""The embedded engine's scheduler loop: which unit of work runs next, and for how long.

Sources release what is due and outputs take what is ready at every step (the root consumes at
once, Jiang §2.1); the strategy picks among the other units — operators, segments or paths
(Chain §4, Jiang §3) — from per-operator (cost, selectivity) measured over recent runs or given
(``set_estimates``).  Costs are measured with the clock of the engine's ``ExecContext``
(``time.perf_counter`` unless a test injects another).
"""

from __future__ import annotations

from typing import Any

from sluice.backends.embedded.registry import QueryRegistry
from sluice.errors import SluiceError
from sluice.runtime.operators.base import OperatorFailure
from sluice.runtime.units import EngineUnit, EngineView, OnlineStats, make_units, model_paths, operator_paths
from sluice.scheduling.strategies import Strategy, make
from sluice.scheduling.units import Granularity, SchedulingView

REPREPARE_EVERY = 200  # decisions between priority recomputations


class SchedulerLoop:
    """Runs the registry's operators under a scheduling strategy until none has work."""

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
        self.set_scheduler(scheduler)

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
        self._built_for = reg.version
        self._granularity = granularity
        self._since_prepare = 0
        return units

    def _stale(self) -> bool:
        return (
            self._units is None
            or self._built_for != self.registry.version
            or self._since_prepare >= self.reprepare_every
            or self._granularity != self.strategy.granularity
        )

    def run(self, max_steps: int | None = None) -> int:
        """Run until no operator has work; returns the number of scheduling decisions."""
        reg = self.registry
        reg.fix_start()
        sources = list(reg.sources.values())
        outputs = reg.outputs()
        steps = 0
        while max_steps is None or steps < max_steps:
            for s in sources:
                if s.has_work():
                    s.run(self.budget)
            units = self._prepare() if self._stale() else self._units
            assert units is not None
            ready = [u for u in units if u.has_work()]
            if ready:
                u = self.strategy.choose(ready, self.view)
                # One time unit of the strategies' model is one turn of `budget` tuples; a quantum
                # (round-robin's, a `+limited` discipline's) scales the turn, and the unit is
                # charged the fraction of a time unit it used.
                budget = self.strategy.budget(u)
                quantum = self.strategy.quantum(u)
                if quantum is not None:
                    budget = max(1, round(budget * quantum))
                try:
                    done = u.run(budget)
                except OperatorFailure as f:
                    reg.fail(f)
                    continue
                self.strategy.charge(u, max(done, 1) / self.strategy.budget(u), self.view)
                self._since_prepare += 1
                steps += 1
            done_out = False
            for o in outputs:
                if o.has_work():
                    try:
                        o.run(self.budget)
                    except OperatorFailure as f:
                        reg.fail(f)
                        outputs = reg.outputs()
                        break
                    done_out = True
            if not ready and not done_out and not any(s.has_work() for s in sources):
                break
        self.steps += steps
        return steps
