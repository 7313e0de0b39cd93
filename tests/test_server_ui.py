"""The web UI of ``sluice serve`` in a real browser (Debian's headless Chromium, driven through
the DevTools protocol: ``tests/browser.py``) against a real server with data flowing: the plan
graph and the live plots render with live data, a query's changes arrive, the register form shows
caret errors, the scheduler switches — and a screenshot shows the graph and a plot drawn.

``SLUICE_UPDATE_SCREENSHOT=1`` also writes the screenshot to ``docs/images/server-ui.png`` (the README's).
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import httpx2 as httpx
import numpy as np
from matplotlib import image

from browser import Browser
from test_server_process import free_port, start, stop

ROOT = Path(__file__).resolve().parent.parent


def pusher(url: str, halt: threading.Event, count: int = 1200) -> threading.Thread:
    """Rows into S every 0.05 s (at most ``count`` pushes), each completing its instant."""

    def run() -> None:
        for ts in range(1, count + 1):
            if halt.wait(0.05):
                return
            rows = "\n".join(json.dumps({"ts": ts, "A": (ts * 7 + k) % 50, "B": f"b{k}"}) for k in range(ts % 5 + 1))
            httpx.post(f"{url}/sources/S/rows?heartbeat={ts}", content=rows, timeout=10)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def colour_pixels(png: np.ndarray, rect: dict, rgb: tuple[int, int, int], tol: int = 12) -> int:
    x0, y0 = int(rect["x"]), int(rect["y"])
    region = png[y0 : y0 + int(rect["height"]), x0 : x0 + int(rect["width"]), :3]
    return int((np.abs(region.astype(int) - np.array(rgb)) <= tol).all(axis=2).sum())


def test_the_page_shows_the_plan_live_plots_answers_and_forms(tmp_path):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = start(tmp_path, port)
    halt = threading.Event()
    browser = None
    try:
        httpx.post(
            f"{url}/cql",
            content="register stream S (A integer, B varchar(8)); "
            "register query big as select A, B from S where A > 25",
            timeout=30,
        )
        httpx.post(
            f"{url}/queries",
            json={"text": "select B, Count(*) from S [Range 5] group by B", "name": "per_b", "retain": None},
            timeout=30,
        )
        feeding = pusher(url, halt)
        browser = Browser(1400, 1000)
        browser.goto(url + "/")
        ops = browser.wait_for(
            "(() => { const ops = [...document.querySelectorAll('#plan g.op')].map(g => g.dataset.op);"
            " return ops.includes('output:big') && ops.includes('output:per_b') && ops; })()"
        )
        assert {"S", "SysQueues", "output:big", "output:per_b"} <= set(ops)
        edges = browser.eval("document.querySelectorAll('#plan path.edge').length")
        assert edges >= 6
        assert "queue" in browser.eval("document.querySelector('#plan g.op[data-op=\"S\"] text.sizes').textContent")
        # live plots: several samples, throughput above zero (rows are flowing)
        browser.wait_for(
            "+document.getElementById('plot-throughput').dataset.points >= 4 && "
            "+document.getElementById('plot-throughput').dataset.max > 1"
        )
        assert int(browser.eval("document.getElementById('plot-memory').dataset.points")) >= 4
        # the selected query's changes arrive through Server-Sent Events, and its answer is shown
        browser.wait_for("document.querySelectorAll('#changes tbody tr').length >= 3")
        browser.eval("document.querySelector('#queries button[data-q=\"per_b\"]').click()")
        browser.wait_for(
            "document.getElementById('answer-of').textContent === 'of per_b' && "
            "document.querySelectorAll('#answer-table tr').length >= 2"
        )
        # the register form: a caret error, then a query registered
        browser.eval(
            "document.getElementById('cql').value = 'select Nope from S'; document.getElementById('register').click()"
        )
        msg = browser.wait_for(
            "document.getElementById('register-msg').className === 'error' && "
            "document.getElementById('register-msg').textContent"
        )
        assert "unknown column 'Nope'" in msg and "^^^^" in msg
        browser.eval(
            "document.getElementById('cql').value = 'register query three as select A from S [Rows 3]';"
            "document.getElementById('register').click()"
        )
        browser.wait_for("!!document.querySelector('#queries button[data-q=\"three\"]')", timeout=15)
        # switch the scheduler
        browser.wait_for("document.getElementById('scheduler').options.length > 3")
        browser.eval("document.getElementById('scheduler').value = 'chain'; document.getElementById('switch').click()")
        assert browser.wait_for("document.getElementById('switch-msg').textContent") == "now chain"
        assert httpx.get(f"{url}/controls", timeout=10).json()["scheduler"] == "chain"
        # the screenshot: the plan's boxes and the throughput line are drawn
        browser.wait_for("+document.getElementById('plot-throughput').dataset.points >= 6")
        rects = browser.eval(
            "JSON.parse(JSON.stringify({plan: document.getElementById('plan').getBoundingClientRect(),"
            " plot: document.getElementById('plot-throughput').getBoundingClientRect()}))"
        )
        shot = browser.screenshot()
        (tmp_path / "ui.png").write_bytes(shot)
        if os.environ.get("SLUICE_UPDATE_SCREENSHOT"):
            (ROOT / "docs" / "images").mkdir(parents=True, exist_ok=True)
            (ROOT / "docs" / "images" / "server-ui.png").write_bytes(shot)
        png = (image.imread(tmp_path / "ui.png") * 255).round().astype(np.uint8)
        assert png.shape[:2] == (1000, 1400)
        assert colour_pixels(png, rects["plan"], (0xDB, 0xE9, 0xFF)) > 500  # a source's box
        assert colour_pixels(png, rects["plan"], (0xDC, 0xF5, 0xDC)) > 500  # an output's box
        assert colour_pixels(png, rects["plot"], (0x2F, 0x85, 0x5A), tol=40) > 40  # the throughput line
    finally:
        halt.set()
        if browser is not None:
            browser.close()
        stop(proc, kill=False)
    feeding.join(timeout=10)
