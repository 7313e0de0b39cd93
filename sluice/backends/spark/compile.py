"""What of a query Spark itself does: partition keys and selections as native DataFrame expressions.

Analyses of a query's rewritten plan (``sluice.plan.rules``; its processors run the same plan), all
conservative (when in doubt, less is done natively and the
processor does the rest — never a different answer):

``partitioning(plan)``
    How to split the query's input over keys (the engine uses ``spark.sql.shuffle.partitions`` of
    them) so that the union of the per-key answers is the answer.  Each source is *keyed* by some
    of its columns (its elements go to the bucket ``pmod(hash(cols), buckets)``, computed by
    Spark), or *replicated* to every bucket (relations only, for stream–relation joins).  A plan
    is valid for an assignment when, bottom-up (``_Check``; its failures say why — ``unsplittable``):

    - time-based windows (Unbounded, Now, Range) keep a keyed input keyed; ``[Rows N]`` (a global
      order) does not; ``[Partition By P Rows N]`` does when the key columns are among ``P``;
    - σ, Sample, ρ keep the key; π keeps it where the key columns are projected, else the input
      stays split but the key is *lost* (an output tuple no longer says which bucket made it);
    - an equi-join of two keyed inputs needs ``left.key = right.key`` conjuncts (same Spark type);
      a keyed input joins a replicated one freely;
    - GROUP BY must include the key columns; DISTINCT, Istream and Dstream need the key not lost
      (bag difference distributes over a union of relations with disjoint supports only) — except
      Istream/Dstream over an insert-only relation (``[Range Unbounded]`` under σ, π, joins);
    - the root must be keyed (a replicated root would be answered once per bucket).

    Candidates come from the plan (GROUP BY, Partition By and equi-join columns, traced to the
    sources) and are tried in that order before whole elements.  Float columns are never keys
    (``hash`` tells -0.0 from 0.0, ``=`` does not).

``pushdown(plan)``
    Conjuncts of WHERE clauses that can be evaluated on a source's elements before any stateful
    operator — on the rewritten plan, whose rules (``sluice.plan.rules``) move them through
    time-based windows, projections, joins (one side's columns), GROUP BY keys, DISTINCT, set
    operations and Istream/Dstream/Rstream down to the scan; the caller pushes those ``to_column``
    translates (``SPARK_FUNCTIONS``: the scalar functions keyed by their ``FunctionDef`` names,
    each equal to the definition, three-valued logic included).  The processor still applies the
    whole predicate, so a pushed conjunct only removes elements the query would drop anyway.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from sluice import windows as W
from sluice.catalog import Kind
from sluice.datatypes import DataType, TypeKind
from sluice.errors import InternalError
from sluice.plan import logical as L
from sluice.plan.analysis import (
    column_equalities,
    conjuncts,
    copied_columns,
    has_subquery,
    insert_only,
    plan_has_subquery,
    shift,
    substitute,
    trace,
)
from sluice.plan.expr import BExpr, Call, ColRef, Const, Subquery, walk_expr
from sluice.plan.numeric import INT_MIN


@dataclass(frozen=True)
class Partitioning:
    """``keys[source]``: key column positions of a keyed source; sources absent are replicated."""

    keys: dict[str, tuple[int, ...]]


# -- partitioning ---------------------------------------------------------------------------


def _scans(plan: L.LogicalNode) -> list[L.Scan]:
    return [n for n in L.walk_plan(plan) if isinstance(n, L.Scan)]


def _keyable(t: DataType) -> bool:
    return t.kind is not TypeKind.FLOAT


def _candidates(plan: L.LogicalNode) -> dict[str, list[tuple[int, ...]]]:
    """Key column sets per source suggested by GROUP BY, Partition By and equi-joins."""
    out: dict[str, list[tuple[int, ...]]] = {}

    def add(node: L.LogicalNode, cols: list[int]) -> None:
        traced = [trace(node, c) for c in cols]
        by_src: dict[str, set[int]] = {}
        for t in traced:
            if t is not None:
                by_src.setdefault(t[0], set()).add(t[1])
        for src, cs in by_src.items():
            key = tuple(sorted(cs))
            if key not in out.setdefault(src, []):
                out[src].append(key)
            for c in key:  # single columns too: the intersection of several demands
                if (c,) not in out[src]:
                    out[src].append((c,))

    for n in L.walk_plan(plan, into_subqueries=False):
        if isinstance(n, L.Aggregate):
            add(n.input, [k.index for k in n.keys if isinstance(k, ColRef)])
        elif isinstance(n, L.Window) and n.spec.partition:
            add(n.input, list(n.spec.partition))
        elif isinstance(n, L.Filter) and isinstance(n.input, L.Join):
            for a, b in column_equalities(n.predicate):
                add(n.input, [a])
                add(n.input, [b])
    return out


class _Invalid(Exception):
    pass


class _Check:
    def __init__(self, keys: dict[str, tuple[int, ...]]) -> None:
        self.keys = keys

    def run(self, node: L.LogicalNode) -> tuple[bool, tuple[int, ...] | None]:
        """(keyed?, key positions or None if lost)."""
        if isinstance(node, L.Scan):
            k = self.keys.get(node.name.lower())
            return (True, k) if k is not None else (False, None)
        if isinstance(node, L.Filter) and isinstance(node.input, L.Join):
            return self.join(node.input, column_equalities(node.predicate))
        if isinstance(node, L.Join):
            return self.join(node, [])
        inputs = [self.run(c) for c in node.inputs()]
        if isinstance(node, L.SetOp):
            (lk, lc), (rk, rc) = inputs
            if not lk and not rk:
                return False, None
            what = node.op.value.title() + (" All" if node.all else "")
            if not (lk and rk):
                raise _Invalid(f"{what} of a split input and a replicated one")
            same = lc if lc == rc else None
            if not (node.op is L.SetOpKind.UNION and node.all) and same is None:
                raise _Invalid(f"{what} compares whole tuples: both inputs must keep the same key columns")
            return True, same
        keyed, cols = inputs[0]
        if not keyed:
            return False, None
        if isinstance(node, L.Window):
            if node.spec.time_based or (cols is not None and node.spec.keeps_split(cols)):
                return True, cols
            raise _Invalid(f"[{node.spec.describe(node.input.schema.names)}] orders the whole stream")
        if isinstance(node, L.Filter):
            return True, cols
        if isinstance(node, L.Sample | L.Distinct):
            if cols is None:
                what = "DISTINCT" if isinstance(node, L.Distinct) else "Sample"
                raise _Invalid(f"{what} over tuples that no longer carry the key (it is projected away)")
            return True, cols
        if isinstance(node, L.Project):
            if cols is None:
                return True, None
            pos = {c.index: i for i, c in reversed(list(enumerate(node.columns))) if isinstance(c, ColRef)}
            return True, (tuple(pos[c] for c in cols) if all(c in pos for c in cols) else None)
        if isinstance(node, L.Aggregate):
            if not node.keys:
                raise _Invalid("an aggregate over the whole relation (no GROUP BY)")
            pos = {k.index: i for i, k in reversed(list(enumerate(node.keys))) if isinstance(k, ColRef)}
            if cols is None or not all(c in pos for c in cols):
                raise _Invalid("GROUP BY does not include the columns the input is split by")
            return True, tuple(pos[c] for c in cols)
        if isinstance(node, L.StreamOp):
            if node.op is not L.StreamOpKind.RSTREAM and cols is None and not insert_only(node.input):
                raise _Invalid(
                    f"{node.op.value.title()} of a relation without the key columns (changes in two parts could cancel)"
                )
            return True, cols
        raise _Invalid(f"no rule splits {type(node).__name__}")

    def join(self, j: L.Join, eqs: list[tuple[int, int]]) -> tuple[bool, tuple[int, ...] | None]:
        (lk, lc), (rk, rc) = self.run(j.left), self.run(j.right)
        nl = len(j.left.schema)
        if not lk and not rk:
            return False, None
        if lk and not rk:
            return True, lc
        if rk and not lk:
            return True, None if rc is None else tuple(c + nl for c in rc)
        if lc is None or rc is None or len(lc) != len(rc):
            raise _Invalid("a join of two split inputs that do not both keep their key columns")
        pairs = {(a, b) for a, b in eqs} | {(b, a) for a, b in eqs}
        types = j.schema.types
        from sluice.backends.spark.types import spark_type

        for a, b in zip(lc, rc, strict=True):
            if (a, b + nl) not in pairs or spark_type(types[a]) != spark_type(types[b + nl]):
                raise _Invalid("a join of two streams without an equality of their key columns (of one type)")
        return True, lc


def partitioning(plan: L.LogicalNode) -> Partitioning | None:
    """How to split the query over keys, or None (it runs on one key); see the module docstring."""
    return _split(plan)[0]


def unsplittable(plan: L.LogicalNode) -> str:
    """Why ``partitioning(plan)`` is None: the reason the first candidate keys failed."""
    return _split(plan)[1]


def _split(plan: L.LogicalNode) -> tuple[Partitioning | None, str]:
    if plan_has_subquery(plan):
        return None, "it has a subquery (which may read every element)"
    scans = _scans(plan)
    names = [s.name.lower() for s in scans]
    if len(set(names)) != len(names):  # a self-join: one source, two roles
        return None, "it reads one source twice"
    schemas = {s.name.lower(): s.schema for s in scans}
    cands = _candidates(plan)
    options: list[list[tuple[int, ...] | None]] = []
    for s in scans:
        src = s.name.lower()
        opts: list[tuple[int, ...] | None] = [
            c for c in cands.get(src, []) if all(_keyable(schemas[src].types[i]) for i in c)
        ]
        whole = tuple(i for i, t in enumerate(s.schema.types) if _keyable(t))
        if whole and whole not in opts:
            opts.append(whole)
        if s.kind is Kind.RELATION:
            opts.append(None)
        options.append(opts)
    why: str | None = None  # the first candidate's failure
    for choice in itertools.product(*options):
        keys = {n: k for n, k in zip(names, choice, strict=True) if k is not None}
        if not keys:
            continue
        try:
            keyed, _ = _Check(keys).run(plan)
        except _Invalid as e:
            why = why or str(e)
            continue
        if keyed:
            return Partitioning(keys), ""
    return None, why or "no column can be a key (float columns never are: hash tells -0.0 from 0.0)"


# -- stateless queries, whole -------------------------------------------------------------------


@dataclass(frozen=True)
class NativePlan:
    """A query that is σ and π over one stream's elements (optionally joined with a relation
    declared static): ``source``'s elements — paired with each ``static`` row — that pass every
    predicate, mapped by ``columns``, at their own timestamps.  Expressions index the stream's
    columns then the relation's if ``stream_first``, else the relation's then the stream's.
    """

    source: str
    predicates: list[BExpr]
    columns: list[BExpr]
    static: str | None = None
    stream_first: bool = True

    def width(self, stream_cols: int, static_cols: int) -> Callable[[int], tuple[str, int]]:
        """Maps an expression's column index to ("c" | "r", index in the stream | relation)."""
        first, n = ("c", stream_cols) if self.stream_first else ("r", static_cols)
        second = "r" if first == "c" else "c"
        return lambda j: (first, j) if j < n else (second, j - n)


