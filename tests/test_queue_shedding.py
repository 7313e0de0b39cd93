"""Load shedding from a queue (STREAM §5.2.2; design 021, "Shedding from the queues"): only the
elements no reader has read are dropped, so every reader of a shared queue sees the same ones,
and what is dropped is returned whole — the counters and ``on_shed`` get exactly it.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sluice.approx.waiting import entering
from sluice.datatypes import INTEGER
from sluice.runtime.batch import from_rows
from sluice.runtime.queue import Queue


def _values(t: pa.Table) -> list[int]:
    return t.column(2).to_pylist()


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 7), min_size=1, max_size=6),
    reads=st.lists(st.integers(0, 30), min_size=2, max_size=2),
    seed=st.integers(0, 1000),
)
def test_only_what_no_reader_read_is_dropped_and_readers_see_the_same_rest(
    sizes: list[int], reads: list[int], seed: int
) -> None:
    q = Queue("q", [INTEGER])
    readers = [q.reader(), q.reader()]
    v = 0
    for n in sizes:  # (several batches: a cut inside one of them)
        q.append(from_rows([(v + i, (v + i,)) for i in range(n)], [INTEGER]))
        v += n
    seen = [_values(r.read(k)) for r, k in zip(readers, reads, strict=True)]
    start = max(len(s) for s in seen)
    unread = _values(q.unread())
    assert unread == list(range(start, v)) and q.unread_count() == v - start
    keep = np.random.default_rng(seed).random(len(unread)) < 0.5
    dropped = _values(q.drop_unread(keep))
    assert dropped == [x for x, k in zip(unread, keep, strict=True) if not k]
    rest = [x for x, k in zip(unread, keep, strict=True) if k]
    for r, s in zip(readers, seen, strict=True):  # each reads on from where it was: what it skipped, then the kept
        assert s + _values(r.read()) == list(range(len(s))) + list(range(len(s), start)) + rest
    assert q.length == 0 and q.nbytes == 0
    q.append(from_rows([(v, (v,))], [INTEGER]))  # (appends go on after a cut)
    assert [_values(r.read()) for r in readers] == [[v], [v]]


def test_a_wrong_number_of_flags_is_an_internal_error() -> None:
    from sluice.errors import InternalError

    q = Queue("q", [INTEGER])
    q.reader()
    q.append(from_rows([(1, (1,)), (2, (2,))], [INTEGER]))
    with pytest.raises(InternalError, match="1 flags for 2 unread"):
        q.drop_unread(np.ones(1, dtype=bool))


def test_a_sources_waiting_elements_are_dropped_from_its_buffer_and_its_queue() -> None:
    from sluice import EmbeddedEngine

    eng = EmbeddedEngine(start=0)
    eng.execute("register stream S (A integer); register stream T (A integer)")
    eng.register_query("select * from S [Range 5], T [Range 5] where S.A = T.A", retain=0)
    eng.push("S", [(t, t) for t in range(10)])
    eng.run()  # (released up to 9 into its queue, where the join waits for T; 9 still buffered)
    src = eng.registry.source("S")
    assert src.waiting()[0] == 10 and list(src.waiting_ts()) == list(range(10))
    asked: list[int] = []

    def keep(n: int) -> np.ndarray:  # (asked once per place: the buffer's one, then the queue's nine)
        asked.append(n)
        return np.arange(n) % 2 == 0

    gone = src.drop_waiting(keep)
    assert asked == [1, 9] and sorted(gone.column(2).to_pylist()) == [1, 3, 5, 7]
    assert src.waiting()[0] == 6 and list(src.waiting_ts()) == [0, 2, 4, 6, 8, 9]
    assert src.admission.accepted == 6


def test_entering_counts_what_the_windows_will_hold_at_once() -> None:
    ts = np.arange(0, 3000, dtype=np.int64)
    assert entering(ts, 1001.0, 0) == 1001  # an empty window fills with a range of the backlog
    assert entering(ts, 1001.0, 1001) <= 2  # a full one: each entering pushes an older one out
    assert entering(ts, float("inf"), 50) == 3000  # no window: every one stays
    assert entering(np.empty(0, np.int64), 1001.0, 0) == 0
