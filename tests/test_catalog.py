"""Catalog: registration rules, UDFs, and SQLite persistence."""

from __future__ import annotations

import sqlite3

import pytest
from sluice.catalog import Catalog, CatalogError, Kind
from sluice.cql import BindError
from sluice.plan import bind_query, execute, open_catalog, register_view
from sluice.reference import evaluate


def test_names_are_case_insensitive_and_unique() -> None:
    cat = Catalog()
    cat.register_stream("Bids", [("price", "float")])
    assert cat.lookup("BIDS").name == "Bids"
    with pytest.raises(CatalogError, match="already registered"):
        cat.register_relation("bids", [("x", "int")])
    with pytest.raises(CatalogError, match="appears twice"):
        cat.register_stream("T", [("a", "int"), ("A", "int")])
    with pytest.raises(CatalogError, match="unknown type"):
        cat.register_stream("U", [("a", "money")])


def test_persisted_catalog_reopens_with_views(tmp_path) -> None:
    path = tmp_path / "catalog.sqlite"
    cat = open_catalog(path)
    execute(cat, "register stream S (A integer, B char(3)); register relation R (A integer);")
    register_view(cat, "Evens", "select A from S where (A / 2) * 2 = A")
    cat.close()

    again = open_catalog(path)
    assert {d.name for d in again.sources} == {"S", "R"}
    view = again.lookup("Evens")
    assert view.kind is Kind.STREAM and view.schema.names == ("A",)
    out = evaluate(bind_query(again, "select * from Evens"), {"S": [(1, (1, "a")), (2, (2, "b"))]})
    assert [e.row for e in out] == [(2,)]
    rows = sqlite3.connect(path).execute("select name, kind from catalog_objects order by seq").fetchall()
    assert rows == [("S", "stream"), ("R", "relation"), ("Evens", "view")]


def test_view_kind_and_columns_are_checked() -> None:
    cat = Catalog()
    execute(cat, "register stream S (A integer)")
    with pytest.raises(BindError, match="declared a stream, but its query yields a relation"):
        register_view(cat, "V", "select * from S [Rows 1]", kind=Kind.STREAM)
    with pytest.raises(BindError, match="names 2 column"):
        register_view(cat, "W", "select A from S", ["x", "y"])


def test_udf_registration_and_strictness() -> None:
    cat = Catalog()
    execute(cat, "register stream S (A integer)")
    cat.register_function("inc", lambda x: x + 1, "integer", ["integer"])
    cat.register_function("isnull", lambda x: x is None, "boolean", strict=False)
    out = evaluate(bind_query(cat, "select inc(A), isnull(A) from S"), {"S": [(1, (1,)), (2, (None,))]})
    assert [e.row for e in out] == [(2, False), (None, True)]
    with pytest.raises(CatalogError):
        cat.register_function("INC", lambda x: x, "integer")
