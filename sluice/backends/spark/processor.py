"""The stateful processor: one embedded engine per partition key, kept in Spark's state store.

Each key's engine runs the query's whole plan — the same operators as the embedded backend — on
the key's elements.  After every micro-batch the engine is snapshotted (pickled) into a
``ValueState``, so the RocksDB state store and Spark's checkpoints carry it across restarts.
Input rows are events: data (``d``) for a source, heartbeats (``h``) and end of input (``e``);
output rows are the query's elements ``(ts, sign, row-as-JSON)``.
"""

from __future__ import annotations

import json
import pickle
from collections.abc import Iterator
from typing import Any

import pandas as pd

try:  # pyspark is an optional dependency of the embedded-only install
    from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle
    from pyspark.sql.types import BinaryType, IntegerType, LongType, StringType, StructField, StructType
except ImportError:  # pragma: no cover - exercised only without pyspark
    StatefulProcessor = object  # type: ignore[misc,assignment]


def output_schema() -> Any:
    return StructType(
        [StructField("ts", LongType()), StructField("sign", IntegerType()), StructField("row", StringType())]
    )


class SluiceProcessor(StatefulProcessor):
    def __init__(self, ddl: str, query: str, start: int, time_unit: str, seed: int) -> None:
        self.ddl, self.query, self.start = ddl, query, start
        self.time_unit, self.seed = time_unit, seed

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.state = handle.getValueState("engine", StructType([StructField("blob", BinaryType())]))

    def _engine(self) -> Any:
        if self.state.exists():
            blob = self.state.get()
            assert blob is not None
            return pickle.loads(blob[0])
        from sluice.backends.embedded import EmbeddedEngine
        from sluice.cql.ast import TimeUnit

        eng = EmbeddedEngine(time_unit=TimeUnit[self.time_unit], seed=self.seed, start=self.start)
        eng.execute(self.ddl)
        eng.register_query(self.query, name="q")
        return eng

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame], timerValues: Any) -> Iterator[pd.DataFrame]:
        eng = self._engine()
        events = pd.concat(list(rows), ignore_index=True)
        events = events.sort_values(["seq"], kind="stable")
        pending: dict[str, list[tuple[Any, ...]]] = {}

        def flush() -> None:
            for src, rs in pending.items():
                eng.push(src, rs)
            pending.clear()

        for kind, src, ts, sign, row in zip(
            events["kind"], events["src"], events["ts"], events["sign"], events["row"], strict=True
        ):
            if kind == "d":
                vals = json.loads(row)
                rel = eng.sources[src.lower()].relation
                pending.setdefault(src, []).append(
                    (int(ts), "+" if sign > 0 else "-", *vals) if rel else (int(ts), *vals)
                )
            else:
                flush()
                if kind == "h":
                    eng.heartbeat(int(ts))
                else:
                    eng.close(int(ts))
        flush()
        eng.run()
        q = eng.queries["q"]
        out = [b for b in q.batches]
        q.batches = []
        self.state.update((pickle.dumps(eng),))
        if out:
            from sluice.runtime.batch import to_elements

            els = [e for b in out for e in to_elements(b)]
            yield pd.DataFrame(
                {
                    "ts": [e[0] for e in els],
                    "sign": [1 if e[1] == "+" else -1 for e in els],
                    "row": [json.dumps(list(e[2])) for e in els],
                }
            )

    def close(self) -> None:
        return None
