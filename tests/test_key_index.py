"""The shared join's key index (``sluice/runtime/key_index.py``): after any appends (NULL keys
among them) and drops from the front, a probe returns exactly the positions a scan of the range
finds, in (query, position) order; key codes equate what Arrow's join equates.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st
from sluice.backends.embedded import EmbeddedEngine
from sluice.runtime.key_index import KeyIndex, key_codes
from sluice.runtime.operators.shared_join import SharedWindowJoin


def _scan(codes: dict[int, int], q: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> list[tuple[int, int]]:
    return [(k, p) for k in range(len(q)) for p in range(int(lo[k]), int(hi[k])) if codes.get(p) == q[k]]


@settings(max_examples=200, deadline=None)
@given(
    steps=st.lists(
        st.one_of(
            st.tuples(st.just("append"), st.lists(st.one_of(st.none(), st.integers(0, 5)), min_size=0, max_size=12)),
            st.tuples(st.just("drop"), st.integers(0, 6)),
        ),
        max_size=25,
    ),
    probes=st.lists(st.tuples(st.integers(0, 5), st.integers(-3, 80), st.integers(0, 40)), max_size=12),
)
def test_a_probe_finds_what_a_scan_of_its_range_finds(steps: list[tuple[str, object]], probes: list[tuple]) -> None:
    ix = KeyIndex()
    held: dict[int, int] = {}  # position → code, of the non-NULL keys held
    for kind, arg in steps:
        if kind == "append":
            keys = list(arg)  # type: ignore[call-overload]
            valid = np.array([k is not None for k in keys], bool)
            codes = np.array([0 if k is None else k for k in keys], np.int64)
            for n, k in enumerate(keys):
                if k is not None:
                    held[ix.end + n] = k
            ix.append(codes, None if valid.all() else valid)
        else:
            base = ix.base + int(arg)  # type: ignore[call-overload]
            ix.drop_before(base)
            held = {p: c for p, c in held.items() if p >= ix.base}
        assert len(ix.runs) <= 2 * max(1, ix.end - ix.base).bit_length() + 1
    q = np.array([c for c, _, _ in probes], np.int64)
    lo = np.array([max(a, ix.base) for _, a, _ in probes], np.int64)
    hi = np.array([max(a, ix.base) + n for _, a, n in probes], np.int64)
    got_q, got_j = ix.probe(q, lo, hi)
    assert list(zip(got_q.tolist(), got_j.tolist(), strict=True)) == _scan(held, q, lo, hi)


def test_codes_equate_what_the_join_equates() -> None:
    ints, valid = key_codes(pa.chunked_array([[1, None, 3]], pa.int64()), mixed=False)
    assert ints[0] == 1 and ints[2] == 3 and valid is not None and valid.tolist() == [True, False, True]
    # a float key compared with an integer one: exactly (3 equals 3.0, one zero; 0.5 equals no
    # integer, and 2^53 + 1 is not 2^53 — a double would round it)
    f, fv = key_codes(pa.array([3.0, -0.0, 0.5, 9007199254740992.0]), mixed=True)
    i, _ = key_codes(pa.array([3, 0, 1, 2**53 + 1]), mixed=True)
    assert f[0] == i[0] and f[1] == i[1] and fv is not None and not fv[2] and f[3] != i[3]
    b, none = key_codes(pa.array([True, False]), mixed=False)
    assert b.tolist() == [1, 0] and none is None


def test_a_shared_join_on_a_float_and_an_integer_key_gives_the_unshared_answer() -> None:
    """The index's codes through the engine: 3 = 3.0, 0 = −0.0, NULL matches nothing."""

    def run(shared_join: str) -> list[list[object]]:
        eng = EmbeddedEngine(shared_join=shared_join, start=0)
        eng.execute("REGISTER STREAM A (K float, V integer); REGISTER STREAM B (K integer, W integer)")
        qs = [eng.register_query(f"SELECT * FROM A [Range {w}], B [Range {w}] WHERE A.K = B.K") for w in (1, 4)]
        a = [(0, 3.0, 1), (1, -0.0, 2), (2, None, 3), (3, 0.5, 4), (5, 3.0, 5)]
        b = [(0, 3, 10), (1, 0, 11), (2, None, 12), (4, 0, 13), (6, 3, 14)]
        for t in range(8):
            eng.push("A", [r for r in a if r[0] == t])
            eng.push("B", [r for r in b if r[0] == t])
            eng.run()
        eng.close(12)
        joins = [o for o in eng.operators if isinstance(o, SharedWindowJoin)]
        assert all(o.left.index is not None and o.right.index is not None for o in joins)
        return [sorted(map(repr, q.results())) for q in qs]

    assert run("greedy") == run("off")
    assert any(run("greedy"))
