"""NEXMark Q0–Q3 on Apache Flink through PyFlink (Flink SQL, streaming mode, a local mini-cluster).

The input tables come from the events in memory (``from_pandas``: bounded streams); the answer is
collected with ``to_pandas()`` (Arrow batches).  Q1's ``DOLTOEUR`` is inlined as ``price * 0.89``.
"""

from __future__ import annotations

from importlib.metadata import version
from typing import Any

import pandas as pd
from common import PER_INSTANT, Q2_AUCTIONS, Q3_STATES, main
from pyflink.table import EnvironmentSettings, TableEnvironment

SQL = {
    "q0": "SELECT auction, bidder, price, `dateTime` FROM Bid",
    "q1": "SELECT auction, price * 0.89, bidder, `dateTime` FROM Bid",
    "q2": f"SELECT auction, price FROM Bid WHERE auction IN {Q2_AUCTIONS}",
    "q3": "SELECT P.name, P.city, P.state, A.id FROM Auction A, Person P "
    f"WHERE A.seller = P.id AND P.state IN {Q3_STATES} AND A.category = 10",
}
_ENV: list[Any] = []


def _env() -> Any:
    if not _ENV:
        t = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
        t.get_config().set("parallelism.default", "1")
        _ENV.append(t)
    return _ENV[0]


def _query(name: str) -> Any:
    def run(d: dict[str, list[dict[str, Any]]]) -> list[Any]:
        env = _env()
        for s in ("Person", "Auction", "Bid") if name == "q3" else ("Bid",):
            env.drop_temporary_view(s)
            env.create_temporary_view(s, env.from_pandas(pd.DataFrame(d[s])))
        # to_pandas collects through Arrow batches (collect() pays a py4j call per row)
        return list(env.sql_query(SQL[name]).to_pandas().itertuples(index=False, name=None))

    return run


UNSUPPORTED = dict.fromkeys(
    PER_INSTANT,
    "CQL's Rstream re-emits a window's relation at every instant, and Istream/Dstream of relations with "
    "CURRENT_TIME have no Flink SQL equivalent: Flink's window TVFs emit once per window",
)

if __name__ == "__main__":
    main("flink", version("apache-flink"), {q: _query(q) for q in SQL}, UNSUPPORTED)
