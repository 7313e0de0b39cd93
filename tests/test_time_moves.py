"""Time moved on at once through operators whose turn would only move it (``SchedulerLoop._move_time``,
docs/design/026): no strategy decision is spent on such a turn, no such turn emits anything, and
the answers are the same whether the loop moves time at once or leaves those turns to the strategy.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from sluice import EmbeddedEngine
from sluice.backends.embedded.loop import SchedulerLoop
from sluice.runtime.operators.base import Operator

# a join whose inputs pass selections, Istream views and [Rows] windows (the shape of the Jiang §5
# plan on the engine) beside queries whose operators do emit on time alone
JOIN = (
    "Istream(select R.A, S.B from R [Rows 2], S [Rows 2] where R.K = S.K and R.A > 0 and S.B < 90)",
    "select K, count(*) from R [Range 3] group by K",
    "Rstream(select * from S [Now] where B > 10)",
    "Istream(select A from R [Range 2] where A > 5)",
    "select K, count(*) from R [Range Unbounded] where A > 3 group by K",
    "Dstream(select K from S [Rows 1])",
)


def _engine(scheduler: str, at_once: bool, queries: tuple[str, ...] = JOIN, budget: int = 1) -> EmbeddedEngine:
    eng = EmbeddedEngine(
        scheduler=scheduler, budget=budget, sharing=False
    )  # (a plain Join, as in Jiang §5 on the engine)
    eng.loop.move_time_at_once = at_once
    eng.execute("register stream R (K integer, A integer); register stream S (K integer, B integer)")
    for q in queries:
        eng.register_query(q)
    return eng


def _feed(eng: EmbeddedEngine, instants: int = 30) -> Iterator[int]:
    """Rows on R at most instants, on S at few (its time moves on through heartbeats alone), then
    each instant's heartbeat; yields after each instant's input so the caller can step the engine.
    """
    for t in range(instants):
        if t % 4 != 3:  # (instants with no row at all: time alone moves through the join too)
            eng.push("R", [(t, t % 3, (7 * t) % 11)])
        if t % 5 == 0:
            eng.push("S", [(t, t % 3, (13 * t) % 100)])
        eng.heartbeat(t)
        yield t


def _answers(eng: EmbeddedEngine) -> list[Any]:
    return [sorted(map(str, eng.results(q))) for q in sorted(eng.queries)]


def _decisions(eng: EmbeddedEngine) -> list[bool]:
    """Step the engine one decision at a time; per decision, whether its unit read any tuple."""
    read_any = []
    for _ in _feed(eng):
        while True:
            before = {id(o): o.tuples_in for o in eng.operators}
            if not eng.run(max_steps=1):
                break
            unit = eng.loop.last
            assert unit is not None
            read_any.append(any(o.tuples_in > before[id(o)] for o in unit.ops))
    return read_any


@pytest.mark.parametrize("scheduler", ["chain", "fifo", "round-robin", "greedy"])
def test_no_decision_is_spent_only_moving_time_through_quiet_operators(scheduler: str) -> None:
    # (operator units: a path or segment unit holding S's operators also holds the join, which
    # reads R's elements in the same turn — there the difference is when S's time moves, not how
    # many decisions are made)
    at_once = _decisions(_engine(scheduler, at_once=True, queries=JOIN[:1]))
    left = _decisions(_engine(scheduler, at_once=False, queries=JOIN[:1]))
    # left to the strategy, turns that only moved time through σ, Istream and [Rows] were decisions
    assert not all(left)
    assert all(at_once) and len(at_once) < len(left)


@contextmanager
def _watch_quiet_turns(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[str, int]]]:
    """Every time-only turn ``_move_time`` ran: (operator, rows it emitted)."""
    seen: list[tuple[str, int]] = []
    inside = [False]
    move, run = SchedulerLoop._move_time, Operator.run

    def moving(self: SchedulerLoop, *a: Any) -> bool:
        inside[0] = True
        try:
            return move(self, *a)
        finally:
            inside[0] = False

    def running(self: Operator, budget: int) -> int:
        out = self.tuples_out
        n = run(self, budget)
        if inside[0]:
            seen.append((self.kind, self.tuples_out - out))
        return n

    monkeypatch.setattr(SchedulerLoop, "_move_time", moving)
    monkeypatch.setattr(Operator, "run", running)
    yield seen


@pytest.mark.parametrize("scheduler", ["chain", "path-capacity", "fifo"])
@pytest.mark.parametrize("budget", [1, 1000])
def test_a_turn_run_to_move_time_emits_nothing_and_answers_are_unchanged(
    scheduler: str, budget: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    answers = []
    for at_once in (True, False):
        eng = _engine(scheduler, at_once, budget=budget)
        with _watch_quiet_turns(monkeypatch) as seen:
            for _ in _feed(eng):
                eng.run()
            eng.close()
        if at_once:
            kinds = {k for k, _ in seen}
            assert {"Select", "Project", "IDstream", "RowsWindow", "TimeWindow", "Join"} <= kinds, kinds
            assert all(n == 0 for _, n in seen), [s for s in seen if s[1]]
        else:
            assert not seen
        answers.append(_answers(eng))
    assert all(answers[0]) and answers[0] == answers[1]  # (every query answered something)
