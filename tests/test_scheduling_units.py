"""Scheduling units (#18 item 4): the simulator and the engine build theirs with one function, and a
strategy's granularity is a ``Granularity`` (a string in a subclass is parsed, an unknown one refused).
"""

from __future__ import annotations

from typing import Any

import pytest
from sluice import EmbeddedEngine
from sluice.scheduling.model import Op, Path
from sluice.scheduling.simulator import Simulator, simulate
from sluice.scheduling.strategies import Strategy, make
from sluice.scheduling.strategies.threshold import Mode
from sluice.scheduling.units import Granularity, units_for

QUERIES = [
    "select K, count(*) from S [Range 5] group by K",
    "select * from S [Rows 3] where K > 1",
    "select istream(K) from S [Range 4] where V < 5",
    "select distinct V from S [Range 10]",
    "select S.K, T.V from S [Rows 2], T [Rows 2] where S.K = T.K",
]

# one strategy per granularity (threshold in saving mode: see _engine)
GRANULARITIES = {
    "round-robin": Granularity.OPERATOR,
    "path-capacity": Granularity.PATH,
    "segment": Granularity.SEGMENT,
    "simplified-segment": Granularity.SEGMENT,
    "threshold": Granularity.SEGMENT,
}


def _engine(scheduler: str, sharing: bool, queries: list[str]) -> EmbeddedEngine:
    eng = EmbeddedEngine(scheduler=scheduler, sharing=sharing)
    eng.execute("register stream S (K integer, V integer); register stream T (K integer, V integer)")
    for q in queries:
        eng.register_query(q)
    # fixed estimates, costs doubling along the operators: release capacities fall at every step, so
    # segment scheduling cuts a path into several segments and simplified segment into two
    ops = [o.name for o in eng.operators if o.kind != "Output"]
    eng.set_estimates({n: (1e-6 * 2**k, 0.5) for k, n in enumerate(ops)})
    if scheduler.startswith("threshold"):
        eng.strategy.mode = Mode.SAVING  # as over its memory limit: simplified segments
    return eng


@pytest.mark.parametrize("scheduler", list(GRANULARITIES))
def test_simulator_and_engine_build_the_same_units(scheduler: str) -> None:
    # Without a join no operator lies on two paths (sharing off): the engine keeps every unit, and
    # the simulator, run by the same strategy over the engine's model paths, has the same ones.
    eng = _engine(scheduler, sharing=False, queries=QUERIES[:4])
    engine_units = eng.loop._prepare()
    assert eng.strategy.granularity is GRANULARITIES[scheduler]
    sim = Simulator(eng.strategy.paths, make(scheduler))
    sim_units = sim.units(eng.strategy.granularity)
    assert [(u.path, u.first, u.last, u.name) for u in engine_units] == [
        (u.path, u.first, u.last, u.name) for u in sim_units
    ]
    if GRANULARITIES[scheduler] is not Granularity.OPERATOR:
        assert any(u.first != u.last for u in sim_units)  # not operator units under another name


@pytest.mark.parametrize("scheduler", list(GRANULARITIES))
def test_engine_units_are_the_shared_ones_once(scheduler: str) -> None:
    # With sharing and a join, operators lie on several paths: the engine keeps the first unit of
    # each run of operators (its name) and drops the repeats; nothing else differs.
    eng = _engine(scheduler, sharing=True, queries=QUERIES + QUERIES[:2])
    engine_units = eng.loop._prepare()
    every = units_for(eng.strategy.paths, eng.strategy.granularity, eng.strategy.segments_of)
    first: dict[str, tuple[int, int, int]] = {}
    for u in every:
        first.setdefault(u.name, (u.path, u.first, u.last))
    if eng.strategy.granularity is not Granularity.PATH:  # (two paths into a join differ in their window)
        assert len(first) < len(every)  # the join is on two paths: its unit is there twice
    assert [(u.path, u.first, u.last) for u in engine_units] == list(first.values())
    assert [u.name for u in engine_units] == list(first)


