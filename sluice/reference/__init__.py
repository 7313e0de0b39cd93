"""The reference evaluator: CQL by definition, the oracle for every backend and strategy."""

from sluice.plan.element import Element
from sluice.reference.evaluator import evaluate, sort_key

__all__ = ["Element", "evaluate", "sort_key"]
