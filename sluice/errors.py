"""The one exception root for user-facing errors, kept apart from internal bugs.

Every error a *user* can cause (bad CQL, unknown names, bad input rows) derives from
:class:`SluiceError`.  A defect in Sluice itself raises :class:`InternalError`, which
deliberately does **not** derive from ``SluiceError`` so that ``except SluiceError``
never hides a bug (sqlglot ``errors.py``; Ibis ``common/exceptions.py``).
"""

from __future__ import annotations


class SluiceError(Exception):
    """Root of every error a user of Sluice can cause and fix."""


class InternalError(Exception):
    """A bug in Sluice: an invariant did not hold.  Never a user's fault."""


class InUseError(SluiceError):
    """A name cannot be unregistered: a view, a query or an operator still uses it."""


class EvaluationError(SluiceError):
    """A query could not be evaluated on the given input (e.g. deleting an absent tuple)."""
