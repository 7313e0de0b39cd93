"""The backend × strategy matrix the cross-backend tests run, and one golden-file runner for any
engine built through the engine contract (``sluice.Sluice``: the same calls on every backend).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sluice.backends import Engine, Sluice
from sluice.reference.compare import diff_outputs

import golden

# Every strategy the engine offers, with its modifiers and a parameter (each changes *when*
# results appear, never what they are).
SCHEDULERS = [
    "round-robin",
    "fifo",
    "greedy",
    "chain",
    "path-capacity",
    "segment",
    "simplified-segment",
    "chain+oldest-first",
    "greedy+dynamic",
    "fifo+exhaustive",
    "path-capacity+limited",
    "threshold",
    "threshold:memory=2KB",  # far below what the queues hold: saving mode, switching back and forth
    "round-robin:quantum=0.25",
    "chain+limited:limit=0.5",
]


def make_engine(backend: str, scheduler: str, time_unit: Any, spark: Any = None, workdir: Path | None = None) -> Engine:
    opts: dict[str, Any] = {"time_unit": time_unit, "scheduler": scheduler}
    if backend == "spark":
        opts.update(spark=spark, workdir=workdir)
    return Sluice(backend=backend, **opts)


def query_cases(g: golden.GoldenFile) -> dict[int | None, list[golden.Case]]:
    """The file's query cases by the instant input ends at (``until=``; None: the last pushed)."""
    groups: dict[int | None, list[golden.Case]] = {}
    for c in g.cases:
        if c.kind == "query":
            assert set(c.options) <= {"until"}, f"{c.line}: options {c.options} have no cross-backend run"
            groups.setdefault(c.options.get("until"), []).append(c)
    return groups


def run_golden_file(path: Path, backend: str, scheduler: str, spark: Any = None, workdir: Path | None = None) -> None:
    """Every query case of a golden file on one backend with one strategy: all of a file's cases
    with the same end run as queries of one engine (sharing its inputs), one engine per end.
    """
    g = golden.load(path)
    for k, (until, cases) in enumerate(query_cases(g).items()):
        eng = make_engine(
            backend, scheduler, g.catalog().time_unit, spark, workdir / str(k) if workdir is not None else None
        )
        for name in g.udfs:
            fn, ret, args = golden.UDFS[name]
            eng.register_function(name, fn, ret, args)
        for text in g.ddl:
            eng.execute(text)
        handles = [(c, eng.register_query(c.query)) for c in cases]
        for name, rows in g.streams.items():
            eng.push(name, [(t, *r) for t, r in rows])
        for name, ups in g.relations.items():
            eng.push(name, [(t, s, *r) for t, s, r in ups])
        eng.close(until)
        try:
            for case, q in handles:
                diffs = diff_outputs(golden.parse_expected(g, case), q.results())
                assert not diffs, f"{path.name}:{case.line} [{backend}, {scheduler}]\n" + "\n".join(diffs[:10])
        finally:
            stop = getattr(eng, "stop", None)
            if stop is not None:
                stop()
