"""The Chain experiments on the embedded engine, beside the simulator's prediction for the same input.

Each operator of an experiment's chart becomes a CQL stage — a view selecting from the one before
it, ``WHERE burn(Ai, w) < c`` — whose selectivity is the chart's (``Ai`` uniform, ``c`` set from
it) and whose cost is real Python work per row (``burn`` runs ``w`` rounds of a linear congruence;
``w`` is calibrated so a row costs the chart's time).  The arrivals are the simulator's own, one
slot of them per ``SLOT`` seconds of virtual time, played into the engine on a virtual clock
(as ``virtual_time.py`` does for the shared joins): push what is due, let the engine make one
scheduling decision (``run(max_steps=1)``), advance the clock by that decision's CPU time.
Measured per run: the total queued elements at each slot (peak and time-mean) and each output
tuple's latency (virtual time of its delivery minus its arrival slot).

The prediction: the simulator on the engine's *measured* path — every operator the plan has
(the stages, the windows and pass-through Istreams the views compile to, the output), each with
its measured seconds per tuple and selectivity — over the same arrivals, under the same strategy.
The JSON reports both and the ratio engine / model, and why they differ where they do by more than 20%.
"""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path as FsPath
from typing import Any

import numpy as np
import pyarrow as pa

from sluice.backends.embedded import EmbeddedEngine
from sluice.experiments.on_engine_claims import cost_to_match, engine_agreement, ratio
from sluice.experiments.scheduling import CHAIN_SETUPS, STRATEGIES, Progress, _arrivals
from sluice.runtime.operators.aggregate import _WholeInstants
from sluice.runtime.operators.streams import IDstream, Output, Rstream, _Completing
from sluice.scheduling.model import Op, Path
from sluice.scheduling.simulator import simulate
from sluice.scheduling.strategies import make
from sluice.scheduling.units import units_for

SLOT = 0.005  # seconds of CPU time per time unit of the chart
DOMAIN = 1_000_000  # the attributes' values: uniform in [0, DOMAIN)
JOIN_KEYS = 10  # the window join's key: K modulo this
KEYS = 100  # the join key K: uniform in [0, KEYS); a stored relation holds every key
ON_ENGINE = tuple(CHAIN_SETUPS)
DEFAULT_BUDGET = 65536  # the engine's own: an operator takes (up to) its whole queue per turn
BUDGET = 1  # one tuple per operator turn: the model's unit of scheduling (Chain §3)


def burn(a: int, w: int) -> int:
    """``w`` rounds of integer work, then ``a`` unchanged: a selection's cost, per row."""
    x = a
    for _ in range(w):
        x = (x * 1103515245 + 12345) & 0x7FFFFFFF
    return a


def calibrate(rounds: int = 200_000) -> float:
    """CPU seconds per round of ``burn``."""
    t = time.thread_time()
    burn(1, rounds)
    return (time.thread_time() - t) / rounds


WIDTH = 4  # attributes A0..A3 on every stream (one per operator of the longest chart), and K


def _stages(
    eng: EmbeddedEngine,
    src: str,
    ops: list[tuple[int, Op]],
    prefix: str,
    per_round: float,
    name: str,
    width: int = WIDTH,
    view: bool = False,
    slot: float | None = None,
) -> Any:
    """CQL stages over ``src``, one per (attribute index, operator); the last is query ``name``
    (with ``view``, a view of that name, whose name is returned).

    A stage of selectivity ≤ 1 selects (``burn(Ai, w) < c``); one above 1 (a join with a stored
    relation, §6.2) joins on ``K`` with a relation holding ``round(s)`` rows per key and burns in
    its projection (``w`` per output row, so per input tuple the chart's time).
    """
    names = ", ".join(f"A{i}" for i in range(width)) + ", K"
    slot = SLOT if slot is None else slot  # (read at the call: a test may set SLOT)
    handle: Any = None
    for k, (i, op) in enumerate(ops):
        if op.sel > 1:
            copies = round(op.sel)
            rel = f"{prefix}rel{k}"
            eng.execute(f"REGISTER RELATION {rel} (K integer, X integer)")
            # before slot 0 (``play`` processes them first): the relation's own insertions are not the
            # join's work per stream tuple, nor part of its selectivity
            eng.push(rel, [(-1, "+", key, c) for key in range(KEYS) for c in range(copies)])
            rounds = max(1, round(op.cost * slot / per_round / copies))
            items = ", ".join(f"burn({src}.A{j}, {rounds}) AS A{j}" if j == i else f"{src}.A{j}" for j in range(width))
            body = f"Rstream(SELECT {items}, {src}.K FROM {src} [Now], {rel} WHERE {src}.K = {rel}.K)"
        else:
            rounds = max(1, round(op.cost * slot / per_round))
            cut = int(op.sel * DOMAIN)
            body = f"Istream(SELECT {names} FROM {src} [Range Unbounded] WHERE burn(A{i}, {rounds}) < {cut})"
        if k < len(ops) - 1 or view:
            src = name if k == len(ops) - 1 else f"{prefix}s{k}"
            eng.execute(f"REGISTER VIEW {src} AS {body}")
            handle = src
        else:
            handle = eng.register_query(body, name=name, retain=0)
    return handle  # the query's handle, or with ``view`` the last view's name


