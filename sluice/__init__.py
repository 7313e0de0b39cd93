"""Sluice: a Data Stream Management System.  Continuous CQL queries with exact answers.

The public types are importable from here (loaded on first use, so ``import sluice`` stays cheap):

>>> from sluice import Sluice, TimeUnit
>>> eng = Sluice(time_unit="millisecond")
>>> eng.catalog.time_unit is TimeUnit.MILLISECOND
True
"""

from importlib import import_module

__version__ = "0.1.0"

_PUBLIC = {
    "Sluice": "sluice.backends",
    "EmbeddedEngine": "sluice.backends.embedded",
    "Query": "sluice.backends.embedded",
    "UnknownNameError": "sluice.backends.embedded",
    "Catalog": "sluice.catalog",
    "Kind": "sluice.catalog",
    "TimeUnit": "sluice.cql.ast",
    "Element": "sluice.plan.element",
    "SluiceError": "sluice.errors",
}

__all__ = ["__version__", *_PUBLIC]


def __getattr__(name: str) -> object:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'sluice' has no attribute {name!r}")
    return getattr(import_module(module), name)
