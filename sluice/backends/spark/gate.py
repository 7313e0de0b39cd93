"""The Spark driver's streams, held and released as the embedded engine's sources release them
(design 023, "On Spark").

Every stream — with its k-constraints (STREAM §4.1), ``PUNCTUATED BY`` and ``FOREIGN KEY …
REFERENCES``, if it declares any — is released on the driver exactly as the embedded engine's
source releases it (``sluice.runtime.operators.sources.Source``): its admitted rows wait here until
their instant is complete — by the stream's lateness rule, heartbeats and ``close()``, and for a
referenced stream no later than each referencing stream has released, plus ``k`` — and leave at
``run()`` in timestamp order (ties in push order), checked against the same ``Constraints`` and
``PunctuationLog``; a referencing stream's released elements tell the stream they reference what
it may no longer have.  So the same elements are rejected, for the same reasons, with any slack,
and a punctuation given before ``run()`` applies to what was pushed before it but not yet released,
as on the embedded engine.  Elements leave here before the markers numbered with them
(``Inbox.release``): a heartbeat reaches Spark after the elements it completes.

What the checks have seen outlives ``stop()`` as the held rows do (``state``, ``restore``): the
next engine on the work directory goes on checking where this one stopped.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pyarrow as pa

from sluice.catalog import SourceDef
from sluice.cql.ast import StreamConstraint
from sluice.runtime.admission import Admission
from sluice.runtime.batch import NEG_INF, sort_by_ts, ts_of
from sluice.runtime.constraints import Constraints, PunctuationLog, log_column
from sluice.runtime.operators.sources import Reference, punctuation_after


class Gate:
    """One held stream on the driver (module docstring)."""

    def __init__(self, d: SourceDef, adm: Admission) -> None:
        self.name = d.name
        self.adm = adm
        self.punctuations = PunctuationLog(d.name)
        own = [c for c in d.constraints if c.kind != "REFERENCES"]  # (a FOREIGN KEY is checked on its target)
        self.checker = Constraints.of_stream(d.name, d.schema, own, self.punctuations)
        self.index = {c.name.lower(): i for i, c in enumerate(d.schema.columns)}
        self.pending: list[pa.Table] = []  # admitted, in push order (ticks)
        self.released = NEG_INF  # every element stamped ≤ it has left (``Source._wm_out``)
        self.referenced_by: list[tuple[Gate, int]] = []
        self.references: list[Reference] = []  # (each one's target a Gate)
        self.own = own
        self.types = [str(t) for t in d.schema.types]
        # the checks of references an earlier engine had (``restore``), each resumed when its
        # referencing stream declares the reference again
        self.resumable: dict[StreamConstraint, Any] = {}

    def state(self) -> dict[str, Any] | None:
        """What the checks know, to outlive ``stop()`` (None: nothing to keep): each constraint's
        check (a reference's implied one too), the punctuations given and told, how far the stream
        was released.
        """
        if self.released == NEG_INF and not self.checker and not self.punctuations.entries:
            return None
        checks = dict(zip([c for c, _ in self.checker.constraints], self.checker.checks, strict=True))
        checks.update(self.resumable)  # (not declared again since: kept for the next engine)
        log = self.punctuations.snapshot()
        return {
            "own": self.own,
            "types": self.types,
            "checks": checks,
            "punctuations": log,
            "released": self.released,
        }

    def restore(self, state: dict[str, Any], where: str) -> None:
        """Go on from what an earlier engine's checks knew (``state``), if the stream declares the
        same constraints over columns of the same types; otherwise start afresh, with a warning
        naming ``where`` it was kept.  As far as the stream was released, its instants are
        complete: an element stamped there now is late, as it would be on one engine.
        """
        if state["own"] != self.own or state["types"] != self.types:
            was = ", ".join(c.sql() for c in state["own"]) or "no constraints"
            warnings.warn(
                f"{where}: what the checks of stream {self.name} had seen is for other constraints or "
                f"types ({was}; {', '.join(state['types'])}), not carried over",
                stacklevel=4,
            )
            return
        own = [state["checks"][c] for c in self.own]  # (everything read before anything changes)
        resumable = {c: o for c, o in state["checks"].items() if c not in self.own}
        released = int(state["released"])
        self.punctuations.restore(state["punctuations"])
        self.checker.restore({"checks": own})  # (its own constraints only yet: references come after)
        self.resumable = resumable
        self.released = max(self.released, released)
        if self.released > NEG_INF:
            self.adm.heartbeat(self.released, scaled=True)

    def reference(self, target: Gate, c: StreamConstraint, k: int) -> None:
        """``FOREIGN KEY (c.column) REFERENCES target(c.ref_column) WITHIN k`` (ticks), as
        ``Source.reference``: ``target`` checks an implied ``PUNCTUATED BY`` and waits for this one.
        """
        implied = StreamConstraint("PUNCTUATED", c.ref_column, c.k, self.name, c.column)
        column = log_column(implied)
        stale = [o for o in target.resumable if o != implied and log_column(o) == column]
        if stale:  # an earlier engine's reference of another k: its promises are not this one's
            target.resumable = {o: v for o, v in target.resumable.items() if o not in stale}
            target.punctuations.drop(column)
        target.checker.add(implied, target.index[c.ref_column.lower()], target.punctuations)
        if implied in target.resumable:  # (an earlier engine's reference, declared again)
            target.checker.resume(implied, target.resumable.pop(implied))
        target.referenced_by.append((self, k))
        self.references.append(Reference(target, column, self.index[c.column.lower()], k, implied))
        if target.released > NEG_INF:  # declared while running: what it speaks of is out already
            self.adm.heartbeat(target.released - k - 1, scaled=True)

    def unreference(self) -> None:
        """Unregistered: the streams it references stop waiting for it and checking it."""
        for ref in self.references:
            ref.withdraw(self)
        self.references = []

    def hold(self, batch: pa.Table) -> None:
        if batch.num_rows:
            self.pending.append(batch)

    def complete_upto(self) -> int:
        done = self.adm.complete_upto()
        for g, k in self.referenced_by:
            done = min(done, g.released + k)
        return done

    def punctuate(self, column: str, tick: int, values: np.ndarray | None, upto: object) -> None:
        """As ``Source.punctuate``: about what this stream has not released yet."""
        punctuation_after(self.name, tick, self.released)
        self.punctuations.add(column, tick, values, upto)

    def release(self) -> pa.Table | None:
        """The elements whose instant is complete, checked, in the stream's order (None: none)."""
        done = self.complete_upto()
        out = None
        if self.pending:
            b = sort_by_ts(pa.concat_tables(self.pending))
            n = int(np.searchsorted(ts_of(b), done, side="right"))
            out, rest = b.slice(0, n), b.slice(n)
            self.pending = [rest] if rest.num_rows else []
            if out.num_rows and self.checker:
                kept = self.adm.constrained(self.checker, out)
                self.adm.accepted -= out.num_rows - kept.num_rows  # (counted when pushed)
                out = kept
            for ref in self.references:
                ref.tell(out)
        self.released = max(self.released, done)
        if self.punctuations.entries:
            self.punctuations.compact(self.released)  # every element stamped ≤ it is released and checked
        return out if out is not None and out.num_rows else None

    def waiting(self) -> int:
        return sum(b.num_rows for b in self.pending)
