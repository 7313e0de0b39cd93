"""The catalog: registered streams, relations, views and scalar UDFs.

Optionally persisted in SQLite: every registration is stored as the CQL DDL that made it
and replayed on open, so a catalog file is readable with any SQLite client.  UDFs are
Python callables and are not persisted; register them again in each process.

>>> cat = Catalog()
>>> cat.register_stream("S", [("A", "integer"), ("D", "char(4)")]).schema.sql()
'A integer, D char(4)'
>>> cat.lookup("s").name
'S'
"""

from __future__ import annotations

import contextlib
import difflib
import sqlite3
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from sluice.catalog.schema import Column, FunctionDef, Kind, Schema, SourceDef, ViewDef
from sluice.cql.ast import StreamConstraint, TimeUnit
from sluice.datatypes import DataType, parse_type_name
from sluice.errors import SluiceError


def check_identifier(name: Any, what: str) -> None:
    """Names of streams, relations, views, attributes and functions are CQL identifiers (a letter
    or ``_``, then letters, digits, ``_``; not a reserved word) — checked here, once, for every
    backend, so a name can never smuggle text into the catalog's DDL or a backend's SQL.
    """
    from sluice.cql.tokens import RESERVED

    if not isinstance(name, str) or not name or not (name[0].isalpha() or name[0] == "_"):
        raise CatalogError(f"{what} {name!r} is not an identifier (a letter or _, then letters, digits, _)")
    if not all(c.isalnum() or c == "_" for c in name):
        raise CatalogError(f"{what} {name!r} is not an identifier (a letter or _, then letters, digits, _)")
    if name.upper() in RESERVED:
        raise CatalogError(f"{what} {name!r} is a reserved word of CQL")


class CatalogError(SluiceError):
    """A registration conflicts with what the catalog holds, or a name is unknown."""


ColumnSpec = tuple[str, DataType | str]
# (kind, column[, k]) or ('references', column, 'Stream(column)', k)
ConstraintSpec = StreamConstraint | tuple[str, str] | tuple[str, str, int] | tuple[str, str, str, int]


def _to_type(t: DataType | str) -> DataType:
    if isinstance(t, DataType):
        return t
    text = t.strip().lower()
    length = None
    if "(" in text:
        text, rest = text.split("(", 1)
        length = int(rest.rstrip(")").strip())
    try:
        return parse_type_name(text.strip(), length)
    except (KeyError, ValueError) as e:
        raise CatalogError(f"unknown type {t!r}") from e


class Catalog:
    """Names → definitions.  ``time_unit`` is what one timestamp tick means (default: second)."""

    def __init__(self, path: str | Path | None = None, time_unit: TimeUnit | str = TimeUnit.SECOND):
        try:
            self.time_unit = TimeUnit.of(time_unit)
        except ValueError as e:
            raise CatalogError(str(e)) from None
        self._sources: dict[str, SourceDef] = {}
        self._views: dict[str, ViewDef] = {}
        self._functions: dict[str, FunctionDef] = {}
        self._db: sqlite3.Connection | None = None
        self._replaying = False
        if path is not None:
            self._open(Path(path))

    # -- persistence ---------------------------------------------------------------------
    def _open(self, path: Path) -> None:
        self._db = sqlite3.connect(path)
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS catalog_objects ("
            " seq INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT UNIQUE NOT NULL,"
            " kind TEXT NOT NULL, ddl TEXT NOT NULL)"
        )
        self._db.execute("CREATE TABLE IF NOT EXISTS catalog_settings (key TEXT PRIMARY KEY, value TEXT)")
        row = self._db.execute("SELECT value FROM catalog_settings WHERE key='time_unit'").fetchone()
        if row is None:
            self._db.execute("INSERT INTO catalog_settings VALUES ('time_unit', ?)", (self.time_unit.name,))
        else:
            self.time_unit = TimeUnit[row[0]]
        self._db.commit()

    def persisted_ddl(self) -> list[str]:
        """The stored DDL, oldest first; ``sluice.plan.ddl.open_catalog`` replays it."""
        if self._db is None:
            return []
        return [r[0] for r in self._db.execute("SELECT ddl FROM catalog_objects ORDER BY seq")]

    @contextlib.contextmanager
    def replaying(self) -> Iterator[None]:
        """Within this block registrations are not written back to the database."""
        self._replaying = True
        try:
            yield
        finally:
            self._replaying = False

    def _persist(self, name: str, kind: str, ddl: str) -> None:
        if self._db is not None and not self._replaying:
            self._db.execute("INSERT INTO catalog_objects (name, kind, ddl) VALUES (?, ?, ?)", (name, kind, ddl))
            self._db.commit()

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

    # -- registration --------------------------------------------------------------------
    def _check_free(self, name: str) -> None:
        check_identifier(name, "name")
        key = name.lower()
        if key in self._sources or key in self._views:
            raise CatalogError(f"{name!r} is already registered")

    def register_source(
        self,
        name: str,
        kind: Kind,
        columns: Iterable[ColumnSpec],
        unit: TimeUnit | str | None = None,
        constraints: Iterable[ConstraintSpec] = (),
    ) -> SourceDef:
        self._check_free(name)
        if unit is not None:
            try:
                unit = TimeUnit.of(unit)
            except ValueError as e:
                raise CatalogError(str(e)) from None
        if unit is not None and unit.millis % self.time_unit.millis:
            raise CatalogError(
                f"{name} counts time in {unit.name.lower()}s, finer than the catalog's tick "
                f"({self.time_unit.name.lower()}); open the catalog with time_unit={unit.name}"
            )
        for n, _ in (columns := list(columns)):
            check_identifier(n, f"attribute of {name}")
        cols = tuple(Column(n, _to_type(t)) for n, t in columns)
        if not cols:
            raise CatalogError(f"{kind.value} {name!r} needs at least one attribute")
        seen: set[str] = set()
        for c in cols:
            if c.name.lower() in seen:
                raise CatalogError(f"attribute {c.name!r} appears twice in {name!r}")
            seen.add(c.name.lower())
        d = SourceDef(name, kind, Schema(cols), unit, _constraints(name, kind, Schema(cols), constraints))
        for sc in d.constraints:
            if sc.kind == "REFERENCES":
                d = self._references(d, sc)
        self._sources[name.lower()] = d
        suffix = f" UNIT {unit.name.lower()}" if unit is not None else ""
        suffix += "".join(f" {c.sql()}" for c in d.constraints)
        self._persist(name, kind.value, f"REGISTER {kind.value.upper()} {name} ({d.schema.sql()}){suffix}")
        return d

    def register_stream(
        self,
        name: str,
        columns: Iterable[ColumnSpec],
        unit: TimeUnit | str | None = None,
        constraints: Iterable[ConstraintSpec] = (),
    ) -> SourceDef:
        return self.register_source(name, Kind.STREAM, columns, unit, constraints)

    def register_relation(
        self, name: str, columns: Iterable[ColumnSpec], unit: TimeUnit | str | None = None
    ) -> SourceDef:
        return self.register_source(name, Kind.RELATION, columns, unit)

    def _references(self, d: SourceDef, c: StreamConstraint) -> SourceDef:
        """``d`` with ``FOREIGN KEY (a) REFERENCES R(b)`` checked: ``R`` a stream registered
        before it (so references never form a cycle) and ``b`` one of its attributes of ``a``'s
        type (the referenced attribute written as ``R`` declares it).
        """
        what = f"{d.name}: {c.sql()}"
        if c.ref.lower() == d.name.lower():
            raise CatalogError(f"{what}: a stream cannot reference itself")
        r = self._sources.get(c.ref.lower())
        if r is None or r.kind is not Kind.STREAM:
            known = ", ".join(sorted(s.name for s in self._sources.values() if s.kind is Kind.STREAM)) or "none"
            raise CatalogError(
                f"{what}: {c.ref} is not a registered stream (register the referenced stream first; streams: {known})"
            )
        try:
            col = r.schema.columns[r.schema.index(c.ref_column)]
        except KeyError:
            raise CatalogError(
                f"{what}: {r.name} has no attribute {c.ref_column} ({', '.join(r.schema.names)})"
            ) from None
        own = d.schema.columns[d.schema.index(c.column)]
        if col.type != own.type:
            raise CatalogError(
                f"{what}: {d.name}.{own.name} is {own.type.sql()} but {r.name}.{col.name} is {col.type.sql()}"
            )
        fixed = StreamConstraint(c.kind, c.column, c.k, r.name, col.name)
        return replace(d, constraints=tuple(fixed if o is c else o for o in d.constraints))

    def referencing(self, name: str) -> list[tuple[SourceDef, StreamConstraint]]:
        """The streams whose ``FOREIGN KEY … REFERENCES`` names ``name``, with the constraint."""
        return [
            (d, c)
            for d in self._sources.values()
            for c in d.constraints
            if c.kind == "REFERENCES" and c.ref.lower() == name.lower()
        ]

    def scale(self, d: SourceDef) -> int:
        """Ticks per timestamp unit of ``d`` (1 unless it declared a coarser unit)."""
        return 1 if d.unit is None else d.unit.millis // self.time_unit.millis

    def add_view(self, view: ViewDef) -> ViewDef:
        """Store an already-validated view (see ``sluice.plan.ddl.register_view``)."""
        self._check_free(view.name)
        self._views[view.name.lower()] = view
        self._persist(view.name, "view", view.text)
        return view

    def register_function(
        self,
        name: str,
        fn: Callable[..., Any],
        return_type: DataType | str,
        arg_types: Sequence[DataType | str] | None = None,
        *,
        strict: bool = True,
        vectorized: bool = False,
    ) -> FunctionDef:
        """Register a scalar UDF callable from CQL as ``name(args...)``.  ``strict``: NULL if any
        argument is NULL, without a call.  ``vectorized``: ``fn`` takes an Arrow array per argument
        and returns an array of the results, row for row (``FunctionDef``).
        """
        check_identifier(name, "function name")
        key = name.upper()
        if key in self._functions:
            raise CatalogError(f"function {name!r} is already registered")
        d = FunctionDef(
            key,
            fn,
            _to_type(return_type),
            None if arg_types is None else tuple(_to_type(t) for t in arg_types),
            strict,
            vectorized,
        )
        self._functions[key] = d
        return d

    def unregister(self, name: str) -> SourceDef | ViewDef:
        """Remove a stream, relation or view (and its stored DDL).  Whether anything still uses it
        is the caller's to check (views and queries are bound above this layer).
        """
        key = name.lower()
        if by := self.referencing(name):
            raise CatalogError(
                f"{name} is referenced by {', '.join(f'{d.name} ({c.sql()})' for d, c in by)}: unregister "
                f"{'it' if len(by) == 1 else 'them'} first"
            )
        d: SourceDef | ViewDef | None = self._sources.pop(key, None) or self._views.pop(key, None)
        if d is None:
            raise CatalogError(f"no stream, relation or view named {name!r}")
        if self._db is not None and not self._replaying:
            self._db.execute("DELETE FROM catalog_objects WHERE name = ? COLLATE NOCASE", (d.name,))
            self._db.commit()
        return d

    def without(self, name: str) -> Catalog:
        """A copy of this catalog (not persisted) without ``name``: to bind what uses it against."""
        other = Catalog(time_unit=self.time_unit)
        other._sources = {k: v for k, v in self._sources.items() if k != name.lower()}
        other._views = {k: v for k, v in self._views.items() if k != name.lower()}
        other._functions = dict(self._functions)
        return other

    # -- lookup --------------------------------------------------------------------------
    def lookup(self, name: str) -> SourceDef | ViewDef:
        key = name.lower()
        if key in self._sources:
            return self._sources[key]
        if key in self._views:
            return self._views[key]
        raise KeyError(name)

    def function(self, name: str) -> FunctionDef | None:
        return self._functions.get(name.upper())

    def names(self) -> list[str]:
        return [d.name for d in self._sources.values()] + [v.name for v in self._views.values()]

    def suggest(self, name: str) -> str | None:
        """The registered name closest to ``name``, for 'did you mean' hints."""
        by_lower = {n.lower(): n for n in self.names()}
        m = difflib.get_close_matches(name.lower(), list(by_lower), n=1, cutoff=0.6)
        return by_lower[m[0]] if m else None

    @property
    def sources(self) -> list[SourceDef]:
        return list(self._sources.values())

    @property
    def views(self) -> list[ViewDef]:
        return list(self._views.values())

    def ticks(self, millis: int) -> int | None:
        """A duration in ticks of the time unit, or None if it is not a whole number of ticks."""
        q, r = divmod(millis, self.time_unit.millis)
        return None if r else q


def _constraints(
    name: str, kind: Kind, schema: Schema, given: Iterable[ConstraintSpec]
) -> tuple[StreamConstraint, ...]:
    """A stream's k-constraints, checked: each names one of its attributes once per kind, with
    an adherence k ≥ 0; a relation has none (it has no order of arrival to constrain).
    """
    out: list[StreamConstraint] = []
    for c in given:
        try:
            c = StreamConstraint.of(c)
        except ValueError as e:
            raise CatalogError(f"{name}: {e}") from None
        if kind is not Kind.STREAM:
            raise CatalogError(f"{name}: {c.kind} BY is a constraint on a stream's elements; a relation has none")
        try:
            column = schema.columns[schema.index(c.column)].name
        except KeyError:
            raise CatalogError(
                f"{name}: {c.kind} BY {c.column} names no attribute of {name} (attributes: {', '.join(schema.names)})"
            ) from None
        if c.kind in c.NO_K and c.k:
            raise CatalogError(f"{name}: {c.kind} BY {column} takes no adherence k")
        if not 0 <= c.k < 2**31:
            unit = "units of the stream's time" if c.kind == "REFERENCES" else "elements"
            raise CatalogError(f"{name}: {c.sql()}: k counts {unit}, 0 to 2^31 - 1")
        if c.kind == "PUNCTUATED" and c.ref:
            raise CatalogError(f"{name}: {c.sql()} is implied by the referencing stream, not declared")
        c = StreamConstraint(c.kind, column, c.k, c.ref, c.ref_column)
        if any(o.kind == c.kind and o.column.lower() == column.lower() for o in out):
            raise CatalogError(
                f"{name}: {c.sql() if c.kind == 'REFERENCES' else f'{c.kind} BY {column}'} is given twice"
            )
        out.append(c)
    return tuple(out)
