"""The server under concurrent load, small and bounded (loopback only): 50 clients pushing at once
and 20 subscribers, one of them slow — nothing pushed is lost or refused, every fast subscriber
gets every element or is told what it missed, and on the server every subscriber's elements are
accounted for (offered = delivered + dropped + held).  The full-size
run with its numbers is ``benchmarks/server_load.py`` (``benchmarks/README.md``).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("server_load", ROOT / "benchmarks" / "server_load.py")
assert spec is not None and spec.loader is not None
server_load = importlib.util.module_from_spec(spec)
spec.loader.exec_module(server_load)


def test_fifty_pushers_and_twenty_subscribers_lose_nothing_silently():
    # slack 3 s: output flows (in many batches) from 3 s into the run; the slow subscriber sleeps 3 s per event
    args = server_load.parse_args(
        [
            "--clients",
            "50",
            "--subscribers",
            "20",
            "--pushes",
            "12",
            "--rows",
            "10",
            "--backlog",
            "20",
            "--slow-pause",
            "3",
            "--slack",
            "3000",
            "--deadline",
            "120",
        ]
    )
    doc = server_load.run(args)
    assert doc["problems"] == [] and doc["checked"], doc
    assert doc["rows"] == doc["every_row_delivered"] == 6000
    # every fast subscriber got every element or was told what it missed (a backlog of 20 is small)
    assert doc["fast_subscribers_received_or_told"] == [6000]
    # every subscriber was offered all of its query's output, each element delivered, dropped or held
    assert doc["subscribers_conserved"]
    assert doc["offered_to_subscribers"] == {"every_row": [6000], "per_key": [doc["per_key_delivered"]]}
    # (whether the slow one loses elements depends on how much the kernel's socket buffers take for it;
    # the policy itself is tested in test_server.py)
    assert doc["slow_subscriber"]["server_side"]["limit"] == 20
    assert doc["push_latency_ms"]["p99"] > 0 and doc["rows_per_second"] > 0
