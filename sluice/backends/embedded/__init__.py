"""The embedded engine (in process, one thread): ``EmbeddedEngine`` is the session users call; its
parts are the query registry, the scheduler loop and the inspector (one module each here).
"""

from sluice.backends.embedded.engine import CHECKPOINT_FORMAT, SNAPSHOT_FORMAT, EmbeddedEngine
from sluice.backends.embedded.query import EngineStats, Query
from sluice.backends.embedded.registry import UnknownNameError

__all__ = ["CHECKPOINT_FORMAT", "SNAPSHOT_FORMAT", "EmbeddedEngine", "EngineStats", "Query", "UnknownNameError"]