def engine(
    strategy: str | Any,
    budget: int | None,
    width: int = WIDTH,
    streams: Sequence[str] = (),
    sharing: bool = True,
    start: int = -1,
) -> EmbeddedEngine:
    """An engine timing operators on this thread's CPU clock, with ``burn`` and the streams
    (``start`` < 0: instants before slot 0 — for the stored relations' rows, and ``play``'s warm-up rows).
    """
    eng = EmbeddedEngine(
        scheduler=strategy,
        time_unit="millisecond",
        start=start,
        budget=budget or DEFAULT_BUDGET,
        clock=time.thread_time,
        sharing=sharing,
    )
    eng.register_function("burn", burn, "integer", ["integer", "integer"])
    cols = ", ".join(f"A{i} integer" for i in range(width)) + ", K integer"
    for st in streams:
        eng.execute(f"REGISTER STREAM {st} ({cols})")
    return eng


def build(
    name: str, strategy: str | Any, per_round: float, budget: int | None = None
) -> tuple[EmbeddedEngine, list[Any]]:
    """Experiment ``name``'s queries as CQL stages on one engine; returns it and the queries' handles."""
    setup = CHAIN_SETUPS[name]
    paths = setup.paths()
    eng = engine(strategy, budget, streams=list(dict.fromkeys(setup.stream_of(p) for p in paths)))
    handles = []
    joined = [p for p in paths if any(o.partner for o in p.ops)]
    if joined:  # §6.3: σ1 on R, the window join of R and S, then σ2, σ3 (Chain §5's two halves)
        r, _ = joined
        j = next(k for k, o in enumerate(r.ops) if o.partner)
        pre, join, post = r.ops[:j], r.ops[j], r.ops[j + 1 :]
        left = "R"
        if pre:
            left = "jr"
            eng.execute(
                f"REGISTER VIEW jr AS Istream(SELECT {', '.join(f'A{i}' for i in range(WIDTH))}, K FROM R "
                f"[Range Unbounded] WHERE burn(A0, {max(1, round(pre[0].cost * SLOT / per_round))}) "
                f"< {int(pre[0].sel * DOMAIN)})"
            )
        # each arrival meets join.sel of the other side's window on average; a small key domain, so the
        # windows fill within a few dozen tuples and the join's selectivity is steady (a window of
        # join.sel × KEYS rows took half a run to fill, its selectivity rising all along)
        rows = round(join.sel * JOIN_KEYS)
        rounds = max(1, round(join.cost * SLOT / per_round / join.sel))
        items = ", ".join(f"burn({left}.A{i}, {rounds}) AS A{i}" if i == j else f"{left}.A{i}" for i in range(WIDTH))
        eng.execute(
            f"REGISTER VIEW jn AS Istream(SELECT {items}, {left}.K FROM {left} [Rows {rows}], S [Rows {rows}] "
            f"WHERE {left}.K % {JOIN_KEYS} = S.K % {JOIN_KEYS})"
        )
        handles.append(_stages(eng, "jn", [(j + 1 + k, o) for k, o in enumerate(post)], "jp", per_round, "join"))
    for k, p in enumerate(x for x in paths if x not in joined):
        handles.append(_stages(eng, setup.stream_of(p), list(enumerate(p.ops)), f"q{k}", per_round, f"q{k}"))
    return eng, handles


