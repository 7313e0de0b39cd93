"""Punctuations read from a file for ``sluice run --punctuations NAME=PATH`` (design 023,
"Punctuations"): JSON lines, one punctuation each, in the stream's unit::

    {"ts": 120, "column": "oid", "values": [17, 18]}
    {"ts": 200, "column": "oid", "upto": 40}

— no element of NAME stamped after ``ts`` has one of ``values`` (or a value ≤ ``upto``) in
``column``.  The feed gives each to the engine before it pushes the first row stamped after it, so
the engine has released nothing it is about.  A line that is not a punctuation is reported with
``file:line`` and skipped; the rest go on.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sluice.backends.rows import TS_MAX, TS_MIN
from sluice.catalog import Kind, SourceDef
from sluice.errors import SluiceError


@dataclass(frozen=True, slots=True)
class Punctuation:
    where: str  # file:line
    ts: int
    column: str
    values: list[Any] | None
    upto: Any


def read_punctuations(path: str | Path) -> tuple[list[Punctuation], list[str]]:
    """A file's punctuations in order of ``ts`` (stable), and why its bad lines were skipped."""
    out: list[Punctuation] = []
    bad: list[str] = []
    with Path(path).open(encoding="utf-8-sig", errors="replace") as fh:  # (a BOM, as the data readers)
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            where = f"{path}:{n}"
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                bad.append(f"{where}: not JSON ({e.msg})")
                continue
            ts, column = rec.get("ts") if isinstance(rec, dict) else None, None
            if isinstance(rec, dict):
                column = rec.get("column")
            if (
                not isinstance(rec, dict)
                or isinstance(ts, bool)
                or not isinstance(ts, int)
                or not TS_MIN <= ts <= TS_MAX
                or not isinstance(column, str)
                or ("values" in rec) == ("upto" in rec)
            ):
                bad.append(
                    f'{where}: a punctuation is {{"ts": <integer timestamp>, "column": <attribute>, "values": [...]}} '
                    'or with "upto": <value> instead of "values"'
                )
                continue
            out.append(Punctuation(where, ts, column, rec.get("values"), rec.get("upto")))
    out.sort(key=lambda p: p.ts)
    return out, bad


def punctuation_files(eng: Any, files: dict[str, list[str]], cql: str) -> dict[str, list[Punctuation]]:
    """``sluice run --punctuations NAME=PATH`` (by name): each stream's punctuations, in order of
    ``ts``; a bad line is reported on stderr with ``file:line`` and skipped.
    """
    out: dict[str, list[Punctuation]] = {}
    for name, paths in files.items():
        try:
            d = eng.catalog.lookup(name)
        except KeyError:
            d = None
        if not isinstance(d, SourceDef) or d.kind is not Kind.STREAM:
            raise SluiceError(f"--punctuations {name}: no such stream in {cql}")
        for path in paths:
            if not Path(path).is_file():
                raise SluiceError(f"--punctuations {name}={path}: no such file")
            found, bad = read_punctuations(path)
            for m in bad:
                print(f"{m} (skipped)", file=sys.stderr)
            out.setdefault(d.name, []).extend(found)
        out[d.name].sort(key=lambda p: p.ts)
    return out


__all__ = ["Punctuation", "punctuation_files", "read_punctuations"]
