"""Files fed to an engine a chunk at a time, merged by timestamp: memory bounded by the chunk
size, not by the input (``sluice run``).

Each file is read in chunks (CSV/JSONL: ``chunk`` lines, Parquet: row batches); a chunk becomes a
typed batch through the one admission check (bad rows reported with ``file:line``), sorted by
timestamp (stable).  Files — of one source or of several — are merged: each round pushes, from
every file, the rows up to the smallest "latest timestamp read" among the files still open, so
no source runs ahead of another by more than a chunk.  A file out of order by more than a chunk
(and the engine's slack) has its stragglers rejected as late, counted — never lost silently.
A stream's punctuations (``sluice.io.punctuations``) are given to the engine in the round that
first pushes rows stamped after them, before those rows: never behind what it has released.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from sluice.backends.rows import table_to_batch
from sluice.catalog import Schema
from sluice.errors import SluiceError
from sluice.io.csv_input import csv_block
from sluice.io.jsonl_input import jsonl_block
from sluice.io.punctuations import Punctuation
from sluice.runtime.batch import sort_by_ts, ts_of

CHUNK = 65536  # rows per read


Position = tuple[int, int]  # (byte offset, line number) of a text file; (batches read, rows read) of Parquet


def _blocks(path: Path, chunk: int, at: Position) -> Iterator[tuple[int, bytes, Position]]:
    """(number of the block's first line, ``chunk`` whole lines as bytes, the position after
    them) — bytes, so a bad byte costs one line; read in large pieces, cut at a newline.
    """
    offset, first = at
    with path.open("rb") as f:
        f.seek(offset)
        rest = b""
        while True:
            parts, n = [rest], rest.count(b"\n")
            while n < chunk:
                piece = f.read(1 << 22)
                if not piece:
                    break
                parts.append(piece)
                n += piece.count(b"\n")
            data = b"".join(parts)
            if not data:
                return
            if n >= chunk:  # cut after the chunk-th newline
                cut = int(np.flatnonzero(np.frombuffer(data, np.uint8) == 10)[chunk - 1]) + 1
                block, rest = data[:cut], data[cut:]
            else:  # the end of the file (its last line may lack a newline)
                block, rest = data, b""
            lines = block.count(b"\n") + (0 if block.endswith(b"\n") else 1)
            offset += len(block)
            yield first, block, (offset, first + lines)
            first += lines


def read_chunks(
    path: str | Path,
    schema: Schema,
    relation: bool,
    name: str,
    tick_ns: int | None = None,
    chunk: int = CHUNK,
    at: Position | None = None,
) -> Iterator[tuple[pa.Table, list[str], Position]]:
    """A file as (typed batch, messages for its bad rows, position after it) per chunk, by its
    extension; ``at`` resumes from a position a previous chunk returned.
    """
    p = Path(path)
    suffix = p.suffix.lower()
    if suffix in (".csv", ".txt", ".dat"):
        for first, block, pos in _blocks(p, chunk, at or (0, 1)):
            batch, errors = csv_block(block, schema, relation, str(p), first)
            yield sort_by_ts(batch), errors, pos
    elif suffix in (".jsonl", ".json", ".ndjson"):
        for first, block, pos in _blocks(p, chunk, at or (0, 1)):
            batch, errors = jsonl_block(block, schema, relation, str(p), first)
            yield sort_by_ts(batch), errors, pos
    elif suffix == ".parquet":
        import pyarrow.parquet as pq

        skip, done = at or (0, 0)
        try:
            pf = pq.ParquetFile(p)
        except (pa.ArrowInvalid, OSError) as e:  # (an empty or broken file: said, not a traceback)
            raise SluiceError(f"{p}: cannot be read as Parquet: {e}") from None
        for k, rb in enumerate(pf.iter_batches(batch_size=chunk)):
            if k < skip:
                continue
            t = pa.Table.from_batches([rb])
            batch, errors = table_to_batch(t, schema, relation, "ts", "sign", f"{p}", tick_ns)
            # table_to_batch numbers rows from 1 within the chunk: make them the file's rows
            errors = [_renumber(m, done) for m in errors]
            done += t.num_rows
            yield sort_by_ts(batch), errors, (k + 1, done)
    else:
        raise ValueError(f"{p}: unknown file type {suffix!r} (use .csv, .jsonl or .parquet)")


def _renumber(msg: str, offset: int) -> str:
    head, sep, rest = msg.partition(", row ")
    num, colon, tail = rest.partition(":")
    return f"{head}, row {int(num) + offset}{colon}{tail}" if sep and num.isdigit() else msg


@dataclass
class _Feed:
    source: str
    path: str
    chunks: Iterator[tuple[pa.Table, list[str], Position]]
    pos: Position | None = None  # after the last chunk read
    pending: list[pa.Table] = field(default_factory=list)
    done: bool = False
    high: int = -(2**63)  # the latest timestamp read from it


class Feeder:
    """Files pushed into an engine round by round (see the module docstring); its state — each
    file's position and the rows read but not yet pushed — is what a checkpoint saves beside the
    engine's, so a restarted run reads on from exactly there.
    """

    def __init__(
        self,
        engine: Any,
        files: Sequence[tuple[str, str | Path]],
        schemas: dict[str, tuple[Schema, bool]],
        *,
        tick_ns: int | None = None,
        chunk: int = CHUNK,
        resume: list[dict[str, Any]] | None = None,
        punctuations: dict[str, list[Punctuation]] | None = None,
        punctuated: dict[str, int] | None = None,
        notes: list[str] | None = None,
    ) -> None:
        self.engine = engine
        self.total = 0
        # per stream: its punctuations (in order of ts) and how many were given (saved in a checkpoint)
        self.punctuations = punctuations or {}
        self.punctuated = dict(punctuated or dict.fromkeys(self.punctuations, 0))
        self.notes: list[str] = list(notes or [])  # punctuations the engine refused, with why (saved too)
        self.feeds: list[_Feed] = []
        for k, (name, path) in enumerate(files):
            schema, relation = schemas[name]
            saved = resume[k] if resume is not None else {}
            if saved and saved["path"] != str(path):
                raise ValueError(f"the checkpoint was taken with {saved['path']}, not {path}")
            chunks = read_chunks(path, schema, relation, name, tick_ns, chunk, saved.get("pos"))
            f = _Feed(name, str(path), chunks, saved.get("pos"))
            if saved:
                f.pending, f.done, f.high = list(saved["pending"]), saved["done"], saved["high"]
                self.total = saved["total"]
            self.feeds.append(f)

    def state(self) -> list[dict[str, Any]]:
        return [
            {"path": f.path, "pos": f.pos, "pending": f.pending, "done": f.done, "high": f.high, "total": self.total}
            for f in self.feeds
        ]

    def round(self) -> bool:
        """Read ahead on every open file, push what every file has passed, run the engine;
        False once everything was pushed.
        """
        feeds = self.feeds
        if not any(not f.done or f.pending for f in feeds):
            self._punctuate(None)  # (those after every row, or with no rows at all)
            return False
        for f in feeds:  # every open file has something read ahead
            while not f.done and not f.pending:
                try:
                    batch, errors, f.pos = next(f.chunks)
                except StopIteration:
                    f.done = True
                    break
                if errors:
                    self.engine.reject(f.source, errors)
                self.total += batch.num_rows + len(errors)
                if batch.num_rows:
                    f.pending.append(batch)
                    f.high = max(f.high, int(ts_of(batch)[-1]))
        open_highs = [f.high for f in feeds if not f.done]
        bound = min(open_highs) if open_highs else None
        due: dict[str, list[pa.Table]] = {}
        for f in feeds:
            if not f.pending:
                continue
            b = sort_by_ts(pa.concat_tables(f.pending) if len(f.pending) > 1 else f.pending[0])
            cut = b.num_rows if bound is None else int(np.searchsorted(ts_of(b), bound, side="right"))
            if cut:
                due.setdefault(f.source, []).append(b.slice(0, cut))
            f.pending = [b.slice(cut)] if cut < b.num_rows else []
        self._punctuate(bound)
        pushes = [(s, sort_by_ts(pa.concat_tables(ps)) if len(ps) > 1 else ps[0]) for s, ps in due.items()]
        # several files of one source: one push, in time order; the sources by their earliest row —
        # a run inside a push (a memory limit's slices) may fix the first instant, and no row of a
        # later push is then before it (design 004, "The first instant")
        for source, batch in sorted(pushes, key=lambda p: int(ts_of(p[1])[0])):
            self.engine.push_batch(source, batch)
        self.engine.run()
        return True

    def _punctuate(self, bound: int | None) -> None:
        """Give the engine the punctuations stamped ≤ ``bound`` (all, at the end), before the rows
        up to it: the rows pushed so far are stamped ≤ the previous bound, below each of them.
        """
        for source, ps in self.punctuations.items():
            k = self.punctuated[source]
            while k < len(ps) and (bound is None or ps[k].ts <= bound):
                p = ps[k]
                try:
                    self.engine.punctuate(source, p.column, values=p.values, upto=p.upto, ts=p.ts)
                except SluiceError as e:
                    self.notes.append(f"{p.where}: punctuation skipped: {e}")
                k += 1
            self.punctuated[source] = k


def feed(
    engine: Any,
    files: Sequence[tuple[str, str | Path]],
    schemas: dict[str, tuple[Schema, bool]],
    *,
    tick_ns: int | None = None,
    chunk: int = CHUNK,
) -> int:
    """Push ``(source, file)`` pairs into ``engine`` chunk by chunk, merged by timestamp, running
    the engine after each round; bad rows go to ``engine.reject``.  Returns the rows read.
    """
    feeder = Feeder(engine, files, schemas, tick_ns=tick_ns, chunk=chunk)
    while feeder.round():
        pass
    return feeder.total


__all__ = ["CHUNK", "Feeder", "feed", "read_chunks"]
