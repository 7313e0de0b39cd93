"""Running the Spark backend's queries: each registered query becomes one Structured Streaming
query — native DataFrame expressions, or a keyed input into ``transformWithStateInPandas``
with the embedded engine's operators (``docs/design/007``) — started at the first ``run()``
after its registration, then fed by every ``run()`` until ``stop()``.
"""

from __future__ import annotations

import json
import re
import shutil
import time
import uuid
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from sluice.backends.spark.compile import window_join_signature
from sluice.backends.spark.frames import input_frame, native_frame
from sluice.backends.spark.preagg import LOWER, UPPER
from sluice.backends.spark.processor import SluiceProcessor, group_output_schema, output_schema
from sluice.backends.spark.query import Collected, SparkQuery
from sluice.backends.spark.shed import SHED_DELIVERED, ships, texts
from sluice.errors import InUseError, SluiceError
from sluice.io.atomic import write_atomic

if TYPE_CHECKING:
    from sluice.backends.spark.engine import SparkEngine

RATE_WAIT = 600  # seconds run() waits for a micro-batch of a query over a rate source
MEMBERS = "members.json"  # a group's queries, in their order, beside its checkpoint
LEGACY_BUCKETS = 8  # keys of a split query whose checkpoint predates the saved number


class Runner:
    def __init__(self, engine: SparkEngine) -> None:
        self.engine = engine

    def buckets(self, q: SparkQuery) -> int:
        """How many keys a split query's input spreads over: ``spark.sql.shuffle.partitions``,
        fixed at the query's first start — a restart on the same workdir keeps the number its
        checkpointed state was made with, whatever the session now says.
        """
        if not q.buckets:
            saved = self._buckets_file(q)
            if saved.exists():
                q.buckets = int(saved.read_text())
            elif (self.engine.workdir / q.label / "checkpoint").exists():
                q.buckets = LEGACY_BUCKETS  # a checkpoint from before the number was saved
            else:
                q.buckets = max(1, int(self.engine.spark.conf.get("spark.sql.shuffle.partitions")))
        return q.buckets

    def _resume_seq(self, members: list[SparkQuery]) -> None:
        """A query's input starts after the events handed to Spark before it was registered
        (``seq_from``), fixed when it first starts: a query resuming a checkpoint reads from the
        saved point (a batch Spark replays after a crash holds events a new engine numbers before
        its own), a new one from now.  A checkpoint older than the saved point read from 0.  Saved
        with it: the first instant of a query registered while running (``SparkQuery.since``).
        """
        q = members[0]
        saved = self.engine.workdir / q.label / "seq_from"
        since = q.since
        if saved.exists():
            seq, *rest = saved.read_text().split()
            since = int(rest[0]) if rest else None
        elif (self.engine.workdir / q.label / "checkpoint").exists():
            seq, since = "0", None
        else:
            seq = str(q.seq_from)
            write_atomic(saved, (seq if since is None else f"{seq} {since}").encode())
        for m in members:
            m.seq_from, m.since = int(seq), since

    def _buckets_file(self, q: SparkQuery) -> Path:
        return self.engine.workdir / q.label / "buckets"

    def _first_instant(self) -> int | None:
        """The processors' first instant: the embedded engine's (``Inbox.fix_first``), None while
        nothing can be released yet — unless Spark reads a source itself (the driver does not see
        its data) or queries resume on a work directory an earlier engine wrote: then, as soon as
        they run, the earliest instant pushed, the rate source's now, or 0.
        """
        eng, inbox = self.engine, self.engine.inbox
        # (a source Spark reads itself is not seen here: ends and heartbeats alone must not fix the
        # first instant — close(until) before any run() fixed it at ``until``, every attached row
        # then "before the first instant")
        start = inbox.first if eng.external else inbox.fix_first()
        if start is None and (eng.external or not inbox.fresh):
            now = None
            if any(k == "rate" for k, _ in eng.external.values()):
                now = time.time_ns() // 1_000_000 // eng.catalog.time_unit.millis  # the rate source starts now
            start = inbox.guess_first(now)
        return start

    def _group(self, q: SparkQuery) -> list[SparkQuery]:
        """The queries starting now that run in one processor with ``q``: each joins the same two
        streams through windows (a shared window join serves them all per key: Hammad et al.,
        issue #12 item 5), reads the same sources split by the same keys from the same event on,
        and writes to memory.  ``[q]`` when it runs alone.
        """
        eng = self.engine
        saved = self._saved_group(q)
        if saved is not None:
            return saved  # it ran in a group before: the checkpoint holds exactly those queries' state
        sig = window_join_signature(q.plan, eng.join_intermediates) if eng.groups_joins else None
        if sig is None or q.sink != "memory" or q.native is not None or eng.preagg_of(q) is not None:
            return [q]
        if self._ran_alone(q):
            return [q]
        out = [q]
        for o in eng.queries.values():
            if o is q or o.stream is not None or o.group or o.sink != "memory":
                continue
            if self._ran_alone(o) or self._saved_group(o) is not None:
                continue
            if (
                o.native is None
                and eng.preagg_of(o) is None
                and window_join_signature(o.plan, eng.join_intermediates) == sig
            ):
                if (o.sources, o.part, o.seq_from, o.since) == (q.sources, q.part, q.seq_from, q.since):
                    out.append(o)
        return out

    def _ran_alone(self, q: SparkQuery) -> bool:
        """Whether the query has a checkpoint of its own (it resumes alone, as it ran)."""
        return (self.engine.workdir / q.name / "checkpoint").exists()

    def _saved_names(self, q: SparkQuery) -> tuple[list[str], Path] | None:
        """The names of the queries ``q`` ran with in one processor on this work directory (saved
        when the group first started, in their order then) and where; None if it never did.
        """
        for f in self.engine.workdir.glob(f"*/{MEMBERS}"):
            names = json.loads(f.read_text())
            if q.name in names:
                return names, f.parent
        return None

    def _saved_group(self, q: SparkQuery) -> list[SparkQuery] | None:
        """The queries ``q`` ran with in one processor (``_saved_names``); every member must be
        registered again: the checkpoint holds their state together.
        """
        eng = self.engine
        saved = self._saved_names(q)
        if saved is None:
            return None
        names, home = saved
        missing = [n for n in names if n not in eng.queries]
        if missing:
            others = ", ".join(n for n in names if n != q.name)
            raise SluiceError(
                f"query {q.name} ran in one Spark processor with {others} (checkpoint {home}): register "
                f"{', '.join(missing)} again before run(), or delete {home} to start {q.name} afresh"
            )
        return [eng.queries[n] for n in names]

    def start(self, q: SparkQuery) -> None:
        eng = self.engine
        q.preagg = eng.preagg_of(q)
        members = self._group(q) if q.preagg is None else [q]
        if len(members) > 1:
            names = tuple(m.name for m in members)
            for m in members:
                m.group = names
            saved = eng.workdir / q.label / MEMBERS
            if not saved.exists():
                write_atomic(saved, json.dumps(list(names)).encode())
        first = eng.inbox.first
        assert first is not None, "queries start once the first instant is fixed (run)"
        self._resume_seq(members)
        if q.since is not None:  # registered while running: its operators start there (as ``Since``)
            first = max(first, q.since)
        ddl, text = "\n".join(eng.ddl.values()), q.bound.text
        inputs = [(d.name, list(d.schema.types)) for d in map(eng._source, q.sources)]
        if q.preagg is not None:  # the processor runs the rewritten query over Spark's partials
            ddl, text = q.preagg.ddl, q.preagg.query
            inputs = [(s, q.preagg.types(eng._source(q.preagg.source))) for s in (UPPER, LOWER)]
        proc = SluiceProcessor(
            ddl,
            text,
            first,
            eng.catalog.time_unit.name,
            eng.seed,
            eng.slack,
            inputs,
            list(q.bound.plan.schema.types),
            eng.udfs,
            eng.scheduler,
            lag=1 if q.preagg is not None else 0,
            preagg=None if q.preagg is None else (q.preagg.source, len(q.preagg.keys)),
            held=sorted(k for k in eng.inbox.gates if eng.inbox.holds(k)),
            shared_join=eng.shared_join,
            join_intermediates=eng.join_intermediates,
            sharing=eng.sharing,
            key_memory_limit=eng.key_memory_limit,
            limits={m.name if len(members) > 1 else "q": (m.limits.weight, m.limits.min_precision) for m in members},
            ship_shed=ships(eng, q),
            members=[(m.name, m.bound.text, list(m.bound.plan.schema.types)) for m in members]
            if len(members) > 1
            else None,
        )
        q.processor = proc
        if q.native is None and q.part is not None:
            buckets = self.buckets(q)  # before the checkpoint directory exists
            write_atomic(self._buckets_file(q), str(buckets).encode())
        if q.native is not None:
            out = native_frame(eng, q)
        else:
            out = (
                input_frame(eng, q)
                .groupBy("ekey")
                .transformWithStateInPandas(
                    statefulProcessor=proc,
                    outputStructType=output_schema(q.bound.plan.schema.types)
                    if len(members) == 1
                    else group_output_schema([list(m.bound.plan.schema.types) for m in members]),
                    outputMode="Append",
                    timeMode="EventTime",
                )
            )
        checkpoint = str(eng.workdir / q.label / "checkpoint")
        w = out.writeStream.option("checkpointLocation", checkpoint).outputMode("append")
        if q.sink == "memory":
            # any query name is a label: Spark's table name takes only word characters
            q.table = f"sluice_{re.sub(r'[^0-9A-Za-z_]', '_', q.label)}_{uuid.uuid4().hex[:8]}"
            if q.collected is None:  # (started again after stop(): this engine's rows so far stay)
                q.collected = Collected()
            q.stream = w.queryName(q.table).foreachBatch(q.collected).start()
            for m in members:  # the others read the group's rows, their own
                if m is q:
                    continue
                m.table, m.collected, m.stream, m.processor, m.buckets = q.table, q.collected, q.stream, proc, q.buckets
        elif q.sink == "console":
            q.stream = w.format("console").option("truncate", "false").start()
        else:  # files, exactly once through the checkpoint
            assert q.out_path is not None
            q.stream = w.format(q.sink).option("path", str(q.out_path)).start()

    def run(self) -> None:
        """Hand Spark every event pushed so far and wait until each query has processed them."""
        eng, inbox = self.engine, self.engine.inbox
        start = self._first_instant()
        if start is None:
            return  # nothing can be released yet: the first instant is not fixed (design 004)
        inbox.push_static(start)
        for q in eng.queries.values():
            if q.stream is None:
                q.native = eng.native_of(q)
            if q.stream is None and q.native is None:  # give every input an event time from the start
                inbox.marker("s", start - 1)
        inbox.release()  # held streams' complete elements, then the markers (numbered after them)
        data, markers = inbox.pending()
        inbox.flush_data()
        if markers:
            # A running query plans micro-batches on its own, listing its sources one by one: a
            # marker file written while it lists could be seen before a data file written ahead of
            # it (pushed, or dropped into an attached directory), and complete an instant whose
            # elements then arrive late.  So every query that keeps state over such input takes it
            # in first — one reading an attached directory is started for that — and only then do
            # the markers appear.  A query not started yet needs that only if its first micro-batch
            # may take part of a directory (a per-trigger limit): otherwise it lists every file
            # there with the markers, attached rows first (seq −1), and saves a micro-batch.
            for q in eng.queries.values():
                if q.stream is None and q.native is None and self._reads_attached(q) and self._limited(q):
                    self.start(q)
            for q in eng.queries.values():  # (a native query reads no markers: nothing to order)
                if q.stream is not None and q.native is None and (data or self._reads_attached(q)):
                    self._settle(q)
        inbox.flush_markers()
        for q in eng.queries.values():
            if q.stream is None:
                self.start(q)
            self._settle(q)
            self._count_dropped(q)
        self.deliver_shed()

    def deliver_shed(self) -> None:
        """Hand what the keys' memory limit dropped since the last call to the ``on_shed``
        callbacks (``shed``): once per processor (a group's members share one).
        """
        eng, done = self.engine, set()
        if not eng.deliveries.callbacks:
            return
        for q in eng.queries.values():
            if q.stream is None or q.label in done or not ships(eng, q):
                continue
            done.add(q.label)
            if q.collected is not None:
                eng.deliveries.deliver(q.label, q.collected.undelivered())
            else:
                t = eng.inspector.output(q)
                new = eng.deliveries.new(
                    q.label, texts(t) if t is not None else [], eng.workdir / q.label / SHED_DELIVERED
                )
                eng.deliveries.deliver(q.label, new)

    def ship_shed(self) -> None:
        """``on_shed`` was called: a running processor that does not ship what it drops is
        stopped and started again at once, from its checkpoint, shipping it (never left stopped:
        a stopped query reads as not started).
        """
        eng = self.engine
        due = [
            q for q in eng.queries.values() if ships(eng, q) and q.processor is not None and q.processor.shipper is None
        ]
        for q in self._halt(due):
            self.start(q)  # (a group's one query starts its members too)

    @staticmethod
    def _halt(queries: list[SparkQuery]) -> list[SparkQuery]:
        """Stop the streaming queries of ``queries`` (a group's members share one: stopped once);
        the first query of each stopped.
        """
        stopped: dict[int, SparkQuery] = {}
        for q in queries:
            if q.stream is not None:
                if id(q.stream) not in stopped:
                    stopped[id(q.stream)] = q
                    q.stream.stop()
                q.stream = None  # (its group stays: started again, it re-forms from the saved members)
        return list(stopped.values())

    def _settle(self, q: SparkQuery) -> None:
        """Wait until the query has processed its input as of now.  A rate source never runs dry —
        ``processAllAvailable`` would wait for ever once its micro-batches take longer than the
        rows arriving meanwhile (a loaded machine) — so for it, until a micro-batch that began
        after this call has finished.
        """
        if not self._reads(q, "rate"):
            q.stream.processAllAvailable()
            return
        since = time.time()
        while True:
            p = q.stream.lastProgress
            began = p and datetime.fromisoformat(p["timestamp"].replace("Z", "+00:00")).timestamp()
            if began and began >= since:
                return
            if q.stream.exception() is not None:
                raise SluiceError(f"query {q.name} stopped: {q.stream.exception()}")
            if time.time() - since > RATE_WAIT:
                raise SluiceError(f"query {q.name}: no micro-batch over its rate source finished in {RATE_WAIT} s")
            time.sleep(0.05)

    def _reads_attached(self, q: SparkQuery) -> bool:
        """Whether a query reads a directory Spark lists itself (``attach_directory``); not a rate or
        socket source, which never runs out of input (draining one would never return).
        """
        return self._reads(q, "directory")

    def _limited(self, q: SparkQuery) -> bool:
        """Whether an attached directory the query reads takes its files a part per micro-batch
        (``maxFilesPerTrigger``, ``maxBytesPerTrigger``, ``latestFirst``: Spark's file-source options).
        """
        ext = self.engine.inbox.external
        limits = {"maxfilespertrigger", "maxbytespertrigger", "latestfirst"}
        for src in q.sources:
            kind, opts = ext.get(src.lower(), ("", {}))
            if kind == "directory" and limits & {k.lower() for k in opts.get("options", {})}:
                return True
        return False

    def _reads(self, q: SparkQuery, kind: str) -> bool:
        """Whether the query reads an attached source of ``kind`` (directory, rate, socket)."""
        ext = self.engine.inbox.external
        return any(ext.get(src.lower(), ("",))[0] == kind for src in q.sources)

    def _count_dropped(self, q: SparkQuery) -> None:
        """Elements Spark dropped behind its watermark (possible for attached sources only: pushed
        elements are checked by the driver first) are counted, never lost silently.
        """
        for p in q.stream.recentProgress:
            if p["batchId"] in q.seen_batches:
                continue
            q.seen_batches.add(p["batchId"])
            q.dropped += sum(int(op.get("numRowsDroppedByWatermark", 0)) for op in p.get("stateOperators", []))

    def _home(self, q: SparkQuery) -> tuple[list[str], Path]:
        """The queries of ``q``'s processor (itself alone, or its group) and their directory."""
        saved = self._saved_names(q)
        return saved if saved is not None else (list(q.group) or [q.name], self.engine.workdir / q.label)

    def check_leaving(self, q: SparkQuery, leaving: set[str]) -> None:
        """An unregistered query's processor must lose all its queries: their state is one checkpoint."""
        members, _ = self._home(q)
        staying = [n for n in members if n not in leaving]
        if staying:
            raise InUseError(
                f"query {q.name} runs in one Spark processor with {', '.join(staying)} (a shared window join: "
                f"their state is one checkpoint): unregister them together, unregister({', '.join(map(repr, members))})"
            )

    def remove(self, q: SparkQuery) -> None:
        """Stop an unregistered query and delete its checkpoint and what was saved beside it
        (a name registered again starts afresh); ``check_leaving`` first.
        """
        _, home = self._home(q)
        self.deliver_shed()  # (what it dropped since the last run: before it goes)
        if q.stream is not None:
            q.stream.stop()  # (a group's one query: stopping it again is a no-op)
            q.stream = None
        shutil.rmtree(home / "checkpoint", ignore_errors=True)
        for f in ("seq_from", "buckets", MEMBERS, SHED_DELIVERED):
            (home / f).unlink(missing_ok=True)
        self.engine.deliveries.forget(q.label)

    def stop(self) -> None:
        """Stop the streaming queries (their checkpoints stay; a new engine on the same workdir resumes)."""
        self.deliver_shed()  # (what they dropped since the last run)
        self._halt(list(self.engine.queries.values()))
