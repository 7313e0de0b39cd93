"""Sample(p): deterministic, a subset, independent of arrival order within an instant, rate ≈ p."""

from __future__ import annotations

from collections import Counter

from sluice.catalog import Catalog
from sluice.plan import bind_query
from sluice.reference import evaluate

CAT = Catalog()
CAT.register_stream("S", [("A", "integer")])
DATA = {"S": [(t // 10, (t % 7,)) for t in range(5000)]}


def _rows(query: str, data=DATA, seed: int = 0) -> Counter:
    return Counter((e.ts, e.row) for e in evaluate(bind_query(CAT, query), data, seed=seed))


def test_sample_is_a_deterministic_subset_near_its_rate() -> None:
    full = _rows("select * from S")
    part = _rows("select * from S Sample(20)")
    assert part == _rows("select * from S Sample(20)")
    assert not (part - full), "a sample only keeps input elements"
    rate = sum(part.values()) / sum(full.values())
    # 5000 Bernoulli(0.2) draws: a 6-sigma band is ±0.034.
    assert 0.166 < rate < 0.234, rate


def test_sample_does_not_depend_on_arrival_order_within_an_instant() -> None:
    reordered = {"S": sorted(DATA["S"], key=lambda e: (e[0], -e[1][0]))}
    assert _rows("select * from S Sample(30)") == _rows("select * from S Sample(30)", reordered)


def test_seed_changes_the_sample_and_100_keeps_all() -> None:
    assert _rows("select * from S Sample(30)", seed=1) != _rows("select * from S Sample(30)", seed=2)
    assert _rows("select * from S Sample(100)") == _rows("select * from S")
