"""Vectorized UDFs: a function on Arrow arrays gives the answers its row-by-row twin gives.

``register_function(..., vectorized=True)``: the engine calls it once per batch with an array per
argument.  Strictness (NULL in, NULL out), float canonicalisation (NaN is NULL, -0.0 is 0.0) and
the per-row error rule (a row the function fails on is dropped and counted, its neighbours kept)
hold exactly as for a row UDF; the reference evaluator calls it on one row at a time.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from sluice.backends.embedded import EmbeddedEngine
from sluice.catalog import Catalog
from sluice.errors import SluiceError
from sluice.plan import bind_query, execute
from sluice.reference import evaluate
from sluice.reference.compare import diff_outputs

ROWS = [(1, 10, 2.5), (1, None, 0.0), (2, -4, None), (3, 7, -0.0), (3, 0, 1.0), (5, 12, 3.0)]


def _row_half(x: int, y: float) -> float:
    return x / y


def _vec_half(x: pa.Array, y: pa.Array) -> pa.Array:
    return pc.divide(pc.cast(x, pa.float64()), y)  # x / 0.0 is ±inf or NaN, as in Python but without raising


def _row_div(x: int, y: int) -> int:
    return 100 // x  # raises for x = 0: that row is dropped


def _vec_div(x: pa.Array, y: pa.Array) -> pa.Array:
    if pc.any(pc.equal(x, 0)).as_py():
        raise ZeroDivisionError("integer division or modulo by zero")  # (Python's words)
    return pc.divide(pa.scalar(100, pa.int64()), x)  # (floor division for these positive/negative values)


def _engine(vectorized: bool) -> tuple[EmbeddedEngine, Catalog]:
    cat = Catalog()
    execute(cat, "register stream S (A integer, B float)")
    cat.register_function(
        "dv", _vec_div if vectorized else _row_div, "integer", ["integer", "integer"], vectorized=vectorized
    )
    cat.register_function(
        "neg", (lambda x: pc.negate(x)) if vectorized else (lambda x: -x), "float", ["float"], vectorized=vectorized
    )
    return EmbeddedEngine(cat), cat


@pytest.mark.parametrize(
    "query",
    [
        "select A, neg(B) from S [Range Unbounded]",  # strict: NULL in, NULL out; -(0.0) is 0.0
        "Istream(select dv(A, A), neg(B) from S [Range 2] where A is not null)",  # dv(0, 0) raises: row dropped
        "select A, count(*) from S [Rows 3] where neg(B) < 0 group by A",
    ],
)
def test_a_vectorized_udf_answers_as_its_row_twin_and_the_reference(query: str) -> None:
    answers = []
    for vectorized in (False, True):
        eng, cat = _engine(vectorized)
        q = eng.register_query(query)
        eng.push("S", ROWS)
        eng.close()
        expected = evaluate(bind_query(cat, query), {"S": [(t, r) for t, *r in ROWS]}, {}, start=1, until=5)
        assert not diff_outputs(expected, q.results()), (vectorized, diff_outputs(expected, q.results())[:5])
        answers.append((q.results(), eng.rejected()))
    assert answers[0] == answers[1]


def test_a_vectorized_udf_that_fails_a_batch_loses_only_the_rows_it_fails_on() -> None:
    eng, _ = _engine(True)
    q = eng.register_query("Istream(select A, dv(A, A) from S [Range Unbounded] where A is not null)")
    eng.push("S", ROWS)
    eng.close()
    assert sorted(r for _, _, r in q.results()) == [(-4, -25), (7, 14), (10, 10), (12, 8)]
    reasons = [m for m in eng.rejected() if "DV" in m]
    assert len(reasons) == 1 and "ZeroDivisionError" in reasons[0] and "(0," in reasons[0], eng.rejected()


def test_a_vectorized_udf_returning_the_wrong_number_of_values_is_called_row_by_row() -> None:
    calls: list[int] = []

    def first_only(x: pa.Array) -> Any:
        calls.append(len(x))
        return x.slice(0, 1)  # right for one row, wrong for more

    eng = EmbeddedEngine()
    eng.execute("register stream S (A integer)")
    eng.register_function("first_only", first_only, "integer", ["integer"], vectorized=True)
    q = eng.register_query("Istream(select first_only(A) from S [Range Unbounded])")
    eng.push("S", [(1, 4), (1, 5), (2, 6)])
    eng.close()
    assert sorted(r for _, _, r in q.results()) == [(4,), (5,), (6,)]
    assert max(calls) > 1 and calls.count(1) == 3  # the batch call, then each row alone


@pytest.mark.spark
def test_a_vectorized_udf_on_spark_answers_as_on_the_embedded_engine(spark: Any, tmp_path: Any) -> None:
    from sluice.backends.spark.engine import SparkEngine

    query = "Istream(select A, neg(B) from S [Range Unbounded] where A > 0)"
    results = []
    for eng in (EmbeddedEngine(), SparkEngine(spark=spark, workdir=tmp_path)):
        eng.execute("register stream S (A integer, B float)")
        eng.register_function("neg", lambda x: pc.negate(x), "float", ["float"], vectorized=True)
        q = eng.register_query(query)
        eng.push("S", ROWS)
        eng.close()
        results.append(sorted(eng.results(q)))
        getattr(eng, "stop", lambda: None)()
    assert results[0] == results[1] and len(results[0]) == 3, results


def test_arguments_are_arrays_of_the_registered_types_and_results_cast_as_declared() -> None:
    """An INTEGER argument to a function registered on FLOAT arrives as a float array (3 / 2 is
    1.5, as for the row function); a result that does not cast to the declared type loses its row
    on every path alike (the batch's cast fails, each row's does too) — the reference evaluator's answer.
    """
    cat = Catalog()
    execute(cat, "register stream S (A integer)")
    cat.register_function("half", lambda x: pc.divide(x, 2), "float", ["float"], vectorized=True)
    cat.register_function(
        "thirds", lambda x: pc.divide(pc.cast(x, pa.float64()), 3), "integer", ["integer"], vectorized=True
    )
    rows = [(1, 3), (2, 4), (3, 6)]
    for query, want in (
        ("Istream(select half(A) from S [Range Unbounded])", [(1.5,), (2.0,), (3.0,)]),
        ("Istream(select thirds(A) from S [Range Unbounded])", [(1,), (2,)]),  # 4 / 3 is no integer: dropped
    ):
        eng = EmbeddedEngine(cat)
        q = eng.register_query(query)
        eng.push("S", rows)
        eng.close()
        assert sorted(r for _, _, r in q.results()) == want, query
        expected = evaluate(bind_query(cat, query), {"S": [(t, (a,)) for t, a in rows]}, {}, start=1, until=3)
        assert not diff_outputs(expected, q.results()), query


def test_a_vectorized_function_needs_an_argument() -> None:
    eng = EmbeddedEngine()
    eng.execute("register stream S (A integer)")
    eng.register_function("one", lambda: pa.array([1]), "integer", vectorized=True)
    with pytest.raises(SluiceError, match="ONE is vectorized: it needs an argument"):
        eng.register_query("select one() from S [Now]")