def native(plan: L.LogicalNode) -> list[NativePlan] | None:
    """The plan as native branches if it is ``Istream(π σ … S [Range Unbounded])`` or
    ``Rstream(π σ … S [Now])``, or the same over ``S [...] ⋈ R`` with ``R`` a relation (the
    caller checks it is static), or ``Union All`` of such inputs under one ``Istream``/``Rstream``
    (one branch each) — each input element yields output only at its own timestamp, so Spark
    needs no state — else None.  (``Istream`` over ``[Now]`` is not: a tuple repeated at
    consecutive instants is not new; ``Union`` without ``All`` removes duplicates, which is state.)
    """
    if not isinstance(plan, L.StreamOp):  # (the rules unwrap a lone branch: ``π σ … S``, a stream)
        one = _branch(plan, None) if plan.kind is Kind.STREAM else None
        return None if one is None else [one]
    if plan.op is L.StreamOpKind.DSTREAM:
        return None
    want: type[W.WindowDef] = W.Unbounded if plan.op is L.StreamOpKind.ISTREAM else W.Now
    branches: list[NativePlan] = []

    def collect(node: L.LogicalNode) -> bool:
        if isinstance(node, L.SetOp) and node.op is L.SetOpKind.UNION and node.all:
            return collect(node.left) and collect(node.right)
        one = _branch(node, want)
        if one is not None:
            branches.append(one)
        return one is not None

    return branches if collect(plan.input) else None


