"""The demo: the seed paper's web-proxy queries over a generated, bursty Requests stream.

Requests arrive in bursts (sessions start as a Poisson process; each session's length is
Pareto-distributed), each to one of a few domains, some of them Stanford's.  The Domains
relation classifies the domains.  Every answer is computed exactly (unless a memory limit makes
the engine approximate, which each query then reports) and checked against the reference
evaluator.  The engine takes the options every command that runs queries takes
(``sluice demo --scheduler chain``, ``--backend spark``, …).
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

from sluice.reference import evaluate
from sluice.workloads.examples import DOMAINS, REQUESTS_DDL
from sluice.workloads.examples import domains as example_domains
from sluice.workloads.examples import requests as generate

QUERIES = [
    (
        "requests for stanford.edu pages in the last hour (seed §2.1, window shortened from a day)",
        "Select Count(*) From Requests S [Range 1 Hour Preceding] Where S.domain = 'stanford.edu'",
    ),
    (
        "of each client's 10 latest stanford.edu requests, how many hit the CS web server (seed §2.1)",
        "Select Count(*) From Requests S [Partition By S.client_id Rows 10 Preceding "
        "Where S.domain = 'stanford.edu'] Where S.URL Like 'http://cs.stanford.edu/%'",
    ),
    (
        "a 10% sample of commerce requests by clients 1..1000 (seed §2.1)",
        "Select T.URL From (Select client_id, URL From Requests S, Domains R "
        "Where S.domain = R.domain And R.type = 'commerce') T Sample(10) "
        "Where T.client_id Between 1 And 1000",
    ),
    (
        "requests per type of content over the last 10 minutes",
        "Select R.type, Count(*) From Requests S [Range 10 Minutes], Domains R "
        "Where S.domain = R.domain Group By R.type",
    ),
    (
        "requests per domain over the last 10 minutes (shares its window with the query above)",
        "Select S.domain, Count(*) From Requests S [Range 10 Minutes] Group By S.domain",
    ),
    (
        "clients making more than 5 requests within a minute, as they cross the line",
        "Istream(Select client_id From Requests [Range 1 Minute] Group By client_id Having Count(*) > 5)",
    ),
]


def run(
    n: int = 3000, data_seed: int = 7, show: int = 3, verify: bool = True, backend: str = "embedded", **options: Any
) -> None:
    """The demo on ``backend`` built with the engine ``options`` (``sluice.backends.Sluice``);
    ``data_seed`` is the generated stream's, ``options["seed"]`` the engine's (``Sample``).
    """
    from sluice.backends import Sluice
    from sluice.reference.compare import diff_outputs

    eng = Sluice(backend, **options)
    embedded = backend == "embedded"
    eng.execute(REQUESTS_DDL)
    requests = generate(n, data_seed)
    domains = example_domains()
    span = requests[-1][0] - requests[0][0]
    print(f"Sluice demo — web-proxy Requests (seed paper §2.1) on the {backend} engine")
    print(
        f"  input: {len(requests)} requests over {span} s in bursts; {len(DOMAINS)} domains in the Domains relation\n"
    )
    handles = [(title, eng.register_query(text)) for title, text in QUERIES]
    eng.push("Domains", [(t, s, *row) for t, s, row in domains])
    slices = 8
    step = max(1, len(requests) // slices)
    t0 = time.perf_counter()
    print("  live: time  requests  outputs" + ("  queues(B)  synopses(B)" if embedded else ""))
    for i in range(0, len(requests), step):
        part = requests[i : i + step]
        eng.push("Requests", [(t, *row) for t, row in part])
        # The proxy's clock: no request and no Domains change stamped before now will still come.
        # Without it, joins with Domains must wait (a relation may change at any later instant).
        eng.heartbeat(part[-1][0] - 1)
        eng.run()
        outs = sum(len(eng.results(q)) for _, q in handles)
        line = f"       {part[-1][0]:>5} s  {i + len(part):>8}  {outs:>7}"
        if embedded:
            st = eng.statistics()
            line += f"  {st.queue_bytes:>9}  {st.synopsis_bytes:>11}"
        print(line)
    eng.close()
    dt = time.perf_counter() - t0
    if embedded:
        st = eng.statistics()
        # (queues fill within a run and are empty after it: the live lines show 0; each queue's peak
        # is its own, at its own moment: their sum is no moment's memory — the limit's peaks are)
        limit = (
            f"; memory limit {st.memory_limit:,} B: peak {st.peak_memory:,} B between runs, "
            f"{st.peak_memory_in_runs:,} B within them"
            if st.memory_limit
            else ""
        )
        print(
            f"  all input processed in {dt:.2f} s; {st.steps} scheduler steps ({st.scheduler}); "
            f"queues' peaks {st.peak_queue_bytes:,} B summed (each within a run; empty after it){limit}\n"
        )
    else:
        print(f"  all input processed in {dt:.2f} s\n")
    for title, q in handles:
        out = eng.results(q)
        signs = Counter(e.sign for e in out)
        print(f"── {q.name}: {title}")
        print(f"   {' '.join(q.bound.text.split())}")
        print(f"   a {q.kind.value}: {len(out)} elements ({signs['+']} +, {signs['-']} -)", end="")
        approx = q.approximation
        approximate = not approx.exact
        if approximate:
            print(f"; {approx.describe()}", end="")
        if verify:
            ref = evaluate(q.bound, {"Requests": requests}, {"Domains": domains}, seed=options.get("seed", 0))
            diffs = diff_outputs(ref, out)
            if not diffs:
                print("; identical to the reference evaluator")
            elif approximate:  # the memory limit's doing, reported above
                print(f"; {len(diffs)} differences from the exact answer (the approximation's)")
            else:
                print(f"; DIFFERS from the reference: {diffs[:2]}")
        else:
            print()
        for e in out[:show]:
            print(f"     [{e.ts}] {e.sign} {e.row}")
        if len(out) > show:
            e = out[-1]
            print(f"     ...\n     [{e.ts}] {e.sign} {e.row}")
        print()
    print("The shared plan (operators used by several queries are marked 'shared with'):")
    print(eng.explain(handles[4][1].name))
