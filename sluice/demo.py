"""The demo: the seed paper's web-proxy queries over a generated, bursty Requests stream.

Requests arrive in bursts (sessions start as a Poisson process; each session's length is
Pareto-distributed), each to one of a few domains, some of them Stanford's.  The Domains
relation classifies the domains.  Every answer is computed exactly.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

import numpy as np

from sluice.catalog import Catalog
from sluice.plan import bind_query, execute
from sluice.plan.explain import explain
from sluice.reference import evaluate

DDL = """
REGISTER STREAM Requests (client_id integer, domain varchar(20), URL varchar(60));
REGISTER RELATION Domains (domain varchar(20), type varchar(12));
"""

DOMAINS = [
    ("stanford.edu", "education"),
    ("mit.edu", "education"),
    ("amazon.com", "commerce"),
    ("ebay.com", "commerce"),
    ("cnn.com", "news"),
]
PATHS = {
    "stanford.edu": ["http://cs.stanford.edu/", "http://cs.stanford.edu/people", "http://www.stanford.edu/"],
    "mit.edu": ["http://www.mit.edu/", "http://csail.mit.edu/"],
    "amazon.com": ["http://amazon.com/books", "http://amazon.com/cart"],
    "ebay.com": ["http://ebay.com/item", "http://ebay.com/search"],
    "cnn.com": ["http://cnn.com/", "http://cnn.com/world"],
}

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
        "clients making more than 5 requests within a minute, as they cross the line",
        "Istream(Select client_id From Requests [Range 1 Minute] Group By client_id Having Count(*) > 5)",
    ),
]


def generate_requests(n: int, seed: int = 7) -> list[tuple[int, tuple[Any, ...]]]:
    """``n`` requests in bursts: Poisson session starts, Pareto(1.4) session lengths."""
    rng = np.random.default_rng(seed)
    out: list[tuple[int, tuple[Any, ...]]] = []
    t = 0.0
    while len(out) < n:
        t += rng.exponential(30.0)  # a new session every 30 s on average
        client = int(rng.integers(1, 1500))
        length = min(int(rng.pareto(1.4) * 3) + 1, 40)
        dom = DOMAINS[int(rng.integers(len(DOMAINS)))][0]
        at = t
        for _ in range(length):
            if rng.random() < 0.3:
                dom = DOMAINS[int(rng.integers(len(DOMAINS)))][0]
            url = PATHS[dom][int(rng.integers(len(PATHS[dom])))]
            out.append((int(at), (client, dom, url)))
            at += rng.exponential(2.0)
    out = sorted(out[:n], key=lambda e: e[0])
    return out


def run(n: int = 600, seed: int = 7, show: int = 4) -> None:
    cat = Catalog()
    execute(cat, DDL)
    requests = generate_requests(n, seed)
    domains = [(0, "+", d) for d in DOMAINS]
    span = requests[-1][0] - requests[0][0]
    print("Sluice demo — web-proxy Requests (seed paper §2.1)")
    print(f"  input: {len(requests)} requests over {span} s in bursts, {len(DOMAINS)} domains in the Domains relation")
    print("  evaluator: the reference evaluator (CQL by definition). The embedded engine will run these")
    print("  same queries continuously; until it lands, this demo shows the exact answers they must give.\n")
    for title, text in QUERIES:
        bq = bind_query(cat, text)
        t0 = time.perf_counter()
        out = evaluate(bq, {"Requests": requests}, {"Domains": domains})
        dt = time.perf_counter() - t0
        signs = Counter(e.sign for e in out)
        print(f"── {title}")
        print(f"   {text}")
        print("   plan:")
        for line in explain(bq.plan).split("\n"):
            print(f"     {line}")
        print(
            f"   result: a {bq.kind.value}; {len(out)} elements ({signs['+']} +, {signs['-']} -) computed in {dt:.2f} s"
        )
        for e in out[:show]:
            print(f"     [{e.ts}] {e.sign} {e.row}")
        if len(out) > show:
            e = out[-1]
            print(f"     ...\n     [{e.ts}] {e.sign} {e.row}")
        print()
