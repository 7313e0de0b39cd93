"""EXPLAIN: the logical plan as an indented tree, with each node's kind and schema.

>>> from sluice.catalog import Catalog
>>> from sluice.plan.binder import bind_query
>>> cat = Catalog(); _ = cat.register_stream("S", [("A", "integer")])
>>> print(explain(bind_query(cat, "select A from S where A > 1").plan))
Istream (default)  -> stream (A integer)
└─ Filter (A > 1)  -> relation (A integer)
   └─ Window Range Unbounded  -> relation (A integer)
      └─ Scan stream S  -> stream (A integer)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sluice.plan import logical as L
from sluice.plan.expr import Subquery, render, walk_expr


def _label(n: L.LogicalNode) -> str:
    fn = _LABELS.get(type(n))
    return fn(n) if fn else type(n).__name__


def _input_names(n: L.LogicalNode) -> tuple[str, ...]:
    ins = n.inputs()
    return ins[0].schema.names if ins else ()


_LABELS: dict[type, Callable[[Any], str]] = {
    L.Scan: lambda n: f"Scan {n.kind.value} {n.name}",
    L.Window: lambda n: f"Window {n.spec.describe(n.input.schema.names)}",
    L.Sample: lambda n: (
        f"Sample {n.fraction * 100:g}%"
        + ("" if n.least is None or n.most is None else f" of {n.least * 100:g}–{n.most * 100:g}%")
    ),
    L.Filter: lambda n: f"Filter {render(n.predicate, _input_names(n))}",
    L.Project: lambda n: (
        "Project "
        + ", ".join(
            render(e, _input_names(n)) + ("" if render(e, _input_names(n)) == c.name else f" AS {c.name}")
            for e, c in zip(n.columns, n.schema.columns, strict=True)
        )
    ),
    L.Join: lambda n: "Join (cross product; condition in the Filter above)",
    L.Aggregate: lambda n: (
        "Aggregate"
        + (f" by {', '.join(render(k, _input_names(n)) for k in n.keys)}" if n.keys else "")
        + ": "
        + ", ".join(a.render(_input_names(n)) for a in n.aggs)
    ),
    L.Distinct: lambda n: "Distinct",
    L.SetOp: lambda n: f"{n.op.title()}{' All' if n.all else ''}",
    L.StreamOp: lambda n: f"{n.op.title()}{' (default)' if n.implicit else ''}",
}


def explain(plan: L.LogicalNode) -> str:
    """Render ``plan`` as a tree; subqueries inside expressions are shown under their node."""
    lines: list[str] = []

    def rec(n: L.LogicalNode, prefix: str, child_prefix: str) -> None:
        schema = ", ".join(f"{c.name} {c.type}" for c in n.schema.columns)
        lines.append(f"{prefix}{_label(n)}  -> {n.kind.value} ({schema})")
        subs = [x for e in n.exprs() for x in walk_expr(e) if isinstance(x, Subquery)]
        kids: list[tuple[str, L.LogicalNode]] = [(f"[{s.kind.lower()} subquery] ", s.plan) for s in subs]
        kids += [("", c) for c in n.inputs()]
        for i, (tag, c) in enumerate(kids):
            last = i == len(kids) - 1
            rec(c, child_prefix + ("└─ " if last else "├─ ") + tag, child_prefix + ("   " if last else "│  "))

    rec(plan, "", "")
    return "\n".join(lines)
