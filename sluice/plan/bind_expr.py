"""Binding of scalar expressions: names → positions, types checked, sugar normalised.

In an aggregate query the select list and HAVING are bound in *post-aggregation* mode: a
sub-expression equal to a GROUP BY key becomes a reference to that key's output column,
an aggregate call becomes a reference to its output column, and any other column of the
block is an error ("must appear in GROUP BY").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sluice.cql import ast
from sluice.cql.errors import BindError, Span
from sluice.datatypes import BIGINT, BOOLEAN, INTEGER, NULLTYPE, TIMESTAMP, DataType, TypeKind
from sluice.plan import functions as F
from sluice.plan.expr import (
    AggCall,
    AggKind,
    BExpr,
    Call,
    CaseWhen,
    ColRef,
    Const,
    CurrentTime,
    OuterRef,
    Subquery,
    UdfCall,
)
from sluice.plan.function_defs import BUILTINS, INFIX, PREFIX, FunctionDef, function
from sluice.plan.numeric import canonical
from sluice.plan.scope import Scope

if TYPE_CHECKING:
    from sluice.plan.binder import Binder
    from sluice.plan.logical import LogicalNode


@dataclass
class AggContext:
    """State for binding an aggregate query's select list / HAVING."""

    keys: list[BExpr]
    aggs: list[AggCall] = field(default_factory=list)
    post_scope: Scope | None = None  # grouping columns by name, for correlated subqueries

    def agg_ref(self, call: AggCall) -> ColRef:
        if call not in self.aggs:
            self.aggs.append(call)
        j = self.aggs.index(call)
        return ColRef(len(self.keys) + j, call.type, call.render())


def literal_type(v: Any) -> DataType:
    if v is None:
        return NULLTYPE
    if isinstance(v, bool):
        return BOOLEAN
    if isinstance(v, int):
        return INTEGER if -(2**31) <= v < 2**31 else BIGINT
    if isinstance(v, float):
        return F.FLOAT
    return DataType(TypeKind.VARCHAR, max(1, len(v)))


