"""Group-by aggregation maintained under insertions and deletions; DISTINCT.

Each run groups its input by (instant, group key) with one Arrow group-by and folds the per-
instant deltas into per-group state in Python — per (instant, group), not per tuple.  At each
instant a group changed, the old row is deleted and the new one inserted (an unchanged value
nets away downstream).  Exactness: COUNT and integer SUM are integer sums; MIN/MAX, DISTINCT
aggregates and float SUM/AVG keep per-value counts, float sums exactly (as integers scaled by
2^1074, rounded once — the same value ``math.fsum`` gives).  Without GROUP BY there is always
exactly one row, from the engine's first instant (``COUNT(*) = 0`` over nothing).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from sluice.plan.expr import AggCall, BExpr
from sluice.plan.semantics import coerce
from sluice.runtime.batch import TS, from_signed_rows, signed_counts
from sluice.runtime.operators.base import Unary
from sluice.runtime.vexpr import compile_expr

SCALE = 1074  # every finite double is an integer multiple of 2^-1074


def _exact(v: float) -> int:
    n, d = v.as_integer_ratio()
    return n * ((1 << SCALE) // d)


def _value_level(a: AggCall) -> bool:
    """Aggregates that need per-value counts (deletions must be able to undo them exactly)."""
    return a.fn in ("MIN", "MAX") or a.distinct or (a.arg is not None and a.arg.type.kind.value == "float")


@dataclass
class _Group:
    count: int = 0  # COUNT(*)
    nonnull: list[int] = field(default_factory=list)  # per aggregate: non-null values
    sums: list[int] = field(default_factory=list)  # per aggregate: integer sum
    values: list[Counter[Any]] = field(default_factory=list)  # per value-level aggregate
    lo: list[Any] = field(default_factory=list)  # cached MIN per aggregate (None: recompute)
    hi: list[Any] = field(default_factory=list)  # cached MAX per aggregate
    row: tuple[Any, ...] | None = None  # the row last emitted for this group


class Aggregate(Unary):
    def setup(self, keys: tuple[BExpr, ...], aggs: tuple[AggCall, ...]) -> Aggregate:
        self.stateful = True
        self.nkeys = len(keys)
        self.key_fns = [compile_expr(k) for k in keys]
        self.aggs = aggs
        self.arg_fns = [compile_expr(a.arg) if a.arg is not None else None for a in aggs]
        self.groups: dict[tuple[Any, ...], _Group] = {}
        self._started = False
        return self

    def _new(self) -> _Group:
        n = len(self.aggs)
        return _Group(0, [0] * n, [0] * n, [Counter() for _ in range(n)], [None] * n, [None] * n)

    def _row(self, key: tuple[Any, ...], g: _Group) -> tuple[Any, ...]:
        vals: list[Any] = []
        for i, a in enumerate(self.aggs):
            if a.fn == "COUNT":
                if a.arg is None:
                    vals.append(g.count)
                elif a.distinct:
                    vals.append(sum(1 for c in g.values[i].values() if c > 0))
                else:
                    vals.append(g.nonnull[i])
                continue
            if _value_level(a):
                counts = g.values[i]
                if not counts:
                    vals.append(None)
                elif a.fn == "MIN":
                    if g.lo[i] is None:
                        g.lo[i] = min(counts)
                    vals.append(coerce(g.lo[i], a.type))
                elif a.fn == "MAX":
                    if g.hi[i] is None:
                        g.hi[i] = max(counts)
                    vals.append(coerce(g.hi[i], a.type))
                else:
                    items = [(v, 1 if a.distinct else c) for v, c in counts.items()]
                    vals.append(self._sum_avg(a, items))
                continue
            if g.nonnull[i] == 0:
                vals.append(None)
            elif a.fn == "SUM":
                vals.append(g.sums[i])
            else:  # AVG of integers, correctly rounded
                vals.append(float(Fraction(g.sums[i], g.nonnull[i])))
        return key + tuple(vals)

    @staticmethod
    def _sum_avg(a: AggCall, items: list[tuple[Any, int]]) -> Any:
        n = sum(c for _, c in items)
        if any(isinstance(v, float) for v, _ in items):
            total = sum(_exact(float(v)) * c for v, c in items)
            exact = Fraction(total, 1 << SCALE)
            return float(exact) if a.fn == "SUM" else float(exact / n)
        s = sum(v * c for v, c in items)
        return s if a.fn == "SUM" else float(Fraction(s, n))

    def _visible(self, g: _Group) -> bool:
        return self.nkeys == 0 or g.count > 0

    def _start(self, out: list[tuple[int, int, tuple[Any, ...]]]) -> None:
        if not self._started and self.ctx.start is not None:
            self._started = True
            if self.nkeys == 0:
                g = self.groups[()] = self._new()
                g.row = self._row((), g)
                out.append((self.ctx.start, 1, g.row))

    def process(self, b: pa.Table) -> None:
        out: list[tuple[int, int, tuple[Any, ...]]] = []
        self._start(out)
        n = b.num_rows
        keycols = [_full(f(b, None), n) for f in self.key_fns]
        cols: dict[str, Any] = {TS: b.column(0), "s": pc.cast(b.column(1), pa.int64())}
        for k, c in enumerate(keycols):
            cols[f"k{k}"] = c
        knames = [f"k{k}" for k in range(self.nkeys)]
        aggs_spec = [("s", "sum")]
        for i, (a, f) in enumerate(zip(self.aggs, self.arg_fns, strict=True)):
            if f is None or _value_level(a):
                continue
            v = _full(f(b, None), n)
            valid = pc.cast(pc.is_valid(v), pa.int64())
            cols[f"n{i}"] = pc.multiply(valid, cols["s"])
            cols[f"v{i}"] = pc.multiply(pc.fill_null(pc.cast(v, pa.int64()), 0), cols["s"])
            aggs_spec += [(f"n{i}", "sum"), (f"v{i}", "sum")]
        t = pa.table(cols)
        g = t.group_by([TS] + knames, use_threads=False).aggregate(aggs_spec)
        changes: dict[tuple[int, tuple[Any, ...]], dict[str, Any]] = {}
        for row in g.to_pylist():
            key = tuple(row[k] for k in knames)
            changes[(row[TS], key)] = row
        # value-level aggregates: net count of each (instant, group, value)
        value_changes: dict[tuple[int, tuple[Any, ...]], list[tuple[int, Any, int]]] = {}
        for i, (a, f) in enumerate(zip(self.aggs, self.arg_fns, strict=True)):
            if f is None or not _value_level(a):
                continue
            vt = pa.table({TS: b.column(0), "s": cols["s"], **{k: cols[k] for k in knames}, "x": _full(f(b, None), n)})
            vg = vt.group_by([TS] + knames + ["x"], use_threads=False).aggregate([("s", "sum")])
            for row in vg.to_pylist():
                key = tuple(row[k] for k in knames)
                value_changes.setdefault((row[TS], key), []).append((i, row["x"], row["s_sum"]))
        for ts, key in sorted(set(changes) | set(value_changes), key=lambda x: x[0]):
            grp = self.groups.get(key)
            if grp is None:
                grp = self.groups[key] = self._new()
            old = grp.row
            row = changes.get((ts, key))
            if row is not None:
                grp.count += row["s_sum"]
                for i in range(len(self.aggs)):
                    if f"n{i}_sum" in row:
                        grp.nonnull[i] += row[f"n{i}_sum"]
                        grp.sums[i] += row[f"v{i}_sum"]
            for i, x, c in value_changes.get((ts, key), ()):
                if x is not None:
                    counts = grp.values[i]
                    counts[x] += c
                    grp.nonnull[i] += c
                    if counts[x] == 0:
                        del counts[x]
                        if x == grp.lo[i]:
                            grp.lo[i] = None
                        if x == grp.hi[i]:
                            grp.hi[i] = None
                    elif c > 0:
                        if grp.lo[i] is not None and x < grp.lo[i]:
                            grp.lo[i] = x
                        if grp.hi[i] is not None and x > grp.hi[i]:
                            grp.hi[i] = x
            new = self._row(key, grp) if self._visible(grp) else None
            grp.row = new
            if old != new:
                if old is not None:
                    out.append((ts, -1, old))
                if new is not None:
                    out.append((ts, 1, new))
            if not self._visible(grp) and key in self.groups and self.nkeys:
                del self.groups[key]
        if out:
            self.emit(from_signed_rows(out, self.types))

    def progress(self, wm: int) -> None:
        out: list[tuple[int, int, tuple[Any, ...]]] = []
        self._start(out)
        if out:
            self.emit(from_signed_rows(out, self.types))
        self.advance(wm)

    def has_work(self) -> bool:
        return super().has_work() or (not self._started and self.ctx.start is not None)

    def state_bytes(self) -> int:
        return sum(64 + 16 * sum(len(v) for v in g.values) for g in self.groups.values())


def _full(v: Any, n: int) -> Any:
    if isinstance(v, pa.Scalar):
        return pa.array([v.as_py()] * n, v.type)
    return v


class Distinct(Unary):
    """Duplicate elimination over a relation: a tuple is in the output while its count is > 0."""

    def setup(self) -> Distinct:
        self.stateful = True
        self.counts: Counter[tuple[Any, ...]] = Counter()
        return self

    def process(self, b: pa.Table) -> None:
        out = []
        for ts, row, delta in signed_counts(b):
            before = self.counts[row]
            after = before + delta
            if after:
                self.counts[row] = after
            else:
                del self.counts[row]
            if before <= 0 < after:
                out.append((ts, 1, row))
            elif after <= 0 < before:
                out.append((ts, -1, row))
        if out:
            self.emit(from_signed_rows(out, self.types))

    def state_bytes(self) -> int:
        return 48 * len(self.counts)