def _branch(top: L.LogicalNode, want: type[W.WindowDef] | None) -> NativePlan | None:
    """``π σ … S [want]`` (optionally joined with a relation) as one ``NativePlan``, or with
    ``want`` None ``π σ … S`` (the rules' ``unwrap-stream-round-trips``), else None.
    """
    chain: list[L.LogicalNode] = []
    node = top
    while isinstance(node, L.Filter | L.Project):
        chain.append(node)
        node = node.inputs()[0]

    def selected(n: L.LogicalNode, at: int) -> tuple[L.Scan | None, list[BExpr]]:
        """A scan under selections, and their predicates with columns moved ``at`` to the right."""
        found: list[BExpr] = []
        while isinstance(n, L.Filter):
            found.append(shift(n.predicate, at) if at else n.predicate)
            n = n.input
        return (n, found) if isinstance(n, L.Scan) else (None, [])

    def stream_window(n: L.LogicalNode, at: int) -> tuple[L.Scan | None, list[BExpr]]:
        """``S [want]`` over selections of the stream ``S`` (pushed below the window by the rules)."""
        if want is None:
            scan, found = selected(n, at)
            return (scan, found) if scan is not None and scan.kind is Kind.STREAM else (None, [])
        if isinstance(n, L.Window) and isinstance(n.spec, want):
            scan, found = selected(n.input, at)
            if scan is not None and scan.kind is Kind.STREAM:
                return scan, found
        return None, []

    static, stream_first = None, True
    scan, below = stream_window(node, 0)
    schema = node.schema
    full = list(range(len(schema)))  # a column of ``node`` → its index among the scans' columns
    if scan is None and want is not None and isinstance(node, L.Join):
        for stream_side, rel_side, first in ((node.left, node.right, True), (node.right, node.left, False)):
            # the relation's side as the rules left it: selections, under a projection that copies
            # the columns the query reads (``prune-columns-below-windows-and-joins``)
            rel, kept = _copied(rel_side)
            sw, rw = len(stream_side.schema), len(rel.schema)
            s_at, r_at = (0, sw) if first else (rw, 0)
            (s, s_preds), (r, r_preds) = stream_window(stream_side, s_at), selected(rel, r_at)
            if s is not None and r is not None:
                scan, below, static, stream_first = s, s_preds + r_preds, r.name, first
                rel_cols = [r_at + k for k in kept]
                stream_cols = [s_at + i for i in range(sw)]
                full = stream_cols + rel_cols if first else rel_cols + stream_cols
                break
    if scan is None:
        return None
    cols: list[BExpr] = [ColRef(full[i], schema.types[i], schema.names[i]) for i in range(len(schema))]
    preds: list[BExpr] = below
    for n in reversed(chain):
        if isinstance(n, L.Filter):
            preds.append(substitute(n.predicate, cols))
        else:
            assert isinstance(n, L.Project)
            cols = [substitute(c, cols) for c in n.columns]
    if any(isinstance(x, Subquery) for e in preds + cols for x in walk_expr(e)):
        return None
    return NativePlan(scan.name, preds, cols, static, stream_first)


