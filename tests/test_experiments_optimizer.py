"""``sluice experiment optimizer`` (issue #15 item 6) at its quick size: its files, and the one
claim that is not a matter of speed — every plan gives the same answer — holds.  (Which plan is
faster is measured and reported, never asserted: no wall-clock thresholds in tests.)"""

from __future__ import annotations

import csv
import json
from pathlib import Path

from sluice.cli import main


def test_the_optimizer_experiment_writes_its_files_and_every_plan_answers_alike(tmp_path: Path) -> None:
    assert main(["experiment", "optimizer", "--quick", "--out", str(tmp_path)]) == 0
    for ext in ("csv", "png", "json"):
        assert (tmp_path / f"optimizer.{ext}").stat().st_size > 0
    doc = json.loads((tmp_path / "optimizer.json").read_text())
    (same,) = [c for c in doc["agreement"] if c["claim"].startswith("every plan gives the same answer")]
    assert same["agrees"] is True
    join, filters = doc["workloads"]["join"], doc["workloads"]["filters"]
    assert join["answers_equal"] and filters["answers_equal"]
    assert join["plans"]["as written"]["output"] > 0 and filters["plans"]["static"]["output"] > 0
    # the three join plans are the three plans named: a tree as written, a tree reordered, a dataflow join
    assert "DataflowJoin" in join["plans"]["adaptive"]["operators"]
    assert "DataflowJoin" not in join["plans"]["static"]["operators"]
    rows = list(csv.DictReader((tmp_path / "optimizer.csv").read_text().splitlines()))
    assert {(r["workload"], r["plan"], r["phase"]) for r in rows} == {
        (w, p, str(k)) for w in ("join", "filters") for p in ("as written", "static", "adaptive") for k in (1, 2)
    }
    assert all(int(r["events_per_s"]) > 0 for r in rows)