def engine_paths(eng: EmbeddedEngine, handles: list[Any]) -> list[tuple[str, list[Any]]]:
    """Every path of the engine's plan from a stream source to a query's output: (stream, operators
    from the source up, the source itself excluded).
    """
    reg = eng.registry
    sources = {id(s): n for n, s in reg.sources.items()}
    out: list[tuple[str, list[Any]]] = []

    def down(op: Any, above: list[Any]) -> None:
        if id(op) in sources:
            if not reg.sources[sources[id(op)]].relation:
                out.append((sources[id(op)], list(reversed(above))))
            return
        for q in op.inputs():
            down(reg.producer(q), [*above, op])

    for h in handles:
        assert h.output is not None
        down(h.output, [])
    return out


def orders(op: Any) -> bool:
    """Whether ``op`` keeps CQL's order by waiting for time, as the model's ``waits`` says: it reads
    whole instants, of several inputs a timestamp prefix at a time (a join) or of one (an aggregate,
    DISTINCT), or holds an instant until it is complete (an Istream/Dstream that is neither a
    pass-through nor pure — over a relation that deletes, or feeding a reader that needs canonical
    order — Rstream, a relation's output).  Not modelled: a window with a slide, which holds an
    insertion until its slide ends (none in these experiments' plans).
    """
    if len(op.inputs()) >= 2 or isinstance(op, _WholeInstants):
        return True
    if isinstance(op, IDstream):
        return not (op.spec.passthrough or op.spec.pure)
    if isinstance(op, Output):
        return not op.spec.is_stream
    return isinstance(op, Rstream)


def waits_for(paths: Sequence[tuple[str, Sequence[Any]]]) -> dict[str, list[str]]:
    """``simulate(waits=…)`` for the model of ``paths`` (operators named ``name@path``): each copy
    of an operator that ``orders`` waits for every operator below any copy of it — what may still
    bring it a tuple of an instant it has begun.
    """
    where: dict[int, list[tuple[int, int]]] = {}
    for k, (_, chain) in enumerate(paths):
        for i, o in enumerate(chain):
            where.setdefault(id(o), []).append((k, i))
    out: dict[str, list[str]] = {}
    for k, (_, chain) in enumerate(paths):
        for o in chain:
            if orders(o):
                below = {f"{paths[k2][1][j].name}@{k2}" for k2, i2 in where[id(o)] for j in range(i2)}
                out[f"{o.name}@{k}"] = sorted(below)
    return out


