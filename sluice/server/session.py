r"""The server's one session over an engine: every request's work on the engine, in turn.

The engines are synchronous and not thread-safe, so every call that touches the engine holds
``ServerSession.lock`` (the HTTP layer runs them in worker threads, one at a time; decoding a
pushed body happens before, outside the lock).  Registrations are stored (``store.Store``) once the
engine accepted them, and replayed by :meth:`ServerSession.restore` when a server starts again.

>>> from sluice.backends.embedded import EmbeddedEngine
>>> s = ServerSession(EmbeddedEngine())
>>> [r["kind"] for r in s.execute("register stream S (A integer); select A from S [Rows 1]")]
['stream', 'query']
>>> s.push("S", "jsonl", b'{"ts": 1, "A": 5}\n{"ts": 2, "A": "x"}', heartbeat=1)["accepted"]
1
>>> s.results("q1")["elements"]
[{'ts': 1, 'sign': '+', 'row': {'A': 5}}]
"""

from __future__ import annotations

import asyncio
import json
import math
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import pyarrow as pa

from sluice.approx.limits import parse_latency
from sluice.backends.base import Engine
from sluice.backends.rows import static_refusal
from sluice.catalog import Kind, SourceDef, ViewDef
from sluice.cql import ast
from sluice.cql.errors import CQLError, Span
from sluice.cql.parser import parse_script
from sluice.errors import SluiceError
from sluice.server.controls import Controls
from sluice.server.formats import Rejection, decode
from sluice.server.journal import Journal, Record
from sluice.server.store import Store, StoredQuery
from sluice.server.subscriptions import Subscription


class NotFound(SluiceError):
    """A name the request refers to is not registered."""


class Refused(SluiceError):
    """A request this backend or this query cannot do now (HTTP 409), with the reason."""


def _json_value(v: Any) -> Any:
    """A value as JSON can hold it: ±infinity as the strings ``"Infinity"``/``"-Infinity"``."""
    if isinstance(v, float) and math.isinf(v):
        return "Infinity" if v > 0 else "-Infinity"
    return v


def elements_json(table: pa.Table, names: list[str]) -> list[dict[str, Any]]:
    """Output elements (``ts``, ``sign``, then the columns in order) as JSON-ready records."""
    if table.num_rows == 0:
        return []
    ts = table.column(0).to_pylist()
    signs = table.column(1).to_pylist()
    cols = [[_json_value(v) for v in c.to_pylist()] for c in table.columns[2:]]
    return [
        {"ts": t, "sign": "+" if s > 0 else "-", "row": dict(zip(names, vals, strict=True))}
        for t, s, *vals in zip(ts, signs, *cols, strict=True)
    ]


def encoded(elements: list[dict[str, Any]]) -> list[tuple[int, str]]:
    """Elements as subscribers hold them: ``(ts, JSON text)``, encoded once for all of them."""
    return [(e["ts"], json.dumps(e)) for e in elements]


def _relocated(e: CQLError, text: str, offset: int) -> CQLError:
    """An error found in one statement of a script, pointed at the script the client sent."""
    span = Span.at(text, offset + e.span.start, offset + e.span.end)
    return type(e)(e.message, span, text, hint=e.hint, note=e.note)