def _copied(n: L.LogicalNode) -> tuple[L.LogicalNode, list[int]]:
    """``n`` without a projection on top that only copies columns, and the columns it kept."""
    kept = copied_columns(n)
    return (n.inputs()[0], kept) if kept is not None else (n, list(range(len(n.schema))))


# -- selections as Spark expressions ----------------------------------------------------------


def pushdown(plan: L.LogicalNode) -> dict[str, list[BExpr]]:
    """Conjuncts over each source's columns that every element the query uses satisfies: on a
    rewritten plan (``sluice.plan.rules`` moves every selection it can down to its scan), the
    selections right above each scan of a source the plan reads once.
    """
    counts: dict[str, int] = {}
    for s in _scans(plan):
        counts[s.name.lower()] = counts.get(s.name.lower(), 0) + 1
    out: dict[str, list[BExpr]] = {}
    for n in L.walk_plan(plan):
        own: list[BExpr] = []
        while isinstance(n, L.Filter):  # a selection over selections (the rules never merge them)
            own += [c for c in conjuncts(n.predicate) if not has_subquery(c)]
            n = n.input
        if isinstance(n, L.Scan) and counts[n.name.lower()] == 1 and len(own) > len(out.get(n.name.lower(), [])):
            out[n.name.lower()] = own
    return out


