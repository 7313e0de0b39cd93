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


def test_live_feed_paces_to_the_clock_and_equals_pushing_everything() -> None:
    from sluice.workloads.live import feed, merge, nexmark_events

    now = [0.0]
    sleeps: list[float] = []

    def sleep(s: float) -> None:
        sleeps.append(s)
        now[0] += s

    data = examples.datacenter(600, locations=4, seed=1)
    query = "SELECT T.LocationId, count(*) FROM Temperature T [Range 1 Minute] GROUP BY T.LocationId"

    def engine():
        eng = EmbeddedEngine()
        eng.execute(examples.DATACENTER_DDL)
        return eng, eng.register_query(query)

    live, q_live = engine()
    stats = feed(live, merge(data), unit_seconds=1.0, speedup=60.0, batch=50, clock=lambda: now[0], sleep=sleep)
    bulk, q_bulk = engine()
    for name, rows in data.items():
        bulk.push(name, [(t, *r) for t, r in rows])
    bulk.close()
    assert q_live.results() == q_bulk.results()
    last = max(t for rows in data.values() for t, _ in rows)
    first = min(t for rows in data.values() for t, _ in rows)
    assert sum(sleeps) == pytest.approx((last - first) / 60.0)  # ten minutes of readings in ten seconds
    assert stats.events == sum(len(r) for r in data.values())
    with pytest.raises(ValueError, match="timestamp order"):
        feed(engine()[0], [("Temperature", (5, 1, 1.0)), ("Temperature", (3, 1, 1.0))], unit_seconds=1.0)
    pairs = list(nexmark_events(200))
    assert [p[1][0] for p in pairs] == sorted(p[1][0] for p in pairs)
    assert {p[0] for p in pairs} == {"Person", "Auction", "Bid"}
