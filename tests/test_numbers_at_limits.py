"""Numbers at their limits (``sluice.plan.numeric``, design note 011): NaN is NULL, ±infinity a
value, an integer beyond 64 bits an error of its row — the same on the engine and the reference
evaluator, and never an error of the engine: it keeps running, other rows and queries go on, and
every dropped row is counted with its reason.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sluice.backends.embedded import EmbeddedEngine
from sluice.catalog import Catalog
from sluice.plan import bind_query, execute
from sluice.reference import evaluate
from sluice.reference.compare import diff_outputs

BIG = 2**62
INF = math.inf
DDL = "register stream S (K bigint, V float, N varchar(3));"


def _cat() -> Catalog:
    c = Catalog()
    execute(c, DDL)
    return c


def _both(query: str, rows: list[tuple[Any, ...]], until: int = 12) -> tuple[list[Any], list[Any], EmbeddedEngine]:
    """(engine output, oracle output, engine) for ``rows`` = (ts, K, V, N) pushed at once."""
    eng = EmbeddedEngine(_cat(), start=0)
    q = eng.register_query(query)
    eng.push("S", rows)
    eng.close(until)
    clean = [(t, (k, None if isinstance(v, float) and v != v else v, n)) for t, k, v, n in rows]
    ref = evaluate(bind_query(_cat(), query), {"S": clean}, start=0, until=until)
    return q.results(), ref, eng


ROWS = [
    (1, 1, 1.0, "a"),
    (2, 1, math.nan, "b"),
    (3, 1, INF, "c"),
    (4, 2, -INF, "d"),
    (5, 2, INF, "e"),
    (6, BIG, 2.5, "f"),
    (7, BIG, 1e308, "g"),
    (8, BIG, 1e308, "h"),
    (9, 3, 0.1, "i"),
]

QUERIES = [
    "select K, sum(V), avg(V), min(V), max(V), count(V) from S [Range 3] group by K",
    "select sum(V), avg(V) from S [Range Unbounded]",
    "select K * 2, V * 0, V - V from S",  # K*2 overflows for BIG: those rows are dropped
    "Istream(select K + K, V from S [Range 2] where V > 0)",
    "select sum(K) from S [Range 4]",  # 2·2^62 is beyond 64 bits: no row while it is
    "select K, sum(K), count(*) from S [Range 2] group by K",
    "select K, max(N), sum(V) from S [Rows 3] group by K",
    # MIN/MAX over a union take the value-level path, whose grouped sums must not wrap past 64 bits
    "select max(N), sum(K) from (select * from S [Range 3] union all select * from S [Range 1]) as U",
    "select K, min(N), sum(K) from (select * from S [Range 3] union all select * from S [Range 1]) as U group by K",
    "select distinct V from S [Range 5]",
    "select K / 0, floor(V), ceil(V), round(V), abs(K) from S",
]


@pytest.mark.parametrize("query", QUERIES)
def test_engine_equals_the_definition_at_the_limits(query: str) -> None:
    got, ref, _ = _both(query, ROWS)
    assert not diff_outputs(ref, got), diff_outputs(ref, got)


def test_nan_in_input_is_null_and_the_engine_recovers() -> None:
    got, _, eng = _both("select K, sum(V), avg(V) from S [Range 2] group by K", ROWS)
    assert eng.rejected() == []  # NaN is not an error: it is NULL
    # the window after the infinities: sum is finite again (no stale NaN or infinity)
    eng.push("S", [(20, 1, 2.0, "z")])
    eng.close(23)
    assert got[-1].row == (3, 0.1, 0.1)
    assert [e for e in eng.queries[next(iter(eng.queries))].results() if e.ts == 20][-1].row == (1, 2.0, 2.0)


def test_overflowing_rows_are_dropped_counted_and_named() -> None:
    got, _, eng = _both("select K * 2 from S", ROWS)
    assert [e.row for e in got] == [(2,), (2,), (2,), (4,), (4,), (6,)]
    msgs = eng.rejected()
    assert len(msgs) == 3 and all("integer overflow" in m and "Project" in m and "q1" in m for m in msgs)
    (op,) = [o for o in eng.statistics().operators if o.kind == "Project"]
    assert op.rejected == 3


def test_a_sum_beyond_64_bits_hides_the_row_and_comes_back() -> None:
    eng = EmbeddedEngine(_cat(), start=0)
    q = eng.register_query("select sum(K) from S [Range 2]")
    eng.push("S", [(1, BIG, 0.0, "a"), (2, BIG, 0.0, "b"), (5, 7, 0.0, "c")])
    eng.close(6)
    assert [(e.ts, e.sign, e.row) for e in q.results()] == [
        (0, "+", (None,)),
        (1, "-", (None,)),
        (1, "+", (BIG,)),
        (2, "-", (BIG,)),  # 2^63: no row
        (4, "+", (BIG,)),  # the first left the window ([Range 2] at 4 holds 2..4)
        (5, "-", (BIG,)),
        (5, "+", (7,)),
    ]
    assert any("SUM outside BIGINT's range" in m for m in eng.rejected())


def test_a_failing_udf_drops_its_row_not_the_engine() -> None:
    eng = EmbeddedEngine(_cat(), start=0)
    eng.register_function("inv", lambda k: 10 // k, "bigint")
    bad = eng.register_query("select inv(K) from S")
    good = eng.register_query("select K from S")
    eng.push("S", [(1, 5, 0.0, "a"), (2, 0, 0.0, "b"), (3, 2, 0.0, "c")])
    eng.close()
    assert [e.row for e in bad.results()] == [(2,), (5,)]
    assert [e.row for e in good.results()] == [(5,), (0,), (2,)]
    (msg,) = eng.rejected()
    assert "INV: ZeroDivisionError" in msg and "row (0, 0.0, 'b') at 2" in msg


# -- admission: one check for every input path, conservation --------------------------------

values = st.one_of(
    st.none(),
    st.integers(-(2**64), 2**64),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=5),
)
raw_rows = st.lists(st.tuples(st.one_of(st.integers(-(2**63), 2**63), st.none()), values, values, values), max_size=12)


def _push(eng: EmbeddedEngine, how: str, rows: list[tuple[Any, ...]], tmp: Any) -> None:
    if how == "tuples":
        eng.push("S", rows)
    elif how == "dicts":
        eng.push("S", [{"ts": t, "K": k, "V": v, "N": n} for t, k, v, n in rows])
    elif how == "pandas":  # object columns: Python values as they are
        eng.push("S", pd.DataFrame(rows, columns=["ts", "K", "V", "N"], dtype=object))
    else:  # a JSONL file through the reader `sluice run` uses (json keeps NaN, ±Infinity, big ints)
        import json

        from sluice.io.feed import read_chunks

        path = tmp / "s.jsonl"
        path.write_text("".join(json.dumps({"ts": t, "K": k, "V": v, "N": n}) + "\n" for t, k, v, n in rows))
        (d,) = eng.catalog.sources
        for batch, errors, _ in read_chunks(path, d.schema, False, "S", chunk=5):
            eng.reject("S", errors)
            eng.push_batch("S", batch)


def _fits(t: Any, k: Any, v: Any, n: Any) -> bool:
    """Whether the row is admissible (the definition the engine must follow)."""
    if t is None or isinstance(t, bool) or not isinstance(t, int) or not -(2**62) < t < 2**62:
        return False
    if k is not None and (isinstance(k, bool) or not isinstance(k, int) or not -(2**63) <= k < 2**63):
        return False
    if v is not None and (isinstance(v, bool) or not isinstance(v, int | float)):
        return False
    return n is None or (isinstance(n, str) and len(n) <= 3)


def _as_table_value(v: Any, integer: bool) -> Any:
    """A table's reading of a value: NaN is missing, a whole float fits an integer column."""
    if isinstance(v, float) and v != v:
        return None
    return int(v) if integer and isinstance(v, float) and v.is_integer() else v


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(raw_rows, st.sampled_from(["tuples", "dicts", "pandas", "jsonl"]))
def test_conservation_accepted_plus_rejected_is_pushed(rows: list[tuple[Any, ...]], how: str) -> None:
    """Every input path: each row accepted or rejected (counted), none lost or crashing, and the
    accepted rows are exactly the admissible ones, NaN as NULL."""
    import tempfile
    from pathlib import Path

    rows = sorted(rows, key=lambda r: r[0] if isinstance(r[0], int) else 0)
    seen = rows  # what the admission check sees: a frame's NaN is missing, its whole floats integers
    if how == "pandas":
        seen = [tuple(_as_table_value(x, i < 2) for i, x in enumerate(r)) for r in rows]
    eng = EmbeddedEngine(_cat(), start=-(2**62) + 1, slack=2**63)
    q = eng.register_query("select * from S")
    with tempfile.TemporaryDirectory() as d:
        _push(eng, how, rows, Path(d))
    (src,) = eng.statistics().sources
    assert src.accepted + src.rejected == len(rows)
    good = [r for r in seen if _fits(*r)]
    assert src.accepted == len(good)
    eng.close()
    want = Counter((t, (k, None if v is None or v != v else float(v), n)) for t, k, v, n in good)
    assert Counter((e.ts, e.row) for e in q.results()) == want


