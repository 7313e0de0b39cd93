"""What a server keeps across restarts, in one SQLite file: the CQL that registered every stream,
relation and view; every registered query with its name, text and settings (weight, least
precision, latency target, retained output, active or not); and the control settings (the
scheduler, synopses' memory limits).  A restarted server replays it in order, so every query runs
again under the same name (``ServerSession.restore``).

Both backends are restored alike: the registrations are replayed as CQL through the engine, not
through a backend's own catalog file.  Writes commit one by one (SQLite's journal makes each
atomic), after the engine accepted the registration: a refused one is never stored.

>>> s = Store(":memory:")
>>> s.add_object("S", "stream", "REGISTER STREAM S (A integer)")
>>> s.add_query(StoredQuery("q", "select A from S"))
>>> [o[0] for o in s.objects()], [q.name for q in s.queries()]
(['S'], ['q'])
"""

from __future__ import annotations

import sqlite3
import threading
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class StoredQuery:
    name: str
    text: str
    weight: float = 1.0
    min_precision: float = 0.0
    max_latency: float | None = None  # seconds
    retain: int | None = None
    active: bool = True


_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS server_objects ("
    " seq INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT UNIQUE NOT NULL COLLATE NOCASE,"
    " kind TEXT NOT NULL, ddl TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS server_queries ("
    " seq INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT UNIQUE NOT NULL, text TEXT NOT NULL,"
    " weight REAL NOT NULL, min_precision REAL NOT NULL, max_latency REAL, retain INTEGER,"
    " active INTEGER NOT NULL)",
    "CREATE TABLE IF NOT EXISTS server_settings (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
)


class Store:
    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        # the server's engine thread and its request threads write through one connection, in turn
        self._db = sqlite3.connect(self.path, check_same_thread=False)
        self._lock = threading.Lock()
        with self._lock, self._db:
            for stmt in _SCHEMA:
                self._db.execute(stmt)

    def _write(self, sql: str, args: tuple[object, ...]) -> None:
        with self._lock, self._db:  # one transaction: committed, or rolled back on error
            self._db.execute(sql, args)

    # -- registrations -------------------------------------------------------------------
    def add_object(self, name: str, kind: str, ddl: str) -> None:
        self._write("INSERT INTO server_objects (name, kind, ddl) VALUES (?, ?, ?)", (name, kind, ddl))

    def remove_object(self, name: str) -> None:
        self._write("DELETE FROM server_objects WHERE name = ?", (name,))

    def objects(self) -> list[tuple[str, str, str]]:
        """(name, kind, CQL), oldest first."""
        with self._lock:
            return list(self._db.execute("SELECT name, kind, ddl FROM server_objects ORDER BY seq"))

    def add_query(self, q: StoredQuery) -> None:
        self._write(
            "INSERT INTO server_queries (name, text, weight, min_precision, max_latency, retain, active)"
            " VALUES (?, ?, ?, ?, ?, ?, ?)",
            (q.name, q.text, q.weight, q.min_precision, q.max_latency, q.retain, int(q.active)),
        )

    def remove_query(self, name: str) -> None:
        self._write("DELETE FROM server_queries WHERE name = ?", (name,))

    def update_query(self, name: str, *, weight: float | None = None, active: bool | None = None) -> None:
        if weight is not None:
            self._write("UPDATE server_queries SET weight = ? WHERE name = ?", (weight, name))
        if active is not None:
            self._write("UPDATE server_queries SET active = ? WHERE name = ?", (int(active), name))

    def queries(self) -> list[StoredQuery]:
        with self._lock:
            rows = list(
                self._db.execute(
                    "SELECT name, text, weight, min_precision, max_latency, retain, active"
                    " FROM server_queries ORDER BY seq"
                )
            )
        return [StoredQuery(n, t, w, p, lat, r, bool(a)) for n, t, w, p, lat, r, a in rows]

    # -- settings ------------------------------------------------------------------------
    def set(self, key: str, value: str | None) -> None:
        if value is None:
            self._write("DELETE FROM server_settings WHERE key = ?", (key,))
        else:
            self._write("INSERT OR REPLACE INTO server_settings VALUES (?, ?)", (key, value))

    def settings(self) -> dict[str, str]:
        with self._lock:
            return dict(self._db.execute("SELECT key, value FROM server_settings ORDER BY key"))

    def close(self) -> None:
        with self._lock:
            self._db.close()
