r"""STREAM 0.6.0 scripts (``gen_client`` format) and ``.dat`` files, read unchanged.

Script commands, one per ``key : value`` line (``#`` comments, blank lines ignored)::

    table : register stream S (A integer, B float);     followed by   source : FILE
    query : select * from S;                             followed by   dest : FILE
    vquery : select A from S;                            followed by   vtable : register stream V (A integer);

Data files: a first line of column types (``i`` integer, ``f`` float, ``b`` byte, ``cN``
char(N)); then ``timestamp,values...`` lines; for relations the second column is the sign.

>>> cmds = parse_script("table : register stream S (A integer);\nsource : d.dat\n"
...                     "query : select * from S;\ndest : out")
>>> [(c.kind, c.target) for c in cmds]
[('table', 'd.dat'), ('query', 'out')]
>>> format_element(3, "+", (1, 2.5, "ab"))
'[3]:+:1, 2.5, ab'
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sluice.errors import SluiceError


class ScriptError(SluiceError):
    """A STREAM script or data file is malformed; the message names the file and line."""


@dataclass(frozen=True, slots=True)
class ScriptCommand:
    kind: str  # 'table' | 'query' | 'vquery'
    text: str  # the CQL (DDL for 'table', a query otherwise)
    target: str  # source file for 'table', dest file for 'query', vtable DDL for 'vquery'
    line: int


_FOLLOWER = {"table": "source", "query": "dest", "vquery": "vtable"}


def parse_script(text: str, name: str = "<script>") -> list[ScriptCommand]:
    """Parse a STREAM script into commands, pairing each with its source/dest/vtable line."""
    entries: list[tuple[str, str, int]] = []
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition(":")
        if not sep:
            raise ScriptError(f"{name}:{lineno}: expected 'key : value', got {line!r}")
        entries.append((key.strip().lower(), value.strip(), lineno))
    out: list[ScriptCommand] = []
    i = 0
    while i < len(entries):
        key, value, lineno = entries[i]
        if key not in _FOLLOWER:
            raise ScriptError(f"{name}:{lineno}: unknown command {key!r} (expected table, query or vquery)")
        want = _FOLLOWER[key]
        if i + 1 >= len(entries) or entries[i + 1][0] != want:
            raise ScriptError(f"{name}:{lineno}: '{key}' must be followed by a '{want}' line")
        out.append(ScriptCommand(key, value.rstrip(";").strip(), entries[i + 1][1], lineno))
        i += 2
    return out


def _parser(code: str, where: str) -> Any:
    code = code.strip()
    if code == "i":
        return int
    if code == "f":
        return float
    if code == "b":
        return str
    if code.startswith("c") and code[1:].isdigit():
        return str
    raise ScriptError(f"{where}: unknown column type {code!r} (expected i, f, b or cN)")


def read_dat(path: str | Path, relation: bool) -> tuple[list[Any], list[str]]:
    """Read a ``.dat`` file: stream → ``[(ts, row)]``, relation → ``[(ts, sign, row)]``.

    Returns the elements and a list of error messages for rejected lines (file:line: why);
    good lines are kept, bad ones reported and skipped — nothing is dropped silently.
    """
    p = Path(path)
    lines = p.read_text().splitlines()
    if not lines:
        raise ScriptError(f"{p}:1: empty data file (expected a line of column types)")
    codes = lines[0].split(",")
    parsers = [_parser(c, f"{p}:1") for c in codes]
    if not parsers or parsers[0] is not int:
        raise ScriptError(f"{p}:1: the first column must be the integer timestamp")
    if relation and (len(parsers) < 2 or codes[1].strip() != "b"):
        raise ScriptError(f"{p}:1: a relation's second column must be the sign (type b)")
    out: list[Any] = []
    errors: list[str] = []
    last_ts: int | None = None
    for lineno, raw in enumerate(lines[1:], 2):
        if not raw.strip():
            continue
        fields = raw.split(",")
        if len(fields) != len(parsers):
            errors.append(f"{p}:{lineno}: {len(fields)} fields, expected {len(parsers)}")
            continue
        try:
            vals = [fn(f.strip()) if fn is not str else f for fn, f in zip(parsers, fields, strict=True)]
        except ValueError as e:
            errors.append(f"{p}:{lineno}: {e}")
            continue
        ts = int(vals[0])
        if last_ts is not None and ts < last_ts:
            errors.append(f"{p}:{lineno}: timestamp {ts} is earlier than {last_ts}")
            continue
        last_ts = ts
        if relation:
            sign = str(vals[1]).strip()
            if sign not in ("+", "-"):
                errors.append(f"{p}:{lineno}: sign {sign!r} is not + or -")
                continue
            out.append((ts, sign, tuple(vals[2:])))
        else:
            out.append((ts, tuple(vals[1:])))
    return out, errors


def format_value(v: Any) -> str:
    if v is None:
        return "NULL"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)


def format_element(ts: int, sign: str, row: Iterable[Any]) -> str:
    """One output line in STREAM's format: ``[ts]:+:v1, v2``."""
    return f"[{ts}]:{sign}:" + ", ".join(format_value(v) for v in row)


def parse_output(lines: Iterable[str]) -> Iterator[tuple[int, str, tuple[str, ...]]]:
    """Parse STREAM output lines back into ``(ts, sign, values-as-text)``."""
    for raw in lines:
        line = raw.rstrip("\n")
        if not line:
            continue
        head, _, rest = line.partition("]:")
        sign, _, vals = rest.partition(":")
        yield int(head.lstrip("[")), sign, tuple(v.strip() for v in vals.split(","))


def parse_value(text: str) -> Any:
    """A value as STREAM printed it: an integer, a number, or text."""
    for conv in (int, float):
        try:
            return conv(text)
        except ValueError:
            pass
    return text
