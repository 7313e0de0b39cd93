"""Golden files: schema, timestamped input, queries and their expected output, in one text file.

Blocks are separated by blank lines; ``#`` lines are comments::

    statement                      DDL (any number of ;-terminated statements)
    REGISTER STREAM S (A integer, B varchar(8));

    udf correlated                 a Python UDF from UDFS below, registered in the catalog

    timeunit millisecond           what one tick means (default: second)

    stream S                       one element a line:  ts: v1, v2
    1: 1, 'x'

    relation R                     one update a line:   ts +: v1   or   ts -: v1
    1 +: 1

    query [until=N] [start=N]      the query, then ---- then expected elements (ts sign: values)
    SELECT * FROM S
    ----
    1 +: 1, 'x'

    query error                    the query, then ---- then the exact error text
    explain                        the query, then ---- then the exact EXPLAIN text

Values are CQL literals: integers, floats, 'strings', NULL, TRUE, FALSE.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sluice.catalog import Catalog
from sluice.cql import ast
from sluice.cql.ast import TimeUnit
from sluice.cql.errors import CQLError
from sluice.cql.parser import parse_expression
from sluice.cql.printer import to_cql
from sluice.errors import SluiceError
from sluice.plan import bind_query, execute
from sluice.plan.explain import explain
from sluice.reference import Element, evaluate

GOLDEN_DIR = Path(__file__).parent / "golden"


def _correlated(a: float, b: float) -> bool:
    return abs(a - b) <= 5.0


# UDFs the golden files may register: name -> (callable, return type, argument types).
UDFS: dict[str, tuple[Callable[..., Any], str, list[str] | None]] = {
    "correlated": (_correlated, "boolean", ["float", "float"]),
    "doltoeur": (lambda usd: round(usd * 0.89, 2), "float", ["float"]),
    "twice": (lambda x: 2 * x, "integer", ["integer"]),
}


@dataclass
class Case:
    kind: str  # 'query' | 'error' | 'explain'
    query: str
    expected: list[str]
    line: int
    options: dict[str, int] = field(default_factory=dict)
    # Where the expected block lives in the file (for --update-golden).
    exp_start: int = 0
    exp_end: int = 0


@dataclass
class GoldenFile:
    path: Path
    lines: list[str]
    ddl: list[str] = field(default_factory=list)
    udfs: list[str] = field(default_factory=list)
    time_unit: str = "SECOND"
    streams: dict[str, list[tuple[int, tuple[Any, ...]]]] = field(default_factory=dict)
    relations: dict[str, list[tuple[int, str, tuple[Any, ...]]]] = field(default_factory=dict)
    cases: list[Case] = field(default_factory=list)

    def catalog(self) -> Catalog:
        cat = Catalog(time_unit=TimeUnit[self.time_unit])
        for name in self.udfs:
            fn, ret, args = UDFS[name]
            cat.register_function(name, fn, ret, args)
        for text in self.ddl:
            execute(cat, text)
        return cat


def parse_values(text: str, where: str) -> tuple[Any, ...]:
    """Comma-separated CQL literals → Python values."""
    if not text.strip():
        return ()
    expr = parse_expression(f"COALESCE({text})")
    assert isinstance(expr, ast.FuncCall)
    out = []
    for a in expr.args:
        if isinstance(a, ast.Literal):
            out.append(a.value)
        elif isinstance(a, ast.Unary) and a.op == "-" and isinstance(a.operand, ast.Literal):
            out.append(-a.operand.value)  # type: ignore[operator]
        else:
            raise ValueError(f"{where}: not a literal: {to_cql(a)}")
    return tuple(out)


def format_value(v: Any) -> str:
    """A value as a CQL literal (the printer's spelling); non-finite floats as Python writes them."""
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    return to_cql(ast.Literal(v))


def format_element(e: Element) -> str:
    return f"{e.ts} {e.sign}: " + ", ".join(format_value(v) for v in e.row)


_ELEMENT = re.compile(r"^\s*(-?\d+)\s*([+-])?\s*:(.*)$")


def _blocks(lines: list[str]) -> Iterator[tuple[int, list[str]]]:
    block: list[str] = []
    start = 0
    for i, raw in enumerate(lines):
        if raw.strip() == "" and block:
            yield start, block
            block = []
        elif raw.strip() and not (raw.startswith("#") and not block):
            if not block:
                start = i
            block.append(raw)
    if block:
        yield start, block


def load(path: Path) -> GoldenFile:
    lines = path.read_text().split("\n")
    g = GoldenFile(path, lines)
    for start, block in _blocks(lines):
        head = block[0].split()
        where = f"{path.name}:{start + 1}"
        body = block[1:]
        if head[0] == "statement":
            g.ddl.append("\n".join(body))
        elif head[0] == "timeunit":
            g.time_unit = head[1].upper()
        elif head[0] == "udf":
            g.udfs.extend(head[1:])
        elif head[0] == "stream":
            rows = g.streams.setdefault(head[1], [])
            for j, line in enumerate(body):
                m = _ELEMENT.match(line)
                if not m or m.group(2):
                    raise ValueError(f"{path.name}:{start + j + 2}: expected 'ts: values'")
                rows.append((int(m.group(1)), parse_values(m.group(3), where)))
        elif head[0] == "relation":
            ups = g.relations.setdefault(head[1], [])
            for j, line in enumerate(body):
                m = _ELEMENT.match(line)
                if not m or not m.group(2):
                    raise ValueError(f"{path.name}:{start + j + 2}: expected 'ts +: values'")
                ups.append((int(m.group(1)), m.group(2), parse_values(m.group(3), where)))
        elif head[0] in ("query", "explain"):
            kind = "explain" if head[0] == "explain" else ("error" if "error" in head[1:] else "query")
            opts = {k: int(v) for k, _, v in (o.partition("=") for o in head[1:] if "=" in o)}
            if "----" not in [b.strip() for b in body]:
                raise ValueError(f"{where}: a {head[0]} block needs '----' before its expected output")
            sep = [b.strip() for b in body].index("----")
            case = Case(kind, "\n".join(body[:sep]), body[sep + 1 :], start + 1, opts)
            case.exp_start = start + 1 + sep + 1
            case.exp_end = start + len(block)
            g.cases.append(case)
        else:
            raise ValueError(f"{where}: unknown block {head[0]!r}")
    return g


def run_case(g: GoldenFile, case: Case) -> list[str]:
    """The actual output lines of a case, in the file's format (reference evaluator)."""
    cat = g.catalog()
    if case.kind == "explain":
        return explain(bind_query(cat, case.query).plan).split("\n")
    if case.kind == "error":
        try:
            bq = bind_query(cat, case.query)
            evaluate(bq, g.streams, g.relations, **case.options)
        except CQLError as e:
            return e.render().split("\n")
        except SluiceError as e:
            return [f"{type(e).__name__}: {e}"]
        return ["(no error)"]
    bq = bind_query(cat, case.query)
    return [format_element(e) for e in evaluate(bq, g.streams, g.relations, **case.options)]


def parse_expected(g: GoldenFile, case: Case) -> list[Element]:
    out = []
    for line in case.expected:
        m = _ELEMENT.match(line)
        if not m or not m.group(2):
            raise ValueError(f"{g.path.name}: bad expected line {line!r}")
        out.append(Element(int(m.group(1)), m.group(2), parse_values(m.group(3), g.path.name)))
    return out


def update(g: GoldenFile) -> None:
    """Rewrite every case's expected block with the actual output."""
    lines = list(g.lines)
    for case in sorted(g.cases, key=lambda c: c.exp_start, reverse=True):
        lines[case.exp_start : case.exp_end] = run_case(g, case)
    g.path.write_text("\n".join(lines))


def all_files() -> list[Path]:
    return sorted(GOLDEN_DIR.glob("*.test"))
