"""Row-at-a-time evaluation of bound expressions, for the operators whose semantics are per row
(subqueries).  It uses the shared scalar definitions (``FunctionDef.row``); a subquery is
answered by a callback the operator supplies.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sluice.errors import InternalError
from sluice.plan.expr import BExpr, Call, CaseWhen, ColRef, Const, CurrentTime, OuterRef, Subquery, UdfCall
from sluice.plan.function_defs import function
from sluice.plan.scalar import not_, quantified, udf_value

Row = tuple[Any, ...]
SubqueryFn = Callable[[Subquery, Row, tuple[Row, ...]], Any]


def eval_row(e: BExpr, row: Row, env: tuple[Row, ...], sub: SubqueryFn, now: int | None = None) -> Any:
    """``e`` on ``row``; ``env`` holds the enclosing rows (innermost last) for OuterRef; ``now`` is
    the instant CURRENT_TIME stands for.
    """
    if isinstance(e, ColRef):
        return row[e.index]
    if isinstance(e, Const):
        return e.value
    if isinstance(e, Call):
        return function(e.fn).row(*(eval_row(a, row, env, sub, now) for a in e.args))
    if isinstance(e, OuterRef):
        return env[-e.depth][e.index]
    if isinstance(e, CaseWhen):
        for cond, res in e.whens:
            if eval_row(cond, row, env, sub, now) is True:
                return eval_row(res, row, env, sub, now)
        return eval_row(e.else_, row, env, sub, now)
    if isinstance(e, UdfCall):
        return udf_value(e, [eval_row(a, row, env, sub, now) for a in e.args])
    if isinstance(e, Subquery):
        return sub(e, row, env)
    if isinstance(e, CurrentTime):
        if now is None:
            raise InternalError("CURRENT_TIME without an instant")
        return now
    raise InternalError(f"cannot evaluate {type(e).__name__} row by row")


def fold_subquery(e: Subquery, x: Any, values: list[tuple[Row, int]]) -> Any:
    """EXISTS / IN / ALL / ANY / scalar over the subquery's rows (with multiplicities), in 3VL."""
    from sluice.errors import EvaluationError

    if e.kind == "EXISTS":
        nonempty = any(n > 0 for _, n in values)
        return (not nonempty) if e.negated else nonempty
    if e.kind == "SCALAR":
        total = sum(n for _, n in values)
        if total > 1:
            raise EvaluationError(f"a scalar subquery returned {total} rows")
        return values[0][0][0] if total else None
    cmp = function(e.op if e.kind == "QUANT" else "eq").row
    out = quantified((cmp(x, r[0]) for r, n in values if n > 0), e.kind == "QUANT" and e.quantifier == "ALL")
    return not_(out) if e.negated else out


class Summary:
    """What a quantified comparison needs of a subquery's one-column rows: emptiness, NULLs, the
    extremes and the set of non-NULL values — so ``x op ALL/ANY (…)`` costs O(1) per outer row.
    Built only when every value is comparable (no float NaN, which orders with nothing).
    """

    __slots__ = ("nonempty", "has_null", "lo", "hi", "values")

    def __init__(self, rows: list[tuple[Row, int]]) -> None:
        vals = [r[0] for r, n in rows if n > 0]
        nonnull = [v for v in vals if v is not None]
        self.nonempty = bool(vals)
        self.has_null = len(nonnull) < len(vals)
        self.lo = min(nonnull) if nonnull else None
        self.hi = max(nonnull) if nonnull else None
        self.values = set(nonnull)

    @staticmethod
    def of(rows: list[tuple[Row, int]]) -> Summary | None:
        if any(isinstance(r[0], float) and r[0] != r[0] for r, _ in rows):
            return None
        return Summary(rows)


def fold_summary(e: Subquery, x: Any, s: Summary) -> Any:
    """``fold_subquery`` from a :class:`Summary` — the same 3VL answer for IN and ALL/ANY."""
    op, quant = (e.op, e.quantifier) if e.kind == "QUANT" else ("eq", "ANY")
    if not s.nonempty:
        out: Any = quant == "ALL"
    else:
        some_true = some_false = False  # among the comparisons with non-NULL values
        if s.values:
            lo, hi, only = s.lo, s.hi, s.lo == s.hi
            if op == "gt":
                some_true, some_false = x > lo, not x > hi
            elif op == "ge":
                some_true, some_false = x >= lo, x < hi
            elif op == "lt":
                some_true, some_false = x < hi, not x < lo
            elif op == "le":
                some_true, some_false = x <= hi, x > lo
            elif op == "eq":
                some_true, some_false = x in s.values, not (only and x == lo)
            else:  # ne
                some_true, some_false = not (only and x == lo), x in s.values
        if quant == "ALL":
            out = False if some_false else (None if s.has_null else True)
        else:
            out = True if some_true else (None if s.has_null else False)
    return not_(out) if e.negated else out
