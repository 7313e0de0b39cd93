"""Bound expressions compiled to vectorised functions over a batch (Arrow compute kernels).

Each function's kernel is its ``FunctionDef.vector`` (``sluice.plan.function_defs``), used only
where its semantics equal CQL's exactly (three-valued logic, NULL propagation, truncating integer
'/').  A function marked ``RowOnly`` there (ROUND, '%', …) and UDFs run row by row through the
shared definitions: slower, never different.

>>> from sluice.datatypes import INTEGER, BOOLEAN
>>> from sluice.plan.expr import Call, ColRef, Const
>>> from sluice.runtime.batch import from_rows
>>> b = from_rows([(1, (7,)), (1, (-7,)), (1, (None,))], [INTEGER])
>>> f = compile_expr(Call("div", (ColRef(0, INTEGER), Const(2, INTEGER)), INTEGER))
>>> f(b, 0).to_pylist()
[3, -3, None]
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sluice.errors import InternalError, SluiceError
from sluice.plan.expr import BExpr, Call, CaseWhen, ColRef, Const, CurrentTime, OuterRef, Subquery, UdfCall
from sluice.plan.function_defs import Kernel, Out, RowOnly, by_rows, full, function, values_array
from sluice.plan.numeric import RowError, canonical_floats
from sluice.plan.scalar import call_udf
from sluice.runtime.batch import META, arrow_type

# (batch, instant) -> Arrow array or scalar.  ``instant`` is None where CURRENT_TIME means the
# element's own timestamp (filters on streams).
VFn = Callable[[pa.Table, int | None], Any]


class UnsupportedError(SluiceError):
    """The embedded engine cannot run this (yet); the message says what and suggests a way round."""


class CompiledExpr:
    """A compiled expression that pickles as its bound expression and recompiles when restored,
    so an engine's state can be snapshotted (the Spark backend keeps it in the state store).
    """

    __slots__ = ("expr", "_fn")

    def __init__(self, expr: BExpr) -> None:
        self.expr = expr
        self._fn: VFn = _compile(expr)

    def __call__(self, b: pa.Table, now: int | None) -> Any:
        return self._fn(b, now)

    def __getstate__(self) -> BExpr:
        return self.expr

    def __setstate__(self, expr: BExpr) -> None:
        self.expr = expr
        self._fn = _compile(expr)


def compile_expr(e: BExpr) -> VFn:
    """Compile ``e`` to ``fn(batch, instant) -> array | scalar`` (picklable)."""
    return CompiledExpr(e)


def _compile(e: BExpr) -> VFn:
    if isinstance(e, ColRef):
        i = e.index + META
        return lambda b, now: b.column(i)
    if isinstance(e, Const):
        s = pa.scalar(e.value, arrow_type(e.type)) if e.value is not None else pa.scalar(None, arrow_type(e.type))
        return lambda b, now: s
    if isinstance(e, CurrentTime):
        return lambda b, now: b.column(0) if now is None else pa.scalar(now, pa.int64())
    if isinstance(e, Call):
        return _call(e)
    if isinstance(e, CaseWhen):
        conds = [_compile(c) for c, _ in e.whens]
        results = [_compile(r) for _, r in e.whens] + [_compile(e.else_)]
        at = arrow_type(e.type)

        def case(b: pa.Table, now: int | None) -> Any:
            n = b.num_rows
            cs = [full(c(b, now), n, pa.bool_()) for c in conds]
            rs = [full(r(b, now), n, at) for r in results]
            return pc.case_when(pc.make_struct(*cs), *rs)

        return case
    if isinstance(e, UdfCall) and e.vectorized:
        return _vectorized_udf(e)
    if isinstance(e, UdfCall):
        args = [_compile(a) for a in e.args]
        fn, strict = e.fn, e.strict

        name = e.name

        def udf(*vals: Any) -> Any:
            return call_udf(name, fn, strict, list(vals))

        return _rowwise(udf, args, e)
    if isinstance(e, Subquery | OuterRef):
        raise UnsupportedError(
            "the embedded engine does not run subqueries in expressions (IN, EXISTS, ALL/ANY, scalar) yet; "
            "rewrite with a join, or use the reference evaluator (sluice reference)"
        )
    raise InternalError(f"cannot compile {type(e).__name__}")


def _vectorized_udf(e: UdfCall) -> VFn:
    """A vectorized UDF on a batch's arrays.  Anything it does wrong for the batch (raises,
    returns too few values or values of another type) sends the batch down ``evaluate_rows``'s
    row path, which calls it on one row at a time and drops only the rows it fails on.
    """
    args = [_compile(a) for a in e.args]
    types = [arrow_type(t) for t in e.array_types()]
    at = arrow_type(e.type)

    def udf(b: pa.Table, now: int | None) -> Any:
        n = b.num_rows
        vals = [full(a(b, now), n, t) for a, t in zip(args, types, strict=True)]
        vals = [v.combine_chunks() if isinstance(v, pa.ChunkedArray) else v for v in vals]
        out = e.fn(*vals)
        out = out if isinstance(out, pa.Array | pa.ChunkedArray) else pa.array(out)
        if len(out) != n:
            raise ValueError(f"{e.name} returned {len(out)} values for {n} rows")
        out = out.cast(at)  # (safe: a value that does not fit raises)
        if e.strict and any(v.null_count for v in vals):  # (a vectorized UDF has arguments: the binder)
            missing = vals[0].is_null()
            for v in vals[1:]:
                missing = pc.or_(missing, v.is_null())
            out = pc.if_else(missing, pa.scalar(None, at), out)
        return canonical_floats(out) if pa.types.is_floating(at) else out

    return udf


def _call(e: Call) -> VFn:
    args = [_compile(a) for a in e.args]
    d = function(e.fn)
    kernel = d.vector if not isinstance(d.vector, RowOnly) else partial(by_rows, d.row)
    return _apply(kernel, args, e)


def _rowwise(fn: Callable[..., Any], args: list[VFn], e: BExpr) -> VFn:
    return _apply(partial(by_rows, fn), args, e)


def _apply(kernel: Kernel, args: list[VFn], e: BExpr) -> VFn:
    t, at = e.type, arrow_type(e.type)
    return lambda b, now: kernel([a(b, now) for a in args], Out(t, at, b.num_rows))


def predicate_mask(fn: VFn, b: pa.Table, now: int | None = None) -> pa.Array:
    """TRUE rows of a predicate (NULL and FALSE both drop the row)."""
    return truth_mask(fn(b, now), b.num_rows)


def truth_mask(v: Any, n: int) -> pa.Array:
    """A predicate's value (array or scalar) as a filter: TRUE keeps, NULL and FALSE drop."""
    if isinstance(v, pa.Scalar):
        return pa.array(np.full(n, v.as_py() is True, dtype=bool))
    return pc.fill_null(v, False)


