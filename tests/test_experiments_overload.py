"""``sluice experiment overload`` (issue #13 item 6) at its quick size: the CSV, PNG and JSON are
written, and every claim its JSON makes holds (memory under the limit, the exact-only query
exact, no false positives, reported FN within 0.1 of measured, weights respected).
"""

from __future__ import annotations

import json
from pathlib import Path

from sluice.cli import main
from sluice.experiments.overload import measured_precision
from sluice.plan.element import Element


def test_the_overload_experiment_writes_its_files_and_its_claims_hold(tmp_path: Path) -> None:
    assert main(["experiment", "overload", "--quick", "--out", str(tmp_path)]) == 0
    for ext in ("csv", "png", "json"):
        assert (tmp_path / f"overload.{ext}").stat().st_size > 0
    doc = json.loads((tmp_path / "overload.json").read_text())
    assert doc["limited_peak_bytes"] <= doc["limit_bytes"] < doc["exact_peak_bytes"]
    assert doc["streams"]["P"]["sampled_out"] > 0
    failed = [c for c in doc["agreement"] if not c["agrees"]]
    assert not failed, failed
    rows = (tmp_path / "overload.csv").read_text().splitlines()
    assert rows[0].startswith("t_ms,memory_exact,memory_limited") and len(rows) > 10


def test_measured_precision_integrates_over_time() -> None:
    exact = [Element(0, "+", (1,)), Element(0, "+", (2,)), Element(10, "-", (1,))]
    approx = [Element(0, "+", (1,)), Element(5, "+", (3,)), Element(10, "-", (1,))]
    fp, fn = measured_precision(exact, approx, until=19)
    # exact: (1) over [0,10), (2) over [0,20) → 30 row-instants; approx misses (2) for 20 → FN 2/3
    # approx: (1) for 10 and (3) over [5,20) wrong for 15 → FP 15/25
    assert abs(fn - 20 / 30) < 1e-12 and abs(fp - 15 / 25) < 1e-12