def test_a_granularity_given_as_a_string_is_parsed() -> None:
    class ByPath(Strategy):
        granularity = "path"  # type: ignore[assignment]

    assert ByPath().granularity is Granularity.PATH
    with pytest.raises(ValueError, match=r"strategy Paths: unknown scheduling granularity 'paths'; known: operator, "):

        class Paths(Strategy):
            granularity = "paths"  # type: ignore[assignment]

    with pytest.raises(ValueError, match="known: operator, path, segment"):
        Granularity.parse("Operator")


def test_units_for_every_granularity() -> None:
    p = Path("p", (Op("a", 1.0, 0.5), Op("b", 1.0, 1.0), Op("c", 2.0, 0.1)))
    q = Path("q", (Op("d", 1.0, 0.5),))

    def ranges(g: Granularity) -> list[tuple[int, int, int, str]]:
        return [
            (u.path, u.first, u.last, u.name)
            for u in units_for([p, q], g, lambda path: [(0, 0), (1, 2)][: len(path.ops)])
        ]

    assert ranges(Granularity.OPERATOR) == [(0, 0, 0, "a"), (0, 1, 1, "b"), (0, 2, 2, "c"), (1, 0, 0, "d")]
    assert ranges(Granularity.PATH) == [(0, 0, 2, "a/b/c"), (1, 0, 0, "d")]
    assert ranges(Granularity.SEGMENT) == [(0, 0, 0, "a"), (0, 1, 2, "b/c"), (1, 0, 0, "d")]


def test_the_simulator_refuses_repeated_operator_names() -> None:
    p = Path("p", (Op("a", 1.0, 0.5),))
    with pytest.raises(ValueError, match="operator names must be unique across paths; repeated: a"):
        Simulator([p, Path("q", p.ops)], make("round-robin"))


def test_dynamic_priority_ages_only_units_holding_tuples() -> None:
    """In the engine a unit holding no tuple (time to move on) is as old as the instant its turn
    completes — before anything was released, minus 2^62.  ``+dynamic`` weighs age × memory: such a
    unit has no memory, and its age must not shrink every other unit's to nothing (then the
    static priority alone decided, for the time-only unit)."""
    from dataclasses import dataclass

    from sluice.scheduling.strategies.starvation import DynamicPriority

    @dataclass(frozen=True)
    class U:
        name: str
        path: int = 0
        first: int = 0
        last: int = 0

    a, b, t = U("a"), U("b"), U("t")
    oldest = {a: 0.0, b: 9.0, t: -(2.0**62) + 1}
    memory = {a: 1.0, b: 1.0, t: 0.0}
    prio = {a: 1.0, b: 2.0, t: 3.0}

    class View:
        now = 10.0

        def oldest(self, u: U) -> float:
            return oldest[u]

        def unit_memory(self, u: U) -> float:
            return memory[u]

    class Inner(Strategy):
        name = "fixed"

        def priority(self, unit, view) -> float:  # type: ignore[no-untyped-def]
            return prio[unit]

    # a: age 10, b: age 1 — a's priority × age × memory (1 × 1 × 1) beats b's (2 × 0.1 × 1)
    assert DynamicPriority(Inner()).choose([a, b, t], View()) == a


