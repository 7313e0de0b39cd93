"""The Spark driver's input: what is pushed, attached or declared static, before Spark reads it.

Pushed rows pass the one admission check (``sluice.backends.rows``) and the lateness rule
(``sluice.runtime.admission``, the embedded engine's sources' own: a partition key sees only its
own elements, so the driver decides for all of them) and wait as typed event batches, numbered
by arrival (``seq``); heartbeats, ends and the start are markers numbered in the same sequence.
Every stream is held (``gate.Gate``) and released at ``run()`` as the embedded engine's source
releases it — complete instants, checked against its k-constraints, punctuations and references;
``release`` numbers what it releases, then the markers given since the last run, so a marker
follows every element it completes.  Held rows outlive ``stop()`` (``save_held``).
``flush`` writes both as Parquet files into the work directory, which Spark reads as streams:
data before markers, so a micro-batch that sees a marker has seen the data before it.
"""

from __future__ import annotations

import base64
import pickle
import time
import uuid
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from sluice.backends.rows import TS_MAX, TS_MIN, admit_batch, rows_to_batch, static_refusal, static_rows, to_batch
from sluice.backends.spark.gate import Gate
from sluice.catalog import Catalog, Kind, SourceDef
from sluice.errors import InternalError, SluiceError
from sluice.io.atomic import write_atomic
from sluice.runtime.admission import Admission, first_instant
from sluice.runtime.batch import NEG_INF, to_elements, ts_of

STATIC_STEM = "part-static-"  # a static relation's one file in a work directory
HELD = "held"  # what the streams held at ``stop()``, one file a stream
RETIRED = "retired"  # the files of unregistered sources