def _family(t: DataType) -> str | None:
    if t.is_integer or t.kind is TypeKind.TIMESTAMP:
        return "int"
    if t.kind is TypeKind.FLOAT:
        return "float"
    if t.is_string:
        return "str"
    if t.kind is TypeKind.BOOLEAN:
        return "bool"
    return None


def _comparable(a: DataType, b: DataType) -> bool:
    fa, fb = _family(a), _family(b)
    return fa is not None and (fa == fb or {fa, fb} == {"int", "float"})


def to_column(e: BExpr, column: Callable[[int], Any]) -> Any | None:
    """A Spark Column computing ``e`` exactly as Sluice does (``FunctionDef.row``), or None.

    Translated: columns, constants, and the calls whose ``SPARK_FUNCTIONS`` entry is a
    translation that accepts their argument types; everything else (CASE, UDFs, CURRENT_TIME,
    subqueries, the functions marked ``InProcessor``) stays in Python.  Integer arithmetic never
    raises (Spark's ``try_*``): where it overflows 64 bits the value is NULL and :func:`overflow`
    is true — the row Sluice drops and counts (``sluice.plan.numeric``).
    """
    out = _compile(e, column)
    return None if out is None else out[0]


def overflow(e: BExpr, column: Callable[[int], Any]) -> Any | None:
    """A Spark Column true where evaluating ``e`` overflows 64-bit integers (None: it cannot)."""
    out = _compile(e, column)
    return None if out is None else out[1]


def _either(a: Any | None, b: Any | None) -> Any | None:
    if a is None or b is None:
        return a if b is None else b
    return a | b


def _compile(e: BExpr, column: Callable[[int], Any]) -> tuple[Any, Any | None] | None:
    """(value, overflow condition or None) of ``e`` as Spark Columns, or None if not translatable."""
    from pyspark.sql import functions as F

    from sluice.backends.spark.types import spark_type

    if isinstance(e, ColRef):
        return column(e.index), None
    if isinstance(e, Const):
        if e.value is None or _family(e.type) is None:
            return None
        return F.lit(e.value).cast(spark_type(e.type)), None
    if not isinstance(e, Call):
        return None
    translate = SPARK_FUNCTIONS.get(e.fn)
    if translate is None:
        raise InternalError(f"scalar function {e.fn!r} has no entry in SPARK_FUNCTIONS (a translation or InProcessor)")
    if isinstance(translate, InProcessor):
        return None
    maybe = [_compile(a, column) for a in e.args]
    if any(a is None for a in maybe):
        return None
    args: list[Any] = [m[0] for m in maybe if m is not None]
    bad: Any | None = None
    for m in maybe:
        if m is not None:
            bad = _either(bad, m[1])
    own = translate(e, args)
    return None if own is None else (own[0], _either(bad, own[1]))


