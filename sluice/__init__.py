"""Sluice: a Data Stream Management System.  Continuous CQL queries with exact answers."""

__version__ = "0.1.0"
