"""Run golden-file cases (and other inputs) on the embedded engine."""

from __future__ import annotations

import pickle
from collections.abc import Callable
from typing import Any

from sluice.backends.embedded import EmbeddedEngine
from sluice.reference import Element


def push_in_pieces(
    build: Callable[[], tuple[EmbeddedEngine, Any]],
    pushes: list[tuple[str, tuple[Any, ...]]],
    chunk: int,
    snapshots: bool = False,
) -> tuple[EmbeddedEngine, Any]:
    """Push ``(stream, row)`` in pieces of ``chunk``, running the engine after each; with
    ``snapshots``, each piece goes on in a new engine from ``build()`` that restored the last one's
    state.  The engine and what ``build`` returned beside it (the query handles) at the end.
    """
    eng, handles = build()
    for i in range(0, len(pushes), chunk):
        for name, row in pushes[i : i + chunk]:
            eng.push(name, [row])
        eng.run()
        if snapshots:
            blob = pickle.dumps(eng.snapshot_state())
            eng, handles = build()
            eng.restore_state(pickle.loads(blob))
    return eng, handles


def run_engine(
    catalog: Any,
    query: str,
    streams: dict[str, list[Any]],
    relations: dict[str, list[Any]],
    *,
    start: int | None = None,
    until: int | None = None,
    sharing: bool = True,
    budget: int = 65536,
    seed: int = 0,
    chunk: int | None = None,
    extra_queries: tuple[str, ...] = (),
    scheduler: str = "round-robin",
    engines: list[EmbeddedEngine] | None = None,
    snapshots: bool = False,
    join_intermediates: str = "auto",
) -> list[Element]:
    """The engine's output for ``query`` over the inputs (pushed in ``chunk``-sized pieces, run between).

    ``snapshots``: after every piece, the engine's state is pickled (``snapshot_state``) and the
    run goes on in a new engine built the same way that restored it — as the Spark processor does.
    """
    stamps = [t for rows in streams.values() for t, _ in rows] + [t for ups in relations.values() for t, _, _ in ups]

    def build() -> tuple[EmbeddedEngine, Any]:
        eng = EmbeddedEngine(
            catalog,
            sharing=sharing,
            budget=budget,
            seed=seed,
            scheduler=scheduler,
            start=start if start is not None else (min(stamps) if stamps else 0),
            join_intermediates=join_intermediates,
        )
        for extra in extra_queries:
            eng.register_query(extra)
        return eng, eng.register_query(query)

    eng, q = build()
    feeds: list[tuple[int, str, tuple[Any, ...]]] = []
    for name, rows in streams.items():
        feeds += [(t, name, (t, *r)) for t, r in rows]
    for name, ups in relations.items():
        feeds += [(t, name, (t, s, *r)) for t, s, r in ups]
    feeds.sort(key=lambda f: f[0])
    step = chunk or len(feeds) or 1
    for i in range(0, len(feeds), step):
        by_name: dict[str, list[Any]] = {}
        for _, name, row in feeds[i : i + step]:
            by_name.setdefault(name, []).append(row)
        for name, rows in by_name.items():
            eng.push(name, rows)
        eng.run()
        if snapshots:
            blob = pickle.dumps(eng.snapshot_state())
            eng, q = build()
            eng.restore_state(pickle.loads(blob))
    eng.close(until)
    assert not eng.rejected(), eng.rejected()
    assert not eng.failures, eng.failures  # (an operator that raised stops its queries)
    if engines is not None:
        engines.append(eng)
    return q.results()


def reference_diffs(
    catalog: Any, query: str, streams: dict[str, list[Any]], relations: dict[str, list[Any]], **options: Any
) -> list[str]:
    """Where the engine's output for ``query`` differs from the reference evaluator's, both over
    the span of the inputs' timestamps (``options``: ``run_engine``'s feeding and engine options).
    """
    from sluice.plan import bind_query
    from sluice.reference import evaluate
    from sluice.reference.compare import diff_outputs

    stamps = [t for rows in streams.values() for t, _ in rows] + [t for ups in relations.values() for t, _, _ in ups]
    start, until = (min(stamps), max(stamps)) if stamps else (0, 0)
    expected = evaluate(bind_query(catalog, query), streams, relations, start=start, until=until)
    got = run_engine(catalog, query, streams, relations, start=start, until=until, **options)
    return diff_outputs(expected, got)