class Evaluated(NamedTuple):
    batch: pa.Table  # the rows kept
    values: list[Any]  # each expression's value over them
    rejected: list[str]  # one reason per dropped row
    kept: np.ndarray | None  # indices of the kept rows in the input (None: all of them)

    def true_rows(self) -> np.ndarray:
        """Indices, in the input, of the rows whose (first) value is TRUE: a predicate's rows."""
        at = np.arange(self.batch.num_rows) if self.kept is None else self.kept
        mask = truth_mask(self.values[0], self.batch.num_rows).to_numpy(zero_copy_only=False)
        return at[np.asarray(mask, dtype=bool)]


def evaluate_rows(fns: Sequence[VFn], exprs: Sequence[BExpr], b: pa.Table, now: int | None = None) -> Evaluated:
    """``exprs`` over a batch, vectorised; if that fails, row by row by the definition
    (``sluice.runtime.rowexpr``), where a row that cannot be evaluated (integer overflow, a UDF
    raising: a ``RowError``) is dropped.  Per-row Python runs only for a batch holding such a row.
    """
    try:
        return Evaluated(b, [f(b, now) for f in fns], [], None)
    except Exception:  # noqa: BLE001 — the row path below decides, by the definition
        pass
    from sluice.runtime.rowexpr import eval_row

    def no_subquery(e: Subquery, row: tuple[Any, ...], env: tuple[tuple[Any, ...], ...]) -> Any:
        raise InternalError("evaluate_rows: a subquery in a vectorised expression")

    keep: list[int] = []
    values: list[list[Any]] = [[] for _ in exprs]
    reasons: list[str] = []
    ts = b.column(0).to_pylist()
    cols = [c.to_pylist() for c in b.columns[META:]]
    for i, t in enumerate(ts):
        row = tuple(c[i] for c in cols)
        try:
            vals = [eval_row(e, row, (), no_subquery, t if now is None else now) for e in exprs]
        except RowError as ex:
            reasons.append(f"row {row!r} at {t}: {ex}")
            continue
        keep.append(i)
        for acc, v in zip(values, vals, strict=True):
            acc.append(v)
    kept = np.array(keep, dtype=np.int64)
    arrays = [values_array(v, e.type, arrow_type(e.type)) for v, e in zip(values, exprs, strict=True)]
    return Evaluated(b.take(pa.array(kept)), arrays, reasons, kept)
