"""What makes an embedded server's data survive a kill: a checkpoint of the whole engine and a
journal of every push and heartbeat accepted since.

* A push is answered only after its record (the admitted batch, the rejection messages, any
  heartbeat) is in the journal and the journal is on disk (``fsync``): nothing accepted is lost.
  Pushes taken together (the session's group commit) share one write and one ``fsync``.
* Any other change — a registration, an unregistration, a control setting — writes a checkpoint
  (``EmbeddedEngine.checkpoint``: temp file + rename) and starts a new journal; so does a journal
  past ``max_bytes``.  Checkpoint and journal carry a generation number: ``engine.G.ckpt`` holds
  everything before ``journal.G.log``; older generations are deleted once a newer is on disk.
* A restarted server loads the newest checkpoint and replays its journal: the engine is where it
  was when the last push was answered, its queries' kept output included (the engine is
  deterministic in what it answers), so output goes on with neither loss nor repeat.  A record cut
  short by the kill was never answered and is ignored.

>>> import tempfile
>>> from sluice.backends.embedded import EmbeddedEngine
>>> d = tempfile.mkdtemp()
>>> eng = EmbeddedEngine(); _ = eng.execute("register stream S (A integer)")
>>> q = eng.register_query("select A from S", "q")
>>> j = Journal(d); j.checkpoint(eng)
>>> import pyarrow as pa
>>> from sluice.runtime.batch import make
>>> j.append([Record("push", "S", make([1], 1, [pa.array([5])], list(eng.catalog.lookup("S").schema.types)))])
>>> j.close(); eng2 = j.load(); j.replay(eng2)
1
>>> eng2.heartbeat(1); _ = eng2.run(); eng2.results("q")
[Element(ts=1, sign='+', row=(5,))]
"""

from __future__ import annotations

import json
import os
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from sluice.backends.embedded import EmbeddedEngine
from sluice.errors import SluiceError

MAX_BYTES = 64 * 1024 * 1024  # a journal longer than this is folded into a new checkpoint


HEADER = 16  # a record: head length (u32), body length (u64), CRC-32 of head and body (u32)


@dataclass
class Record:
    """One accepted push (its admitted batch and rejection messages), heartbeat or punctuation."""

    kind: str  # "push" | "heartbeat" | "start" | "punctuation"
    name: str = ""
    batch: pa.Table | None = None
    rejected: list[str] = field(default_factory=list)
    heartbeat: int | None = None
    start: int | None = None  # "start": the engine fixed its first instant here (design 004)
    punctuation: tuple[str, list[Any] | None, Any, int] | None = None  # (column, values, upto, ts)

    def apply(self, engine: Any) -> None:
        """Put the record into ``engine`` (a replay, or the system streams' sampler)."""
        if self.start is not None and engine.ctx.start is None:
            # where the live engine fixed it, between the pushes before and after — a replay runs
            # once, at its end, and would fix it from every push (design 004, "The first instant")
            engine.ctx.start = self.start
        if self.rejected:
            engine.reject(self.name, self.rejected)
        if self.batch is not None and self.batch.num_rows:
            engine.push_batch(self.name, self.batch)
        if self.punctuation is not None:
            column, values, upto, ts = self.punctuation
            engine.punctuate(self.name, column, values=values, upto=upto, ts=ts)
        if self.heartbeat is not None:
            if self.name:
                engine.heartbeat(self.heartbeat, self.name)
            else:
                engine.heartbeat(self.heartbeat)

    def encode(self) -> bytes:
        head = json.dumps(
            {
                "kind": self.kind,
                "name": self.name,
                "rejected": self.rejected,
                "heartbeat": self.heartbeat,
                "start": self.start,
                "punctuation": self.punctuation,
            }
        ).encode()
        body = b""
        if self.batch is not None:
            sink = pa.BufferOutputStream()
            with pa.ipc.new_stream(sink, self.batch.schema) as w:
                w.write_table(self.batch)
            body = sink.getvalue().to_pybytes()
        payload = head + body
        return struct.pack("<IQI", len(head), len(body), zlib.crc32(payload)) + payload


class Journal:
    def __init__(self, directory: str | Path, max_bytes: int = MAX_BYTES) -> None:
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.max_bytes = max_bytes
        gens = self._generations()
        self.generation = gens[-1] if gens else 0
        self._file: Any = None

    def _generations(self) -> list[int]:
        return sorted(int(p.name.split(".")[1]) for p in self.dir.glob("engine.*.ckpt"))

    def _ckpt(self, g: int) -> Path:
        return self.dir / f"engine.{g}.ckpt"

    def _log(self, g: int) -> Path:
        return self.dir / f"journal.{g}.log"

    @property
    def exists(self) -> bool:
        return self.generation > 0

    def load(self) -> EmbeddedEngine:
        """The engine of the newest checkpoint (its journal still to replay: :meth:`replay`)."""
        return EmbeddedEngine.restore(self._ckpt(self.generation))

    def records(self) -> Iterator[Record]:
        """The journal's records in order; a record cut short (the kill came mid-write) ends it."""
        path = self._log(self.generation)
        if not path.exists():
            return
        data = path.read_bytes()
        at = 0
        while at + HEADER <= len(data):
            hlen, blen, crc = struct.unpack_from("<IQI", data, at)
            end = at + HEADER + hlen + blen
            if end > len(data) or zlib.crc32(data[at + HEADER : end]) != crc:
                return  # torn or damaged (power lost mid-write): nothing after it was answered
            head = json.loads(data[at + HEADER : at + HEADER + hlen])
            batch = pa.ipc.open_stream(pa.py_buffer(data[at + HEADER + hlen : end])).read_all() if blen else None
            punct = head.get("punctuation")
            yield Record(
                head["kind"],
                head["name"],
                batch,
                head["rejected"],
                head["heartbeat"],
                head.get("start"),
                tuple(punct) if punct is not None else None,
            )
            at = end

    def replay(self, engine: EmbeddedEngine) -> int:
        """Put the journal's pushes and heartbeats into ``engine`` (restored from the checkpoint),
        and its first instant where the live engine fixed it; returns the pushes and heartbeats.
        """
        n = 0
        for r in self.records():
            r.apply(engine)
            n += r.kind != "start"
        engine.run()
        return n

    def append(self, records: list[Record]) -> None:
        """Write records and wait until they are on disk (then their pushes may be answered)."""
        if not records:
            return
        if self._file is None:
            self._file = self._log(self.generation).open("ab")
        start = self._file.tell()
        try:
            self._file.write(b"".join(r.encode() for r in records))
            self._file.flush()
            os.fsync(self._file.fileno())
        except OSError:
            # (disk full…) cut back to the last whole record, so later appends follow it cleanly
            self._file.truncate(start)
            self._file.seek(start)
            raise

    @property
    def full(self) -> bool:
        return self._file is not None and self._file.tell() > self.max_bytes

    def checkpoint(self, engine: EmbeddedEngine) -> None:
        """The engine's whole state as the next generation, with an empty journal after it."""
        g = self.generation + 1
        try:
            engine.checkpoint(self._ckpt(g))
        except SluiceError as e:
            raise SluiceError(f"the server's state cannot be checkpointed: {e}") from None
        if self._file is not None:
            self._file.close()
            self._file = None
        self.generation = g
        for old in self._generations():  # the new one is on disk: the older ones are not needed
            if old < g:
                self._ckpt(old).unlink(missing_ok=True)
                self._log(old).unlink(missing_ok=True)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