def test_tables_reject_bad_rows_alone() -> None:
    """Arrow/pandas: a bad value rejects its row, not the table; signs are checked, NaN is NULL,
    a null timestamp is rejected, varchar lengths hold."""
    cat = Catalog()
    execute(cat, DDL + "register relation R (A integer);")
    eng = EmbeddedEngine(cat, start=0)
    s = eng.register_query("select * from S")
    r = eng.register_query("select * from R")
    df = pd.DataFrame(
        {"ts": [1, 2, None, 4, 5], "K": [1, 2, 3, 4, 5], "V": [1.5, math.nan, 2.0, 3.0, 4.0], "N": list("abcde")}
    )
    df.loc[4, "N"] = "toolong"
    eng.push("S", df)
    eng.push("R", pa.table({"ts": [1, 1, 1, 1], "sign": ["+", "x", "?", "-"], "A": [1, 2, 3, 1]}))
    eng.push("R", pa.table({"ts": [2, 2], "sign": [1, 0], "A": [7, 8]}))
    eng.close(6)
    assert sorted(e.row for e in s.results()) == [(1, 1.5, "a"), (2, None, "b"), (4, 3.0, "d")]
    assert [(e.ts, e.sign, e.row) for e in r.results()] == [(2, "+", (7,))]
    msgs = eng.rejected()
    assert any("row 3: timestamp missing" in m for m in msgs)
    assert any("row 5" in m and "longer than" in m for m in msgs)
    assert any("sign 'x'" in m or "sign 0" in m for m in msgs)
    stats = {x.name: x for x in eng.statistics().sources}
    assert stats["S"].accepted + stats["S"].rejected == 5
    assert stats["R"].accepted + stats["R"].rejected == 6


