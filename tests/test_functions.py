"""The scalar function registry (``sluice.plan.function_defs.FUNCTIONS``, design 017): every
function is complete on every path — an Arrow kernel or a reasoned ``RowOnly``, a Spark translation
or a reasoned ``InProcessor`` — and, called from CQL with every argument type its typing rule
accepts, gives the reference evaluator's answer on the embedded engine, whether a batch runs
through its kernel or (a row failing in it) row by row.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import pyarrow as pa
import pytest
from sluice.backends.embedded import EmbeddedEngine
from sluice.backends.spark.compile import SPARK_FUNCTIONS, InProcessor
from sluice.catalog import Catalog
from sluice.datatypes import DataType
from sluice.plan import bind_query, execute
from sluice.plan.expr import BExpr, Call, ColRef, Const, walk_expr
from sluice.plan.function_defs import BUILTINS, FUNCTIONS, FunctionDef, Out, RowOnly, Syntax, by_rows
from sluice.plan.logical import walk_plan
from sluice.plan.numeric import RowError, canonical
from sluice.reference import evaluate
from sluice.reference.compare import diff_outputs
from sluice.runtime.batch import arrow_type

BIG = 2**62
DDL = "register stream S (K integer, I integer, B bigint, F float, N varchar(8), P varchar(8), X boolean);"
# (ts, row): ordinary values, the limits (B + B overflows 64 bits: a row error), the NULLs, and
# the strings where Arrow's and Python's definitions part (case mapping, '\' in LIKE patterns)
ROWS: list[tuple[int, tuple[Any, ...]]] = [
    (1, (1, 7, 3, 2.5, "abc", "a%", True)),
    (2, (2, -7, -3, -71.975, "aXb", "_X%", False)),
    (3, (3, 0, 0, -0.0, "", "%", None)),
    (4, (4, None, None, None, None, None, True)),
    (5, (5, 2, BIG, math.inf, "ß", "ß", False)),
    (6, (6, -2, -BIG, -math.inf, "İ", "_", True)),
    (7, (7, 2**31 - 1, 2**63 - 1, 1e308, "a\\b", "a\\b", None)),
    (8, (8, -(2**31), -(2**63), 0.1, "a%b", "a\\%", False)),
]
# what a function is called with: every column but K, and constants of each kind (NULL too)
OPERANDS = ["I", "B", "F", "N", "P", "X", "2", "0.5", "'a%'", "NULL"]


def _catalog() -> Catalog:
    cat = Catalog()
    execute(cat, DDL)
    return cat


CAT = _catalog()
TYPES: dict[str, DataType] = {}


def _type(operand: str) -> DataType:
    if not TYPES:
        for name in OPERANDS:
            TYPES[name] = bind_query(CAT, f"select {name} from S").schema.types[0]
    return TYPES[operand]


def _text(d: FunctionDef, args: tuple[str, ...]) -> str:
    """The call as CQL writes it (its syntax in the registry)."""
    match d.syntax:
        case Syntax.INFIX:
            return f"({args[0]} {d.symbol} {args[1]})"
        case Syntax.PREFIX:
            return f"({d.symbol} {args[0]})"
        case Syntax.POSTFIX:
            return f"({args[0]} {d.symbol})"
        case Syntax.CALL:
            return f"{d.symbol}({', '.join(args)})"


def calls(d: FunctionDef) -> list[str]:
    """``d`` over every operand list its typing rule accepts (at most one NULL and one optional argument)."""
    out = []
    lo, hi = d.arity
    for n in range(lo, min(hi, lo + 1) + 1):
        for args in itertools.product(OPERANDS, repeat=n):
            if args.count("NULL") > 1:
                continue
            try:
                d.typing([_type(a) for a in args])
            except TypeError:
                continue
            out.append(_text(d, args))
    return out


def test_every_function_has_a_kernel_or_a_reason_and_a_spark_entry() -> None:
    """No silent fallback: each function says how the engine vectorises it and how Spark runs it."""
    assert set(SPARK_FUNCTIONS) == set(FUNCTIONS), "SPARK_FUNCTIONS must name every registered function"
    for name, d in FUNCTIONS.items():
        assert d.name == name
        assert callable(d.vector) or (isinstance(d.vector, RowOnly) and len(d.vector.reason) > 20), name
        spark = SPARK_FUNCTIONS[name]
        assert callable(spark) or (isinstance(spark, InProcessor) and len(spark.reason) > 20), name
    assert set(BUILTINS) == {d.symbol for d in FUNCTIONS.values() if d.syntax is Syntax.CALL}


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_every_function_is_callable_from_cql_and_the_engine_equals_the_reference(name: str) -> None:
    d = FUNCTIONS[name]
    exprs = calls(d)
    assert exprs, f"{name}: no argument types from OPERANDS pass its typing rule"
    queries = [f"select K, {x} from S" for x in exprs]
    assert any(_the_call(q, name) is not None for q in queries), f"{name}: never bound to a call of it"
    for q in queries:
        ref = evaluate(bind_query(CAT, q), {"S": ROWS}, start=0, until=10)
        # A row per batch: the kernel on each row.  If a row fails (64-bit overflow), all rows at
        # once too: the failing row sends the whole batch through the row evaluator (rowexpr).
        for piece in (1, len(ROWS)):
            eng = EmbeddedEngine(CAT, start=0)
            h = eng.register_query(q)
            for i in range(0, len(ROWS), piece):
                eng.push("S", [(t, *r) for t, r in ROWS[i : i + piece]])
                eng.run()
            eng.close(10)
            assert not eng.failures, (q, eng.failures)
            diffs = diff_outputs(ref, h.results())
            assert not diffs, f"{q} (batches of {piece})\n" + "\n".join(diffs[:5])
            if not eng.rejected():
                break


@pytest.mark.parametrize("name", sorted(n for n, d in FUNCTIONS.items() if not isinstance(d.vector, RowOnly)))
def test_every_kernel_equals_the_definition_row_by_row(name: str) -> None:
    """The kernel against ``by_rows(row)`` on the same Arrow values — arrays and scalars alike —
    wherever the kernel answers (where it raises, the engine takes the row path)."""
    d = FUNCTIONS[name]
    kernel = d.vector
    assert callable(kernel)
    checked = 0
    for x in calls(d):
        call = _the_call(f"select {x} from S", name)
        if call is None:  # folded at binding: -(2) is the literal -2
            continue
        args = [_arrow(a) for a in call.args]
        out = Out(call.type, arrow_type(call.type), len(ROWS))
        try:
            want = by_rows(d.row, args, out)
            got = kernel(args, out)
        except (RowError, pa.ArrowInvalid, pa.ArrowNotImplementedError):
            continue  # a row fails, or Arrow takes no NULL-typed literal: the engine goes row by row
        got_list = [got.as_py()] * len(ROWS) if isinstance(got, pa.Scalar) else got.to_pylist()
        assert _same(got_list, want.to_pylist()), (x, got_list, want.to_pylist())
        checked += 1
    assert checked, name


def _the_call(query: str, name: str) -> Call | None:
    """The outermost call of ``name`` in the bound query."""
    for n in walk_plan(bind_query(CAT, query).plan):
        for e in n.exprs():
            for x in walk_expr(e):
                if isinstance(x, Call) and x.fn == name:
                    return x
    return None


def _arrow(e: BExpr) -> Any:
    """An argument's Arrow value over ``ROWS``: a column's array as admitted (-0.0 is 0.0), a
    constant's scalar."""
    if isinstance(e, Const):
        return pa.scalar(e.value, arrow_type(e.type))
    assert isinstance(e, ColRef), e
    return pa.array([canonical(r[e.index]) for _, r in ROWS], arrow_type(e.type))


def _same(a: list[Any], b: list[Any]) -> bool:
    """Equal values of one type — a float zero of one sign (``==`` takes -0.0 for 0.0)."""
    return all(
        x == y and (type(x) is type(y) or x is None) and (not isinstance(x, float) or str(x) == str(y))
        for x, y in zip(a, b, strict=True)
    )