class Inbox:
    def __init__(self, catalog: Catalog, workdir: Path, slack: int, start: int | None = None) -> None:
        self.catalog = catalog
        self.workdir = workdir
        self.slack = slack
        self.admission: dict[str, Admission] = {}  # per source, created at its first input
        # per stream: held and checked as the embedded engine's source does (``gate``), in
        # registration order (a stream references only streams registered before it)
        self.gates: dict[str, Gate] = {}
        # the latest instant any source released (ticks; what a query registered now starts after,
        # as on the embedded engine: ``since``)
        self.released_upto = NEG_INF
        self._told: dict[str, int] = {}  # per stream, the last "r" marker: released up to (ticks)
        # source -> (kind, options): "directory" (path, format, options), "rate", "socket"
        self.external: dict[str, tuple[str, dict[str, Any]]] = {}
        self.static: dict[str, list[tuple[Any, ...]]] = {}  # relation -> its fixed rows
        # events and markers numbered so far — on a workdir an earlier engine wrote, numbering
        # goes on from its last: its files are no new query's input, and a resumed query's
        # checkpoint already read them
        self.seq = _last_seq(workdir)
        self.released = self.seq  # events handed to Spark (flushed); later ones are every new query's input
        self.fresh = self.seq == 0  # no earlier engine wrote into the work directory
        # the first instant: given, or fixed as the embedded engine fixes it (``fix_first``)
        self.first = start
        # ``first`` not fixed by the rule but taken when queries had to start (``Runner._first_instant``):
        # the driver then rejects nothing by it (a resumed processor keeps its own first instant)
        self.guessed = False
        self._firsts: dict[str, int] = {}  # per source, its earliest element pushed before ``first`` is fixed
        self.completed: int | None = None  # the latest heartbeat
        self.ended: int | None = None  # where close() ended the input (ticks)
        self.min_ts: int | None = None
        self.last_ts: int | None = None
        self._batches: dict[str, list[pa.Table]] = {}  # source -> pending event batches
        # markers: (seq, kind, ts, source, note) — a punctuation's source and what it says (``note``)
        self._markers: list[tuple[int, str, int, str | None, str | None]] = []
        self._unnumbered: list[tuple[str, int, str | None, str | None]] = []  # given since the last ``release``
        self._static_written: set[str] = set()

    def source(self, name: str) -> SourceDef:
        try:
            d = self.catalog.lookup(name)
        except KeyError:
            raise SluiceError(f"no stream or relation named {name!r}") from None
        if not isinstance(d, SourceDef):
            raise SluiceError(f"{name} is a view; push to its streams")
        return d

    def admission_of(self, d: SourceDef) -> Admission:
        key = d.name.lower()
        if key not in self.admission:
            adm = self.admission[key] = Admission(d.name, self.slack, self.catalog.scale(d))
            if self.completed is not None:  # what heartbeats completed holds for every source (as embedded)
                adm.heartbeat(self.completed)
            if self.ended is not None:
                adm.close(self.ended)
        return self.admission[key]

    # -- sources Spark reads itself, and static relations --------------------------------
    def attach(self, d: SourceDef, kind: str, options: dict[str, Any]) -> None:
        self.external[d.name.lower()] = (kind, options)

    def set_static(self, d: SourceDef, rows: list[tuple[Any, ...]]) -> None:
        batch = static_rows(d, rows)
        if d.name.lower() in self.static or d.name.lower() in self.admission:
            raise SluiceError(f"{d.name} already has contents")
        self.static[d.name.lower()] = [tuple(r) for _, _, r in to_elements(batch)]

    def push_static(self, start: int | None) -> None:
        """Static relations enter the processors' engines once, inserted at the start: written
        once per work directory with ``seq`` −1, as an attached source's rows are, so that every
        query reads them — one registered after the first run, and one new to a restarted engine
        — and a query resuming its checkpoint, which read them already, not again (a restarted
        engine used to push them a second time: the resumed query's joins doubled).
        """
        first = start if start is not None else (self.first if self.first is not None else (self.min_ts or 0))
        for key, rows in self.static.items():
            if key in self._static_written or not rows:
                continue
            self._static_written.add(key)
            d = self.source(key)
            directory = self.workdir / "sources" / key
            self.admission_of(d).accepted += len(rows)
            if any(directory.glob(f"{STATIC_STEM}*.parquet")):
                continue  # an earlier engine on this work directory wrote them
            at = first // self.catalog.scale(d)  # the relation's unit; never after the start
            batch, errors = rows_to_batch([(at, "+", *r) for r in rows], d.schema, True, d.name)
            if errors:
                raise InternalError(f"static rows of {d.name} checked when attached: {errors[:3]}")
            n = batch.num_rows
            cols = {"seq": pa.array(np.full(n, -1, np.int64)), "ts": batch.column(0)}
            cols["sign"] = batch.column(1).cast(pa.int32())
            cols.update({f"c{j}": batch.column(2 + j) for j in range(len(d.schema))})
            self._write(directory, pa.table(cols), STATIC_STEM)

    def forget(self, d: SourceDef) -> None:
        """An unregistered source: its admission, attachment, static rows, pending batches and
        written files go (no query reads them; one registered again under the name starts empty).
        """
        key = d.name.lower()
        gate = self.gates.pop(key, None)
        if gate is not None:
            gate.unreference()
        self._told.pop(key, None)
        (self.workdir / HELD / f"{key}.parquet").unlink(missing_ok=True)
        (self.workdir / HELD / f"{key}.checks").unlink(missing_ok=True)
        for held in (self.admission, self.external, self.static, self._batches, self._firsts):
            held.pop(key, None)
        self._static_written.discard(key)
        directory = self.workdir / "sources" / key
        if directory.exists():  # kept aside, not deleted: its numbers stay counted (``_last_seq``)
            (self.workdir / RETIRED).mkdir(exist_ok=True)
            directory.rename(self.workdir / RETIRED / f"{key}-{uuid.uuid4().hex[:8]}")

    # -- pushed rows ---------------------------------------------------------------------
    def push(self, name: str, rows: Any, ts_column: str = "ts", sign_column: str = "sign") -> None:
        self._push(self._changeable(name), rows, ts_column, sign_column)

    def push_batch(self, name: str, batch: pa.Table) -> None:
        d = self._changeable(name)
        batch, errors = admit_batch(batch, d.schema, d.name)
        self._push_typed(d, batch, errors)

    def _changeable(self, name: str) -> SourceDef:
        d = self.source(name)
        if d.name.lower() in self.static:
            raise static_refusal(d.name)
        return d

    def _push(self, d: SourceDef, rows: Any, ts_column: str = "ts", sign_column: str = "sign") -> None:
        tick_ns = self.catalog.time_unit.millis * 1_000_000
        relation = d.kind is Kind.RELATION
        batch, errors = to_batch(rows, d.schema, relation, d.name, ts_column, sign_column, tick_ns)
        self._push_typed(d, batch, errors)

    def _push_typed(self, d: SourceDef, batch: pa.Table, errors: list[str]) -> None:
        adm = self.admission_of(d)
        for msg in errors:
            adm.reject("malformed", msg)
        batch = adm.admit(batch)  # in ticks
        if not self.guessed:  # (a relation's change before it: its processors' engines apply it there)
            batch = adm.from_start(batch, self.first, d.kind is Kind.RELATION)
        adm.accepted += batch.num_rows
        if batch.num_rows == 0:
            return
        ticks = ts_of(batch)
        self._seen(d, int(ticks.min()), int(ticks.max()))
        gate = self.gates.get(d.name.lower())
        if gate is not None:
            gate.hold(batch)  # (released, checked and numbered at ``run()``: ``release``)
        else:  # (a relation: its processors' engines hold and check it)
            self._queue(d, adm, batch)

    def _seen(self, d: SourceDef, lo: int, hi: int) -> None:
        """Elements stamped ``lo``..``hi`` (ticks) pushed to ``d``: the first instant and ``close()`` read it."""
        self.min_ts = lo if self.min_ts is None else min(self.min_ts, lo)
        if self.first is None:
            key = d.name.lower()
            self._firsts[key] = min(self._firsts.get(key, lo), lo)
        self.last_ts = hi if self.last_ts is None else max(self.last_ts, hi)

    def _queue(self, d: SourceDef, adm: Admission, batch: pa.Table) -> None:
        """Admitted elements (ticks) numbered and waiting to be written for Spark."""
        n = batch.num_rows
        seq = pa.array(np.arange(self.seq + 1, self.seq + 1 + n, dtype=np.int64))
        self.seq += n
        # as pushed: the processor scales
        ts = batch.column(0) if adm.scale == 1 else pa.array(ts_of(batch) // adm.scale)
        cols = {"seq": seq, "ts": ts, "sign": batch.column(1).cast(pa.int32())}
        cols.update({f"c{j}": batch.column(2 + j) for j in range(len(d.schema))})
        self._batches.setdefault(d.name.lower(), []).append(pa.table(cols))

    # -- held streams (``gate``) -----------------------------------------------------------
    def declare(self, d: SourceDef) -> None:
        """A stream registered: held here (``gate``), with what an earlier engine on the work
        directory held at ``stop()``; a FOREIGN KEY links it to the stream it references.
        """
        gate = self.gates[d.name.lower()] = Gate(d, self.admission_of(d))
        checks = self.workdir / HELD / f"{d.name.lower()}.checks"
        if checks.exists():  # (what an earlier engine's checks had seen: ``save_held``)
            try:
                state = pickle.loads(checks.read_bytes())
                first = state["first"]
                gate.restore(state, str(checks))
            except Exception as e:  # (another version's, or damaged: the stream is registered anyway)
                warnings.warn(f"{checks}: unreadable ({type(e).__name__}: {e}), not carried over", stacklevel=3)
            else:
                if self.first is None and gate.released > NEG_INF:
                    # released there: the first instant was fixed there too, and stays (a replayed
                    # batch's elements before it are no notes; design 004, "The first instant")
                    self.first, self.guessed = first
            checks.unlink()
        saved = self.workdir / HELD / f"{d.name.lower()}.parquet"
        if saved.exists():
            held = pq.read_table(saved)
            saved.unlink()
            want = rows_to_batch([], d.schema, False, d.name)[0].schema
            if held.schema.remove_metadata() != want.remove_metadata():
                warnings.warn(
                    f"{saved}: rows held for a stream {d.name} of another schema ({held.schema.types} against "
                    f"{want.types}), skipped",
                    stacklevel=2,
                )
            elif held.num_rows:  # (pushed to an engine before: as if pushed to this one)
                gate.hold(held)
                ticks = ts_of(held)
                lo, hi = int(ticks.min()), int(ticks.max())
                self._seen(d, lo, hi)
                gate.adm.max_seen = max(gate.adm.max_seen, hi)
                gate.adm.accepted += held.num_rows
        scale = self.catalog.scale(d)
        for c in d.constraints:
            if c.kind == "REFERENCES":  # (the catalog checked it names a stream registered before)
                gate.reference(self.gates[c.ref.lower()], c, c.k * scale)

    def save_held(self) -> None:
        """What the streams hold (pushed, their instants not complete) into the work directory,
        where the next engine on it takes them back (``declare``): nothing pushed is lost at
        ``stop()``.  Beside them, what their checks have seen (``Gate.state``).
        """
        for key, gate in self.gates.items():
            path = self.workdir / HELD / f"{key}.parquet"
            if gate.pending:
                self._write_file(path, pa.concat_tables(gate.pending))
            else:  # (an engine stopped before: its file is stale now)
                path.unlink(missing_ok=True)
            checks, state = self.workdir / HELD / f"{key}.checks", gate.state()
            if state is None:
                checks.unlink(missing_ok=True)
            else:
                state["first"] = (self.first, self.guessed)
                write_atomic(checks, pickle.dumps(state))

    def since(self) -> int | None:
        """Where a query registered now starts (ticks), as on the embedded engine: after the
        latest instant any source released; None before anything was (it reads from the start).
        """
        return None if self.released_upto == NEG_INF else self.released_upto + 1

    def punctuate(self, d: SourceDef, column: str, values: np.ndarray | None, upto: Any, ts: int | None) -> int:
        """A punctuation on a held stream, as ``EmbeddedEngine.punctuate`` (``ts`` in its unit;
        default: the latest instant pushed to it or released).  Returns the ``ts`` it holds from.
        """
        gate, adm = self.gates[d.name.lower()], self.admission_of(d)
        if ts is None:
            if max(adm.max_seen, gate.released) == NEG_INF:
                raise SluiceError(
                    f"{d.name}: nothing was pushed to it yet, so a punctuation has no latest instant to "
                    "follow: give ts=… (no element stamped after it has those values)"
                )
            ts = max(adm.max_seen, gate.released) // adm.scale
        tick = (int(ts) + 1) * adm.scale - 1  # (the instant's last tick)
        gate.punctuate(column, tick, values, upto)
        # the processors' joins and aggregates read it too (design 023, "On Spark")
        self.marker("p", tick, d.name, punctuation_note(column, tick, values, upto))
        return int(ts)

    def release(self) -> None:
        """At ``run()``, once the first instant is fixed: each held stream's complete elements,
        checked — referencing streams before the streams they reference — then the markers given
        since the last run, numbered after them.
        """
        for key, gate in reversed(self.gates.items()):
            out = gate.release()
            d = self.source(key)
            if out is not None:
                self._queue(d, self.admission_of(d), out)
            self.released_upto = max(self.released_upto, gate.released)
            if gate.released > self._told.get(key, NEG_INF):
                # Spark's watermark must know what the stream completed: its released rows alone
                # would put it up to slack + 1 ticks behind (the rows of an incomplete instant stay here)
                self._told[key] = gate.released
                self.marker("r", gate.released, d.name)
        for key, adm in self.admission.items():  # (relations: released as far as complete)
            if key not in self.gates and key not in self.external:
                self.released_upto = max(self.released_upto, adm.complete_upto())
        for kind, ts, src, note in self._unnumbered:
            self.seq += 1
            self._markers.append((self.seq, kind, ts, src, note))
        self._unnumbered.clear()

    def holds(self, name: str) -> bool:
        """Whether the driver holds ``name``'s elements and releases them (a pushed stream; not an
        attached one, whose rows Spark reads itself): it completes as far as released (``r``).
        """
        key = name.lower()
        return key in self.gates and key not in self.external

    def held(self, name: str) -> int:
        """Elements pushed to ``name`` and held (not yet released to Spark)."""
        gate = self.gates.get(name.lower())
        return 0 if gate is None else gate.waiting()

    def reject(self, name: str, messages: Sequence[str]) -> None:
        """Count rows rejected before they reached the engine (a reader's bad lines), as malformed."""
        adm = self.admission_of(self.source(name))
        for msg in messages:
            adm.reject("malformed", msg)

    def messages(self) -> list[str]:
        return [m for adm in self.admission.values() for m in adm.messages]

    # -- markers -------------------------------------------------------------------------
    def marker(self, kind: str, ts: int, src: str | None = None, note: str | None = None) -> None:
        """A marker: ``h`` heartbeat, ``e`` end, ``s`` start (every input gets an event time from
        it), ``r`` stream ``src`` released up to ``ts`` (ticks; its input's event time and, in the
        processors of queries reading it, its completion), ``p`` a
        punctuation of stream ``src`` (``note``: ``punctuation_note``; no event time) —
        numbered at the next ``release``, after the elements released there.  (An element pushed
        after a heartbeat is stamped after it — else late — so numbering it first is safe.)
        """
        self._unnumbered.append((kind, ts, src, note))

    def complete(self, kind: str, ts: int, start: int | None) -> None:
        """Instants up to ``ts`` are complete (``h``) or the input ends there (``e``): static rows
        go in first (before any instant completes), then the marker, and every source's lateness
        rule learns it.
        """
        if isinstance(ts, bool) or not isinstance(ts, int) or not TS_MIN <= ts <= TS_MAX:
            raise SluiceError(f"a heartbeat is an integer timestamp in {TS_MIN}..{TS_MAX}, not {ts!r}")
        self.marker(kind, ts)
        if kind == "e":  # (ticks, as the embedded engine's close: every source complete to it or its last)
            self.ended = ts if self.ended is None else max(self.ended, ts)
        else:
            self.completed = ts if self.completed is None else max(self.completed, ts)
        for adm in self.admission.values():
            if kind == "e":
                adm.close(ts)
            else:
                adm.heartbeat(ts)
        if self.first is not None:  # (else ``Runner.run`` writes them once it is fixed, before the markers)
            self.push_static(start)

    def fix_first(self) -> int | None:
        """The first instant by the embedded engine's rule (``admission.first_instant``, design
        004), from what was pushed (a source never pushed is complete to what heartbeats and ends
        said); None: nothing can be released yet.
        """
        if self.first is None:
            waiting = ((lo, self.admission[k].complete_upto()) for k, lo in self._firsts.items())
            self.first = first_instant(waiting, (self.admission_of(d).complete_upto() for d in self.catalog.sources))
            if self.first is not None:
                self._firsts.clear()
        return self.first

    def guess_first(self, fallback: int | None) -> int:
        """When Spark reads a source itself, or queries resume on an earlier engine's work
        directory, the driver cannot see all the data: the first instant is then the earliest
        instant pushed, else ``fallback``, else 0 — a guess, by which the driver rejects nothing.
        """
        self.first = self.min_ts if self.min_ts is not None else (fallback or 0)
        self.guessed = True
        return self.first

    # -- to Spark ------------------------------------------------------------------------
    def pending(self) -> tuple[bool, bool]:
        """Whether data, and markers, wait to be written (after ``release``)."""
        return any(self._batches.values()), bool(self._markers)

    def flush_data(self) -> None:
        """Write the pending data files, one a source."""
        for src, batches in self._batches.items():
            if batches:
                self._write(self.workdir / "sources" / src, pa.concat_tables(batches))
                batches.clear()

    def flush_markers(self) -> None:
        """Write the pending markers (after their data: ``SparkRunner.run`` says when)."""
        if self._markers:
            seq, kind, ts, src, note = zip(*self._markers, strict=True)
            cols = {"seq": pa.array(seq, pa.int64()), "kind": pa.array(kind), "ts": pa.array(ts, pa.int64())}
            cols.update(src=pa.array(src, pa.string()), note=pa.array(note, pa.string()))
            self._write(self.workdir / "markers", pa.table(cols))
            self._markers.clear()
        self.released = self.seq

    def _write(self, directory: Path, table: pa.Table, prefix: str = "part-") -> None:
        # unique across engines on one workdir (a restarted engine keeps adding files)
        self._write_file(directory / f"{prefix}{time.time_ns():020d}-{uuid.uuid4().hex[:8]}.parquet", table)

    @staticmethod
    def _write_file(path: Path, table: pa.Table) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}")
        pq.write_table(table, tmp)
        tmp.rename(path)  # appears atomically


