"""The seed papers' example streams and trace replay with chosen selectivities."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pyarrow.parquet as pq
import pytest
from sluice.backends.embedded import EmbeddedEngine
from sluice.workloads import examples
from sluice.workloads.arrivals import trace_interarrivals


@pytest.mark.parametrize("sel", [0.0, 0.013, 0.25, 0.5, 0.999, 1.0])
def test_trace_attributes_hit_the_chosen_selectivity_exactly(sel) -> None:
    n = 4000
    rows = examples.trace_stream("bc-aug89", n, selectivities=[sel, 0.5], seed=2)
    t = examples.threshold(sel)
    assert sum(1 for r in rows if r[1] < t) == round(sel * n)
    assert sum(1 for r in rows if r[2] < examples.threshold(0.5)) == n // 2
    assert all(0 <= r[1] < 100 for r in rows)


def test_trace_replay_keeps_the_trace_burstiness_and_speeds_it_up() -> None:
    n = 3000
    slow = examples.trace_stream("dec-pkt-1-udp", n)
    fast = examples.trace_stream("dec-pkt-1-udp", n, speedup=10.0)
    gaps = trace_interarrivals("dec-pkt-1-udp")[:n]
    assert slow[-1][0] == int(np.cumsum(gaps)[-1] * 1000)
    assert fast[-1][0] == int(np.cumsum(gaps / 10.0)[-1] * 1000)
    assert [r[0] for r in slow] == sorted(r[0] for r in slow)
    with pytest.raises(ValueError, match="selectivity"):
        examples.trace_stream("dec-pkt-1-udp", 10, selectivities=[1.5])


def test_datacenter_readings_and_the_hammad_query() -> None:
    data = examples.datacenter(1800, locations=40, seed=5)
    assert data == examples.datacenter(1800, locations=40, seed=5)  # deterministic
    temps = [r[1] for _, r in data["Temperature"]]
    assert len(data["Temperature"]) == 40 * 180 and 15 < float(np.median(temps)) < 30
    assert max(temps) > 27  # some locations run hot
    eng = EmbeddedEngine()
    eng.execute(examples.DATACENTER_DDL)
    q = eng.register_query(
        "SELECT T.LocationId FROM Temperature T [Range 1 Minute], Humidity H [Range 1 Minute] "
        "WHERE T.Value > 27.0 and H.Value < 42.0 and T.LocationId = H.LocationId"
    )
    for name, rows in data.items():
        eng.push(name, [(t, *r) for t, r in rows])
    eng.close()
    hot = {e.row[0] for e in q.results() if e.sign == "+"}
    assert hot and len(hot) < 40


def test_requests_generator_is_the_demo_workload() -> None:
    rows = examples.requests(300, seed=1)
    assert len(rows) == 300 and rows == examples.requests(300, seed=1)
    assert {r[1] for _, r in rows} <= {d for d, _ in examples.DOMAINS}


def test_cli_generates_each_workload(tmp_path) -> None:
    sluice = [sys.executable, "-m", "sluice"]
    for args in (
        ["trace", "--events", "2000", "--selectivities", "0.2", "--speedup", "5"],
        ["datacenter", "--seconds", "120", "--locations", "5"],
        ["requests", "--events", "50"],
    ):
        out = tmp_path / args[0]
        r = subprocess.run([*sluice, "gen", *args, "--out", str(out)], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        assert (out / "schema.cql").read_text().startswith("REGISTER")
    t = pq.read_table(tmp_path / "trace" / "Packets.parquet")
    assert t.num_rows == 2000 and sum(1 for v in t.column("a0").to_pylist() if v < 20) == 400
    assert pq.read_table(tmp_path / "datacenter" / "Humidity.parquet").num_rows == 5 * 12
