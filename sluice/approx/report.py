"""What a memory limit did to a query, as the user reads it (``Query.approximation``, EXPLAIN,
``statistics()``): the ``Approximation`` of its streams and windows, and the manager's ``Event``s.
``sluice.approx.manager`` decides; this module only reports.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from sluice.approx.limits import QueryLimits
from sluice.approx.precision import EXACT, Precision, estimate, window_key_of
from sluice.approx.static import StaticSample
from sluice.plan import logical as L
from sluice.runtime.bloom import Bloom


class Resizable(Protocol):
    """A window the query lets shrink (``[Range T At Least t]``, ``[Rows N At Least m]``;
    ``sluice.runtime.operators.windows``): its size in ``unit`` (ticks or rows).
    """

    spec: Any
    queries: set[str]
    unit: str

    @property
    def full(self) -> int: ...

    @property
    def occupied(self) -> int: ...

    @property
    def range_now(self) -> int: ...

    @property
    def settled(self) -> bool: ...

    @property
    def refilled(self) -> bool: ...

    def resize(self, r: int) -> int: ...

    def kept(self) -> tuple[int, int, float]: ...


def _size(window: str, r: int) -> str:
    return f"{r} rows" if window.startswith("[Rows") else f"{r} ticks"


@dataclass(frozen=True, slots=True)
class Event:
    """Something the manager did, and why (``statistics().approx_events``)."""

    seq: int  # the manager's adjustment count when it happened
    action: str  # "sample", "raise", "shed", "over-limit"
    detail: str


_SHRUNK_UNDER_AGGREGATE = "a shrunk window below an aggregate (its values change)"


@dataclass(frozen=True, slots=True)
class Approximation:
    """What a query gets (``Query.approximation``, EXPLAIN, ``statistics()``)."""

    rates: dict[str, float]  # each stream's current sampling rate
    kept: dict[str, float]  # the fraction of each stream's elements kept since the query started
    dropped: int  # elements of its streams dropped since it started (sampled out + shed)
    precision: Precision | None  # expected (FP, FN); None: outside the model (see ``unsafe``)
    unsafe: dict[str, str]  # streams it reads where approximation is unsafe, with why
    limits: QueryLimits
    # Load shedding drops a stream's elements in bursts, so a stream read twice (a self-join)
    # loses both reads' tuples together: its FN then lies between ``fn_low`` (the reads fully
    # dependent) and ``precision.fn`` (independent, as sampling makes them).  None: no such case.
    fn_low: float | None = None
    # windows that may shrink (``At Least``) and did: description → (size now in ticks or rows, the
    # fraction of what the full window holds that it held, over the instants since it started)
    windows: dict[str, tuple[int, float]] = field(default_factory=dict)
    # ``Sample(a To b)`` ranges set below their highest rate at registration (STREAM §5.1.2)
    static: tuple[StaticSample, ...] = ()
    # DISTINCTs compressed into Bloom filters (STREAM §5.2.1): "DISTINCT over s" → the filter now
    synopses: dict[str, Bloom] = field(default_factory=dict)

    @property
    def exact(self) -> bool:
        return self.dropped == 0 and not self.windows and not self.static and not self.synopses

    @classmethod
    def none(cls, limits: QueryLimits) -> Approximation:
        """No approximation: the query is answered exactly (no limit, or a backend without one)."""
        return cls({}, {}, 0, EXACT, {}, limits)

    def describe(self) -> str:
        if self.exact:
            return "exact"
        parts = [
            f"{s} kept {k:.1%} (rate now {self.rates.get(s, 1.0):.3g})" for s, k in sorted(self.kept.items()) if k < 1
        ] + [f"window {w} now {_size(w, r)}, {k:.1%} held" for w, (r, k) in sorted(self.windows.items())]
        parts += [f"{c.describe()} (chosen at registration)" for c in self.static]
        parts += [f"{d} compressed: {b.describe()}" for d, b in sorted(self.synopses.items())]
        est = (
            (self.precision.describe() if self.fn_low is None else self._range())
            if self.precision is not None
            else "precision unknown: "
            + "; ".join([f"{s} {why}" for s, why in sorted(self.unsafe.items())] or [_SHRUNK_UNDER_AGGREGATE])
        )
        below = (
            f" — below its least precision {self.limits.min_precision:g} (the limit cannot be held otherwise)"
            if self.below_min
            else ""
        )
        return f"approximate: {', '.join(parts)}; {self.dropped} elements dropped; {est}{below}"

    @property
    def below_min(self) -> bool:
        """Its estimated recall (1 − FN) is under the ``min_precision`` it stated."""
        return self.precision is not None and 1.0 - self.precision.fn < self.limits.min_precision - 1e-9

    def _range(self) -> str:
        assert self.precision is not None and self.fn_low is not None
        return (
            f"FP {self.precision.fp:.3f}, FN {self.fn_low:.3f}–{self.precision.fn:.3f} "
            "(shed in bursts: the reads of one stream are not independent)"
        )


def shrunk_windows(
    query: str, found: tuple[tuple[Resizable, tuple[str, ...]], ...]
) -> tuple[dict[object, float], dict[str, tuple[int, float]]]:
    """A query's windows that may shrink: (``window_key`` → the fraction held of what the full
    window would hold, for ``precision.estimate``; description → (range now, that fraction) for
    those that did shrink).
    """
    windows: dict[object, float] = {}
    shrunk: dict[str, tuple[int, float]] = {}
    for op, streams in found:
        if query in op.queries:
            frac = op.kept()[2]
            key = window_key_of(op.spec.window, streams)
            windows[key] = min(frac, windows.get(key, 1.0))
            if frac < 1.0 or op.range_now < op.full:
                shrunk[f"[{op.spec.window.describe()}] over {', '.join(streams)}"] = (op.range_now, frac)
    return windows, shrunk


def windows_only(query: str, plan: L.LogicalNode, limits: QueryLimits, found: Any) -> Approximation:
    """What a query without a memory limit gets: exact, unless a window of it was resized
    (``change_mem``, ``TimeWindow.resize``).
    """
    windows, shrunk = shrunk_windows(query, found)
    return Approximation({}, {}, 0, estimate(plan, {}, windows), {}, limits, None, shrunk)