def test_datetime_timestamps_become_ticks_of_the_engine_unit() -> None:
    eng = EmbeddedEngine(time_unit="millisecond", start=0)
    eng.execute(DDL)
    q = eng.register_query("select K from S")
    df = pd.DataFrame({"ts": pd.to_datetime([1500, 2500], unit="ms"), "K": [1, 2], "V": [0.0, 0.0], "N": ["a", "b"]})
    eng.push("S", df)
    eng.close()
    assert [(e.ts, e.row) for e in q.results()] == [(1500, (1,)), (2500, (2,))]


def test_push_batch_goes_through_the_same_checks() -> None:
    from sluice.datatypes import BIGINT, FLOAT, DataType, TypeKind
    from sluice.runtime.batch import make

    eng = EmbeddedEngine(_cat(), start=0)
    q = eng.register_query("select * from S")
    types = [BIGINT, FLOAT, DataType(TypeKind.VARCHAR, 3)]
    b = make(
        [1, 2, 2**62 + 5],
        [1, 2, 1],
        [pa.array([1, 2, 3]), pa.array([math.nan, 1.0, 2.0]), pa.array(["a", "b", "c"])],
        types,
    )
    eng.push_batch("S", b)
    eng.close(3)
    assert [e.row for e in q.results()] == [(1, None, "a")]
    assert len(eng.rejected()) == 2


def test_a_failing_query_stops_alone() -> None:
    """An operator that raises (here: a scalar subquery with two rows) stops its query, with the
    reason; the engine and the other queries go on."""
    cat = _cat()
    execute(cat, "register stream S2 (W integer);")
    eng = EmbeddedEngine(cat, start=0)
    bad = eng.register_query("select K, (select W from S2 [Range Unbounded]) from S")
    good = eng.register_query("select K from S")
    eng.push("S2", [(1, 1), (2, 2)])
    eng.push("S", [(1, 7, 0.0, "a"), (3, 8, 0.0, "b")])
    eng.close()
    assert [e.row for e in good.results()] == [(7,), (8,)]
    assert bad.error is not None and "scalar subquery returned 2 rows" in bad.error
    assert bad.name in eng.failures and bad.name not in eng.queries
    eng.push("S", [(5, 9, 0.0, "c")])
    eng.close()
    assert [e.row for e in good.results()][-1] == (9,)