# -- scalar functions as Spark Columns, keyed by ``sluice.plan.function_defs.FUNCTIONS`` --------

SparkTranslation = Callable[[Call, list[Any]], tuple[Any, Any | None] | None]
"""A call's Spark Column from its arguments' Columns and the condition where it overflows 64 bits
(None: it cannot), or None where it does not take these argument types (the query then runs the
call in the processor)."""


@dataclass(frozen=True)
class InProcessor:
    """A function Spark does not compute: an expression using it runs in the processor (the
    embedded engine's operators, so the definition); ``reason`` says why it is not translated.
    """

    reason: str


def _numeric(e: Call) -> bool:
    return all(_family(a.type) in ("int", "float") for a in e.args)


def _cmp(method: str) -> SparkTranslation:
    def translate(e: Call, args: list[Any]) -> tuple[Any, Any | None] | None:
        if not _comparable(e.args[0].type, e.args[1].type):
            return None
        return getattr(args[0], method)(args[1]), None

    return translate


_TRY = {"add": "try_add", "sub": "try_subtract", "mul": "try_multiply"}


def _arith(op: str, method: str) -> SparkTranslation:
    """``+ − ×`` (``op``; unary minus is ``0 − x``, which is −x for every x but 0, and 0.0 for
    0.0: the definition's negation, one zero): integers through Spark's ``try_*``, whose NULL
    where both inputs are not is the overflow; a float result as Sluice holds it (:func:`canonical_float`).
    """

    def translate(e: Call, args: list[Any]) -> tuple[Any, Any | None] | None:
        from pyspark.sql import functions as F

        from sluice.backends.spark.types import spark_type

        if not _numeric(e):
            return None
        out_type = spark_type(e.type)
        a, b = (F.lit(0).cast(out_type), args[0]) if e.fn == "neg" else (args[0].cast(out_type), args[1].cast(out_type))
        if e.type.is_integer:
            res = getattr(F, _TRY[op])(a, b)
            return res.cast(out_type), a.isNotNull() & b.isNotNull() & res.isNull()
        return canonical_float(getattr(a, method)(b)), None

    return translate


def _div_mod(e: Call, args: list[Any]) -> tuple[Any, Any | None] | None:
    """Integer ``/`` truncating toward zero, ``%`` with the dividend's sign, NULL for a zero divisor."""
    from pyspark.sql import functions as F

    from sluice.backends.spark.types import spark_type

    if not _numeric(e):
        return None
    a, b = args
    bad = None
    if e.type.is_integer:  # Spark's div truncates toward zero, % keeps the dividend's sign
        big = (a == F.lit(INT_MIN)) & (b == F.lit(-1))  # the one quotient beyond 64 bits
        if e.fn == "div":
            exact = F.when(big, F.lit(None)).otherwise(F.call_function("div", a, b))
            bad = big
        else:
            exact = F.when(big, F.lit(0)).otherwise(a % b)
    else:
        exact = canonical_float(a / b if e.fn == "div" else a % b)  # -2.0 % 2.0 is -0.0 in Java
    res = F.when(b == 0, F.lit(None)).otherwise(exact)  # no ANSI error: x / 0 is NULL
    return res.cast(spark_type(e.type)), bad


def _concat(e: Call, args: list[Any]) -> tuple[Any, Any | None] | None:
    from pyspark.sql import functions as F

    if not all(_family(a.type) == "str" for a in e.args):
        return None
    return F.concat(args[0], args[1]), None


def _coalesce(e: Call, args: list[Any]) -> tuple[Any, Any | None] | None:
    from pyspark.sql import functions as F

    from sluice.backends.spark.types import spark_type

    return F.coalesce(*args).cast(spark_type(e.type)), None


