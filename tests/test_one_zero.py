"""One float zero (``sluice.plan.numeric``, design note 011): ``-0.0`` equals ``0.0``, so an
operator that keeps one of equal values (grouping, DISTINCT, set operations, Istream) could keep
either, and a user function could tell which.  Sluice holds ``0.0`` alone: ``-0.0`` entering by any
input path, or computed (``-X``, ``X * -1``, ``ROUND(-0.4)``, a UDF's result, an underflow), is
``0.0`` — on the engine's vectorised and row paths, the reference evaluator and Spark alike.

``diff_outputs`` compares values with ``==``, for which the two zeros are equal: every test here
also looks at the sign (``math.copysign``).
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from sluice.backends.embedded import EmbeddedEngine
from sluice.catalog import Catalog, Schema
from sluice.datatypes import FLOAT, INTEGER
from sluice.io.feed import feed
from sluice.plan import bind_query, execute
from sluice.plan.element import Element
from sluice.plan.function_defs import FUNCTIONS, RowOnly
from sluice.reference import evaluate
from sluice.reference.compare import diff_outputs
from sluice.runtime import vexpr
from sluice.runtime.batch import make

DDL = "register stream Z (K integer, X float)"
SCHEMA = Schema.of(("K", INTEGER), ("X", FLOAT))


def _cat() -> Catalog:
    c = Catalog()
    execute(c, DDL)
    c.register_function("negz", lambda x: -0.0, FLOAT, [FLOAT])  # a UDF returning -0.0
    return c


def _negative_zeros(elements: list[Element]) -> list[Element]:
    """The elements holding a -0.0 anywhere (there must be none)."""
    return [e for e in elements if any(isinstance(v, float) and v == 0 and math.copysign(1, v) < 0 for v in e.row)]


def _floats(elements: list[Element]) -> list[float]:
    return [v for e in elements for v in e.row if isinstance(v, float)]


def test_negative_zero_enters_as_zero_by_every_input_path(tmp_path: Path) -> None:
    """Tuples, dicts, pandas, Arrow tables, typed batches (``push_batch``), CSV (pyarrow's blocks
    and the line-by-line reader), JSONL and Parquet files: each -0.0 arrives as 0.0."""
    eng = EmbeddedEngine(_cat(), start=0)
    q = eng.register_query("select K, X from Z")
    eng.push("Z", [(1, 1, -0.0), (1, 1, 0.0)])
    eng.push("Z", [{"ts": 2, "K": 2, "X": -0.0}])
    eng.push("Z", pd.DataFrame({"ts": [3], "K": [3], "X": [-0.0]}))
    eng.push("Z", pa.table({"ts": [4], "K": [4], "X": pa.array([-0.0])}))
    eng.push_batch("Z", make([5], 1, [pa.array([5]), pa.array([-0.0])], [INTEGER, FLOAT]))
    csv = tmp_path / "z.csv"
    csv.write_text("6,6,-0.0\n6,6,-0\n")
    quoted = tmp_path / "q.csv"  # a quote: the block is read line by line
    quoted.write_text('7,7,"-0.0"\n')
    jsonl = tmp_path / "z.jsonl"
    jsonl.write_text(json.dumps({"ts": 8, "K": 8, "X": -0.0}) + "\n")
    parquet = tmp_path / "z.parquet"
    pq.write_table(pa.table({"ts": [9], "K": [9], "X": pa.array([-0.0])}), parquet)
    schemas = {"Z": (SCHEMA, False)}
    assert feed(eng, [("Z", p) for p in (csv, quoted, jsonl, parquet)], schemas) == 5
    eng.close(10)
    got = q.results()
    assert sorted(e.row[0] for e in got) == [1, 1, 2, 3, 4, 5, 6, 6, 7, 8, 9]
    assert eng.rejected() == []
    assert _floats(got) == [0.0] * 11 and not _negative_zeros(got)


def test_the_reference_evaluator_reads_negative_zero_as_zero() -> None:
    """Its input as the engine admits it: -0.0 is 0.0 (and NaN NULL), in streams and relations."""
    cat = _cat()
    execute(cat, "register relation R (X float)")
    s = evaluate(bind_query(cat, "select X from Z"), {"Z": [(1, (1, -0.0)), (2, (2, math.nan))]})
    r = evaluate(bind_query(cat, "select X from R"), relations={"R": [(1, "+", (-0.0,)), (2, "-", (0.0,))]})
    assert [e.row for e in s] == [(0.0,), (None,)] and not _negative_zeros(s)
    assert [(e.ts, e.sign, e.row) for e in r] == [(1, "+", (0.0,)), (2, "-", (0.0,))] and not _negative_zeros(r)


# each computes -0.0 under IEEE 754 from X = 0.0, Y = -0.4, W = 1e-300 (K = 1); Sluice gives 0.0
ZERO_QUERIES = [
    "select -X, X * -1, -1 * X, X / -2, X / -2.0, W * -W, -W / 1e300 from Z",  # Arrow kernels
    "select round(Y), round(Y, 0), round(-0.004, 2), X % -1.0, (X - 2.0) % 2.0, negz(X) from Z",  # row by row
    "select -0.0, - 0.0 + X, case when K > 0 then -X else X end, coalesce(-X, 1.0), nullif(-X, 1.0) from Z",
    "select abs(-X), floor(-X), ceil(Y), -X - 0.0, -X + -X from Z",
    "Istream(select -X from Z [Range 2])",
    "select distinct -X from Z [Range 2]",
    "select -X, count(*) from Z [Range 5] group by -X",
    "select sum(-X), avg(-X), min(-X), max(X * -1), sum(W * -W), min(Y * 0) from Z [Range 5]",
    "select K, sum(-X), min(-X), max(-X) from Z [Rows 2] group by K",  # MIN/MAX on the FIFO path
    "select -X from Z [Now] except select Y from Z [Now]",
]


@pytest.mark.parametrize("row_path", [False, True], ids=["kernels", "row-by-row"])
@pytest.mark.parametrize("query", ZERO_QUERIES)
def test_an_expression_whose_ieee_result_is_negative_zero_gives_zero(
    query: str, row_path: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On the engine's Arrow kernels, on its row-by-row path (every function run by its
    definition) and on the reference evaluator: 0.0, never -0.0."""
    if row_path:
        row_only = RowOnly("this test: every call by its definition")
        monkeypatch.setattr(vexpr, "function", lambda name: replace(FUNCTIONS[name], vector=row_only))
    cat = Catalog()
    execute(cat, "register stream Z (K integer, X float, Y float, W float)")
    cat.register_function("negz", lambda x: -0.0, FLOAT, [FLOAT])
    rows = [(1, 1, 0.0, -0.4, 1e-300), (2, 1, -0.0, -0.4, 1e-300), (3, 2, 0.0, -0.0, 1e-300)]
    eng = EmbeddedEngine(cat, start=0)
    q = eng.register_query(query)
    eng.push("Z", rows)
    eng.close(6)
    got = q.results()
    expected = evaluate(bind_query(cat, query), {"Z": [(t, tuple(r)) for t, *r in rows]}, start=0, until=6)
    assert got and not diff_outputs(expected, got), diff_outputs(expected, got)
    assert eng.rejected() == []
    assert not _negative_zeros(got) and not _negative_zeros(expected)
    assert 0.0 in _floats(got)


