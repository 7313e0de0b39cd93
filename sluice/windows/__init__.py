"""Window kinds (stream → relation, seed §2.2 / CQL §5.1): one file each, syntax and meaning together.

A kind's file holds two classes.  Its syntax (an ``ast.Window`` subclass: what the query says,
durations with their units, column names, spans) parses itself after its keyword, prints itself
as CQL and binds itself to its meaning.  Its meaning (a ``WindowDef``, sizes in ticks, columns as
positions) carries everything the layers below ask of it: its EXPLAIN text, its contents by
definition (which the reference evaluator runs), the instants at which its contents can change
with no new input, and the properties the planners and the Spark compiler read — so a consumer
asks ``spec.insert_only`` or ``spec.time_based``, never compares kind names.

Registering a kind is adding its syntax to ``WINDOWS``; the runtime's operator for each meaning is
registered in ``sluice.runtime.operators.windows.WINDOW_OPERATORS`` (``tests/test_windows.py``
checks both).  Design: ``docs/design/018-window-kinds-own-their-syntax.md``.

>>> Range(10, slide=5).describe()
'Range 10 ticks Slide 5 ticks'
>>> Range(2).contents([(1, ("a",)), (3, ("b",)), (4, ("c",))], 4)
[('b',), ('c',)]
>>> Rows(2).order_sensitive, Range(2).order_sensitive
(True, False)
"""

from __future__ import annotations

from sluice.cql import ast
from sluice.windows.base import Row, Unbounded, WindowBinding, WindowDef, WindowParser, visible
from sluice.windows.now import Now, NowSyntax
from sluice.windows.partition import PartitionedRows, PartitionSyntax
from sluice.windows.ranges import Range, RangeSyntax
from sluice.windows.rows import Rows, RowsSyntax

#: Every window kind's syntax, in the order the parser's error lists their keywords.
WINDOWS: tuple[type[ast.Window], ...] = (NowSyntax, RowsSyntax, RangeSyntax, PartitionSyntax)


def window_kinds() -> list[type[WindowDef]]:
    """Every meaning a window can have (each needs a runtime operator), from ``WINDOWS``.

    >>> [k.__name__ for k in window_kinds()]
    ['Now', 'Rows', 'Unbounded', 'Range', 'PartitionedRows']
    """
    return list(dict.fromkeys(d for w in WINDOWS for d in w.binds_to))


__all__ = [
    "WINDOWS",
    "Now",
    "NowSyntax",
    "PartitionSyntax",
    "PartitionedRows",
    "Range",
    "RangeSyntax",
    "Row",
    "Rows",
    "RowsSyntax",
    "Unbounded",
    "WindowBinding",
    "WindowDef",
    "WindowParser",
    "visible",
    "window_kinds",
]
