"""AST → typed logical plan (binder), EXPLAIN, DDL execution."""

from sluice.plan.binder import BoundQuery, bind_query
from sluice.plan.ddl import execute, open_catalog, register_view
from sluice.plan.explain import explain

__all__ = ["BoundQuery", "bind_query", "execute", "explain", "open_catalog", "register_view"]
