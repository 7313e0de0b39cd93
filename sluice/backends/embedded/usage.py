"""The embedded engine's memory, as the resource manager reads it (``sluice.approx.manager``):
every queue's and every operator's state bytes (sources' buffered input included), and the part
attributable to each base stream — what the operators it feeds hold, shared equally among the
streams that feed them.
"""

from __future__ import annotations

from sluice.approx.manager import Usage
from sluice.backends.embedded.registry import QueryRegistry
from sluice.runtime.operators.aggregate import Distinct
from sluice.runtime.operators.base import Operator
from sluice.runtime.operators.windows import RowsWindow, TimeWindow


class UsageMeter:
    """Measures a registry's memory; the lineage (which streams feed which operator) is
    recomputed only when the operator DAG changed.
    """

    def __init__(self, registry: QueryRegistry) -> None:
        self.registry = registry
        self._version = -1
        self._feeds: list[tuple[Operator, tuple[str, ...]]] = []
        self._holding: list[tuple[Operator, frozenset[str]]] = []  # stateful operators, the streams they read
        self._windows: tuple[tuple[TimeWindow | RowsWindow, tuple[str, ...]], ...] = ()
        self._distincts: tuple[tuple[Distinct, tuple[str, ...]], ...] = ()  # over inputs that only insert

    def _lineage(self) -> None:
        reg = self.registry
        producer: dict[int, Operator] = {id(q): op for op in reg.all_operators() for q in op.outputs}
        ups: dict[int, frozenset[str]] = {}
        feeds: list[tuple[Operator, tuple[str, ...]]] = []
        holding: list[tuple[Operator, frozenset[str]]] = []
        for src in reg.sources.values():
            key = frozenset() if src.relation else frozenset({src.name.lower()})
            ups[id(src)] = key
            feeds.append((src, tuple(key)))
        for op in reg.operators:  # creation order is a topological order
            mine: frozenset[str] = frozenset()
            for q in op.inputs():
                p = producer.get(id(q))
                if p is not None:
                    mine |= ups.get(id(p), frozenset())
            ups[id(op)] = mine
            feeds.append((op, tuple(sorted(mine))))
            if op.stateful:
                holding.append((op, mine))
        self._feeds, self._holding, self._version = feeds, holding, reg.version
        self._windows = tuple((op, s) for op, s in feeds if isinstance(op, TimeWindow | RowsWindow) and op.shrinkable)
        self._distincts = tuple((op, s) for op, s in feeds if isinstance(op, Distinct) and op.insert_only and s)

    def windows(self) -> tuple[tuple[TimeWindow | RowsWindow, tuple[str, ...]], ...]:
        """The windows that may shrink (``[Range T At Least t]``, ``[Rows N At Least m]``), each
        with the streams it reads.
        """
        if self._version != self.registry.version:
            self._lineage()
        return self._windows

    def __call__(self) -> Usage:
        if self._version != self.registry.version:
            self._lineage()
        total = 0
        by_stream: dict[str, float] = {}
        for op, streams in self._feeds:
            b = op.state_bytes() + sum(q.nbytes for q in op.outputs)
            total += b
            if streams and b:
                share = b / len(streams)
                for s in streams:
                    by_stream[s] = by_stream.get(s, 0.0) + share
        holders: dict[str, int] = {}
        for op, read in self._holding:  # (asked now: a join stops holding once an input ended)
            if op.holds_elements():
                for s in read:
                    holders[s] = holders.get(s, 0) + 1
        queued = {s.name.lower(): s.waiting() for s in self.registry.sources.values() if not s.relation}
        return Usage(total, by_stream, holders, self._windows, queued, self._distincts)
