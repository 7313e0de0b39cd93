"""What the engine holds *within* runs under a memory limit, with steps paced and without (design
021, "Steps in pieces"): the peak the limit governs (``peak_memory``: at admissions and when each
run starts and ends) and the most held after any piece of a step (``peak_memory_in_runs``), as
fractions of the limit, and the seconds each run took, in the same process.  Without pacing each
scheduling turn runs whole (``Pacer.enabled = False``) and the shared join queues its pairing as
it always did (``ExecContext.paced = False``).

- ``four queries``: ``tests/test_limits.py``'s four (a selection, a window join, a GROUP BY, an
  Rstream) over 12,000 elements of two streams, 60 at a time, under a third of their exact peak.
- ``group-by beside a join``: a GROUP BY over S and ``S [2 s] ⋈ T [1 s]`` on 200 keys, 700 ms of
  each in turn, one element a millisecond, under 160 KB.
- ``one key``: ``Istream(A [1000] ⋈ B [1000])`` on a single key, 100 elements of A then 100 of B:
  10,000 pairs (the windows need 13 KB) under 64 KB.
- ``a backlog meeting its partner``: the same join over 40 keys, 4,000 elements of A then 4,000
  of B: 178,000 pairs, about 10 MB at once in one turn, under 800 KB (the windows need 190 KB).

Answers are checked equal with and without pacing where nothing is dropped (``one key``); with
drops, the two runs keep different elements (pacing changes when admission finds room) and the
figures are what each kept.

    .venv/bin/python benchmarks/limit_in_runs.py

Writes ``benchmarks/results/limit_in_runs.json``.
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
from sluice.backends.embedded import EmbeddedEngine
from sluice.experiments.results import write_results

FOUR = [
    "select * from A [Range 400] where V < 50",
    "select A.K, A.V, B.V from A [Range 300], B [Range 200] where A.K = B.K",
    "select K, count(*), sum(V) from B [Range 250] group by K",
    "select rstream(*) from A [Now] where K < 3",
]
BESIDE = [
    "Istream(select K, count(*) from S [Range 500 Milliseconds] group by K)",
    "Istream(select S.K, T.I from S [Range 2 Seconds], T [Range 1 Second] where S.K = T.K)",
]
ONE_KEY = "Istream(select A.V, B.V from A [Range 1000], B [Range 1000] where A.K = B.K)"


def engine(limit: int | str, paced: bool, **kw: Any) -> EmbeddedEngine:
    eng = EmbeddedEngine(memory_limit=limit, **kw)
    assert eng.pacer is not None
    eng.pacer.enabled = paced
    return eng


def four(limit: int | str, paced: bool) -> tuple[EmbeddedEngine, list[Any]]:
    rnd = random.Random(2)
    feed = [(rnd.choice("AB"), (t // 3, rnd.randrange(20), rnd.randrange(100))) for t in range(12_000)]
    eng = engine(limit, paced, start=0)
    eng.execute("REGISTER STREAM A (K integer, V integer); REGISTER STREAM B (K integer, V integer)")
    qs = [eng.register_query(q, retain=0) for q in FOUR]
    for i in range(0, len(feed), 60):
        for s in "AB":
            rows = [r for name, r in feed[i : i + 60] if name == s]
            if rows:
                eng.push(s, rows)
        eng.run()
    eng.close()
    return eng, qs


def beside(limit: int, paced: bool) -> tuple[EmbeddedEngine, list[Any]]:
    rng = np.random.default_rng(11)
    ts = np.arange(6_000, dtype=np.int64)
    eng = engine(limit, paced, time_unit="millisecond")
    eng.execute("register stream S (I integer, K integer); register stream T (I integer, K integer)")
    qs = [eng.register_query(q, retain=0) for q in BESIDE]
    data = {s: pa.table({"ts": ts, "I": ts, "K": rng.integers(0, 200, len(ts))}) for s in "ST"}
    for lo in range(0, len(ts), 700):
        for s in "ST":
            eng.push(s, data[s].slice(lo, 700))
        eng.run()
    eng.close()
    return eng, qs


def one_join(n: int, keys: int) -> Callable[[int, bool], tuple[EmbeddedEngine, list[Any]]]:
    """``ONE_KEY``'s join over ``keys`` keys, ``n`` elements of A and then ``n`` of B."""

    def case(limit: int, paced: bool) -> tuple[EmbeddedEngine, list[Any]]:
        eng = engine(limit, paced, start=0)
        eng.execute("REGISTER STREAM A (K integer, V integer); REGISTER STREAM B (K integer, V integer)")
        q = eng.register_query(ONE_KEY)
        for s in "AB":
            eng.push(s, [(t, t % keys, t) for t in range(n)])
            eng.run()
        eng.close()
        return eng, [q]

    return case


def measure(case: Callable[[Any, bool], tuple[EmbeddedEngine, list[Any]]], limit: int) -> dict[str, Any]:
    row: dict[str, Any] = {"limit_bytes": limit}
    answers = {}
    for paced in (False, True):
        t0 = time.perf_counter()
        eng, qs = case(limit, paced)
        secs = time.perf_counter() - t0
        st = eng.statistics()
        mode = "paced" if paced else "whole_turns"
        row[mode] = {
            "peak_over_limit": round(st.peak_memory / limit, 3),
            "peak_in_runs_over_limit": round(st.peak_memory_in_runs / limit, 3),
            "dropped": st.shed + sum(s.sampled_out for s in st.shedding),
            "seconds": round(secs, 2),
        }
        assert eng.pacer is not None
        if paced:
            row[mode].update(pieces=eng.pacer.pieces, turns_cut=eng.pacer.cut, drained=eng.pacer.drains)
        answers[paced] = (
            [[(e.ts, e.sign, e.row) for e in q.results()] for q in qs] if not row[mode]["dropped"] else None
        )
    if answers[False] is not None and answers[True] is not None:
        assert answers[False] == answers[True], "pacing changed an answer"
        row["answers_equal"] = True
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="benchmarks/results/limit_in_runs.json")
    args = ap.parse_args()
    exact, _ = four("1GB", False)
    rows = {
        "four queries": measure(four, exact.statistics().peak_memory // 3),
        "group-by beside a join": measure(beside, 160_000),
        "one key": measure(one_join(100, 1), 64_000),
        "a backlog meeting its partner": measure(one_join(4_000, 40), 800_000),
    }
    for name, r in rows.items():
        print(f"{name:30} limit {r['limit_bytes']:>7} B  whole turns {r['whole_turns']}  paced {r['paced']}")
    write_results(args.out, "limit_in_runs", cases=rows)


if __name__ == "__main__":
    main()
