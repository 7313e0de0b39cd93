"""NEXMark Q0–Q3 on Pathway (an incremental dataflow engine in Rust with a Python API).

The input tables are built from the events in memory (``pw.debug.table_from_pandas``) and the
answer collected with ``pw.debug.table_to_pandas``: Pathway runs its incremental engine over the
whole input as one batch of updates.
"""

from __future__ import annotations

import os
from importlib.metadata import version
from typing import Any

os.environ.setdefault("PATHWAY_MONITORING_LEVEL", "none")

import pandas as pd  # noqa: E402
import pathway as pw  # noqa: E402
from common import PER_INSTANT, Q2_AUCTIONS, Q3_STATES, main  # noqa: E402


def _bids(d: dict[str, list[dict[str, Any]]]) -> Any:
    return pw.debug.table_from_pandas(pd.DataFrame(d["Bid"]))


def _rows(t: Any, cols: list[str]) -> list[Any]:
    df = pw.debug.table_to_pandas(t)
    return list(df[cols].itertuples(index=False, name=None))


def q0(d: dict[str, list[dict[str, Any]]]) -> list[Any]:
    b = _bids(d)
    return _rows(b.select(b.auction, b.bidder, b.price, b.dateTime), ["auction", "bidder", "price", "dateTime"])


def q1(d: dict[str, list[dict[str, Any]]]) -> list[Any]:
    b = _bids(d)
    t = b.select(b.auction, euro=b.price * 0.89, bidder=b.bidder, dateTime=b.dateTime)
    return _rows(t, ["auction", "euro", "bidder", "dateTime"])


def q2(d: dict[str, list[dict[str, Any]]]) -> list[Any]:
    b = _bids(d)
    hit = b.auction == Q2_AUCTIONS[0]
    for a in Q2_AUCTIONS[1:]:
        hit = hit | (b.auction == a)
    f = b.filter(hit)
    return _rows(f.select(f.auction, f.price), ["auction", "price"])


def q3(d: dict[str, list[dict[str, Any]]]) -> list[Any]:
    # "id" is Pathway's own row key: rename the NEXMark ids
    a = pw.debug.table_from_pandas(pd.DataFrame(d["Auction"]).rename(columns={"id": "aid"}))
    p = pw.debug.table_from_pandas(pd.DataFrame(d["Person"]).rename(columns={"id": "pid"}))
    local = p.filter((p.state == Q3_STATES[0]) | (p.state == Q3_STATES[1]) | (p.state == Q3_STATES[2]))
    books = a.filter(a.category == 10)
    j = books.join(local, books.seller == local.pid).select(local.name, local.city, local.state, books.aid)
    return _rows(j, ["name", "city", "state", "aid"])


UNSUPPORTED = dict.fromkeys(
    PER_INSTANT,
    "Rstream/Istream over sliding windows, ALL-subqueries and CURRENT_TIME: Pathway's windowby emits one "
    "result per window (updated in place), not CQL's per-instant answer stream",
)

if __name__ == "__main__":
    main("pathway", version("pathway"), {"q0": q0, "q1": q1, "q2": q2, "q3": q3}, UNSUPPORTED)