class ServerSession:
    """The engine, its registrations and subscribers, behind one lock.

    ``retain``: output elements kept per query for ``results`` (None: all — a relation query's
    current answer needs them; subscribers see every element either way).  ``backlog``: the most
    elements a subscriber may fall behind before the oldest are dropped for it (counted, told).
    """

    def __init__(
        self,
        engine: Engine,
        store: Store | None = None,
        *,
        backend: str = "embedded",
        retain: int | None = 10_000,
        backlog: int = 10_000,
        journal: Journal | None = None,
    ) -> None:
        self.engine = engine
        self.journal = journal  # embedded engine with --state: checkpoint + journal of pushes
        self.backend = backend
        self.store = store
        self.retain = retain
        self.backlog = backlog
        self.lock = threading.RLock()
        self.subscriptions: dict[str, list[Subscription]] = {}
        self.started = time.time()
        self.after_run: list[Callable[[], None]] = []  # e.g. the system relations' sampler
        self._polled: dict[str, int] = {}  # Spark: output rows already handed to subscribers
        self._epochs: dict[str, str] = {}  # query -> the run its output positions count (``epoch``)
        self.system: set[str] = set()  # the server's own streams (lower case): ``system.SystemStreams``
        self._pending: list[_Push] = []  # decoded pushes waiting for the engine (``push``)
        self._pending_lock = threading.Lock()
        self._in_script = False  # a script's registrations checkpoint once, at its end
        self.resumed = False  # the engine came from a checkpoint (``build_session``)

    @property
    def embedded(self) -> bool:
        return self.backend == "embedded"

    # -- registration --------------------------------------------------------------------
    def execute(self, text: str) -> list[dict[str, Any]]:
        """Run a CQL script: each statement registers, starts a query, or explains.  A statement
        that fails stops the script there (those before it stay registered; ``applied`` says which).
        """
        out: list[dict[str, Any]] = []
        try:
            stmts = parse_script(text)
        except CQLError as e:
            raise ScriptError(e, out) from None
        with self.lock:
            self._in_script = True
            try:
                for stmt in stmts:
                    try:
                        out.append(self._statement(stmt, text))
                    except SluiceError as e:
                        raise ScriptError(e, out) from None
            finally:
                self._in_script = False
                if any(r["kind"] != "explain" for r in out):
                    self.changed()
        return out

    def _statement(self, stmt: ast.Statement, text: str) -> dict[str, Any]:
        """One statement of ``text``; a CQL error in it points into ``text``, as the client sent it."""
        start, end = (stmt.span.start, stmt.span.end) if hasattr(stmt, "span") else (0, len(text))
        if isinstance(stmt, ast.RegisterQuery):  # the query's text alone is stored, under its name
            start, end = stmt.query.span.start, stmt.query.span.end
        src = text[start:end]
        try:
            if isinstance(stmt, ast.QueryStatement):
                return self.register_query(src)
            if isinstance(stmt, ast.RegisterQuery):
                return self.register_query(
                    src,
                    stmt.name,
                    weight=1.0 if stmt.weight is None else stmt.weight,
                    min_precision=0.0 if stmt.precision is None else stmt.precision,
                    max_latency=stmt.latency,
                )
            if isinstance(stmt, ast.Explain):
                return {"kind": "explain", "plan": self.engine.execute(src)[0]}
            if isinstance(stmt, ast.RegisterSource | ast.RegisterView):
                self.engine.execute(src)
                d = self.engine.catalog.lookup(stmt.name)  # type: ignore[attr-defined]
                kind = d.kind.value if isinstance(d, SourceDef) else "view"
                if self.store is not None:
                    self.store.add_object(d.name, kind, src)
                return {"kind": kind, "name": d.name}
        except CQLError as e:
            raise (e if e.source == text else _relocated(e, text, start)) from None
        raise Refused(f"statement {type(stmt).__name__} is not accepted by the server")

    def register_query(
        self,
        text: str,
        name: str | None = None,
        *,
        weight: float = 1.0,
        min_precision: float = 0.0,
        max_latency: float | str | None = None,
        retain: int | None | str = "default",
        active: bool = True,
        persist: bool = True,
    ) -> dict[str, Any]:
        """Start a continuous query (named ``qN`` unless named) and store it."""
        keep = self.retain if retain == "default" else retain
        assert not isinstance(keep, str)
        latency = None if max_latency is None else parse_latency(max_latency)
        with self.lock:
            name = name or self._free_name()
            if self.embedded:
                h = self.engine.register_query(  # type: ignore[call-arg]
                    text, name, retain=keep, weight=weight, min_precision=min_precision, max_latency=latency
                )
            else:  # (max_latency: measured and reported by the Spark backend, nothing switched)
                h = self.engine.register_query(
                    text, name, weight=weight, min_precision=min_precision, max_latency=max_latency
                )
            if self.embedded:
                h.subscribe_arrow(self._fanout(name))
            else:
                self._polled[name] = 0
            if not active:
                self.engine.deactivate(name)  # type: ignore[attr-defined]
            if persist and self.store is not None:
                self.store.add_query(StoredQuery(name, text, weight, min_precision, latency, keep, active))
            if persist and not self._in_script:
                self.changed()
            return {"kind": "query", "name": name, "output": h.bound.kind.value, "columns": h.bound.schema.names}

    def _free_name(self) -> str:
        taken = set(self._all_queries())
        n = len(taken) + 1
        while f"q{n}" in taken:
            n += 1
        return f"q{n}"

    def _all_queries(self) -> dict[str, Any]:
        eng: Any = self.engine
        inactive = getattr(getattr(eng, "registry", None), "inactive", {})
        return {**eng.queries, **inactive}

    def _query(self, name: str) -> Any:
        q = self._all_queries().get(name)
        if q is None:
            known = ", ".join(sorted(self._all_queries())) or "none"
            raise NotFound(f"no query named {name!r} (registered: {known})")
        return q

    def unregister(self, name: str) -> None:
        """Remove queries: ``name`` may list several (``a,b``), which leave together or not at all
        (the queries of one Spark processor must: ``SparkEngine.unregister``).
        """
        names = list(dict.fromkeys(n.strip() for n in name.split(",")))
        with self.lock:
            for n in names:
                self._query(n)
            self.engine.unregister(*names)
            for n in names:
                for sub in self.subscriptions.pop(n, []):
                    sub.close()
                self._polled.pop(n, None)
                self._epochs.pop(n, None)
                if self.store is not None:
                    self.store.remove_query(n)
                    self.store.set(f"epoch:{n}", None)
            self.changed()

    def drop(self, name: str) -> dict[str, str]:
        """Unregister a stream, relation or view — refused (409) while a query or view uses it."""
        with self.lock:
            cat: Any = self.engine.catalog  # type: ignore[attr-defined]
            try:
                d = cat.lookup(name)
            except KeyError:
                raise NotFound(f"no stream, relation or view named {name!r}") from None
            if d.name.lower() in self.system:
                raise Refused(f"{d.name} is a system stream of the server")
            self.engine.unregister_source(d.name)
            if self.store is not None:
                self.store.remove_object(d.name)
            self.changed()
            return {"unregistered": d.name, "kind": "view" if isinstance(d, ViewDef) else d.kind.value}

    def changed(self) -> None:
        """Anything but a push or heartbeat changed the engine: a checkpoint (with --state)."""
        if self.journal is not None:
            self.journal.checkpoint(self.engine)  # type: ignore[arg-type]

    def restore(self) -> dict[str, int]:
        """Bring the engine to what the state directory holds.  With a checkpoint (embedded
        engine): replay its journal, then reconcile with the store (what was registered or removed
        after it, if the kill came in between).  Without: replay the store — every stream,
        relation and view, then every query under its name — and apply the control settings.
        """
        if self.store is None:
            return {"objects": 0, "queries": 0, "pushes": 0}
        with self.lock:
            eng: Any = self.engine
            pushes = 0
            if self.journal is not None and self.journal.exists:
                for name, q in self._all_queries().items():  # subscribers are not in a checkpoint
                    q.subscribe_arrow(self._fanout(name))
                pushes = self.journal.replay(eng)
            objects = self.store.objects()
            for name, _, ddl in objects:
                if not self._known(name):
                    self.engine.execute(ddl)
            stored = {d.name.lower() for d in [*eng.catalog.sources, *eng.catalog.views]} - self.system
            for name in stored - {o[0].lower() for o in objects}:
                self.drop(name)
            queries = self.store.queries()
            for name in set(self._all_queries()) - {q.name for q in queries}:
                self.engine.unregister(name)
            for q in queries:
                if q.name in self._all_queries():
                    continue
                self.register_query(
                    q.text,
                    q.name,
                    weight=q.weight,
                    min_precision=q.min_precision,
                    max_latency=q.max_latency,
                    retain=q.retain,
                    active=q.active,
                    persist=False,
                )
            Controls(self).restore(self.store.settings())
            self.changed()  # the replayed journal folded into a checkpoint: the state to go on from
            return {"objects": len(objects), "queries": len(queries), "pushes": pushes}

    def _known(self, name: str) -> bool:
        try:
            self.engine.catalog.lookup(name)  # type: ignore[attr-defined]
        except KeyError:
            return False
        return True

    # -- input ---------------------------------------------------------------------------
    def source(self, name: str) -> SourceDef:
        try:
            d = self.engine.catalog.lookup(name)  # type: ignore[attr-defined]
        except KeyError:
            d = None
        if not isinstance(d, SourceDef):
            known = ", ".join(sorted(s.name for s in self.engine.catalog.sources)) or "none"  # type: ignore[attr-defined]
            raise NotFound(f"no stream or relation named {name!r} (registered: {known})")
        return d

    def push(self, name: str, fmt: str, body: bytes, heartbeat: int | None = None) -> dict[str, Any]:
        """Decode and admit a body: the rows that fit go into the engine, each row that does not
        is rejected alone (its number and reason in the answer, and counted by the engine).

        Pushes that arrive while the engine is busy are taken together once it is free (a group
        commit): each is admitted on its own, in arrival order, with its own counts, and the engine
        runs once for the group before any of them is answered.
        """
        with self.lock:  # (a DELETE of the source may not come between the look-up and the decoding)
            d = self.source(name)
        if d.name.lower() in self.system:
            raise Refused(f"{d.name} is a system stream: the server samples the engine into it")
        batch, bad = decode(fmt, body, d.schema, d.kind is Kind.RELATION, d.name)
        p = _Push(d.name, batch, bad, heartbeat, d)
        with self._pending_lock:
            self._pending.append(p)
        with self.lock:
            if not p.done:
                self._commit()
        if p.error is not None:
            raise p.error
        assert p.report is not None
        return p.report

    def _commit(self) -> None:
        """Admit every waiting push in order, then run the engine once (under the lock)."""
        with self._pending_lock:
            group = list(self._pending)
            self._pending.clear()
        records: list[Record] = []
        try:
            for p in group:
                unfixed = self._unfixed()
                try:
                    p.report = self._admit(p)
                except Exception as e:  # one push's failure is its own: the others go on
                    p.error = e if isinstance(e, SluiceError) else SluiceError(f"{p.name}: push failed: {e!r}")
                # what reached the engine is journaled, also from a push that failed part-way
                if p.admitted:
                    msgs = [f"{p.name}, row {r.row}: {r.reason}" for r in p.bad]
                    records.append(Record("push", p.name, p.batch, msgs))
                records += [Record("heartbeat", n, heartbeat=p.heartbeat) for n in p.heartbeated]
                if unfixed and not self._unfixed():  # a run inside the push (a memory limit's slices) fixed it
                    records.append(Record("start", start=self.engine.ctx.start))  # type: ignore[attr-defined]
            if self.journal is not None:
                try:
                    self.journal.append(records)  # on disk before any of them is answered
                except OSError as e:
                    for p in group:  # never answered as kept while not on disk
                        if p.error is None:
                            p.report = None
                            p.error = SluiceError(
                                f"{p.name}: the push reached the engine but could not be journaled ({e}); it may "
                                "be lost if the server stops before its next checkpoint"
                            )
                    raise
            self._run()
            if self.journal is not None and self.journal.full:
                self.changed()
        finally:
            for p in group:
                if p.error is None and p.report is None:
                    p.error = SluiceError(f"{p.name}: the push was not completed (the engine failed)")
                p.done = True

    def _admit(self, p: _Push) -> dict[str, Any]:
        if self.source(p.name) is not p.source:  # (decoded outside the lock)
            raise Refused(f"{p.name} was unregistered while the push was decoded; nothing of it was taken")
        if self.engine.is_static(p.name):  # refused whole, before anything is counted or journaled
            raise Refused(str(static_refusal(p.name)))
        before = self._source_counts(p.name)
        if p.bad:
            self.engine.reject(p.name, [f"{p.name}, row {r.row}: {r.reason}" for r in p.bad])
        p.admitted = True  # (from here on, rows may be in the engine)
        if p.batch.num_rows:
            self.engine.push_batch(p.name, p.batch)
        after = self._source_counts(p.name)
        if p.heartbeat is not None:
            p.heartbeated = self._heartbeat(p.heartbeat)
        report: dict[str, Any] = {"accepted": p.batch.num_rows, "rejected": [asdict(r) for r in p.bad]}
        if before is not None and after is not None:
            # what the engine did after the checks: late elements (the lateness rule) and, under a
            # memory limit, the sampled-out and shed ones — all counted in its statistics too
            late = after[1].get("late", 0) - before[1].get("late", 0)
            report["late"] = late
            report["dropped"] = p.batch.num_rows - late - (after[0] - before[0])
        return report

    def _source_counts(self, name: str) -> tuple[int, dict[str, int]] | None:
        if not self.embedded:
            return None
        st = self.engine.sources[name.lower()].source_statistics()  # type: ignore[attr-defined]
        return st.accepted, dict(st.rejected_reasons)

    def punctuate(self, name: str, column: str, values: list[Any] | None, upto: Any, ts: int | None) -> int:
        """A punctuation on a stream (design 023, "Punctuations"), journaled with the ``ts`` it took."""
        with self.lock:
            name = self.source(name).name
            at = self.engine.punctuate(name, column, values=values, upto=upto, ts=ts)
            if self.journal is not None:
                try:
                    self.journal.append([Record("punctuation", name, punctuation=(column, values, upto, at))])
                except OSError as e:  # never answered as kept while not on disk
                    raise SluiceError(
                        f"{name}: the punctuation reached the engine but could not be journaled ({e}); it may "
                        "be lost if the server stops before its next checkpoint"
                    ) from e
            self._run()
            if self.journal is not None and self.journal.full:
                self.changed()
            return at

    def heartbeat(self, ts: int) -> None:
        with self.lock:
            names = self._heartbeat(ts)
            if self.journal is not None:
                self.journal.append([Record("heartbeat", n, heartbeat=ts) for n in names])
            self._run()

    def _heartbeat(self, ts: int) -> list[str]:
        """Every user stream and relation is complete to ``ts`` (system streams keep their own
        time); the sources it told, by name ("": all at once).
        """
        if not self.system:
            self.engine.heartbeat(ts)
            return [""]
        names = [d.name for d in self.engine.catalog.sources if d.name.lower() not in self.system]  # type: ignore[attr-defined]
        for n in names:
            self.engine.heartbeat(ts, n)  # type: ignore[call-arg]
        return names

    def _unfixed(self) -> bool:
        """Whether the embedded engine's first instant is still to be fixed (design 004)."""
        return self.embedded and self.engine.ctx.start is None  # type: ignore[attr-defined]

    def _run(self) -> None:
        unfixed = self._unfixed()
        self.engine.run()
        if unfixed and self.journal is not None and not self._unfixed():
            # a replay must fix the first instant where this run did (``Record.apply``)
            self.journal.append([Record("start", start=self.engine.ctx.start)])  # type: ignore[attr-defined]
        if not self.embedded:
            self._poll()
        for fn in self.after_run:  # (the system streams' sampler: it waits for the first instant)
            fn()

    # -- output --------------------------------------------------------------------------
    def _names(self, q: Any) -> list[str]:
        return list(q.bound.schema.names)

    def _fanout(self, name: str) -> Callable[[pa.Table], None]:
        def deliver(batch: pa.Table) -> None:
            subs = self.subscriptions.get(name)
            if subs:
                els = encoded(elements_json(batch, self._names(self._query(name))))
                for s in subs:
                    s.offer(els)

        return deliver

    def _poll(self) -> None:
        """Spark: hand subscribers the output rows that appeared since the last run."""
        for name, seen in self._polled.items():
            if not self.subscriptions.get(name):
                continue
            t = self.engine.arrow(name)  # type: ignore[attr-defined]
            if t.num_rows > seen:
                els = encoded(elements_json(t.slice(seen), self._names(self._query(name))))
                for s in self.subscriptions[name]:
                    s.offer(els)
                self._polled[name] = t.num_rows

    def epoch(self, name: str) -> str:
        """The run of a query whose output positions an SSE id counts (``epoch:position``): new
        at each registration; kept across restarts only where positions are (the embedded engine
        with ``--state``: its checkpoint and journal keep the output) — on Spark, or without a
        state, positions start again at 0 with each engine, and so does the epoch.
        """
        e = self._epochs.get(name)
        if e is None:
            keep = self.store is not None and self.journal is not None
            e = (self.store.settings().get(f"epoch:{name}") if keep else None) or uuid.uuid4().hex[:12]  # type: ignore[union-attr]
            if keep:
                self.store.set(f"epoch:{name}", e)  # type: ignore[union-attr]
            self._epochs[name] = e
        return e

    def subscribe(
        self, name: str, loop: asyncio.AbstractEventLoop | None, after: int | None = None, epoch: str | None = None
    ) -> Subscription:
        """A new subscriber to the query's output from now on — or, ``after`` a position of run
        ``epoch`` (a reconnecting client's last event id), from there: the kept output it missed
        first, within its backlog, and a gap for what it cannot have (``Subscription``).  Under
        the lock: nothing falls between the replay and the first live batch.
        """
        with self.lock:
            q = self._query(name)
            if not self.embedded:
                self._poll()  # rows Spark wrote since the last run are the other subscribers' first
            t = q.arrow() if self.embedded else self.engine.arrow(name)  # type: ignore[attr-defined]
            delivered = q.delivered if self.embedded else t.num_rows
            first = delivered - t.num_rows  # the position of the first element kept
            current = self.epoch(name)
            sub = Subscription(name, self.backlog, loop, position=delivered, epoch=current)
            if after is not None and epoch is not None and epoch != current:
                sub.missed(None, "the query's output started again (re-registered, or the server restarted)")
                after = first
            elif after is not None and after > delivered:
                sub.missed(None, f"position {after} is past the query's output ({delivered})")
                after = None
            if after is not None and after < delivered:
                start = max(after, first, delivered - self.backlog)  # (more would be dropped at once)
                if start > after and sub.gap is None:
                    sub.missed(start - after, "no longer kept (--retain) or more than a subscriber's --backlog")
                sub.position = start
                names = self._names(q)
                for b in t.slice(start - first).to_batches(max_chunksize=1000):
                    sub.offer(encoded(elements_json(pa.Table.from_batches([b]), names)))
            self.subscriptions.setdefault(name, []).append(sub)
            if not self.embedded:  # from now on, as on the embedded engine
                self._polled[name] = t.num_rows
            return sub

    def unsubscribe(self, sub: Subscription) -> None:
        with self.lock:
            subs = self.subscriptions.get(sub.query, [])
            if sub in subs:
                subs.remove(sub)
            sub.close()

    def results(self, name: str, last: int | None = None) -> dict[str, Any]:
        """A query's output kept so far (the last ``last`` elements), and how much there was."""
        with self.lock:
            q = self._query(name)
            t = q.arrow() if self.embedded else self.engine.arrow(name)  # type: ignore[attr-defined]
            delivered = q.delivered if self.embedded else t.num_rows
        kept = t.num_rows
        if last is not None and last < kept:
            t = t.slice(kept - last)
        return {
            "query": name,
            "delivered": delivered,
            "kept": kept,
            "elements": elements_json(t, self._names(q)),
        }

    def answer(self, name: str) -> dict[str, Any]:
        """A relation query's current answer: its rows now (embedded engine, ``retain`` None)."""
        with self.lock:
            q = self._query(name)
            if not self.embedded:
                raise Refused("a query's current answer is read on the embedded engine; on Spark read /results")
            if q.kind is not Kind.RELATION:
                raise Refused(f"query {name} is a stream; its answer is its output (/results)")
            try:
                t = q.contents()
            except SluiceError as e:
                raise Refused(str(e)) from None
        return {"query": name, "rows": [e["row"] for e in elements_json(t, self._names(q))]}

    # -- inspection ----------------------------------------------------------------------
    def explain(self, name: str | None = None) -> str:
        with self.lock:
            if name is not None:
                self._query(name)
            if not self.embedded:
                if name is None:
                    return "\n\n".join(self.engine.explain(n) for n in self._all_queries())
            return self.engine.explain(name)

    def queries(self) -> list[dict[str, Any]]:
        with self.lock:
            out = []
            for name, q in self._all_queries().items():
                out.append(
                    {
                        "name": name,
                        "text": q.bound.text,
                        "output": q.bound.kind.value,
                        "columns": self._names(q),
                        "active": getattr(q, "active", True),
                        "weight": q.weight if self.embedded else q.limits.weight,
                        "delivered": q.delivered if self.embedded else None,
                        "subscribers": [s.statistics() for s in self.subscriptions.get(name, [])],
                    }
                )
            return out

    def sources(self) -> list[dict[str, Any]]:
        with self.lock:
            cat: Any = self.engine.catalog  # type: ignore[attr-defined]
            out: list[dict[str, Any]] = [
                {"name": d.name, "kind": d.kind.value, "columns": [[c.name, c.type.sql()] for c in d.schema.columns]}
                | ({"system": True} if d.name.lower() in self.system else {})
                for d in cat.sources
            ]
            out += [{"name": v.name, "kind": "view", "text": v.text} for v in cat.views]
            return out

    def health(self) -> dict[str, Any]:
        with self.lock:
            return {
                "status": "ok",
                "backend": self.backend,
                "uptime": round(time.time() - self.started, 3),
                "queries": len(self._all_queries()),
                "subscribers": sum(len(s) for s in self.subscriptions.values()),
                "rejected": len(self.engine.rejected()),
            }

    def close(self) -> None:
        with self.lock:
            for subs in self.subscriptions.values():
                for s in subs:
                    s.close()
            self.subscriptions.clear()
            if not self.embedded:
                self.engine.stop()  # type: ignore[attr-defined]
            if self.store is not None:
                self.store.close()
            if self.journal is not None:
                self.journal.close()


@dataclass
class _Push:
    """A decoded push waiting for the engine, and its outcome."""

    name: str
    batch: pa.Table
    bad: list[Rejection]
    heartbeat: int | None
    source: SourceDef | None = None  # what the body was decoded against
    report: dict[str, Any] | None = None
    error: SluiceError | None = None
    done: bool = False
    admitted: bool = False  # it reached the engine (journaled even if it then failed)
    heartbeated: list[str] = field(default_factory=list)  # the sources its heartbeat told


class ScriptError(SluiceError):
    """A statement of a script failed: the error, and what the statements before it registered."""

    def __init__(self, error: SluiceError, applied: list[dict[str, Any]]) -> None:
        super().__init__(str(error))
        self.error = error
        self.applied = list(applied)
