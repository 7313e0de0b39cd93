"""The stateful processor: the query's operators per partition key, their state in Spark's store.

Each processor instance builds the query's plan once — an embedded engine, the same operators as
the embedded backend.  For each key it restores that key's operator state into it
(``EmbeddedEngine.restore_state``: operator protocol v2), runs the key's elements, and stores the
operators' new state (``snapshot_state``, pickled) in a ``ValueState``, so the RocksDB state
store and Spark's checkpoints carry it across restarts.  The state holds data only — synopses,
queues, buffered output — never the plan, the catalog or user functions.

Input rows are events in typed columns: data (``d``) for source ``i`` in ``s{i}c{j}`` (with
``s{i}n{j}`` is-null flags for non-string columns), heartbeats (``h``: completing the streams the
driver does not hold), streams released up to (``r``: completing a held stream, ticks), end of
input (``e``), punctuations (``p``: the stream in ``src``, what it says in ``note``) and rows
rejected before the processor (``n``: without a ts, before the first instant; the note in ``src``).
Runs of data between markers become Arrow batches pushed on the engine's fast path.  The
processor runs in event-time mode: Spark's watermark (each input's event time minus the slack,
the minimum over inputs) completes instants on every key, through a timer each key re-arms.  Output rows
are the query's elements ``(ts, sign, c0…)`` with nullable typed columns; rows with sign 0 carry
a ``note``: an element the key's engine rejected (late, or a deletion of an absent tuple), or a
row one of its operators could not evaluate (an integer overflow, a failing UDF).
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from sluice.backends.spark import budget, shed
from sluice.datatypes import DataType
from sluice.errors import SluiceError
from sluice.runtime.batch import arrow_type, dumps, make, sort_by_ts, ts_of

try:  # pyspark is an optional dependency of the embedded-only install
    from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle
    from pyspark.sql.types import BinaryType, IntegerType, LongType, StringType, StructField, StructType
except ImportError:  # pragma: no cover - exercised only without pyspark
    StatefulProcessor = object  # type: ignore[misc,assignment]

# a pre-aggregated query's engine: slack so large that only the watermark completes instants
NO_SLACK_COMPLETION = 2**62

# Spark's event time is ticks + this offset, read as milliseconds: Spark treats a watermark of 0 as
# "none yet" and drops rows at or before it, and Sluice's timestamps may be 0 or negative.
EVENT_TIME_OFFSET = 2**41

_NULLABLE = {
    pa.int64(): pd.Int64Dtype(),
    pa.int8(): pd.Int8Dtype(),
    pa.float64(): pd.Float64Dtype(),
    pa.bool_(): pd.BooleanDtype(),
}


def output_schema(types: list[DataType] | tuple[DataType, ...]) -> Any:
    from sluice.backends.spark.types import spark_type

    return StructType(
        [StructField("ts", LongType()), StructField("sign", IntegerType())]
        + [StructField(f"c{j}", spark_type(t)) for j, t in enumerate(types)]
        + [StructField("note", StringType())]
    )


def group_output_schema(members: list[list[DataType]]) -> Any:
    """The output of one processor serving several queries: which query a row is of (``query``;
    NULL on a note about the shared input), and member ``i``'s columns ``m{i}c{j}``.
    """
    from sluice.backends.spark.types import spark_type

    return StructType(
        [StructField("ts", LongType()), StructField("sign", IntegerType()), StructField("query", StringType())]
        + [StructField(f"m{i}c{j}", spark_type(t)) for i, types in enumerate(members) for j, t in enumerate(types)]
        + [StructField("note", StringType())]
    )


def register_udfs(catalog: Any, udfs: list[tuple[Any, ...]]) -> None:
    """Register ``SparkEngine.udfs`` — (name, fn, return type, argument types, strict, vectorized) —
    in a catalog (a processor's engine, the pre-aggregation's scratch one); processors pickled
    before vectorized UDFs keep five fields.
    """
    for name, fn, ret, args, strict, *vec in udfs:
        catalog.register_function(name, fn, ret, args, strict=strict, vectorized=bool(vec and vec[0]))


def _punctuate(eng: Any, name: str, note: str) -> None:
    """A punctuation the driver checked (``SparkEngine.punctuate``) into this key's log of the
    stream, where its joins and aggregates read it.  Added as a fact, not through
    ``Source.punctuate``: this key may have released past its stamp already (Spark read later rows
    in an earlier micro-batch) — the driver rejected every element that breaks it, so it holds
    whenever it arrives; applied late, a join forgets only later.
    """
    from sluice.backends.spark.inbox import read_punctuation

    src = eng.sources.get(str(name).lower())
    if src is None:
        return
    column, tick, values, upto = read_punctuation(note)
    # at the latest stamp in the log, if later: readers count the entries they applied, and one
    # put before those would never be read ("none after τ'" for τ' ≥ τ is implied by it)
    entries = src.punctuations.of(column)
    src.punctuations.add(column, max(tick, entries[-1][0]) if entries else tick, values, upto)


class _Late:
    """Partials of slides already complete (design 015): rejected, their elements counted."""

    def __init__(self) -> None:
        self.n = 0
        self.first: int | None = None
        self.last: int | None = None
        self.done = 0

    def taken(self, b: pa.Table, done: int, count_at: int) -> pa.Table:
        """The partials of ``b`` after ``done`` (every instant ≤ it complete); the rest counted."""
        ts = ts_of(b)
        late = ts <= done
        if not late.any():
            return b
        self.n += int(pc.sum(b.column(2 + count_at).filter(pa.array(late))).as_py() or 0)
        lo, hi = int(ts[late].min()), int(ts[late].max())
        self.first = lo if self.first is None else min(self.first, lo)
        self.last = hi if self.last is None else max(self.last, hi)
        self.done = done
        return b.filter(pa.array(~late))

    def note(self, stream: str) -> str:
        slides = f"{self.first}" if self.first == self.last else f"{self.first} to {self.last}"
        return (
            f"{stream}: {self.n} element(s) arrived behind Spark's watermark (late: pre-aggregated, their slides "
            f"ending at {slides} were complete at {self.done}; design 015)"
        )


class SluiceProcessor(StatefulProcessor):
    def __init__(
        self,
        ddl: str,
        query: str,
        start: int,
        time_unit: str,
        seed: int,
        slack: int,
        sources: list[tuple[str, list[DataType]]],
        out_types: list[DataType],
        udfs: list[tuple[Any, ...]] | None = None,
        scheduler: str = "round-robin",
        lag: int = 0,
        shared_join: str | None = None,
        members: list[tuple[str, str, list[DataType]]] | None = None,
        join_intermediates: str = "auto",
        sharing: bool = True,
        preagg: tuple[str, int] | None = None,
        held: list[str] | None = None,
        key_memory_limit: int | None = None,
        limits: dict[str, tuple[float, float]] | None = None,
        ship_shed: bool = False,
    ) -> None:
        """``members``: (name, CQL, output types) of the queries this processor runs together
        (they share a window join); None: ``query`` alone, named "q".  ``preagg``: its input is
        Spark's partials of this stream (design 015), COUNT(*) at this index of their columns.
        ``held``: the streams the driver holds (lower case): a heartbeat completes them only as
        far as the driver released them, which an ``r`` marker says (design 023, "On Spark").
        ``key_memory_limit``: each key's engine holds its queues and synopses within it by sampling
        and shedding its input, its counters reported in a note (``budget``; design 021);
        ``limits``: each query's (weight, min_precision) there; ``ship_shed``: what it drops goes
        back to the driver as note rows, for its ``on_shed`` callbacks (``shed``).
        """
        self.ddl, self.query, self.start = ddl, query, start
        self.lag = lag  # ticks behind Spark's watermark its instants complete (pre-aggregated input)
        self.scheduler = scheduler
        self.shared_join = shared_join
        self.join_intermediates = join_intermediates
        self.sharing = sharing
        self.members = members
        self.time_unit, self.seed, self.slack = time_unit, seed, slack
        self.sources, self.out_types = sources, out_types
        self.udfs = udfs or []
        self.index = {name: i for i, (name, _) in enumerate(sources)}
        self.preagg = preagg
        self.held = None if held is None else frozenset(held)
        self.key_memory_limit = key_memory_limit
        self.limits = limits or {}
        self.shipper = shed.Shipper() if ship_shed else None

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.state = handle.getValueState("engine", StructType([StructField("blob", BinaryType())]))
        self._plan: Any = None  # the engine this instance restores each key's state into
        self._fresh = b""  # the state of a key seen for the first time
        self.shipper = getattr(self, "shipper", None)  # (processors pickled before it)

    def _engine(self) -> Any:
        """The plan with this key's operator state in it."""
        from sluice.backends.embedded import SNAPSHOT_FORMAT, EmbeddedEngine

        if self._plan is None:
            self._plan = self._build()
            self._fresh = dumps(self._plan.snapshot_state())
        blob = self._fresh
        if self.state.exists():
            stored = self.state.get()
            assert stored is not None
            blob = stored[0]
        state = pickle.loads(blob)
        if isinstance(state, dict) and state.get("limits") is None and self._plan.limits is not None:
            # (a key stored before the query had a key memory limit: its manager starts afresh,
            # never with the previous key's rates and counters)
            state["limits"] = pickle.loads(self._fresh)["limits"]
        old = "a pickled engine per key" if isinstance(state, EmbeddedEngine) else None  # before operator state
        if old is None and isinstance(state, dict) and state.get("format") != SNAPSHOT_FORMAT:
            old = f"operator state of format {state.get('format')}, this version reads {SNAPSHOT_FORMAT}"
        if old is not None:
            raise SluiceError(
                f"this query's Spark checkpoint was written by another version of Sluice ({old}); delete its "
                "checkpoint directory and run it again from the start"
            )
        try:
            self._plan.restore_state(state)
        except SluiceError as e:  # the plan changed (another version's rewrites): its state cannot be used
            raise SluiceError(
                f"this query's Spark checkpoint holds state of another plan ({e}); delete its checkpoint directory "
                "and run it again from the start"
            ) from None
        if self.shipper is not None and self._plan.limits is not None:  # (callbacks are not state: set each turn)
            self._plan.limits.on_shed = [self.shipper]
        return self._plan

    def _build(self) -> Any:
        from sluice.backends.embedded import EmbeddedEngine
        from sluice.cql.ast import TimeUnit

        # partials complete instants only through Spark's watermark: one stamped at its slide's end
        # says nothing of what is complete (no slack counts back from it)
        pre = getattr(self, "preagg", None)  # (processors pickled before design 015's partials)
        eng = EmbeddedEngine(
            time_unit=TimeUnit[self.time_unit],
            seed=self.seed,
            start=self.start,
            slack=self.slack if pre is None else NO_SLACK_COMPLETION,
            scheduler=getattr(self, "scheduler", "round-robin"),  # processors pickled before it existed
            shared_join=getattr(self, "shared_join", None),
            # (a processor pickled before design 024 built its joins as trees of binary joins)
            join_intermediates=getattr(self, "join_intermediates", "keep"),
            sharing=getattr(self, "sharing", True),
            memory_limit=getattr(self, "key_memory_limit", None),
        )
        register_udfs(eng.catalog, self.udfs)
        eng.execute(self.ddl)
        members = getattr(self, "members", None)  # processors pickled before groups existed
        limits = getattr(self, "limits", {})
        for name, text, _ in members or [("q", self.query, self.out_types)]:
            weight, least = limits.get(name, (1.0, 0.0))
            eng.register_query(text, name=name, weight=weight, min_precision=least)
        return eng

    def _batch(self, run: pd.DataFrame, src: str) -> pa.Table:
        i = self.index[src]
        types = self.sources[i][1]
        at = 0 if getattr(self, "preagg", None) is not None else i  # both streams of partials: s0…
        cols = []
        for j, t in enumerate(types):
            v = run.get(f"s{at}c{j}")
            if v is None:  # a column the query's answer does not depend on was not sent (frames._sent)
                cols.append(pa.nulls(len(run), arrow_type(t)))
            elif t.is_string:
                cols.append(pa.array(v.to_numpy(dtype=object), type=arrow_type(t), from_pandas=True))
            else:
                flag = run.get(f"s{at}n{j}")  # (none for a column never NULL: a partial count)
                mask = None if flag is None else flag.to_numpy(dtype=bool)
                cols.append(pa.array(v.to_numpy(), mask=mask, type=arrow_type(t)))
        ts = run["ts"].to_numpy(dtype=np.int64)
        # (partials carry no sign: each is an insertion)
        sign = run["sign"].to_numpy().astype(np.int8) if "sign" in run else np.ones(len(run), np.int8)
        return make(ts, sign, cols, types)

    def _at_start(self, eng: Any, src: str, b: pa.Table) -> pa.Table:
        """A relation's changes stamped before the first instant apply at it (design 004): raised
        here, in the order of their own stamps, before this engine's lateness rule sees them —
        Spark's watermark completes instants on every source at once, so the stamp the driver
        admitted by the relation's own lateness would be behind it.  (A relation in a coarser unit
        than the engine's: at the first of its instants not before the start.)
        """
        if not eng.sources[src.lower()].relation or b.num_rows == 0:
            return b
        at = -(-self.start // eng.catalog.scale(eng.catalog.lookup(src)))  # (in the relation's unit)
        if int(ts_of(b).min()) >= at:
            return b
        b = sort_by_ts(b)
        return b.set_column(0, "__ts", pa.array(np.maximum(ts_of(b), at)))

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame], timerValues: Any) -> Iterator[pd.DataFrame]:
        eng = self._engine()
        before = {n: len(s.messages) for n, s in eng.sources.items()}
        self._note_start(eng, key)
        pre = getattr(self, "preagg", None)
        late = _Late()
        if pre is not None:  # what the watermark completed first: a partial of it is late
            self._complete(eng, timerValues)
        # pushed events and markers in the driver's order (seq); an attached source's rows (seq −1,
        # first) in timestamp order: Spark reads a micro-batch's files in no particular order, and
        # nothing in one micro-batch is late (docs/design/014)
        events = pd.concat(list(rows), ignore_index=True)
        untimed = events["kind"] == "n"  # a row Spark could not give a ts (its message in src): counted
        rejected = events.loc[untimed, "src"].tolist()
        order = ["seq", "ts"] if "seq" in events else ["ts"]  # (partials carry no seq: all Spark's)
        events = events[~untimed].sort_values(order, kind="stable", ignore_index=True)
        kinds = events["kind"].to_numpy()
        marks = [int(m) for m in np.flatnonzero(kinds != "d")] + [len(events)]
        lo = 0
        for m in marks:
            run = events.iloc[lo:m]
            for src in pd.unique(run["src"]):
                b = self._batch(run[run["src"] == src], src)
                if pre is not None:
                    b = late.taken(b, eng.sources[str(src).lower()].complete_upto(), pre[1])
                eng.push_batch(src, self._at_start(eng, src, b))
            if m < len(events):
                ts = int(events["ts"].iat[m])
                if kinds[m] == "h":
                    # (a stream the driver holds completes as far as it released it: "r")
                    held = getattr(self, "held", None)  # (processors pickled before held streams)
                    for name, source in eng.sources.items():
                        if held is None or name not in held:
                            source.heartbeat(ts)
                elif kinds[m] == "r":  # the driver released this stream up to ts (ticks)
                    source = eng.sources.get(str(events["src"].iat[m]).lower())
                    if source is not None:
                        source.heartbeat(ts, scaled=True)
                elif kinds[m] == "e":
                    eng.close(ts)
                elif kinds[m] == "p":
                    _punctuate(eng, events["src"].iat[m], events["note"].iat[m])
                # "s" (a query started) only gave every input an event time
            lo = m + 1
        if late.n:
            assert pre is not None
            rejected.append(late.note(pre[0]))
        yield from self._finish(eng, before, timerValues, rejected)

    def handleExpiredTimer(self, key: Any, timerValues: Any, expiredTimerInfo: Any) -> Iterator[pd.DataFrame]:
        """Spark's watermark moved on: instants before it are complete on this key too."""
        eng = self._engine()
        self._note_start(eng, key)
        yield from self._finish(eng, {n: len(s.messages) for n, s in eng.sources.items()}, timerValues)

    def _note_start(self, eng: Any, key: Any) -> None:
        """What a key memory limit's manager had counted when this key's turn began (``budget``)."""
        self._key, self._counted = str(key[0] if isinstance(key, tuple) else key), budget.counters(eng)
        if self.shipper is not None:
            self.shipper.start(self._key)

    def _complete(self, eng: Any, timer_values: Any) -> int:
        """Spark's watermark W (ticks + offset): no element at or before it will reach any key
        (Spark drops it, and Sluice counts it; a partial of it the processor rejects), so every
        instant ≤ W − offset (less ``lag``) is complete here.  Returns W.
        """
        w = int(timer_values.getCurrentWatermarkInMs())
        if w > 0:  # 0: no watermark yet
            for src in eng.sources.values():
                src.heartbeat(w - EVENT_TIME_OFFSET - self.lag, scaled=True)
        return w

    def _finish(
        self, eng: Any, before: dict[str, int], timer_values: Any, rejected: list[str] | None = None
    ) -> Iterator[pd.DataFrame]:
        """Complete what Spark's watermark says is complete, store the state, yield the output and
        the notes: the engine's rejections and evaluation errors, and ``rejected`` (rows Spark
        could not give a timestamp).
        """
        w = self._complete(eng, timer_values)
        eng.run()
        for armed in list(self.handle.listTimers()):
            self.handle.deleteTimer(armed)
        self.handle.registerTimer(max(w, 0) + 1)  # wake this key when the watermark passes w
        notes = [m for n, s in eng.sources.items() for m in s.messages[before.get(n, 0) :]]
        notes += rejected or []
        said = budget.key_report(eng, self._key, self._counted)  # what a key memory limit did here
        if said is not None:
            notes.append(said)
        if self.shipper is not None:  # what it dropped, for the driver's on_shed callbacks
            notes += self.shipper.notes
            self.shipper.notes = []
        members = getattr(self, "members", None)
        if members is not None:
            yield from self._finish_group(eng, members, notes)
            return
        q = eng.queries["q"]
        out, q.batches = q.batches, []
        for u in eng.operators:  # rows an operator could not evaluate (sluice.plan.numeric): reported once
            notes += u.reject_messages
            u.reject_messages = []
        self.state.update((dumps(eng.snapshot_state()),))
        frames = []
        if out:
            t = pa.concat_tables(out)
            df = t.to_pandas(types_mapper=_NULLABLE.get)
            df.columns = ["ts", "sign"] + [f"c{j}" for j in range(t.num_columns - 2)]
            df["sign"] = df["sign"].astype("int32")
            df["note"] = pd.Series([None] * len(df), dtype=object)
            frames.append(df)
        if notes:
            n = len(notes)
            df = pd.DataFrame({"ts": np.zeros(n, np.int64), "sign": np.zeros(n, np.int32)})
            for j, t in enumerate(self.out_types):
                df[f"c{j}"] = pd.Series([None] * n, dtype=_NULLABLE.get(arrow_type(t), object))
            df["note"] = notes
            frames.append(df)
        if frames:
            yield pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]

    def _finish_group(
        self, eng: Any, members: list[tuple[str, str, list[DataType]]], notes: list[str]
    ) -> Iterator[pd.DataFrame]:
        """The output of every member, each row naming its query, in the group's columns (the
        others' NULL); notes on the shared input name no query, an operator's name its queries.
        """
        owned: list[tuple[str | None, str]] = [(None, m) for m in notes]
        for u in eng.operators:
            for m in u.reject_messages:
                owned += [(name, m) for name in sorted(u.queries)] or [(None, m)]
            u.reject_messages = []
        frames = []
        for i, (member, _, _) in enumerate(members):
            q = eng.queries.get(member)
            if q is None:  # it failed here (its operator's message is a note)
                continue
            out, q.batches = q.batches, []
            if out:
                frames.append(self._group_frame(members, i, member, pa.concat_tables(out), None))
        for owner, m in owned:
            frames.append(self._group_frame(members, -1, owner, None, m))
        self.state.update((dumps(eng.snapshot_state()),))
        if frames:
            yield pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]

    @staticmethod
    def _group_frame(
        members: list[tuple[str, str, list[DataType]]], i: int, name: str | None, t: pa.Table | None, note: str | None
    ) -> pd.DataFrame:
        n = t.num_rows if t is not None else 1
        df = pd.DataFrame(
            {
                "ts": t.column(0).to_numpy() if t is not None else np.zeros(n, np.int64),
                "sign": t.column(1).to_numpy().astype(np.int32) if t is not None else np.zeros(n, np.int32),
            }
        )
        df["query"] = pd.Series([name] * n, dtype=object)
        for k, (_, _, types) in enumerate(members):
            for j, typ in enumerate(types):
                if k == i and t is not None:
                    df[f"m{k}c{j}"] = t.column(2 + j).to_pandas(types_mapper=_NULLABLE.get)
                else:
                    df[f"m{k}c{j}"] = pd.Series([None] * n, dtype=_NULLABLE.get(arrow_type(typ), object))
        df["note"] = pd.Series([note] * n, dtype=object)
        return df

    def close(self) -> None:
        return None
