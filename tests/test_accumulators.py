"""Accumulators (``sluice.plan.accumulators``): the one definition of SQL's aggregates.

Properties: inserting a multiset gives SQL's aggregate of it (computed here from its definition);
retracting part of it gives the aggregate of the rest; merging two gives the aggregate of their
union; an Arrow array and a Python list insert the same; every aggregate kind has a definition.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sluice.datatypes import BIGINT, FLOAT, INTEGER, VARCHAR, DataType
from sluice.errors import InternalError
from sluice.plan import accumulators as A
from sluice.plan.expr import AggCall, AggKind, ColRef
from sluice.plan.functions import aggregate as result_type

CASES = [(k, d, t) for k in AggKind for d in (False, True) for t in (INTEGER, FLOAT, VARCHAR)]
CASES = [c for c in CASES if not (c[0] in (AggKind.SUM, AggKind.AVG) and c[2] is VARCHAR)]


def _call(kind: AggKind, distinct: bool, t: DataType) -> AggCall:
    return AggCall(kind, ColRef(0, t), distinct, result_type(kind.value, t))


def _by_definition(a: AggCall, values: list[Any]) -> Any:
    vals = [v for v in values if v is not None]
    if a.distinct:
        vals = list(dict.fromkeys(vals))
    if a.fn is AggKind.COUNT:
        return len(vals)
    if not vals:
        return None
    if a.fn is AggKind.MIN:
        return min(vals)
    if a.fn is AggKind.MAX:
        return max(vals)
    if any(isinstance(v, float) for v in vals):
        total = math.fsum(vals)  # the exact sum rounded once (no infinities drawn here)
        if a.fn is AggKind.SUM:
            return total
        return float(sum(Fraction(v) for v in vals) / len(vals))
    return sum(vals) if a.fn is AggKind.SUM else float(Fraction(sum(vals), len(vals)))


def _values(t: DataType) -> st.SearchStrategy[list[Any]]:
    if t is INTEGER:
        v: st.SearchStrategy[Any] = st.integers(-50, 50)
    elif t is FLOAT:
        v = st.sampled_from([0.1, 0.2, 0.3, -1.5, 1e16, 3.0, 0.0])
    else:
        v = st.sampled_from(["a", "b", "ab", ""])
    return st.lists(st.none() | v, max_size=12)


@settings(max_examples=300)
@given(st.sampled_from(CASES), st.data())
def test_insert_retract_merge_follow_the_definition(case, data) -> None:
    a = _call(*case)
    t = case[2]
    xs = data.draw(_values(t))
    ys = data.draw(_values(t))
    acc = A.accumulator(a)
    acc.insert(xs + ys)
    assert acc.evaluate() == _by_definition(a, xs + ys)
    acc.retract(ys)
    assert acc.evaluate() == _by_definition(a, xs)
    other = A.accumulator(a)
    other.insert(ys)
    acc.merge(other)
    assert acc.evaluate() == _by_definition(a, xs + ys)
    arrow = A.accumulator(a)
    column = pa.array(xs + ys, type={INTEGER: pa.int32(), FLOAT: pa.float64(), VARCHAR: pa.string()}[t])
    arrow.insert(column)
    assert arrow.evaluate() == acc.evaluate()
    arrow.retract(column)
    assert arrow.empty


def test_retracting_the_extreme_finds_the_next_one() -> None:
    acc = A.accumulator(_call(AggKind.MAX, False, INTEGER))
    acc.insert([5, 9, 7, 9])
    acc.retract([9])
    assert acc.evaluate() == 9
    acc.retract([9])
    assert acc.evaluate() == 7
    for v in range(100):  # many values in and out: the heap is rebuilt, the answer stays right
        acc.add(v, 1)
        acc.add(v, -1)
    assert acc.evaluate() == 7


def test_every_kind_has_a_definition_and_an_unknown_one_is_an_error() -> None:
    assert set(A.AGGREGATES) == set(AggKind)
    a = AggCall(AggKind.SUM, ColRef(0, BIGINT), False, BIGINT)
    object.__setattr__(a, "fn", "MEDIAN")
    with pytest.raises(InternalError, match="no aggregate definition for 'MEDIAN'"):
        A.accumulator(a)
    with pytest.raises(ValueError):
        AggCall("MEDIAN", None, False, BIGINT)  # type: ignore[arg-type]


def test_the_counting_path_takes_count_sum_avg_without_distinct_and_fifo_extremes() -> None:
    took = {(k, d) for k, d, t in CASES if A.counting(_call(k, d, t))}
    assert took == {(k, False) for k in (AggKind.COUNT, AggKind.SUM, AggKind.AVG)}
    # over an input that deletes in insertion order (a window), MIN and MAX too, DISTINCT or not
    fifo = {(k, d) for k, d, t in CASES if A.counting(_call(k, d, t), fifo=True)}
    assert fifo == took | {(k, d) for k in (AggKind.MIN, AggKind.MAX) for d in (False, True)}


def test_a_float_sum_stays_float_when_its_values_are_whole() -> None:
    """1 and 1.0 are one value of the multiset; a FLOAT argument still sums as a float."""
    acc = A.accumulator(_call(AggKind.SUM, False, FLOAT))
    acc.insert([1, 1.0])
    assert acc.evaluate() == 2.0 and isinstance(acc.evaluate(), float)
