"""Executing CQL statements against a catalog: DDL registers, queries bind, EXPLAIN renders.

>>> from sluice.catalog import Catalog
>>> cat = Catalog()
>>> results = execute(cat, "register stream S (A integer); register view V as select A from S [Rows 2];")
>>> cat.lookup("V").kind.value
'relation'
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from sluice.catalog import Catalog, CatalogError, Kind, Schema, SourceDef, ViewDef
from sluice.catalog.schema import Column
from sluice.cql import ast
from sluice.cql.errors import BindError
from sluice.cql.parser import parse_query, parse_script
from sluice.cql.printer import to_cql
from sluice.errors import InUseError, SluiceError
from sluice.plan.binder import Binder, BoundQuery
from sluice.plan.explain import explain


def execute(catalog: Catalog, text: str) -> list[BoundQuery | str | None]:
    """Run every statement in ``text``; returns a bound query, an EXPLAIN text, or None (DDL)."""
    out: list[BoundQuery | str | None] = []
    for stmt in parse_script(text):
        src = text[stmt.span.start : stmt.span.end] if hasattr(stmt, "span") else to_cql(stmt)
        out.append(execute_statement(catalog, stmt, text, src))
    return out


def execute_statement(catalog: Catalog, stmt: ast.Statement, source: str, stmt_text: str) -> BoundQuery | str | None:
    if isinstance(stmt, ast.RegisterSource):
        try:
            catalog.register_source(
                stmt.name,
                Kind.STREAM if stmt.kind == "STREAM" else Kind.RELATION,
                [(c.name, c.type) for c in stmt.columns],
                stmt.unit,
                stmt.constraints,
            )
        except CatalogError as e:
            raise BindError(str(e), stmt.span, source) from None
        return None
    if isinstance(stmt, ast.RegisterView):
        register_view(catalog, stmt.name, stmt.query, stmt.columns, source=source, text=stmt_text)
        return None
    if isinstance(stmt, ast.Explain):
        return explain(Binder(catalog, source).bind_top(stmt.query))
    if isinstance(stmt, ast.RegisterQuery):  # its name and limits are the engine's business
        text = source[stmt.query.span.start : stmt.query.span.end]
        return BoundQuery(Binder(catalog, source).bind_top(stmt.query), text)
    assert isinstance(stmt, ast.QueryStatement)
    return BoundQuery(Binder(catalog, source).bind_top(stmt.query), stmt_text)


def register_view(
    catalog: Catalog,
    name: str,
    query: str | ast.Query,
    columns: Sequence[str] = (),
    *,
    kind: Kind | None = None,
    source: str | None = None,
    text: str | None = None,
) -> ViewDef:
    """Validate and register a named view.  ``kind`` checks what the query yields (STREAM's
    ``vtable : register stream ...``); ``columns`` renames its output columns.
    """
    if isinstance(query, str):
        source = query
        query = parse_query(query)
    src = source if source is not None else to_cql(query)
    node = Binder(catalog, src, context=name).bind_top(query)
    span = query.span
    if kind is not None and node.kind is not kind:
        hint = (
            "wrap the query in Istream(...), Dstream(...) or Rstream(...)"
            if kind is Kind.STREAM
            else "give its streams a window, or declare the view a stream"
        )
        raise BindError(
            f"view {name} is declared a {kind.value}, but its query yields a {node.kind.value}",
            span,
            src,
            hint=hint,
        )
    names = node.schema.names
    if columns:
        if len(columns) != len(names):
            raise BindError(
                f"view {name} names {len(columns)} column(s) but its query yields {len(names)}",
                span,
                src,
            )
        names = tuple(columns)
    schema = Schema(tuple(Column(n, c.type) for n, c in zip(names, node.schema.columns, strict=True)))
    body = to_cql(query)
    ddl = f"REGISTER VIEW {name}" + (f" ({', '.join(columns)})" if columns else "") + f" AS {body}"
    view = ViewDef(name, query, ddl if text is None else text, schema, node.kind, tuple(columns))
    try:
        return catalog.add_view(view)
    except CatalogError as e:
        raise BindError(str(e), span, src) from None


def users_of(catalog: Catalog, name: str, queries: Mapping[str, str]) -> list[str]:
    """The views, then the queries (name → query text), that no longer bind without ``name``.
    Binding, not scanning plans: a plan inlines views, so a query over a view names only the
    view's streams, yet its text — what a restart replays — needs the view.
    """
    rest = catalog.without(name)
    users = [v.name for v in rest.views if not _binds(rest, v.text, v.query)]
    return users + [n for n, text in queries.items() if not _binds(rest, text)]


def check_unused(catalog: Catalog, name: str, queries: Mapping[str, str]) -> SourceDef | ViewDef:
    """The stream, relation or view ``name`` — ``InUseError`` naming the views and queries
    (``queries``: name → text) to unregister first while any uses it.
    """
    try:
        d = catalog.lookup(name)
    except KeyError:
        raise CatalogError(f"no stream, relation or view named {name!r}") from None
    users = users_of(catalog, d.name, queries)
    users += [f"{r.name} ({c.sql()})" for r, c in catalog.referencing(d.name)]
    if users:
        raise InUseError(f"{d.name} is used by {', '.join(users)}: unregister those first")
    return d


def _binds(catalog: Catalog, text: str, query: ast.Query | None = None) -> bool:
    try:
        Binder(catalog, text).bind_top(query if query is not None else parse_query(text))
    except SluiceError:
        return False
    return True


def open_catalog(path: str | Path) -> Catalog:
    """Open (or create) a catalog persisted in SQLite, replaying its stored DDL."""
    cat = Catalog(path)
    with cat.replaying():
        for ddl in cat.persisted_ddl():
            execute(cat, ddl)
    return cat
