"""Run a STREAM 0.6.0 script on the embedded engine and write its outputs in STREAM's format.

>>> # sluice script test/scripts/test1 --base ../shared/conformance/stream-0.6.0 --out out/
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sluice.backends.embedded import EmbeddedEngine
from sluice.catalog import Kind
from sluice.compat.stream_script import ScriptError, format_element, parse_script, read_dat
from sluice.cql import parse_statement
from sluice.cql.ast import RegisterSource
from sluice.runtime.batch import from_rows, from_signed_rows


@dataclass
class ScriptRun:
    engine: Any
    outputs: dict[Path, Any]  # dest -> the query handle (EmbeddedEngine's Query or SparkQuery)
    rejected: list[str]
    counts: dict[Path, int]  # dest -> elements written


def run_script(
    script: str | Path,
    base: str | Path | None = None,
    out_dir: str | Path | None = None,
    engine: Any = None,
    **engine_options: Any,
) -> ScriptRun:
    """Execute ``script`` on ``engine`` (default: an ``EmbeddedEngine(**engine_options)``; the
    Spark backend works too); data paths are relative to ``base`` (default: the current
    directory).  Each ``dest`` is written under ``out_dir`` if given (by file name), else at its
    own path.
    """
    root = Path(base) if base is not None else Path.cwd()
    script = Path(script)
    if not script.exists() and (root / script).exists():
        script = root / script
    eng: Any = engine if engine is not None else EmbeddedEngine(**engine_options)
    embedded = isinstance(eng, EmbeddedEngine)
    outputs: dict[Path, Any] = {}
    rejected: list[str] = []
    for cmd in parse_script(script.read_text(), str(script)):
        where = f"{script}:{cmd.line}"
        if cmd.kind == "table":
            stmt = parse_statement(cmd.text)
            if not isinstance(stmt, RegisterSource):
                raise ScriptError(f"{where}: 'table' needs REGISTER STREAM or REGISTER RELATION")
            eng.execute(cmd.text)
            relation = stmt.kind == "RELATION"
            data, errors = read_dat(root / cmd.target, relation)
            rejected += errors
            if not embedded:
                eng.push(stmt.name, [(t, s, *r) for t, s, r in data] if relation else [(t, *r) for t, r in data])
                continue
            types = [c.type for c in stmt.columns]
            if relation:
                batch = from_signed_rows([(t, 1 if s == "+" else -1, r) for t, s, r in data], types)
            else:
                batch = from_rows(data, types)
            eng.push_batch(stmt.name, batch)
        elif cmd.kind == "vquery":
            vt = parse_statement(cmd.target)
            if not isinstance(vt, RegisterSource):
                raise ScriptError(f"{where}: 'vtable' needs REGISTER STREAM or REGISTER RELATION")
            kind = Kind.STREAM if vt.kind == "STREAM" else Kind.RELATION
            eng.register_view(vt.name, cmd.text, [c.name for c in vt.columns], kind=kind)
        else:
            dest = Path(out_dir) / Path(cmd.target).name if out_dir is not None else root / cmd.target
            outputs[dest] = eng.register_query(cmd.text, name=Path(cmd.target).name)
    eng.close()
    counts: dict[Path, int] = {}
    for dest, q in outputs.items():
        dest.parent.mkdir(parents=True, exist_ok=True)
        elements = q.results() if embedded else eng.results(q)
        with dest.open("w") as f:
            for e in elements:
                f.write(format_element(e.ts, e.sign, e.row) + "\n")
        counts[dest] = len(elements)
    return ScriptRun(eng, outputs, rejected, counts)