def test_an_operator_that_waits_reads_only_what_is_older_than_anything_below() -> None:
    """``waits``: an exact engine's join reads its inputs in timestamp order (a timestamp prefix of
    both); Chain §5's rule blocks a join half only while its partner's queue is empty."""
    paths = [
        Path("l", (Op("jl", 1.0, 1.0, partner="jr"),)),
        Path("r", (Op("slow", 1.0, 1.0), Op("jr", 1.0, 1.0, partner="jl"))),
    ]

    def ready(
        waits: dict[str, list[str]] | None, left: list[float], slow: list[float], right: list[float]
    ) -> list[str]:
        sim = Simulator(paths, make("fifo"), whole=True, waits=waits)
        for q, arrivals in zip(
            (sim.queues[0][0], sim.queues[1][0], sim.queues[1][1]), (left, slow, right), strict=True
        ):
            q.extend([a, 1.0, float(k)] for k, a in enumerate(arrivals))
        return sorted(sim.paths[u.path].ops[u.first].name for u in sim.ready(Granularity.OPERATOR))

    ordered = {"jl": ["slow"], "jr": []}
    # only a newer tuple below the partner: Chain §5 waits for it, timestamp order need not
    assert ready(None, [1.0], [2.0], []) == ["slow"]
    assert ready(ordered, [1.0], [2.0], []) == ["jl", "slow"]
    # an older tuple below the partner: timestamp order waits, though the partner's queue is not empty
    assert ready(None, [3.0], [2.0], [1.0]) == ["jl", "jr", "slow"]
    assert ready(ordered, [3.0], [2.0], [1.0]) == ["jr", "slow"]
    # one of the same instant also waits: the join at that instant needs both sides
    assert ready(ordered, [2.0], [2.0], []) == ["slow"]
    with pytest.raises(ValueError, match="waits: no operator named nowhere"):
        Simulator(paths, make("fifo"), waits={"jl": ["nowhere"]})
    for cycle in ({"jl": ["jl"]}, {"jl": ["jr"], "jr": ["jl"]}):  # (they would never run)
        with pytest.raises(ValueError, match="waits: operators wait for each other"):
            Simulator(paths, make("fifo"), waits=cycle)


def test_a_join_that_waits_for_its_instant_runs_end_to_end() -> None:
    """End to end (FIFO, non-preemptive): the fast side's tuple of instant 0 waits at the join only
    until the slow side's tuple of instant 0 has passed (done at 6); Chain §5's rule holds it while
    anything at all is below its empty partner — the slow side's instant-1 tuple too (done at 10).
    Every tuple leaves either way."""
    paths = [
        Path("l", (Op("jl", 1.0, 1.0, partner="jr"),)),
        Path("r", (Op("slow", 4.0, 1.0), Op("jr", 1.0, 1.0, partner="jl"))),
    ]
    arrivals = {"l": [1, 1, 0, 0], "r": [1, 1, 0, 0]}
    chain5 = simulate(paths, arrivals, make("fifo"), 30, preemptive=False, whole=True)
    ordered = simulate(paths, arrivals, make("fifo"), 30, preemptive=False, whole=True, waits={"jl": ["slow"]})

    def done(r: Any, path: int) -> list[float]:
        return sorted(d for _, d, p in r.completions.values() if p == path)

    assert done(ordered, 1) == done(chain5, 1) == [5.0, 11.0]  # the slow side: 0-4 slow, 4-5 join; 6-10, 10-11
    assert done(ordered, 0) == [6.0, 12.0] and done(chain5, 0) == [10.0, 12.0]
    assert ordered.memory[-1] == chain5.memory[-1] == 0


def test_an_operator_on_two_paths_is_one_unit_ranked_by_its_higher_place() -> None:
    """Chain §5: a join "is part of both operator paths and will therefore be part of two operator
    chains" — in the engine one unit (run once, reading both inputs), ranked by the higher of its
    chains' priorities, as the chain that ranks it higher would schedule it."""
    eng = EmbeddedEngine(scheduler="chain", sharing=False)
    eng.execute("register stream S (K integer, V integer); register stream T (K integer, V integer)")
    # a selection below the join on one side only: the two chains differ there
    eng.execute("register view SV as Istream(select K, V from S [Range Unbounded] where V > 3)")
    eng.register_query("select SV.K, T.V from SV [Rows 2], T [Rows 2] where SV.K = T.K")
    ops = [o.name for o in eng.operators if o.kind != "Output"]
    eng.set_estimates(
        {n: (1e-6 if n.startswith("select") else 1e-5, 0.1 if n.startswith("select") else 1.0) for n in ops}
    )
    units = eng.loop._prepare()
    (join,) = [u for u in units if any(o.kind.endswith("Join") for o in u.ops)]
    assert len(join.copies) == 1 and join.copies[0].path != join.path
    strategy = eng.loop.strategy
    places = [strategy.priority(join, eng.loop.view), strategy.priority(join.copies[0], eng.loop.view)]
    assert places[0] != places[1]
    assert strategy.ranked(join, eng.loop.view) == max(places)
    eng.close()