class ExprBinder:
    """Binds AST expressions against a :class:`Scope`; owned by a :class:`Binder`."""

    def __init__(self, binder: Binder) -> None:
        self.binder = binder
        self.source = binder.source
        self._dispatch: dict[type, Callable[..., BExpr]] = {
            ast.Literal: self._literal,
            ast.ColumnName: self._column,
            ast.Unary: self._unary,
            ast.Binary: self._binary,
            ast.FuncCall: self._call,
            ast.IsNull: self._is_null,
            ast.Like: self._like,
            ast.Between: self._between,
            ast.InList: self._in_list,
            ast.InSubquery: self._in_subquery,
            ast.Exists: self._exists,
            ast.Quantified: self._quantified,
            ast.ScalarSubquery: self._scalar_subquery,
            ast.Case: self._case,
            ast.CurrentTime: lambda e, scope, agg, clause: CurrentTime(TIMESTAMP),
            ast.Star: self._star,
        }

    def error(self, msg: str, span: Span, hint: str | None = None, note: str | None = None) -> BindError:
        return BindError(msg, span, self.source, hint=hint, note=note)

    # -- entry points --------------------------------------------------------------------
    def bind(self, e: ast.Expr, scope: Scope, agg: AggContext | None = None, clause: str = "") -> BExpr:
        if agg is not None:
            # Post-aggregation: a whole sub-expression equal to a GROUP BY key is that key.
            if not isinstance(e, ast.Literal | ast.FuncCall) or (
                isinstance(e, ast.FuncCall) and e.name not in F.AGGREGATES
            ):
                try:
                    pre = self.bind(e, scope, None, clause)
                except BindError:
                    pre = None
                if pre is not None and pre in agg.keys:
                    k = agg.keys.index(pre)
                    return ColRef(k, pre.type, getattr(pre, "name", "") or f"key{k}")
        handler = self._dispatch.get(type(e))
        if handler is None:
            raise self.error(f"unexpected {type(e).__name__} here", getattr(e, "span", Span(0, 0, 1, 1)))
        return handler(e, scope, agg, clause)

    def predicate(self, e: ast.Expr, scope: Scope, agg: AggContext | None, clause: str) -> BExpr:
        b = self.bind(e, scope, agg, clause)
        if not (b.type.kind is TypeKind.BOOLEAN or b.type.is_null):
            raise self.error(f"{clause} needs a condition, but this is {b.type}", e.span)
        return b

    # -- leaves --------------------------------------------------------------------------
    def _literal(self, e: ast.Literal, scope: Scope, agg: AggContext | None, clause: str) -> BExpr:
        return Const(e.value, literal_type(e.value))

    def _star(self, e: ast.Star, scope: Scope, agg: AggContext | None, clause: str) -> BExpr:
        raise self.error("'*' is only allowed in a select list or COUNT(*)", e.span)

    def _column(self, e: ast.ColumnName, scope: Scope, agg: AggContext | None, clause: str) -> BExpr:
        s: Scope | None = scope
        depth = 0
        while s is not None:
            found = s.matches(e.qualifier, e.name)
            if len(found) > 1:
                quals = sorted({c.qualifier or "?" for c in found})
                hint = (
                    f"qualify it, e.g. {quals[0]}.{e.name}"
                    if e.qualifier is None and len(quals) > 1
                    else "give the columns distinct names with AS in the subquery"
                )
                where = " and ".join(quals)
                raise self.error(f"column {e.sql()!r} is ambiguous: it is in {where}", e.span, hint)
            if found:
                c = found[0]
                if depth == 0:
                    if agg is not None:
                        raise self.error(
                            f"column {e.sql()!r} must appear in GROUP BY or be used in an aggregate",
                            e.span,
                            hint=f"add {e.sql()} to GROUP BY, or aggregate it, e.g. MAX({e.sql()})",
                        )
                    return ColRef(c.index, c.type, e.sql())
                return OuterRef(depth, c.index, c.type, e.sql())
            s = s.parent
            depth += 1
        if e.qualifier is not None and not scope.has_qualifier(e.qualifier):
            raise self.error(
                f"unknown name {e.qualifier!r} in {e.sql()!r}",
                e.span,
                hint=_names_hint("inputs in FROM", sorted(_all_qualifiers(scope))),
            )
        raise self.error(
            f"unknown column {e.sql()!r}",
            e.span,
            hint=_names_hint("columns here", sorted({c.name for c in scope.columns})),
        )

    # -- operators -----------------------------------------------------------------------
    def _typed(self, span: Span, rule: Callable[..., DataType], *args: Any) -> DataType:
        try:
            return rule(*args)
        except TypeError as err:
            raise self.error(str(err), span) from None

    def _apply(self, d: FunctionDef | str, args: tuple[BExpr, ...], span: Span) -> Call:
        """A call of ``d`` (or the function of that internal name), typed by its rule."""
        d = function(d) if isinstance(d, str) else d
        return Call(d.name, args, self._typed(span, d.typing, [a.type for a in args]))

    def _unary(self, e: ast.Unary, scope: Scope, agg: AggContext | None, clause: str) -> BExpr:
        x = self.bind(e.operand, scope, agg, clause)
        if e.op == "+":
            self._typed(e.span, function("neg").typing, [x.type])  # '+' takes what '-' takes
            return x
        d = PREFIX.get(e.op)
        if d is None:
            raise self.error(f"unknown operator {e.op!r}", e.span)
        out = self._apply(d, (x,), e.span)
        if out.fn == "neg" and isinstance(x, Const):
            if isinstance(x.value, int | float) and not isinstance(x.value, bool):
                return Const(canonical(-x.value), out.type)  # a negative literal (-0.0 is 0.0: one zero)
        return out

    def _binary(self, e: ast.Binary, scope: Scope, agg: AggContext | None, clause: str) -> BExpr:
        a = self.bind(e.left, scope, agg, clause)
        b = self.bind(e.right, scope, agg, clause)
        d = INFIX.get(e.op)
        if d is None:
            raise self.error(f"unknown operator {e.op!r}", e.span)
        return self._apply(d, (a, b), e.span)

    def _is_null(self, e: ast.IsNull, scope: Scope, agg: AggContext | None, clause: str) -> BExpr:
        x = self.bind(e.operand, scope, agg, clause)
        return self._apply("is_not_null" if e.negated else "is_null", (x,), e.span)

    def _like(self, e: ast.Like, scope: Scope, agg: AggContext | None, clause: str) -> BExpr:
        a = self.bind(e.operand, scope, agg, clause)
        b = self.bind(e.pattern, scope, agg, clause)
        out = self._apply("like", (a, b), e.span)
        return self._apply("not", (out,), e.span) if e.negated else out

    def _between(self, e: ast.Between, scope: Scope, agg: AggContext | None, clause: str) -> BExpr:
        x = self.bind(e.operand, scope, agg, clause)
        lo = self.bind(e.low, scope, agg, clause)
        hi = self.bind(e.high, scope, agg, clause)
        out = self._apply("and", (self._apply("ge", (x, lo), e.span), self._apply("le", (x, hi), e.span)), e.span)
        return self._apply("not", (out,), e.span) if e.negated else out

    def _in_list(self, e: ast.InList, scope: Scope, agg: AggContext | None, clause: str) -> BExpr:
        x = self.bind(e.operand, scope, agg, clause)
        out: Call | None = None
        for item in e.items:
            v = self.bind(item, scope, agg, clause)
            eq = self._apply("eq", (x, v), getattr(item, "span", e.span))
            out = eq if out is None else self._apply("or", (out, eq), e.span)
        assert out is not None
        return self._apply("not", (out,), e.span) if e.negated else out

    def _case(self, e: ast.Case, scope: Scope, agg: AggContext | None, clause: str) -> BExpr:
        operand = self.bind(e.operand, scope, agg, clause) if e.operand is not None else None
        whens: list[tuple[BExpr, BExpr]] = []
        for cond_ast, res_ast in e.whens:
            if operand is not None:
                cond: BExpr = self._apply("eq", (operand, self.bind(cond_ast, scope, agg, clause)), cond_ast.span)
            else:
                cond = self.predicate(cond_ast, scope, agg, "WHEN")
            whens.append((cond, self.bind(res_ast, scope, agg, clause)))
        else_ = self.bind(e.else_, scope, agg, clause) if e.else_ is not None else Const(None, NULLTYPE)
        t = self._typed(e.span, F.unify_all, "CASE results", [r.type for _, r in whens] + [else_.type])
        return CaseWhen(tuple(whens), else_, t)

    # -- function calls ------------------------------------------------------------------
    def _call(self, e: ast.FuncCall, scope: Scope, agg: AggContext | None, clause: str) -> BExpr:
        if e.name in F.AGGREGATES:
            return self._aggregate(e, scope, agg, clause)
        if e.star:
            raise self.error(f"{e.name}(*) is not allowed; only COUNT(*)", e.span)
        if e.distinct:
            raise self.error(f"DISTINCT is only allowed in an aggregate, not in {e.name}()", e.span)
        args = tuple(self.bind(a, scope, agg, clause) for a in e.args)
        types = [a.type for a in args]
        builtin = BUILTINS.get(e.name)
        if builtin is not None:
            lo, hi = builtin.arity
            if not lo <= len(args) <= hi:
                n = str(lo) if lo == hi else f"{lo} to {hi}"
                raise self.error(f"{e.name} takes {n} argument(s), got {len(args)}", e.span)
            return self._apply(builtin, args, e.span)
        udf = self.binder.catalog.function(e.name)
        if udf is None:
            raise self.error(
                f"unknown function {e.name}",
                e.span,
                hint="register it with Catalog.register_function(name, fn, return_type)",
            )
        if udf.arg_types is not None:
            if len(udf.arg_types) != len(args):
                raise self.error(f"{e.name} takes {len(udf.arg_types)} argument(s), got {len(args)}", e.span)
            for want, got, a_ast in zip(udf.arg_types, types, e.args, strict=True):
                if F.unify(want, got) is None:
                    raise self.error(f"{e.name} expects {want} here, not {got}", a_ast.span)
        if udf.vectorized and not args:
            raise self.error(
                f"{e.name} is vectorized: it needs an argument (it is given one array per argument, "
                "as long as the batch)",
                e.span,
            )
        return UdfCall(e.name, args, udf.return_type, udf.fn, udf.strict, udf.vectorized, udf.arg_types)

    def _aggregate(self, e: ast.FuncCall, scope: Scope, agg: AggContext | None, clause: str) -> BExpr:
        if agg is None:
            hint = "filter groups with HAVING" if clause == "WHERE" else None
            raise self.error(f"aggregate {e.name} is not allowed in {clause or 'this place'}", e.span, hint)
        if e.star:
            if e.name != AggKind.COUNT:
                raise self.error(f"{e.name}(*) is not allowed; only COUNT(*)", e.span)
            return agg.agg_ref(AggCall(AggKind.COUNT, None, False, BIGINT))
        if len(e.args) != 1:
            raise self.error(f"{e.name} takes one argument, got {len(e.args)}", e.span)
        # The argument is evaluated per input row: bind it pre-aggregation (no nesting).
        arg = self.bind(e.args[0], scope, None, f"an argument of {e.name}")
        t = self._typed(e.span, F.aggregate, e.name, arg.type)
        return agg.agg_ref(AggCall(AggKind(e.name), arg, e.distinct, t))

    # -- subqueries ----------------------------------------------------------------------
    def _sub_scope(self, scope: Scope, agg: AggContext | None) -> Scope:
        if agg is not None:
            assert agg.post_scope is not None
            return agg.post_scope
        return scope

    def _subplan(self, q: ast.Query, scope: Scope, agg: AggContext | None, span: Span, one_column: bool) -> LogicalNode:
        plan = self.binder.bind_subquery_expr(q, self._sub_scope(scope, agg))
        if one_column and len(plan.schema) != 1:
            raise self.error(f"this subquery must return one column, not {len(plan.schema)}", span)
        return plan

    def _in_subquery(self, e: ast.InSubquery, scope: Scope, agg: AggContext | None, clause: str) -> BExpr:
        x = self.bind(e.operand, scope, agg, clause)
        plan = self._subplan(e.query, scope, agg, e.query.span, True)
        self._typed(e.span, F.compare, x.type, plan.schema.types[0])
        return Subquery("IN", plan, BOOLEAN, operand=x, negated=e.negated)

    def _exists(self, e: ast.Exists, scope: Scope, agg: AggContext | None, clause: str) -> BExpr:
        plan = self._subplan(e.query, scope, agg, e.query.span, False)
        return Subquery("EXISTS", plan, BOOLEAN, negated=e.negated)

    def _quantified(self, e: ast.Quantified, scope: Scope, agg: AggContext | None, clause: str) -> BExpr:
        x = self.bind(e.operand, scope, agg, clause)
        plan = self._subplan(e.query, scope, agg, e.query.span, True)
        self._typed(e.span, F.compare, x.type, plan.schema.types[0])
        return Subquery("QUANT", plan, BOOLEAN, operand=x, op=INFIX[e.op].name, quantifier=e.quantifier)

    def _scalar_subquery(self, e: ast.ScalarSubquery, scope: Scope, agg: AggContext | None, clause: str) -> BExpr:
        plan = self._subplan(e.query, scope, agg, e.span, True)
        return Subquery("SCALAR", plan, plan.schema.types[0])


def _all_qualifiers(scope: Scope) -> set[str]:
    out: set[str] = set()
    s: Scope | None = scope
    while s is not None:
        out |= {c.qualifier for c in s.columns if c.qualifier}
        s = s.parent
    return out


def _names_hint(what: str, names: list[str]) -> str | None:
    if not names:
        return None
    shown = ", ".join(names[:12]) + (", ..." if len(names) > 12 else "")
    return f"{what}: {shown}"