def punctuation_note(column: str, tick: int, values: np.ndarray | None, upto: Any) -> str:
    """A punctuation as a marker carries it to the processors (``read_punctuation``)."""
    return base64.b64encode(pickle.dumps((column, tick, values, upto))).decode("ascii")


def read_punctuation(note: str) -> tuple[str, int, np.ndarray | None, Any]:
    column, tick, values, upto = pickle.loads(base64.b64decode(note))
    return column, tick, values, upto


def _last_seq(workdir: Path) -> int:
    """The highest ``seq`` in the event and marker files under ``workdir`` (0: none; retired
    sources' files count: a resumed query's saved start may lie among their numbers), from the
    Parquet footers' statistics (no data read).  Only the inbox's own files count (``part-*``: not
    a write's hidden temporary, left behind by a kill); one it cannot read is reported and skipped.
    """
    last = 0
    dirs = ("sources/*", f"{RETIRED}/*", "markers")
    for f in [f for d in dirs for f in workdir.glob(f"{d}/part-*.parquet")]:
        try:
            meta = pq.ParquetFile(f).metadata
            j = meta.schema.to_arrow_schema().get_field_index("seq")
            if j < 0:
                continue  # not an inbox file (a query's output written under sources/)
            stats = [meta.row_group(g).column(j).statistics for g in range(meta.num_row_groups)]
            if all(st is not None and st.has_min_max for st in stats):
                last = max([last, *(int(st.max) for st in stats)])
            else:  # written without statistics: read the column
                last = max(last, int(pc.max(pq.read_table(f, columns=["seq"]).column(0)).as_py() or 0))
        except (OSError, pa.ArrowInvalid) as e:
            warnings.warn(f"{f}: not a readable input file of this work directory, skipped ({e})", stacklevel=2)
    return last
