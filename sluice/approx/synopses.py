"""Synopsis compression beyond windows (STREAM §5.2.1): "using Bloom filters [4] for duplicate
elimination" — a DISTINCT over an input that only inserts (``Select Distinct A From S``: its
values since the stream began) holds every value it has seen, and its memory grows with them
for ever; sampling its stream is unsafe (§5.1.1), so under a memory limit it is the culprit the
others are shed for.  Compressed, it keeps a Bloom filter of a fixed size instead: a new value
the filter takes for a seen one is lost (a false negative, never a false positive), at the
filter's false-positive rate, which it measures and reports.

``sluice.approx.manager`` decides when (:func:`compress`), this module which and how large; the
operator (``sluice.runtime.operators.aggregate.Distinct``) does it.  Design 021, "Bloom filters".
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from sluice.runtime.bloom import Bloom, Filtered

AT = 0.10  # a DISTINCT holding at least this fraction of the limit may be compressed
ROOM = 0.8  # the filters take at most this fraction of what the limit leaves free at the target (batches aside)
SHRINK = 2  # … and at most this fraction of what the exact synopsis held (compression must pay)
LEAST = 0.01  # … and at least this fraction of the limit
GROW_AT = 0.01  # a filter past this FP rate gets a new slice when memory is low (``grow``)


# operators whose synopsis may be a Bloom filter (``Filtered``: DISTINCT over an input that only
# inserts, set EXCEPT whose right side only inserts), each with the streams its filter holds
Found = tuple[tuple[Filtered, tuple[str, ...]], ...]


def candidates(
    found: Found, limit: int, exact: set[str], sites: Mapping[str, frozenset[str]], streams: Iterable[str] | None = None
) -> Found:
    """The synopses worth compressing: exact still, holding at least ``AT`` of the limit, serving
    no exact-only query (``exact``) and, in every query it serves, where a lost value cannot show a
    wrong row (``sites``: per query, ``precision.bloom_sites``) — and, given ``streams``, over one
    of them.
    """
    want = None if streams is None else set(streams)
    return tuple(
        (op, s)
        for op, s in found
        if op.compressible
        and not (op.queries & exact)
        and all(describe(op.WHAT, s) in sites.get(q, frozenset()) for q in op.queries)
        and op.state_bytes() >= AT * limit
        and (want is None or want & set(s))
    )


def compress(
    found: Found,
    limit: int,
    excess: float,
    exact: set[str],
    sites: Mapping[str, frozenset[str]],
    streams: Iterable[str] | None,
) -> list[str]:
    """Compress the :func:`candidates` into filters: memory is ``excess`` bytes above the target
    (``< 0``: below it); each filter gets an equal part of ``ROOM`` of what the limit leaves free
    at the target once the exact synopses are gone (at least ``LEAST`` of the limit, at most
    ``1/SHRINK`` of what it held).  What was done.
    """
    chosen = candidates(found, limit, exact, sites, streams)
    if not chosen:
        return []
    free = sum(op.state_bytes() for op, _ in chosen) - excess
    part = ROOM * max(free, 0.0) / len(chosen)
    out = []
    for op, s in chosen:
        held = op.state_bytes()
        size = int(max(LEAST * limit, min(part, held / SHRINK)))
        out.append(f"{describe(op.WHAT, s)}: {op.compress(size)}")
    return out


def grow(found: Found, limit: int, free: float) -> list[str]:
    """Filters past ``GROW_AT`` get a new slice, together ``ROOM`` of the ``free`` bytes — each at
    least ``LEAST`` of the limit and half the filter (a scalable filter grows geometrically: tiny
    slices fill at once), else none; what was done.
    """
    due = [(op, s, b) for op, s in found if (b := op.synopsis()) is not None and b.fp_rate > GROW_AT]
    part = ROOM * max(free, 0.0) / max(len(due), 1)
    return [
        f"{describe(op.WHAT, s)}: {op.grow(int(part))}" for op, s, b in due if part >= max(LEAST * limit, b.nbytes / 2)
    ]


def compressed(query: str, found: Found) -> dict[str, Bloom]:
    """A query's compressed synopses: "DISTINCT over s, …" → what the filter is now."""
    out: dict[str, Bloom] = {}
    for op, streams in found:
        b = op.synopsis()
        if query in op.queries and b is not None:
            out[describe(op.WHAT, streams)] = b
    return out


def describe(what: str, streams: Iterable[str]) -> str:
    """How a compressed operator is named in reports, and matched with the plan's
    (``precision.estimate``): by its kind and the base streams below it.
    """
    return f"{what} over " + ", ".join(sorted(set(streams)))


def recall_of(blooms: Mapping[str, Bloom], what: str, streams: Iterable[str]) -> float:
    """The recall of the compressed ``what`` over ``streams`` (1: none is)."""
    b = blooms.get(describe(what, streams))
    return 1.0 if b is None else b.recall