def test_chain_runs_a_join_whose_other_chain_outranks_a_competitor() -> None:
    """End to end: the join's place on one path ranks below a selection of another query, its place
    on the other path above it — with both ready, the engine under Chain runs the join (ranked by
    its higher chain; before, by the first path's only, it ran the selection)."""
    eng = EmbeddedEngine(scheduler="chain", sharing=False)
    eng.execute(
        "register stream S (K integer, V integer); register stream T (K integer, V integer); "
        "register stream U (K integer, V integer)"
    )
    eng.execute("register view SV as Istream(select K, V from S [Range Unbounded] where V > 3)")
    eng.register_query("select SV.K, T.V from SV [Rows 2], T [Rows 2] where SV.K = T.K")
    eng.register_query("select K from U where V > 3")
    ops = [o.name for o in eng.operators if o.kind != "Output"]
    est = {n: (1e-6, 0.1) if n.startswith("select") else (1e-5, 1.0) for n in ops}
    competitor = [n for n in ops if n.startswith("select")][-1]  # the second query's selection
    est[competitor] = (4e-5, 0.1)  # its chain priority lies between the join's two places
    eng.set_estimates(est)
    units = eng.loop._prepare()
    (join,) = [u for u in units if any(o.kind.endswith("Join") for o in u.ops)]
    (other,) = [u for u in units if u.ops[0].name == competitor]
    strategy, view = eng.loop.strategy, eng.loop.view
    places = sorted(strategy.priority(u, view) for u in (join, *join.copies))
    assert places[0] < strategy.priority(other, view) < places[1]
    chosen: list[tuple[list[str], str]] = []
    choose = strategy.choose

    def logged(ready: Any, v: Any) -> Any:
        u = choose(ready, v)
        chosen.append((sorted(r.name for r in ready), u.name))
        return u

    strategy.choose = logged  # type: ignore[method-assign]
    for t in range(1, 4):
        eng.push("S", [(t, 1, 5)])
        eng.push("T", [(t, 1, 7)])
    eng.heartbeat(4)
    for _ in range(50):  # until the join has work
        if join.has_work():
            break
        eng.run(max_steps=1)
    eng.push("U", [(5, 1, 9)])
    eng.heartbeat(6)
    eng.run(max_steps=1)
    ready, ran = chosen[-1]
    assert {join.name, other.name} <= set(ready) and ran == join.name
    eng.close()


def test_units_from_a_checkpoint_before_copies_are_built_anew() -> None:
    """A checkpoint's loop whose units have no ``copies`` (written before them) does not rank by
    the first place silently: its units are built again at the next run."""
    eng = _engine("chain", False, QUERIES)
    units = eng.loop._prepare()
    for u in units:
        object.__delattr__(u, "copies")  # (as a unit unpickled from before the field)
    loop = type(eng.loop).__new__(type(eng.loop))
    loop.__setstate__(eng.loop.__getstate__())
    assert loop._units is None
    now = _engine("chain", False, QUERIES)
    now.loop._prepare()
    kept = type(now.loop).__new__(type(now.loop))
    kept.__setstate__(now.loop.__getstate__())
    assert kept._units is not None  # (units with copies: kept)
    eng.close()
    now.close()
