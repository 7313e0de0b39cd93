"""A real ``sluice serve`` process on a loopback port: Server-Sent Events over HTTP, and a
server killed (SIGKILL) and started again on the same state that restores every query.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx2 as httpx


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(state: Path, port: int, *extra: str) -> subprocess.Popen:
    """The server, once it answers /health (at most 60 s)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("SLUICE_TOKEN", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "sluice", "serve", "--port", str(port), "--state", str(state), *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env,
        text=True,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"the server exited: {proc.stdout.read() if proc.stdout else ''}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                return proc
        except httpx.TransportError:
            time.sleep(0.2)
    stop(proc, kill=True)
    raise AssertionError("the server did not answer within 60 s")


def stop(proc: subprocess.Popen, kill: bool) -> None:
    proc.kill() if kill else proc.terminate()  # kill: SIGKILL, no shutdown code runs
    proc.wait(timeout=30)
    if proc.stdout:
        proc.stdout.close()


def jsonl(*rows: dict) -> bytes:
    return "\n".join(json.dumps(r) for r in rows).encode()


def test_killed_server_restarts_with_every_query(tmp_path):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = start(tmp_path, port)
    try:
        r = httpx.post(
            f"{url}/cql",
            content="register stream S (A integer); register query big weight 2 as select A from S where A > 1;"
            "register query counts as select Count(*) from S [Range 2]",
            timeout=30,
        )
        assert r.status_code == 200, r.text
        assert httpx.patch(f"{url}/controls", json={"scheduler": "chain"}, timeout=10).status_code == 200
        with httpx.stream("GET", f"{url}/queries/big/events?max_events=1", timeout=30) as resp:
            lines = resp.iter_lines()
            assert next(lines) == "event: subscribed"
            r = httpx.post(
                f"{url}/sources/S/rows?heartbeat=2", content=jsonl({"ts": 1, "A": 5}, {"ts": 2, "A": 1}), timeout=10
            )
            assert r.json()["accepted"] == 2
            data = [ln for ln in lines if ln.startswith("data: ")]
        assert json.loads(data[-1][6:]) == [{"ts": 1, "sign": "+", "row": {"A": 5}}]
    finally:
        stop(proc, kill=True)
    proc = start(tmp_path, port)
    try:
        out = proc.stdout.readline() if proc.stdout else ""
        assert (
            "restored 1 streams/relations/views, 2 queries, 2 journaled pushes, heartbeats and punctuations" in out
        )  # a push, its heartbeat
        qs = {q["name"]: q for q in httpx.get(f"{url}/queries", timeout=10).json()["queries"]}
        assert set(qs) == {"big", "counts"} and qs["big"]["weight"] == 2.0
        assert httpx.get(f"{url}/controls", timeout=10).json()["scheduler"] == "chain"
        r = httpx.post(
            f"{url}/sources/S/rows?heartbeat=4", content=jsonl({"ts": 3, "A": 7}, {"ts": 4, "A": 9}), timeout=10
        )
        assert r.json()["accepted"] == 2
        # the output goes on from before the kill: the journaled push is back in, nothing twice
        els = httpx.get(f"{url}/queries/big/results", timeout=10).json()["elements"]
        assert [(e["ts"], e["row"]["A"]) for e in els] == [(1, 5), (3, 7), (4, 9)]
        counts = httpx.get(f"{url}/queries/counts/results", timeout=10).json()["elements"]
        assert [(e["ts"], e["sign"], e["row"]["count"]) for e in counts] == [
            (1, "+", 1),
            (2, "-", 1),
            (2, "+", 2),
            (3, "-", 2),
            (3, "+", 3),  # at 4: still 3 in [Range 2]
        ]
    finally:
        stop(proc, kill=False)


def test_serving_off_loopback_without_a_token_is_refused(tmp_path):
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "sluice",
            "serve",
            "--host",
            "0.0.0.0",
            "--port",
            str(free_port()),
            "--state",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env={k: v for k, v in os.environ.items() if k != "SLUICE_TOKEN"},
    )
    assert r.returncode == 1
    assert r.stderr.strip().startswith("sluice: serving on 0.0.0.0 (not loopback) needs a token")