@pytest.mark.parametrize("name", ["X (A integer); REGISTER RELATION Injected", "a'b", "1x", "", "select", "a.b"])
def test_names_are_identifiers_checked_once(name: str, tmp_path: Any) -> None:
    from sluice.catalog.catalog import CatalogError

    cat = Catalog(path=str(tmp_path / "c.db"))
    with pytest.raises(CatalogError, match="identifier|reserved"):
        cat.register_stream(name, [("A", "integer")])
    with pytest.raises(CatalogError, match="identifier|reserved"):
        cat.register_stream("Ok", [(name, "integer")])
    cat.register_stream("Ok", [("A", "integer")])
    cat.close()
    from sluice.plan.ddl import open_catalog

    assert [d.name for d in open_catalog(tmp_path / "c.db").sources] == ["Ok"]


floats = st.one_of(
    st.floats(allow_nan=False, allow_infinity=True, width=64),
    st.sampled_from([0.1, 0.2, 0.3, 1e308, -1e308, 5e-324, -0.0, 2.0**-1060]),
    st.none(),
)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.tuples(st.integers(0, 8), st.integers(0, 2), floats), max_size=14).map(
        lambda rs: sorted(rs, key=lambda r: r[0])
    ),
    st.sampled_from(["[Range 2]", "[Rows 3]", "[Range Unbounded]", "[Partition By K Rows 2]"]),
    st.sampled_from(["sum(V), avg(V), count(V)", "avg(V)", "sum(V), count(*)"]),
    st.booleans(),
)
def test_float_sums_are_exact_and_vectorised(rows: list[Any], window: str, aggs: str, grouped: bool) -> None:
    """Float SUM/AVG run in the vectorised counting path (no per-value state) and equal the
    definition bit for bit: the exact sum of the doubles, rounded once."""
    query = f"select {'K, ' if grouped else ''}{aggs} from S {window}{' group by K' if grouped else ''}"
    data = [(t, k, v, "x") for t, k, v in rows]
    got, ref, eng = _both(query, data, until=10)
    assert Counter((e.ts, e.sign, repr(e.row)) for e in got) == Counter((e.ts, e.sign, repr(e.row)) for e in ref)
    (agg,) = [u for u in eng.operators if u.kind == "Aggregate"]
    assert agg._counting is not None  # the vectorised path, not per-value Python


@settings(max_examples=120, deadline=None)
@given(
    st.lists(st.integers(0, 30), min_size=1, max_size=25),
    st.integers(0, 4),
    st.lists(st.integers(1, 6), min_size=1, max_size=25),
)
def test_lateness_does_not_depend_on_batching(stamps: list[int], slack: int, cuts: list[int]) -> None:
    """Out-of-order rows are accepted or rejected the same whether pushed one by one or in any
    batches: each is judged against what had arrived before it."""
    rows = [(t, i, 0.0, None) for i, t in enumerate(stamps)]
    answers = []
    for sizes in ([1] * len(rows), cuts, [len(rows)]):
        eng = EmbeddedEngine(_cat(), slack=slack)
        q = eng.register_query("select * from S")
        at, k = 0, 0
        while at < len(rows):
            n = sizes[k % len(sizes)]
            eng.push("S", rows[at : at + n])
            at, k = at + n, k + 1
        eng.close()
        (src,) = eng.statistics().sources
        answers.append((sorted(e.row[0] for e in q.results()), src.rejected))
    assert answers[0] == answers[1] == answers[2]


def test_a_timestamp_at_the_end_of_time_is_rejected_by_every_query_alike() -> None:
    """Regression (issue: nothing lost): ts = 2^63 − 1 used to be emitted by `select *` while the
    windowed group-by silently emitted nothing; now it is rejected at admission, with its reason,
    and every query sees the same input."""
    eng = EmbeddedEngine(_cat())
    plain = eng.register_query("select * from S")
    grouped = eng.register_query("select K, count(*) from S [Range 10] group by K")
    eng.push("S", [(1, 1, 1.0, "a"), (2**63 - 1, 2, 2.0, "b"), (2, 3, 3.0, "c")])
    eng.close()
    assert [e.ts for e in plain.results()] == [1, 2]
    assert {e.row for e in grouped.results() if e.sign == "+"} >= {(1, 1), (3, 1)}
    (msg,) = eng.rejected()
    assert "timestamp 9223372036854775807 is outside ±2^62" in msg
    (src,) = eng.statistics().sources
    assert (src.accepted, src.rejected) == (2, 1)
