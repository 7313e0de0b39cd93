"""What the web UI of ``sluice serve`` reads: the plan graph (operators, their queues and
synopses with live sizes, and the queues between them) and a compact sample of the engine's
counters for the live plots.  The page itself is ``static/index.html`` (plain HTML, SVG and canvas:
no build step, nothing fetched from elsewhere).

>>> from sluice.backends.embedded import EmbeddedEngine
>>> from sluice.server.session import ServerSession
>>> s = ServerSession(EmbeddedEngine())
>>> _ = s.execute("register stream S (A integer); register query big as select A from S where A > 1")
>>> g = plan_graph(s)
>>> [(n["id"], n["kind"]) for n in g["nodes"]], [(e["source"], e["target"]) for e in g["edges"]]
([('S', 'StreamSource'), ('select#1', 'Select'), ('output:big', 'Output')], \
[('S', 'select#1'), ('select#1', 'output:big')])
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sluice.server.session import ServerSession

PAGE = Path(__file__).with_name("static") / "index.html"


def plan_graph(session: ServerSession) -> dict[str, Any]:
    """Nodes (operators with their output queues' held elements and bytes, their synopses'
    bytes and the queries they serve) and edges (a queue from its producer to a reader).
    """
    with session.lock:
        if not session.embedded:
            return {"nodes": [], "edges": [], "note": "the plan graph is the embedded engine's (Spark: /explain)"}
        reg: Any = session.engine.registry  # type: ignore[attr-defined]
        ops = reg.all_operators()
        producer = {id(q): op.name for op in ops for q in op.outputs}
        nodes = [
            {
                "id": op.name,
                "kind": op.kind,
                "detail": op.detail,
                "queries": sorted(op.queries),
                "held": sum(q.length for q in op.outputs),
                "queue_bytes": sum(q.nbytes for q in op.outputs),
                "synopsis_bytes": op.state_bytes(),
                "system": op.name.lower() in session.system,
            }
            for op in ops
        ]
        edges = [
            {"source": producer[id(q)], "target": op.name, "queue": q.name, "held": q.length}
            for op in ops
            for q in op.inputs()
            if id(q) in producer
        ]
        return {"nodes": nodes, "edges": edges}


def metrics(session: ServerSession) -> dict[str, Any]:
    """One sample for the live plots: memory, input and output so far, each query's latency."""
    with session.lock:
        out: dict[str, Any] = {"t": time.time()}
        if not session.embedded:
            return out
        st: Any = session.engine.statistics()
        user = [s for s in st.sources if s.name.lower() not in session.system]
        out["queue_bytes"] = st.queue_bytes
        out["synopsis_bytes"] = st.synopsis_bytes
        out["accepted"] = sum(s.accepted for s in user)
        out["rejected"] = sum(s.rejected for s in user)
        out["delivered"] = {n: q.delivered for n, q in session._all_queries().items()}
        out["latency"] = {n: {"mean": s.mean, "max": s.max, "count": s.count} for n, s in st.latency}
        return out
