"""``sluice serve``: Sluice as a long-running server (STREAM §6) — an HTTP API to register
streams, relations, views and queries in CQL, push rows (JSON lines, CSV, Arrow IPC), follow a
query's output (Server-Sent Events), read and set control tables, EXPLAIN, health.

Layers: ``formats`` (pushed bodies → the admission check), ``subscriptions`` (bounded backlogs),
``store`` (SQLite: what a restart replays), ``session`` (the engine behind one lock),
``system`` (the engine's statistics as system streams, queried in CQL),
``controls`` (control tables, statistics), ``app`` (Starlette routes), and :func:`serve`
(uvicorn).  Design: ``docs/design/022-server.md``.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import sys
from pathlib import Path
from typing import Any

from sluice.errors import SluiceError
from sluice.server.app import MAX_BODY, create_app
from sluice.server.journal import Journal
from sluice.server.session import ServerSession
from sluice.server.store import Store
from sluice.server.system import SYSTEM_STREAMS, SystemStreams

log = logging.getLogger("sluice.server")


def is_loopback(host: str) -> bool:
    """Whether ``host`` is reachable from this machine only (``localhost``, 127.0.0.0/8, ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_exposure(host: str, token: str | None) -> None:
    """Off loopback a server needs a token: anyone who reaches it could register and push."""
    if not is_loopback(host) and not token:
        raise SluiceError(
            f"serving on {host} (not loopback) needs a token: --token-file FILE, --token TOKEN or SLUICE_TOKEN; "
            "clients then send Authorization: Bearer TOKEN"
        )


def build_session(
    backend: str = "embedded",
    state: str | Path | None = None,
    *,
    retain: int | None = 10_000,
    backlog: int = 10_000,
    system: bool = True,
    sample_every: int | None = None,
    **engine_options: Any,
) -> tuple[ServerSession, dict[str, int]]:
    """The engine, its store (``state``: a directory; None keeps nothing) and what was restored."""
    from sluice.backends import Sluice

    store = None
    if state is not None:
        Path(state).mkdir(parents=True, exist_ok=True)
        store = Store(Path(state) / "sluice-server.db")
        stored_unit = store.settings().get("time_unit")
        unit = str(engine_options.get("time_unit", "second")).upper()
        if stored_unit is not None and stored_unit != unit:
            raise SluiceError(
                f"{state} holds a server whose timestamps count {stored_unit.lower()}s, not {unit.lower()}s: "
                f"start it with --time-unit {stored_unit.lower()}"
            )
        store.set("time_unit", unit)
        if backend == "spark":
            engine_options.setdefault("workdir", str(Path(state) / "spark"))
    journal = Journal(Path(state) / "engine") if state is not None and backend == "embedded" else None
    # the embedded engine of a checkpoint (its own options kept), or a new one
    engine: Any = journal.load() if journal is not None and journal.exists else Sluice(backend, **engine_options)
    session = ServerSession(engine, store, backend=backend, retain=retain, backlog=backlog, journal=journal)
    session.resumed = journal is not None and journal.exists
    if system and backend == "embedded":  # before the restore: stored queries may read them
        if sample_every is None:  # a sample per second of data time
            sample_every = max(1, 1000 // engine.catalog.time_unit.millis)
        SystemStreams(session, sample_every)
    return session, session.restore()


def read_token(path: str | Path) -> str:
    """A token kept in a file (``--token-file``): its first line, so the token is not in the
    process list (``--token``) or the environment.  A file others may read is reported.
    """
    p = Path(path)
    try:
        lines = p.read_text().splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise SluiceError(f"--token-file {p}: cannot read it ({e})") from None
    token = lines[0].strip() if lines else ""
    if not token:
        raise SluiceError(f"--token-file {p}: the file is empty; put the token on its first line")
    if p.stat().st_mode & 0o077:
        print(f"sluice serve: warning: {p} can be read by others than its owner (chmod 600 {p})", file=sys.stderr)
    return token


def serve(
    host: str = "127.0.0.1",
    port: int = 8765,
    *,
    token: str | None = None,
    token_file: str | Path | None = None,
    state: str | Path | None = None,
    backend: str = "embedded",
    retain: int | None = 10_000,
    backlog: int = 10_000,
    max_body: int = MAX_BODY,
    sample_every: int | None = None,
    **engine_options: Any,
) -> None:
    """Run the server until interrupted (SIGINT/SIGTERM): uvicorn over :func:`create_app`."""
    import uvicorn

    if token and token_file:
        raise SluiceError("give the token once: --token or --token-file, not both")
    token = token or (read_token(token_file) if token_file else None) or os.environ.get("SLUICE_TOKEN") or None
    check_exposure(host, token)
    session, restored = build_session(
        backend, state, retain=retain, backlog=backlog, sample_every=sample_every, **engine_options
    )
    print(
        f"sluice serve: {backend} engine on http://{host}:{port} "
        f"(restored {restored['objects']} streams/relations/views, {restored['queries']} queries, "
        f"{restored['pushes']} journaled pushes, heartbeats and punctuations"
        f"{' from ' + str(state) if state else '; nothing is kept: give --state DIR to keep registrations'})",
        flush=True,
    )
    if session.resumed:
        print(
            "sluice serve: the engine resumed from its checkpoint, with the options it was started with "
            "(this start's --scheduler, --memory-limit, --slack, --time-unit are not applied; /controls are)",
            flush=True,
        )
    # without a token (loopback only): requests must name a loopback host, and no page of
    # another origin may change anything (DNS rebinding, cross-site POSTs)
    hosts = ["127.0.0.1", "localhost", "::1", host]
    app = create_app(session, token=token, max_body=max_body, hosts=hosts)
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", timeout_graceful_shutdown=2)
    try:
        uvicorn.Server(config).run()
    finally:
        session.close()


__all__ = [
    "SYSTEM_STREAMS",
    "ServerSession",
    "Store",
    "SystemStreams",
    "build_session",
    "check_exposure",
    "create_app",
    "is_loopback",
    "serve",
]
