"""Sluice: a Data Stream Management System.  Continuous CQL queries with exact answers."""

__version__ = "0.1.0"


def __getattr__(name: str) -> object:
    # ``from sluice import Sluice`` without importing the engine for every ``import sluice``
    if name == "Sluice":
        from sluice.backends import Sluice

        return Sluice
    raise AttributeError(name)