_NOT_YET = "not translated yet (Spark's function not checked against the definition)"

SPARK_FUNCTIONS: Mapping[str, SparkTranslation | InProcessor] = MappingProxyType(
    {
        "add": _arith("add", "__add__"),
        "sub": _arith("sub", "__sub__"),
        "mul": _arith("mul", "__mul__"),
        "neg": _arith("sub", "__sub__"),
        "div": _div_mod,
        "mod": _div_mod,
        "concat": _concat,
        "eq": _cmp("__eq__"),
        "ne": _cmp("__ne__"),
        "lt": _cmp("__lt__"),
        "le": _cmp("__le__"),
        "gt": _cmp("__gt__"),
        "ge": _cmp("__ge__"),
        "and": lambda e, args: (args[0] & args[1], None),
        "or": lambda e, args: (args[0] | args[1], None),
        "not": lambda e, args: (~args[0], None),
        "is_null": lambda e, args: (args[0].isNull(), None),
        "is_not_null": lambda e, args: (args[0].isNotNull(), None),
        "like": InProcessor("Spark's LIKE takes '\\' as an escape character; CQL's LIKE does not"),
        "abs": InProcessor("ABS of the least 64-bit integer overflows: it would need a check as + − × have"),
        "floor": InProcessor("Spark's FLOOR of a double is a BIGINT; the definition keeps a float"),
        "ceil": InProcessor("Spark's CEIL of a double is a BIGINT; the definition keeps a float"),
        "round": InProcessor(_NOT_YET + ": half away from zero on the value's shortest decimal"),
        "lower": InProcessor(_NOT_YET + ": Unicode case mapping as Python's str.lower"),
        "upper": InProcessor(_NOT_YET + ": Unicode case mapping as Python's str.upper"),
        "length": InProcessor(_NOT_YET + ": code points, as Python's len"),
        "nullif": InProcessor(_NOT_YET),
        "coalesce": _coalesce,
    }
)
"""Every scalar function's Spark translation, or why it runs in the processor
(``tests/test_functions.py`` fails if one of ``FUNCTIONS`` has neither)."""


def canonical_float(c: Any) -> Any:
    """A float Column as Sluice holds it (``sluice.plan.numeric``): NaN as NULL (``inf − inf``),
    ``-0.0`` as ``0.0`` (``0.0 * -1``: adding 0.0 gives +0.0 under IEEE rounding).  Also applied
    to the float columns of attached sources, which Spark reads without the driver's admission.
    """
    from pyspark.sql import functions as F

    return F.when(F.isnan(c), F.lit(None)).otherwise(c + F.lit(0.0))


def window_join_signature(plan: L.LogicalNode, join_intermediates: str = "keep") -> tuple[str, str] | None:
    """The two streams (by name) the plan's first window join reads, when a shared window join
    could serve it (``sluice.runtime.planner.window_side``); None if it has none.  A join inside a
    tree of three or more inputs is one unless the tree keeps its intermediate results
    (``join_intermediates="keep"``): otherwise the tree is one dataflow join (design 024).
    """
    from sluice.runtime.join_tree import join_inputs
    from sluice.runtime.planner import window_side

    todo = [plan]  # (depth first, in the written order: the first window join as before)
    while todo:
        n = todo.pop()
        if isinstance(n, L.Join) and join_intermediates != "keep":
            leaves = join_inputs(n)
            if len(leaves) >= 3:
                todo += reversed(leaves)  # (a leaf may hold joins of its own: a FROM subquery)
                continue
        if isinstance(n, L.Join):
            left, right = window_side(n.left), window_side(n.right)
            if left is not None and right is not None:
                if isinstance(left.base, L.Scan) and isinstance(right.base, L.Scan):
                    return left.base.name.lower(), right.base.name.lower()
        todo += reversed(n.inputs())  # (visited after the subqueries in its expressions, as walk_plan does)
        todo += reversed([x.plan for e in n.exprs() for x in walk_expr(e) if isinstance(x, Subquery)])
    return None
