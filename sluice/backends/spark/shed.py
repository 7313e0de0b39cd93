"""What a key's memory limit dropped, handed to the driver's ``on_shed`` callbacks (issue #13,
design 021 "On Spark"): ``SparkEngine.on_shed(fn)`` as ``EmbeddedEngine.on_shed(fn)``.

A key's engine drops elements on an executor.  Once a callback is registered, each processor
started after it ships them back: one sign-0 note row per dropped batch, its text ``PREFIX`` and
JSON (the key, the stream, the reason, the elements as an Arrow IPC stream in base64) — a
report, never a rejection (``query.notes`` keeps it apart).  The driver hands each batch to the
callbacks once, at the end of ``run()``/``close()``, in the table the embedded engine hands them
(``__ts``, the sign, the stream's columns).  A memory sink's batches are taken out of its rows as
they arrive (``Collected``): they do not stay in the driver's memory; a file sink's stay in its
files and are told apart by their text, so each is delivered once however often the files are read.

>>> t = pa.table({"__ts": [3, 4], "__sign": pa.array([1, 1], pa.int8()), "c0": [7, 8]})
>>> stream, back, reason = read(note("k1", "s", t, "shed"))
>>> (stream, reason, back.equals(t))
('s', 'shed', True)
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

PREFIX = "sluice:key-shed "
SHED_DELIVERED = "shed-delivered"  # beside a file sink's checkpoint: the digests of the notes handed over

Callback = Callable[[str, pa.Table, str], None]


def note(key: str, stream: str, batch: pa.Table, reason: str) -> str:
    """The note row's text for one batch a key dropped."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as w:
        w.write_table(batch)
    data = base64.b64encode(sink.getvalue().to_pybytes()).decode("ascii")
    return PREFIX + json.dumps({"key": key, "stream": stream, "reason": reason, "ipc": data}, separators=(",", ":"))


def is_shed(text: str | None) -> bool:
    return text is not None and text.startswith(PREFIX)


def read(text: str) -> tuple[str, pa.Table, str]:
    """(stream, elements, reason) of a note."""
    r = json.loads(text[len(PREFIX) :])
    with pa.ipc.open_stream(base64.b64decode(r["ipc"])) as f:
        batch = f.read_all()
    return r["stream"], batch, r["reason"]


class Shipper:
    """A processor's side: collects a key engine's drops in a turn (``on_shed`` of its manager)."""

    def __init__(self) -> None:
        self.key = ""
        self.notes: list[str] = []

    def start(self, key: str) -> None:
        self.key, self.notes = key, []

    def __call__(self, stream: str, batch: pa.Table, reason: str) -> None:
        self.notes.append(note(self.key, stream, batch, reason))


class Deliveries:
    """The driver's side: the callbacks, what each processor's output has delivered, and the
    callbacks' failures (reported, never raised: as the embedded engine's).
    """

    def __init__(self) -> None:
        self.callbacks: list[Callback] = []
        self.delivered: dict[str, Counter[bytes]] = {}  # per processor (its label): notes delivered, by digest
        self.failures: dict[str, list[str]] = {}  # per processor: "callback …: failed on …"

    def new(self, label: str, notes: Iterable[str], saved: Path) -> list[str]:
        """The notes of a file sink's output not delivered yet (each text as often as it occurs),
        by their digests, which ``saved`` (beside the query's checkpoint) keeps: a new engine on
        the same workdir, reading the same files, hands none over again (a crash between a
        delivery and its line: that batch again — at least once).
        """
        done = self.delivered.get(label)
        if done is None:
            lines = saved.read_text().split() if saved.exists() else []
            done = self.delivered[label] = Counter(bytes.fromhex(h) for h in lines)
        met: Counter[bytes] = Counter()
        out, digests = [], []
        for n in notes:
            h = hashlib.sha1(n.encode()).digest()
            met[h] += 1
            if met[h] > done[h]:
                done[h] += 1
                out.append(n)
                digests.append(h.hex())
        if digests:
            saved.parent.mkdir(parents=True, exist_ok=True)
            with saved.open("a") as f:
                f.write("".join(d + "\n" for d in digests))
        return out

    def forget(self, label: str) -> None:
        """A query removed: a new one of its name starts afresh."""
        self.delivered.pop(label, None)
        self.failures.pop(label, None)

    def deliver(self, label: str, notes: Iterable[str]) -> None:
        for n in notes:
            stream, batch, reason = read(n)
            for fn in self.callbacks:
                try:
                    fn(stream, batch, reason)
                except Exception as e:  # the callback's failure is reported, never the engine's
                    self.failures.setdefault(label, []).append(
                        f"callback: on_shed callback {fn!r} failed on {batch.num_rows} {stream} elements: {e!r}"
                    )


def _mask(t: pa.Table) -> pa.ChunkedArray | None:
    """Which rows of an output table are shed notes (None: none is) — one Arrow pass: every
    memory sink's micro-batch goes through it.
    """
    if "note" not in t.column_names or t.num_rows == 0:
        return None
    mask = pc.fill_null(pc.starts_with(t.column("note"), PREFIX), False)
    return mask if pc.any(mask).as_py() else None


def texts(t: pa.Table) -> list[str]:
    """The shed notes of an output table (a file sink's, read back)."""
    mask = _mask(t)
    return [] if mask is None else t.column("note").filter(mask).to_pylist()


def take(t: pa.Table) -> tuple[pa.Table, list[str]]:
    """A micro-batch's rows without its shed notes, and those notes (``Collected``)."""
    mask = _mask(t)
    if mask is None:
        return t, []
    return t.filter(pc.invert(mask)), t.column("note").filter(mask).to_pylist()


def ships(eng: Any, q: Any) -> bool:
    """Whether ``q``'s processor ships what its keys drop: a callback exists, a key memory limit
    can drop anything, and the query keeps state (a native one drops nothing) and its output (a
    console's drops could go nowhere).
    """
    return (
        bool(eng.deliveries.callbacks) and eng.key_memory_limit is not None and q.native is None and q.sink != "console"
    )
