"""The one engine contract every backend implements: ``EmbeddedEngine`` and ``SparkEngine`` are
checked against it by mypy (the functions at the end), and ``Sluice()`` returns it.

The same calls, in any order, give the same answers on both: register (DDL or the API) before or
after pushing, push tuples/dicts/tables or typed batches, heartbeat, run, close, read each
query's output from its handle (``handle.results()``) or the engine (``engine.results(handle)``),
and see every rejected row in ``rejected()``.  Backend-specific calls (the embedded engine's
schedulers and checkpoints, Spark's attached sources and sinks) live on the classes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import pyarrow as pa

from sluice.catalog import Kind

if TYPE_CHECKING:
    from sluice.approx.report import Approximation
    from sluice.backends.embedded import EmbeddedEngine, Query
    from sluice.backends.spark.engine import SparkEngine
    from sluice.backends.spark.query import SparkQuery


class QueryHandle(Protocol):
    """A registered continuous query."""

    name: str

    def results(self) -> list[Any]:
        """Its output so far: ``(ts, sign, row)`` elements, per instant deletions first."""
        ...

    def arrow(self) -> pa.Table:
        """Its output so far as one Arrow table: ``ts``, ``sign``, then the columns by name."""
        ...

    @property
    def approximation(self) -> Approximation:
        """What a memory limit does to it: exact, or its streams' kept fractions and precision."""
        ...


class Engine(Protocol):
    """What both backends accept and do alike."""

    def execute(self, text: str) -> list[Any]:
        """Run CQL statements (DDL, queries, EXPLAIN); a query statement yields its handle."""
        ...

    def register_stream(self, name: str, columns: Sequence[tuple[str, Any]]) -> None: ...

    def register_relation(self, name: str, columns: Sequence[tuple[str, Any]]) -> None: ...

    def register_view(self, name: str, query: str, columns: Sequence[str] = (), kind: Kind | None = None) -> None: ...

    def register_function(
        self,
        name: str,
        fn: Callable[..., Any],
        return_type: Any,
        arg_types: Any = None,
        *,
        strict: bool = True,
        vectorized: bool = False,
    ) -> None: ...

    def register_query(
        self,
        query: str,
        name: str | None = None,
        *,
        weight: float = 1.0,
        min_precision: float = 0.0,
        max_latency: float | str | None = None,
    ) -> Any: ...

    def unregister(self, name: str, *more: str) -> None: ...

    def unregister_source(self, name: str) -> Any: ...

    def attach_static(self, name: str, rows: list[tuple[Any, ...]]) -> None:
        """A relation holding exactly ``rows`` at every instant; nothing may be pushed to it."""
        ...

    def is_static(self, name: str) -> bool:
        """Whether ``name`` is a static relation (``attach_static``): pushes to it are refused."""
        ...

    def push(self, name: str, rows: Any, *, ts_column: str = "ts", sign_column: str = "sign") -> None: ...

    def push_batch(self, name: str, batch: pa.Table) -> None: ...

    def reject(self, name: str, messages: Sequence[str]) -> None: ...

    def heartbeat(self, ts: int) -> None: ...

    def punctuate(
        self, name: str, column: str, *, values: Sequence[Any] | None = None, upto: Any = None, ts: int | None = None
    ) -> int:
        """No later element of stream ``name`` has one of ``values`` (or a value ≤ ``upto``) in ``column``."""
        ...

    def run(self) -> Any: ...

    def close(self, until: int | None = None) -> None: ...

    def results(self, query: Any) -> list[Any]: ...

    def rejected(self) -> list[str]: ...

    def explain(self, query: Any) -> str: ...

    def statistics(self) -> Any: ...

    def on_shed(self, fn: Callable[[str, pa.Table, str], None]) -> None:
        """Call ``fn(stream, elements, reason)`` with the elements a memory limit dropped."""
        ...

    def __enter__(self) -> Any: ...

    def __exit__(self, kind: type[BaseException] | None, *exc: object) -> None:
        """``with engine:`` — on leaving without an error, ``close()`` (the end of input); on
        Spark the streaming queries then stop (their checkpoints stay).
        """
        ...


if TYPE_CHECKING:  # mypy checks both backends against the contract here

    def _embedded(e: EmbeddedEngine) -> Engine:
        return e

    def _spark(e: SparkEngine) -> Engine:
        return e

    def _query(q: Query) -> QueryHandle:
        return q

    def _spark_query(q: SparkQuery) -> QueryHandle:
        return q