def test_group_by_over_both_zeros_is_one_group_with_key_zero() -> None:
    """{0.0, -0.0} are one group, whichever arrives first, and its key is 0.0 — on the engine and
    the reference evaluator; DISTINCT keeps one 0.0."""
    for first in (-0.0, 0.0):
        rows = [(1, 1, first), (2, 2, -first), (3, 3, first)]
        for query, want in (
            ("select X, count(*) from Z [Range Unbounded] group by X", (0.0, 3)),
            ("select distinct X from Z [Range Unbounded]", (0.0,)),
        ):
            eng = EmbeddedEngine(_cat(), start=0)
            q = eng.register_query(query)
            eng.push("Z", rows)
            eng.close(3)
            expected = evaluate(bind_query(_cat(), query), {"Z": [(t, (k, x)) for t, k, x in rows]}, start=0, until=3)
            for out in (q.results(), expected):
                final: dict[tuple[Any, ...], int] = {}
                for e in out:
                    final[e.row] = final.get(e.row, 0) + (1 if e.sign == "+" else -1)
                assert [r for r, n in final.items() if n] == [want]
                assert not _negative_zeros(out)


def test_a_negative_literal_zero_is_zero() -> None:
    """The binder folds ``-0.0`` into a constant: 0.0 (what Spark and the engine compute from)."""
    from sluice.plan import logical as L
    from sluice.plan.expr import Const

    plan = bind_query(_cat(), "select -0.0 from Z").plan
    (c,) = next(n for n in L.walk_plan(plan) if isinstance(n, L.Project)).columns
    assert isinstance(c, Const) and math.copysign(1, c.value) == 1


@pytest.mark.spark
def test_one_zero_on_spark(spark: Any, tmp_path: Path) -> None:
    """On Spark: native expressions (Spark's ``-X`` is ``0 − X``, its ``%`` Java's), a grouping
    in the processor, and an attached CSV directory Spark reads itself (before, its -0.0 and NaN
    went through as they were) — every zero is 0.0, NaN is NULL, and the answers are the embedded
    engine's."""
    from sluice.backends.spark.engine import SparkEngine

    ddl = "register stream Z (K integer, X float); register stream A (K integer, X float)"
    queries = [
        "select -X, X * -1, X / -2.0, (X - 2.0) % 2.0, X from Z",  # native
        "select X, count(*) from Z [Range Unbounded] group by X",  # the processor
        "select X, -X from A",  # native, over the attached directory
    ]
    rows = [(1, 1, 0.0), (2, 2, -0.0), (3, 3, 0.0)]
    d = tmp_path / "in"
    d.mkdir()
    eng = SparkEngine(spark=spark, workdir=tmp_path / "w")
    eng.execute(ddl)
    eng.attach_directory("A", d, "csv")
    handles = [eng.register_query(q) for q in queries]
    (d / "a.csv").write_text("ts,K,X\n1,1,-0.0\n2,2,0.0\n3,3,NaN\n")  # Spark reads NaN as NaN
    eng.push("Z", rows)
    eng.run()
    eng.close(3)
    assert ["native Spark expressions" in eng.explain(h) for h in handles] == [True, False, True]
    emb = EmbeddedEngine(start=1)
    emb.execute(ddl)
    twins = [emb.register_query(q) for q in queries]
    emb.push("Z", rows)
    emb.push("A", [(1, 1, -0.0), (2, 2, 0.0), (3, 3, math.nan)])
    emb.close(3)
    for h, twin in zip(handles, twins, strict=True):
        got, want = eng.results(h), twin.results()
        assert got and not diff_outputs(want, got) and len(got) == len(want), h.bound.text
        assert not _negative_zeros(got) and not _negative_zeros(want), h.bound.text
    eng.stop()
