"""AST → CQL text.  Expressions are fully parenthesised so that ``parse(print(q)) == q``.

>>> from sluice.cql.parser import parse_query
>>> to_cql(parse_query("select a+b*2 from S [range 2 minutes] where not a=1"))
'SELECT (a + (b * 2)) FROM S [Range 2 minutes] WHERE (NOT (a = 1))'
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sluice.cql import ast


def to_cql(node: ast.Node) -> str:
    """Render any AST node as CQL text."""
    # a window kind is a subclass of ast.Window: the nearest class in the table prints it
    fn = next((_PRINTERS[c] for c in type(node).__mro__ if c in _PRINTERS), None)
    if fn is None:
        raise TypeError(f"no printer for {type(node).__name__}")
    return fn(node)


def _literal(n: ast.Literal) -> str:
    v = n.value
    if v is None:
        return "NULL"
    if isinstance(v, bool):
        return "TRUE" if v else "FALSE"
    if isinstance(v, str):
        return "'" + v.replace("'", "''") + "'"
    if isinstance(v, float):
        r = repr(v)
        if r in ("inf", "nan", "-inf"):
            raise ValueError(f"{r} has no CQL literal")
        return r
    return str(v)


def _select(n: ast.Select) -> str:
    items = ", ".join(to_cql(i) for i in n.items)
    if n.stream_op:
        items = f"{n.stream_op.title()}({items})"
    parts = ["SELECT"]
    if n.distinct:
        parts.append("DISTINCT")
    parts.append(items)
    parts.append("FROM " + ", ".join(to_cql(f) for f in n.from_))
    if n.where is not None:
        parts.append("WHERE " + to_cql(n.where))
    if n.group_by:
        parts.append("GROUP BY " + ", ".join(to_cql(g) for g in n.group_by))
    if n.having is not None:
        parts.append("HAVING " + to_cql(n.having))
    if n.window is not None:
        parts.append("WINDOW " + to_cql(n.window))
    return " ".join(parts)


def _from_suffix(n: ast.TableRef | ast.SubqueryRef) -> str:
    s = ""
    if n.window is not None:
        s += " " + to_cql(n.window)
    if n.sample is not None:
        s += " " + to_cql(n.sample)
    if n.alias is not None:
        s += f" AS {n.alias}"
    return s


def _window(n: ast.Window) -> str:
    body = n.body()  # each kind prints itself (sluice.windows)
    if n.where is not None:
        body += " Where " + to_cql(n.where)
    return f"[{body}]"


def _case(n: ast.Case) -> str:
    s = "CASE"
    if n.operand is not None:
        s += " " + to_cql(n.operand)
    for cond, res in n.whens:
        s += f" WHEN {to_cql(cond)} THEN {to_cql(res)}"
    if n.else_ is not None:
        s += " ELSE " + to_cql(n.else_)
    return s + " END"


def _call(n: ast.FuncCall) -> str:
    if n.star:
        return f"{n.name}(*)"
    args = ", ".join(to_cql(a) for a in n.args)
    return f"{n.name}({'DISTINCT ' if n.distinct else ''}{args})"


def _operand(q: ast.Query) -> str:
    return q.name if isinstance(q, ast.TableQuery) else f"({to_cql(q)})"


def _not(neg: bool) -> str:
    return "NOT " if neg else ""


def _unary(n: ast.Unary) -> str:
    sep = " " if n.op == "NOT" else ""
    return f"({n.op}{sep}{to_cql(n.operand)})"


_PRINTERS: dict[type, Callable[[Any], str]] = {
    ast.Literal: _literal,
    ast.ColumnName: lambda n: n.sql(),
    ast.Star: lambda n: f"{n.qualifier}.*" if n.qualifier else "*",
    ast.Unary: _unary,
    ast.Binary: lambda n: f"({to_cql(n.left)} {n.op} {to_cql(n.right)})",
    ast.FuncCall: _call,
    ast.IsNull: lambda n: f"({to_cql(n.operand)} IS {_not(n.negated)}NULL)",
    ast.Like: lambda n: f"({to_cql(n.operand)} {_not(n.negated)}LIKE {to_cql(n.pattern)})",
    ast.Between: lambda n: f"({to_cql(n.operand)} {_not(n.negated)}BETWEEN {to_cql(n.low)} AND {to_cql(n.high)})",
    ast.InList: lambda n: f"({to_cql(n.operand)} {_not(n.negated)}IN ({', '.join(to_cql(i) for i in n.items)}))",
    ast.InSubquery: lambda n: f"({to_cql(n.operand)} {_not(n.negated)}IN ({to_cql(n.query)}))",
    ast.Exists: lambda n: f"({_not(n.negated)}EXISTS ({to_cql(n.query)}))",
    ast.Quantified: lambda n: f"({to_cql(n.operand)} {n.op} {n.quantifier} ({to_cql(n.query)}))",
    ast.ScalarSubquery: lambda n: f"({to_cql(n.query)})",
    ast.Case: _case,
    ast.CurrentTime: lambda n: "CURRENT_TIME",
    ast.Duration: lambda n: n.sql(),
    ast.Window: _window,
    ast.Sample: lambda n: f"Sample({n.percent:g})" if n.least is None else f"Sample({n.least:g} To {n.percent:g})",
    ast.TableRef: lambda n: n.name + _from_suffix(n),
    ast.SubqueryRef: lambda n: f"({to_cql(n.query)})" + _from_suffix(n),
    ast.SelectItem: lambda n: to_cql(n.expr) + (f" AS {n.alias}" if n.alias else ""),
    ast.Select: _select,
    ast.SetOp: lambda n: f"{_operand(n.left)} {n.op}{' ALL' if n.all else ''} {_operand(n.right)}",
    ast.TableQuery: lambda n: n.name,
    ast.StreamOp: lambda n: f"{n.op.title()}({to_cql(n.query)})",
    ast.ColumnDef: lambda n: f"{n.name} {n.type.sql()}",
    ast.RegisterSource: lambda n: (
        f"REGISTER {n.kind} {n.name} ({', '.join(to_cql(c) for c in n.columns)})"
        + (f" UNIT {n.unit.name.lower()}" if n.unit is not None else "")
        + "".join(f" {c.sql()}" for c in n.constraints)
    ),
    ast.RegisterView: lambda n: (
        f"REGISTER VIEW {n.name}" + (f" ({', '.join(n.columns)})" if n.columns else "") + f" AS {to_cql(n.query)}"
    ),
    ast.RegisterQuery: lambda n: (
        f"REGISTER QUERY {n.name}"
        + (f" WEIGHT {n.weight:g}" if n.weight is not None else "")
        + (f" PRECISION {n.precision:g}" if n.precision is not None else "")
        + (f" LATENCY {n.latency * 1000:g} ms" if n.latency is not None else "")
        + f" AS {to_cql(n.query)}"
    ),
    ast.QueryStatement: lambda n: to_cql(n.query),
    ast.Explain: lambda n: "EXPLAIN " + to_cql(n.query),
}
