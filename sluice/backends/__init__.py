"""Backends behind one engine interface (``sluice.backends.base.Engine``).

>>> eng = Sluice()                      # the embedded engine, the default
>>> type(eng).__name__
'EmbeddedEngine'
"""

from __future__ import annotations

from typing import Any

from sluice.backends.base import Engine, QueryHandle
from sluice.errors import SluiceError


def Sluice(backend: str = "embedded", **options: Any) -> Engine:  # noqa: N802 - reads as a class
    """An engine: ``backend="embedded"`` (in process; options as ``EmbeddedEngine``) or
    ``backend="spark"`` (``master="local[2]"`` or a cluster URL; options as ``SparkEngine``).
    """
    if backend == "embedded":
        from sluice.backends.embedded import EmbeddedEngine

        return EmbeddedEngine(**options)
    if backend == "spark":
        from sluice.backends.spark.engine import SparkEngine

        return SparkEngine(**options)
    raise SluiceError(f"unknown backend {backend!r}; known: embedded, spark")


__all__ = ["Engine", "QueryHandle", "Sluice"]
