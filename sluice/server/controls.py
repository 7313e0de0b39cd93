"""Control tables (STREAM §6): what a client may read and change while queries run — the
scheduling strategy, each query's weight and activity, each synopsis's memory limit — and the
engine's statistics.  Every change is stored, so a restarted server applies it again.

>>> from sluice.backends.embedded import EmbeddedEngine
>>> from sluice.server.session import ServerSession
>>> s = ServerSession(EmbeddedEngine())
>>> _ = s.execute("register stream S (A integer); register query top as select A from S [Rows 3]")
>>> c = Controls(s)
>>> c.update(None, None, {"scheduler": "chain"})
>>> c.update("queries", "top", {"weight": 2.5})
>>> t = c.tables(); t["scheduler"], t["queries"]
('chain', [{'name': 'top', 'weight': 2.5, 'active': True}])
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sluice.errors import SluiceError
from sluice.scheduling.strategies import STRATEGIES

if TYPE_CHECKING:
    from sluice.server.session import ServerSession


class ControlError(SluiceError):
    """A control table's value is not one it takes."""


class Controls:
    def __init__(self, session: ServerSession) -> None:
        self.session = session

    @property
    def engine(self) -> Any:
        return self.session.engine

    def _embedded_only(self, what: str) -> None:
        from sluice.server.session import Refused

        if not self.session.embedded:
            raise Refused(
                f"{what} is a control of the embedded engine's scheduler and synopses; the Spark backend runs "
                "its queries as Spark streaming queries (no shared scheduler or synopses to set)"
            )

    def tables(self) -> dict[str, Any]:
        """The control tables now."""
        with self.session.lock:
            eng = self.engine
            out: dict[str, Any] = {"backend": self.session.backend}
            queries = self.session._all_queries()
            out["queries"] = [
                {"name": n, "weight": getattr(q, "weight", 1.0), "active": getattr(q, "active", True)}
                for n, q in queries.items()
            ]
            if not self.session.embedded:
                return out
            out["scheduler"] = eng.strategy.name
            out["schedulers"] = sorted(STRATEGIES)
            out["synopses"] = [
                {
                    "operator": op.name,
                    "synopsis": i,
                    "kind": st.kind,
                    "tuples": st.tuples,
                    "bytes": st.nbytes,
                    "limit": st.budget,
                    "over": st.over_budget,
                }
                for op in eng.registry.all_operators()
                for i, st in enumerate(s.statistics() for s in op.synopses())
            ]
            out["memory_limit"] = None if eng.limits is None else eng.limits.limit
            return out

    def update(self, what: str | None, name: str | None, body: dict[str, Any]) -> None:
        """``what`` None: engine settings (``{"scheduler": NAME}``); ``"queries"``: a query's
        ``weight`` and ``active``; ``"synopses"``: an operator's synopses' memory ``limit`` (bytes).
        """
        from sluice.server.session import NotFound

        allowed = {None: {"scheduler"}, "queries": {"weight", "active"}, "synopses": {"limit"}}
        if what not in allowed:
            raise NotFound(f"no control table {what!r}; known: queries, synopses")
        unknown = set(body) - allowed[what]
        if unknown or not body:
            raise ControlError(f"{what or 'engine'} controls take {', '.join(sorted(allowed[what]))}")
        with self.session.lock:
            applied = False
            try:
                for key, value in body.items():
                    self.apply(f"{key}" if what is None else f"{what}:{name}:{key}", value)
                    applied = True
                    if self.session.store is not None:
                        stored = None if value is None else str(value)
                        self.session.store.set(f"{key}" if what is None else f"{what}:{name}:{key}", stored)
            finally:
                if applied:  # what was applied is stored and checkpointed, also when a later key fails
                    self.session.changed()

    def apply(self, key: str, value: Any) -> None:
        """One setting (also replayed from the store at start, values then being text)."""
        parts = key.split(":")
        if parts == ["scheduler"]:
            self._embedded_only("the scheduler")
            if not isinstance(value, str):
                raise ControlError(f"scheduler must be a name ({', '.join(sorted(STRATEGIES))})")
            try:
                self.engine.set_scheduler(value)
            except ValueError as e:
                raise ControlError(str(e)) from None
            return
        what, name, field = parts[0], ":".join(parts[1:-1]), parts[-1]
        if what == "queries":
            self.session._query(name)
            if field == "weight":
                self._embedded_only("a query's weight")
                try:
                    w = float(value)
                except (TypeError, ValueError):
                    raise ControlError(f"weight must be a positive number, not {value!r}") from None
                self.engine.set_weight(name, w)
                if self.session.store is not None:
                    self.session.store.update_query(name, weight=w)
            else:
                active = value if isinstance(value, bool) else {"True": True, "False": False}.get(str(value))
                if active is None:
                    raise ControlError(f"active must be true or false, not {value!r}")
                self._embedded_only("a query's activity")
                from sluice.server.session import Refused

                if active != self.session._query(name).active:
                    try:
                        (self.engine.activate if active else self.engine.deactivate)(name)
                    except SluiceError as e:
                        raise Refused(str(e)) from None
                if self.session.store is not None:
                    self.session.store.update_query(name, active=active)
            return
        self._embedded_only("a synopsis's memory limit")
        ops = [op for op in self.engine.registry.all_operators() if op.name == name and op.synopses()]
        if not ops:
            with_syn = sorted(op.name for op in self.engine.registry.all_operators() if op.synopses())
            raise ControlError(f"no operator {name!r} with synopses (operators with synopses: {', '.join(with_syn)})")
        limit = None if value in (None, "None") else value
        if limit is not None:
            try:
                limit = int(limit)
            except (TypeError, ValueError):
                limit = -1
            if limit < 0:
                raise ControlError(f"a synopsis's limit is a number of bytes (or null: none), not {value!r}")
        for syn in ops[0].synopses():
            syn.change_mem(limit)

    def restore(self, settings: dict[str, str]) -> None:
        """Apply stored settings (the query ones were restored with the queries)."""
        for key, value in settings.items():
            if key == "scheduler" or key.startswith("synopses:"):
                self.apply(key, value)

    def statistics(self) -> Any:
        with self.session.lock:
            st = self.engine.statistics()
            subs = [s.statistics() for ss in self.session.subscriptions.values() for s in ss]
            return {"engine": st, "subscribers": subs}
