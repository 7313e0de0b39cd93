"""Stream/relation schemas, views and UDFs, optionally persisted in SQLite."""

from sluice.catalog.catalog import Catalog, CatalogError, ConstraintSpec
from sluice.catalog.schema import Column, FunctionDef, Kind, Schema, SourceDef, ViewDef

__all__ = [
    "Catalog",
    "CatalogError",
    "Column",
    "ConstraintSpec",
    "FunctionDef",
    "Kind",
    "Schema",
    "SourceDef",
    "ViewDef",
]
