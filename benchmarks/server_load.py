"""Load on `sluice serve` through HTTP, loopback only, bounded in rows and time.

A server process (embedded engine, millisecond ticks, slack 5 s: instants complete as the
clients' clocks move on) takes 50 concurrent clients pushing JSON-lines batches stamped with their
wall clock, while 20 subscribers follow two queries over Server-Sent Events — 19 reading as fast
as they can, one reading one event per half second.  Reported: pushed rows per second, each push's
HTTP round trip (p50, p99, max), what every subscriber received, the slow one's bounded backlog
(held at most ``--backlog``, the rest dropped *and told*), and the server's memory.

Checked: every pushed row was accepted, and each fast subscriber of ``every_row`` received one
element per row or was told, in a ``gap`` event, how many it missed (nothing lost silently).

    .venv/bin/python benchmarks/server_load.py [--clients 50] [--subscribers 20] [--pushes 40] [--rows 50]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx2 as httpx
import numpy as np

OUT = Path(__file__).parent / "results" / "server_load.json"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


class Subscriber(threading.Thread):
    def __init__(self, url: str, query: str, slow: float, halt: threading.Event) -> None:
        super().__init__(daemon=True)
        self.url, self.query, self.slow, self.halt = url, query, slow, halt  # slow: seconds per event
        self.elements = 0
        self.gaps = 0
        self.dropped_told = 0
        self.ready = threading.Event()

    def run(self) -> None:
        try:
            self.follow()
        except httpx.TransportError:
            if not self.halt.is_set():  # the server went away before the run ended
                raise

    def follow(self) -> None:
        with (
            httpx.Client(timeout=httpx.Timeout(10, read=60)) as c,
            c.stream("GET", f"{self.url}/queries/{self.query}/events") as resp,
        ):
            event = None
            for line in resp.iter_lines():
                if line.startswith("event: "):
                    event = line[7:]
                    if event == "subscribed":
                        self.ready.set()
                elif line.startswith("data: ") and event == "elements":
                    self.elements += len(json.loads(line[6:]))
                    if self.slow:
                        time.sleep(self.slow)
                elif line.startswith("data: ") and event == "gap":
                    self.gaps += 1
                    self.dropped_told += json.loads(line[6:])["dropped"]
                if self.halt.is_set():
                    return


def main() -> int:
    doc = run(parse_args())
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(doc, indent=2) + "\n")
    print(json.dumps(doc, indent=2))
    if not doc["checked"]:
        print("the load run lost or refused rows: see problems above", file=sys.stderr)
        return 1
    return 0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--subscribers", type=int, default=20)
    ap.add_argument("--pushes", type=int, default=40, help="pushes per client")
    ap.add_argument("--rows", type=int, default=50, help="rows per push")
    ap.add_argument("--backlog", type=int, default=10_000)
    ap.add_argument("--deadline", type=float, default=300, help="seconds the whole run may take")
    ap.add_argument("--slack", type=int, default=5000, help="ms out of order the server takes (clients' clocks)")
    ap.add_argument("--slow-pause", type=float, default=0.5, help="seconds the slow subscriber waits per event")
    return ap.parse_args(argv)


def run(args: argparse.Namespace) -> dict:
    """One load run (a server process of its own); the report, ``checked`` saying nothing was lost."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    state = tempfile.mkdtemp(prefix="sluice-load-")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "sluice",
            "serve",
            "--port",
            str(port),
            "--state",
            state,
            "--time-unit",
            "millisecond",
            "--slack",
            str(args.slack),
            "--backlog",
            str(args.backlog),
            "--retain",
            "1000",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    start = time.monotonic()
    try:
        while time.monotonic() - start < 60:
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.2)
        r = httpx.post(
            f"{url}/cql",
            timeout=30,
            content="register stream S (K integer, V integer);"
            "register query every_row as select K, V from S;"
            "register query per_key as select K, Count(*), Sum(V) from S [Range 1 Second] group by K",
        )
        r.raise_for_status()
        rss0 = rss_kb(proc.pid)
        halt = threading.Event()
        subs = [
            Subscriber(url, "every_row" if i % 2 == 0 else "per_key", args.slow_pause if i == 1 else 0.0, halt)
            for i in range(args.subscribers)
        ]
        for s in subs:
            s.start()
        for s in subs:
            s.ready.wait(30)
        t0 = time.time()
        latencies: list[float] = []
        accepted = [0]
        problems: list[str] = []
        lock = threading.Lock()

        def client(k: int) -> None:
            with httpx.Client(timeout=60) as c:
                for i in range(args.pushes):
                    ts = int((time.time() - t0) * 1000)
                    body = "\n".join(
                        json.dumps({"ts": ts, "K": (k * 31 + i + j) % 100, "V": j}) for j in range(args.rows)
                    )
                    began = time.perf_counter()
                    resp = c.post(f"{url}/sources/S/rows", content=body)
                    took = time.perf_counter() - began
                    rep = resp.json()
                    with lock:
                        latencies.append(took)
                        accepted[0] += rep.get("accepted", 0) - rep.get("late", 0) - rep.get("dropped", 0)
                        if resp.status_code != 200 or rep["rejected"] or rep["late"] or rep["dropped"]:
                            problems.append(resp.text[:200])

        rss_series: list[int] = []

        def watch() -> None:
            while not halt.is_set():
                rss_series.append(rss_kb(proc.pid))
                time.sleep(0.5)

        threading.Thread(target=watch, daemon=True).start()
        cpu0 = cpu_seconds(proc.pid)
        began = time.perf_counter()
        pushers = [threading.Thread(target=client, args=(k,), daemon=True) for k in range(args.clients)]
        for p in pushers:
            p.start()
        for p in pushers:
            p.join(max(1.0, args.deadline - (time.monotonic() - start)))
        push_seconds = time.perf_counter() - began
        server_cpu = cpu_seconds(proc.pid) - cpu0
        rss1 = rss_kb(proc.pid)
        # every instant pushed completes: the rest of the output flows to the subscribers
        httpx.post(f"{url}/heartbeat", json={"ts": int((time.time() - t0) * 1000) + 10_000}, timeout=60)
        total = args.clients * args.pushes * args.rows
        every = httpx.get(f"{url}/queries/every_row", timeout=30).json()["delivered"]
        fast = [s for s in subs if s.query == "every_row" and not s.slow]
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and any(s.elements + s.dropped_told < every for s in fast):
            time.sleep(0.2)
        stats = httpx.get(f"{url}/statistics", timeout=30).json()
        per_key = httpx.get(f"{url}/queries/per_key", timeout=30).json()["delivered"]
        halt.set()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    slow = next(s for s in subs if s.slow)
    # the server's side of each subscriber: what its query offered it = delivered + dropped + held
    slow_stats = min((s for s in stats["subscribers"] if s["query"] == slow.query), key=lambda s: s["delivered"])
    conserved = all(s["offered"] == s["delivered"] + s["dropped"] + s["held"] for s in stats["subscribers"])
    offered = {
        q: sorted({s["offered"] for s in stats["subscribers"] if s["query"] == q}) for q in ("every_row", "per_key")
    }
    # nothing lost silently: each fast subscriber received every element or was told what it missed
    ok = (
        not problems
        and conserved
        and accepted[0] == total
        and every == total
        and all(s.elements + s.dropped_told == total for s in fast)
    )
    lat = np.array(latencies) * 1000
    doc = {
        "clients": args.clients,
        "subscribers": args.subscribers,
        "rows": total,
        "push_requests": len(latencies),
        "push_seconds": round(push_seconds, 3),
        "rows_per_second": round(total / push_seconds),
        "requests_per_second": round(len(latencies) / push_seconds, 1),
        # the server's CPU while the clients pushed (of the machine's cores, shared with the clients)
        "server_cpu_seconds": round(server_cpu, 2),
        "server_cpu_ms_per_push": round(1000 * server_cpu / max(1, len(latencies)), 2),
        "push_latency_ms": {
            "p50": round(float(np.percentile(lat, 50)), 2),
            "p99": round(float(np.percentile(lat, 99)), 2),
            "max": round(float(lat.max()), 2),
        },
        "every_row_delivered": every,
        "per_key_delivered": per_key,
        "offered_to_subscribers": offered,
        "subscribers_conserved": conserved,
        "fast_subscribers_received": sorted({s.elements for s in fast}),
        "fast_subscribers_told_dropped": sorted({s.dropped_told for s in fast}),
        "fast_subscribers_received_or_told": sorted({s.elements + s.dropped_told for s in fast}),
        "slow_subscriber": {
            "received": slow.elements,
            "gap_events": slow.gaps,
            "dropped_told": slow.dropped_told,
            "server_side": slow_stats,
            "backlog_limit": args.backlog,
        },
        "server_rss_mb": {
            "before": round(rss0 / 1024, 1),
            "after_pushes": round(rss1 / 1024, 1),
            "quarters_of_the_run": [
                round(rss_series[int(q * (len(rss_series) - 1))] / 1024, 1) for q in (0.25, 0.5, 0.75, 1)
            ],
        },
        "checked": ok,
        "problems": problems[:5],
    }
    return doc


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    raise SystemExit(main())