def play(
    name: str | Callable[[Any, float, int | None], tuple[EmbeddedEngine, list[Any]]],
    arrivals: dict[str, list[int]],
    strategy: str | Any,
    per_round: float,
    seed: int,
    estimates: dict[str, tuple[float, float]] | None = None,
    budget: int | None = BUDGET,
    width: int = WIDTH,
    slot: float | None = None,
    warm: Callable[[np.random.Generator, int], dict[int, int]] | None = None,
    warm_rows: int = 0,
) -> dict[str, Any]:
    """One run on the virtual clock (``arrivals`` per stream) of a Chain experiment's queries (by
    name) or of what ``name(strategy, per_round, budget)`` builds; ``estimates``: static (seconds
    per tuple, selectivity) per operator; ``budget``: tuples an operator may take per turn (None:
    the engine's default, its whole queue).

    ``warm``: before slot 0, ``warm_rows`` rows per stream, one per instant from ``-warm_rows``
    (the engine must start there), with the attributes ``warm(rng, n)`` fixes (index: value; the
    rest random, as the arrivals') — rows that pass the leaf selections and fill the joins'
    windows, so the run starts in the joins' steady state.  They are processed to the end before
    slot 0 and nothing of them is measured: costs, selectivities, memory and latency count from
    slot 0.
    """
    slot = SLOT if slot is None else slot  # (read at the call: a test may set SLOT)
    eng, handles = (
        build(name, strategy, per_round, budget) if isinstance(name, str) else name(strategy, per_round, budget)
    )
    if estimates:
        eng.set_estimates(estimates)
    # one time unit of the strategies is one slot of the chart: a quantum (round-robin's, Chain
    # §4.3's "fixed time quantum") gives each operator the tuples its cost fits in it
    eng.loop.time_unit_seconds = slot
    rng = np.random.default_rng(seed)
    stamps = {st: np.repeat(np.arange(len(a)), a) for st, a in arrivals.items()}
    data = {}
    for st, ts in stamps.items():
        cols = {"__ts": pa.array(ts, pa.int64()), "__sign": pa.array(np.ones(len(ts), np.int8))}
        for i in range(width):
            cols[f"c{i}"] = pa.array(rng.integers(0, DOMAIN, len(ts)), pa.int64())
        cols[f"c{width}"] = pa.array(rng.integers(0, KEYS, len(ts)), pa.int64())
        data[st] = pa.table(cols)
    out: list[pa.Table] = []
    for h in handles:
        h.subscribe_arrow(out.append)
    if warm is not None and warm_rows > 0:
        for st in stamps:
            cols = {"__ts": pa.array(np.arange(-warm_rows, 0), pa.int64()),
                    "__sign": pa.array(np.ones(warm_rows, np.int8))}  # fmt: skip
            given = warm(rng, warm_rows)
            for i in range(width + 1):
                vals = rng.integers(0, KEYS if i == width else DOMAIN, warm_rows)
                if i in given:
                    vals = np.full(warm_rows, given[i])
                cols[f"c{i}"] = pa.array(vals, pa.int64())
            eng.push_batch(st, pa.table(cols))
    eng.heartbeat(-1)  # the warm-up rows and the stored relations' rows, processed before slot 0
    eng.run()
    out.clear()
    choices = _log_choices(eng)  # every decision from slot 0: (the ready units' names, the chosen one's)
    ops = list(eng.operators)
    queue_of = {q.name: q for q in eng.registry.queues()}
    before = {id(o): o.statistics() for o in ops}  # (the warm-up's share, not measured)
    enqueued = {st: queue_of[st].enqueued for st in arrivals}
    paths = engine_paths(eng, handles)
    copies, past = plan_copies(paths)
    # the model has a copy of an operator on every path it is on; the engine, where one operator
    # serves several paths' same tuples (shared, before any join), one reader: each element waiting
    # there counts once per copy, as the model counts it (past a join each copy holds its own side's)
    weight = {id(r): len(copies.get(id(o), [0])) if id(o) not in past else 1 for o in ops for r in o.readers}
    readers = {st: sum(weight[id(r)] for o in ops for r in o.readers if r.queue is queue_of[st]) for st in arrivals}
    slots = max(len(a) for a in arrivals.values())
    memory: list[int] = []
    queue_bytes: list[float] = []  # the queues' bytes at each slot (what the engine's strategies read)
    busy_at: list[float] = []  # time units worked before each slot's arrivals entered
    turns_at: list[int] = []  # scheduling decisions made before each slot's arrivals entered
    waiting = [0] * len(ops)  # per operator: elements waiting at its inputs, summed over the slots
    spread_n, spread_s, spread_q = [0] * len(ops), [0.0] * len(ops), [0.0] * len(ops)  # turns' time per tuple
    turns = 0
    lat: list[float] = []
    at: list[float] = []  # when each of them was delivered
    pos = dict.fromkeys(arrivals, 0)
    v, held, busy, unattributed = 0.0, 0, 0.0, 0.0
    turn_cost = [0.0] * len(ops)
    index = {id(o): k for k, o in enumerate(ops)}
    seen = [o.busy_seconds for o in ops]  # each operator's busy time when it last ran
    seen_in = [o.tuples_in for o in ops]
    seen_out = [o.tuples_out for o in ops]
    # per operator: what each tuple it read passed on, in order (a turn that read n and wrote m: the
    # m spread evenly over its n); and what it wrote in turns that read nothing (a window's
    # expirations: then its writes are not per tuple read). The model takes them for selections
    # only: an operator holding its input (Istream, Rstream, a join) writes for earlier tuples
    emitted: list[list[int]] = [[] for _ in ops]
    unread_out = [0] * len(ops)
    idle = 0.0  # the cost of turns in which an operator read no tuple (time moving on: heartbeats)
    outputs = [k for k, o in enumerate(ops) if o.kind == "Output"]  # (they run at every step)
    readers_of = [r for o in ops for r in o.readers]
    # an operator that holds what it read until its instant is complete (an Istream over deletions):
    # those elements wait as the unread ones do — the model's ``waits`` keeps them in its queue
    holders = [(o, weight[id(o.readers[0])]) for o in ops if isinstance(o, _Completing) and o.readers]
    # per turn that ran: (slots pushed before it, what it cost, its tuples read per operator, the part
    # of its cost those operators' reads were charged), and the held elements before each turn apart
    # from the arrivals (what the turns so far had done to the queues): ``replay``'s input
    trace: list[tuple[int, float, dict[int, int], float]] = []
    done_before: list[int] = []
    while True:
        # the slots the clock has reached: their arrivals enter; a slot passed during a turn sees the
        # queues as they were when the turn began (the turn's batch is still in service) plus arrivals
        while len(memory) <= min(int(v), slots - 1):
            k = len(memory)
            for st, ts in stamps.items():
                j = int(np.searchsorted(ts, k, side="right"))
                if j > pos[st]:
                    eng.push_batch(st, data[st].slice(pos[st], j - pos[st]))
                    held += (j - pos[st]) * readers[st]
                    pos[st] = j
            eng.heartbeat(k)
            memory.append(held)
            for j, o in enumerate(ops):
                waiting[j] += sum(r.available() for r in o.readers) + (o.holding() if isinstance(o, _Completing) else 0)
            queue_bytes.append(eng.loop.view.memory())
            busy_at.append(busy)
            turns_at.append(turns)
        # what each operator has still to read (once per path's copy, as the model counts), and pushed
        # rows the sources have not yet released, once per operator (copy) reading them
        held = sum(r.available() * weight[id(r)] for r in readers_of) + sum(o.holding() * w for o, w in holders)
        held += sum((pos[st] - queue_of[st].enqueued + enqueued[st]) * readers[st] for st in arrivals)
        pushed = sum(pos[st] * readers[st] for st in arrivals)
        t0 = time.thread_time()
        steps = eng.run(max_steps=1)
        turns += steps
        cost = (time.thread_time() - t0) / slot
        # only the unit the decision ran and the outputs can have worked (the others' time is unchanged)
        ran = outputs + ([index[id(o)] for o in eng.loop.last.ops] if eng.loop.last is not None else [])
        ran = list(dict.fromkeys(ran + [index[k] for k in eng.loop.moved]))  # (time moved on, outside the strategy)
        spent, read = {}, {}
        for k in ran:
            now, now_in = ops[k].busy_seconds, ops[k].tuples_in
            spent[k], seen[k] = now - seen[k], now
            read[k], seen_in[k] = now_in - seen_in[k], now_in
            wrote, seen_out[k] = ops[k].tuples_out - seen_out[k], ops[k].tuples_out
            if read[k]:  # spread evenly over the turn's tuples (which of them passed is not recorded)
                emitted[k].extend((i + 1) * wrote // read[k] - i * wrote // read[k] for i in range(read[k]))
            else:
                unread_out[k] += wrote
        total = sum(spent.values())
        charged = 0.0
        for k, x in spent.items():  # the turn's whole cost (scheduling too), by each operator's share
            if total > 0:
                # an operator that read nothing only moved time on: a fixed cost per slot, not per tuple
                share = cost * x / total
                if read[k]:
                    turn_cost[k] += share
                    charged += share
                    per = share / read[k]  # this turn's time per tuple (the model's is one fixed cost)
                    spread_n[k] += 1
                    spread_s[k] += per
                    spread_q[k] += per * per
                else:
                    idle += share
        if total <= 0:
            unattributed += cost  # a turn in which no operator did work (time moving on, scheduling)
        busy += cost
        if not steps and not eng.loop.moved:  # (a call that only moved time on is a turn of its own)
            if len(memory) >= slots:
                break
            v = float(len(memory))  # idle: jump to the next slot
            continue
        trace.append((len(memory), cost, {k: n for k, n in read.items() if n}, charged))
        done_before.append(held - pushed)
        v += cost
        for t in out:  # delivered during the turn: they leave when it ends
            lat.extend((v - np.asarray(t.column("__ts"), dtype=float)).tolist())
            at.extend([v] * t.num_rows)
        out.clear()
    st_of = {id(o): (_since(before[id(o)], o.statistics()), c) for o, c in zip(ops, turn_cost, strict=True)}
    # per operator: its turns' cost per tuple in (what the model charges) and its selectivity; the
    # model's processor has what the fixed work leaves of each slot, so its costs are divided by that
    fixed = (idle + unattributed) / max(slots, 1)
    left = max(1.0 - fixed, 0.05)
    model: list[Path] = []
    passes: dict[str, list[int]] = {}  # the model's operator: what each tuple passed in the engine
    halved: set[str] = set()  # operators the engine shares between paths of the same tuples
    for k, (stream, chain) in enumerate(paths):
        opz = []
        for o in chain:
            j = index[id(o)]
            # past a join, the copies of an operator on several paths see different tuples (each its side's)
            alone = id(o) not in past or len(copies[id(o)]) == 1
            if o.kind == "Select" and not unread_out[j] and emitted[j] and alone:
                passes[f"{o.name}@{k}"] = emitted[j]
            ost, charged = st_of[id(o)]
            shared = copies[id(o)]
            partner = None
            if len(o.inputs()) == 2 and len(shared) == 2:  # a join of two streams: the other side's half
                partner = f"{o.name}@{shared[1] if shared[0] == k else shared[0]}"
            cost = max(charged / ost.tuples_in / left, 1e-9) if ost.tuples_in else 1e-9
            if id(o) not in past and len(shared) > 1:  # one operator serving several paths' same tuples: its work once
                cost /= len(shared)
                halved.add(o.name)
            opz.append(Op(f"{o.name}@{k}", cost, ost.selectivity if ost.tuples_in else 1.0, partner))
        model.append(Path(f"{stream}#{k}", tuple(opz)))
    own = sum(ost.seconds for ost, _ in st_of.values()) / slot
    # threshold's switches, those during the warm-up too (its mode at slot 0 is the last of them;
    # its running mean memory carries the warm-up as well)
    switches = [(float(t), str(m)) for t, m in getattr(eng.loop.strategy, "switches", [])]
    # every arrival up to each slot, once per operator (copy) reading it
    upto = np.arange(slots)
    arrived = sum((np.searchsorted(ts, upto, side="right") * readers[st] for st, ts in stamps.items()),
                  np.zeros(slots, np.int64)).tolist()  # fmt: skip
    done_before.append(held - pushed)  # and after the last turn
    reads = [0] * len(ops)
    for _, _, rd, _ in trace:
        for k, n in rd.items():
            reads[k] += n
    mean = [c / n if n else 0.0 for c, n in zip(turn_cost, reads, strict=True)]
    eng.close()
    return {
        "memory": memory,
        "trace": trace,
        "op_names": [o.name for o in ops],
        # the held elements apart from the arrivals before each turn, and after the last
        "done_before": done_before,
        # the engine's own turns, each tuple charged its operator's mean cost (the model's, before the
        # fixed work is spread over the slots): what the engine's queue would have been
        "replay_memory": replay(
            trace,
            done_before,
            arrived,
            [c - ch + sum(n * mean[k] for k, n in rd.items()) for _, c, rd, ch in trace],
        ),  # fmt: skip
        # the same turns at the model's own costs: each tuple at its operator's mean cost on what the
        # fixed work leaves of a slot, the turns that read nothing (heartbeats) free — where the
        # heartbeats' work fell made no difference if this is the replay's queue
        "replay_spread_memory": replay(
            trace,
            done_before,
            arrived,
            [sum(n * mean[k] for k, n in rd.items()) / left for _, _, rd, _ in trace],
        ),  # fmt: skip
        "arrived": arrived,
        "choices": choices,
        "queue_bytes": queue_bytes,
        "busy_at": busy_at,
        "latency": lat,
        "delivered_at": at,
        "paths": model,
        "waits": waits_for(paths),
        "passes": passes,
        "shared": sorted(halved),
        "streams": [stream for stream, _ in paths],
        "outputs": len(lat),
        "operator_share_of_turns": round(own / busy, 3) if busy else None,
        "idle_work_per_slot": unattributed / max(slots, 1),
        # time units per slot spent in turns that read no tuple (the heartbeats moving time through
        # every operator), apart from the operators' costs per tuple
        "fixed_work_per_slot": fixed,
        "busy": busy,  # time units the engine worked, over the run's slots
        "tuples_in": {o.name: st.tuples_in for o, (st, _) in zip(ops, st_of.values(), strict=True)},  # from slot 0
        "charged": {o.name: c for o, c in zip(ops, turn_cost, strict=True)},  # time units of its turns, from slot 0
        "turns_at": turns_at,
        "turns": turns,  # scheduling decisions (operator or unit turns) over the run
        "switches": switches,  # a switching strategy's (engine time, mode it switched to)
        # per operator with 10 turns or more: the coefficient of variation of its turns' time per tuple
        "cost_cv": {
            o.name: round(math.sqrt(max(q / n - (m / n) ** 2, 0.0)) / (m / n), 3)
            for o, n, m, q in zip(ops, spread_n, spread_s, spread_q, strict=True)
            if n >= 10 and m > 0
        },
        # per operator: the elements waiting at its inputs, time-mean over the slots (the largest first)
        "held_by": dict(
            sorted(
                ((o.name, round(w / max(slots, 1), 3)) for o, w in zip(ops, waiting, strict=True) if w),
                key=lambda x: -x[1],
            )
        ),  # fmt: skip
    }


def _log_choices(eng: EmbeddedEngine) -> list[tuple[tuple[str, ...], str]]:
    """From now on, each decision of ``eng``'s strategy: the ready units' names and the chosen one's."""
    log: list[tuple[tuple[str, ...], str]] = []
    strategy = eng.loop.strategy
    choose = strategy.choose

    def logged(ready: Sequence[Any], view: Any) -> Any:
        u = choose(ready, view)
        log.append((tuple(r.name for r in ready), u.name))
        return u

    strategy.choose = logged  # type: ignore[method-assign]
    return log


def otherwise(paths: Sequence[Path], choices: Sequence[tuple[tuple[str, ...], str]], strategy: Any) -> dict[str, Any]:
    """How often ``strategy`` (static priorities) prepared on the model's ``paths`` — the engine's
    operators at their costs measured in the run — ranks another ready unit strictly above the one
    the engine chose (the engine's strategy ranks by its own estimates).  Units are matched by their
    operators' names (a model copy of a shared operator: the highest of its copies' priorities);
    decisions with a unit the model does not have (a segment cut elsewhere) are not compared.
    """
    # (the engine's paths end below the outputs, which run at every step: so its segments are cut)
    paths = [dataclasses.replace(p, ops=tuple(o for o in p.ops if not o.name.startswith("output:"))) for p in paths]
    strategy.prepare(paths)
    prio: dict[str, float] = {}
    for u in units_for(paths, strategy.granularity, strategy.segments_of):
        name = "/".join(o.name.rsplit("@", 1)[0] for o in paths[u.path].ops[u.first : u.last + 1])
        p = round(strategy.priority(u, None), 12)
        prio[name] = max(prio.get(name, p), p)
    compared = differ = 0
    for ready, chosen in choices:
        if len(ready) < 2 or any(r not in prio for r in ready):
            continue
        compared += 1
        differ += prio[chosen] < max(prio[r] for r in ready)
    return {"decisions": len(choices), "compared": compared, "otherwise": differ,
            "share": round(differ / compared, 3) if compared else None}  # fmt: skip


def plan_copies(paths: list[tuple[str, list[Any]]]) -> tuple[dict[int, list[int]], set[int]]:
    """Per operator (by id) the paths it is on, and the operators at or past a two-input operator
    (a join) on some path — past it, copies on several paths see different tuples.
    """
    copies: dict[int, list[int]] = {}
    past: set[int] = set()
    for k, (_, chain) in enumerate(paths):
        joined = False
        for o in chain:
            copies.setdefault(id(o), []).append(k)
            joined = joined or len(o.inputs()) == 2
            if joined:
                past.add(id(o))
    return copies, past


def replay(
    trace: Sequence[tuple[int, float, Mapping[int, int], float]],
    done_before: Sequence[float],
    arrived: Sequence[float],
    costs: Sequence[float] | None = None,
) -> list[float]:
    """The engine's held elements at each slot had its turns (``play``'s trace: the same operators,
    the same tuples, in the same order) taken ``costs`` each (None: what each took).

    Turn j starts when the one before it ends, and not before the slot whose arrivals the engine
    had pushed when it began; a slot sees the queues as they were before the turn in service then
    (``done_before[j]``: what the turns before it had done) plus every arrival up to it — as ``play``
    counts.  With the measured costs it is the engine's own count; with each tuple at its operator's
    mean cost it separates what the turns' varying costs did from what the engine's decisions did.
    """
    ends, end = [], 0.0
    given = costs if costs is not None else [t[1] for t in trace]
    for (slots_in, _, _, _), c in zip(trace, given, strict=True):
        end = max(end, slots_in - 1) + c
        ends.append(end)
    done = np.searchsorted(np.asarray(ends), np.arange(len(arrived)), side="left")  # turns ended before each slot
    return [done_before[j] + a for j, a in zip(done.tolist(), arrived, strict=True)]


def _since(a: Any, b: Any) -> Any:
    """An operator's statistics ``b`` less what it had done by ``a`` (the warm-up's share)."""
    return dataclasses.replace(
        b, tuples_in=b.tuples_in - a.tuples_in, tuples_out=b.tuples_out - a.tuples_out, seconds=b.seconds - a.seconds
    )


def run(out: FsPath, slots: int = 2000, seed: int = 1, progress: bool = True) -> dict[str, Any]:
    per_round = calibrate()
    bar = Progress(len(ON_ENGINE) * len(STRATEGIES), "chain-on-engine") if progress else None
    results: dict[str, Any] = {}
    batch_rows: dict[str, Any] = {}  # Chain with whole-queue turns (the engine's default budget)
    for name in ON_ENGINE:
        setup = CHAIN_SETUPS[name]
        arr = _arrivals(setup.paths(), slots, "dec-pkt", seed, setup.streams)
        arrivals = {setup.stream_of(p): [int(round(a)) for a in arr[p.name]] for p in setup.paths()}
        # static estimates from a preliminary pass over the data, as Chain §6 did
        pre = play(name, arrivals, "fifo", per_round, seed)
        estimates = {o.name.rsplit("@", 1)[0]: (o.cost * SLOT, o.sel) for p in pre["paths"] for o in p.ops}
        rows = {}
        for s in STRATEGIES:
            e = play(name, arrivals, s, per_round, seed, estimates)
            by_name = {st.lower(): a for st, a in arrivals.items()}  # the catalog folds names' case
            model_arrivals = {p.name: by_name[st.lower()] for p, st in zip(e["paths"], e["streams"], strict=True)}
            eng_lat = statistics.fmean(e["latency"]) if e["latency"] else 0.0
            row: dict[str, Any] = {
                "engine": {
                    "peak_queue": max(e["memory"]),
                    "mean_queue": round(statistics.fmean(e["memory"]), 3),
                    "mean_latency": round(eng_lat, 3),
                },
                "outputs": e["outputs"],
                "shared_operators": e["shared"],
                "operator_share_of_turns": e["operator_share_of_turns"],
                "held_by": dict(list(e["held_by"].items())[:3]),  # the operators most is waiting at
                "cost_cv": {k: e["cost_cv"].get(k) for k in list(e["held_by"])[:3]},
                "busy_per_slot": round(e["busy"] / slots, 3),
                "measured_paths": {
                    p.name: [[o.name, round(o.cost, 4), round(o.sel, 4)] for o in p.ops] for p in e["paths"]
                },
            }
            # the model as the engine runs (whole tuples, non-preemptive, each join and holding
            # Istream waiting for its instant: ``waits_for``); the same given what each operator's
            # tuples passed in the engine (the data's pattern, where the model passes every 1/s-th);
            # Chain's fluid model
            for model, engine_like, passes in (
                ("model", True, None),
                ("passes_model", True, e["passes"]),
                ("fluid_model", False, None),
            ):
                sim = simulate(
                    e["paths"], model_arrivals, make(s), slots, preemptive=not engine_like, whole=engine_like,
                    passes=passes, waits=e["waits"] if engine_like else None,
                )  # fmt: skip
                sim_lat = sim.output_latency() or 0.0
                row[model] = {
                    "peak_queue": round(sim.peak, 3),
                    "mean_queue": round(statistics.fmean(sim.memory), 3),
                    "mean_latency": round(sim_lat, 3),
                }
                row[f"ratio_to_{model}"] = {
                    k: ratio(row["engine"][k], row[model][k]) for k in ("peak_queue", "mean_queue", "mean_latency")
                }
            # the engine's own turns, each tuple at its operator's mean cost: what the turns' varying
            # costs did, apart from the decisions
            row["replay"] = {"mean_queue": round(statistics.fmean(e["replay_memory"]), 3)}
            row["engine_over_replay"] = ratio(row["engine"]["mean_queue"], row["replay"]["mean_queue"])
            row["cost_scale_to_match"] = cost_to_match(
                e["paths"], model_arrivals, s, slots, row["engine"]["mean_queue"]
            )
            row["passes_cost_scale_to_match"] = cost_to_match(
                e["paths"], model_arrivals, s, slots, row["engine"]["mean_queue"], e["passes"]
            )
            rows[s] = row
            if bar:
                bar.step(f"{name}/{s}")
        whole = play(name, arrivals, "chain", per_round, seed, estimates, budget=None)
        batch_rows[name] = {
            "peak_queue": max(whole["memory"]),
            "mean_queue": round(statistics.fmean(whole["memory"]), 3),
        }
        results[name] = rows
    summary: dict[str, Any] = {
        "experiment": "chain-on-engine",
        "slot_seconds": SLOT,
        "burn_round_seconds": per_round,
        "slots": slots,
        "input": "dec-pkt",
        "budget": BUDGET,
        "results": results,
        "chain_whole_queue_turns": batch_rows,
    }
    summary["agreement"] = [c for name, rows in results.items() for c in engine_agreement(name, rows, batch_rows[name])]
    out.mkdir(parents=True, exist_ok=True)
    (out / "chain-on-engine.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary
