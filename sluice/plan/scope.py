"""Name scopes for binding: the columns visible in a query block, and its enclosing blocks."""

from __future__ import annotations

from dataclasses import dataclass, field

from sluice.datatypes import DataType


@dataclass(frozen=True, slots=True)
class ScopeColumn:
    qualifier: str | None  # the FROM item's alias (or name); None for an unnamed subquery
    name: str
    type: DataType
    index: int


@dataclass
class Scope:
    """Columns of one query block's row; ``parent`` is the enclosing block (correlation)."""

    columns: list[ScopeColumn]
    parent: Scope | None = None
    qualifiers: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.qualifiers = {c.qualifier.lower() for c in self.columns if c.qualifier}

    def matches(self, qualifier: str | None, name: str) -> list[ScopeColumn]:
        key = name.lower()
        q = qualifier.lower() if qualifier else None
        return [
            c
            for c in self.columns
            if c.name.lower() == key and (q is None or (c.qualifier is not None and c.qualifier.lower() == q))
        ]

    def has_qualifier(self, qualifier: str) -> bool:
        s: Scope | None = self
        while s is not None:
            if qualifier.lower() in s.qualifiers:
                return True
            s = s.parent
        return False
