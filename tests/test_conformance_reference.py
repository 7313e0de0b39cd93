"""The STREAM 0.6.0 test scripts through the reference evaluator, compared with the prototype's own
expected outputs under the README's rules (per-instant multisets, netting, numeric floats).

The oracle is quadratic by design, so it checks a prefix of each script's input (instants ≤ CUT;
output up to τ depends only on input up to τ).  Full-length runs belong to the engine's tests.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from sluice.catalog import Catalog, Kind
from sluice.compat.stream_script import parse_output, parse_script, parse_value, read_dat
from sluice.cql import parse_statement
from sluice.cql.ast import RegisterSource
from sluice.plan import bind_query, execute, register_view
from sluice.reference import evaluate

BASE = Path(__file__).resolve().parents[2] / "shared" / "conformance" / "stream-0.6.0"
CUT = 600


def _netted(items) -> dict:
    c: Counter = Counter()
    for ts, sign, vals in items:
        c[(ts, tuple(round(v, 4) if isinstance(v, float) else v for v in vals))] += 1 if sign == "+" else -1
    return {k: v for k, v in c.items() if v}


@pytest.mark.skipif(not BASE.exists(), reason="../shared/conformance is not beside this checkout")
@pytest.mark.parametrize("n", range(1, 11))
def test_stream_script_prefix(n: int) -> None:
    script = BASE / "test" / "scripts" / f"test{n}"
    cat = Catalog()
    streams: dict = {}
    relations: dict = {}
    query = dest = None
    for cmd in parse_script(script.read_text(), str(script)):
        if cmd.kind == "table":
            stmt = parse_statement(cmd.text)
            assert isinstance(stmt, RegisterSource)
            execute(cat, cmd.text)
            data, errors = read_dat(BASE / cmd.target, stmt.kind == "RELATION")
            assert errors == []
            (relations if stmt.kind == "RELATION" else streams)[stmt.name] = [d for d in data if d[0] <= CUT]
        elif cmd.kind == "vquery":
            vt = parse_statement(cmd.target)
            assert isinstance(vt, RegisterSource)
            kind = Kind.STREAM if vt.kind == "STREAM" else Kind.RELATION
            register_view(cat, vt.name, cmd.text, [c.name for c in vt.columns], kind=kind)
        else:
            query, dest = cmd.text, cmd.target
    assert query is not None and dest is not None
    out = evaluate(bind_query(cat, query), streams, relations, until=CUT)
    got = _netted((e.ts, e.sign, e.row) for e in out)
    expected_file = BASE / "test" / "sample-out" / Path(dest).name
    expected = _netted(
        (ts, sign, tuple(parse_value(v) for v in vals))
        for ts, sign, vals in parse_output(expected_file.read_text().splitlines())
        if ts <= CUT
    )
    assert got == expected
