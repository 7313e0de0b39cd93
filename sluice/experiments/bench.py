"""``sluice bench``: NEXMark queries on Sluice's engines and on peers, over the same events.

For each query, in one run:

* **reference** — first, the embedded engine's answer on the first ``check`` events (3,000) must
  equal the reference evaluator's (by definition, every instant); the oracle cannot run at full size.
* **embedded** — events/s end to end (typed Arrow batches pushed, one heartbeat per batch);
  p50/p99 latency from the wall-clock moment an event's batch was pushed to the moment its output
  element was delivered; peak queue + synopsis memory.
* **duckdb** — the same final answer computed by DuckDB in this process (the single-core limit of
  a query that sees all input at once).  For Q0–Q3, the engine's answer must equal DuckDB's.
* **spark** — the Spark backend (``--master``), answer checked equal to the embedded engine's.
* **pathway**, **bytewax**, **flink** — peers, each in its own virtual environment
  (``make peers``; their pins conflict with Sluice's: Pathway needs pyarrow < 26, PyFlink pyarrow
  < 17, numpy < 2.2 and pandas < 2.3), run as subprocesses on the same events written as Parquet
  (``benchmarks/peers/*_nexmark.py``).  A peer's answer must equal DuckDB's before its time counts;
  a peer that cannot express a query says why.

Q4–Q8 (Rstream, CURRENT_TIME, slides) have no SQL snapshot equivalent; their answers are checked
against the reference evaluator in ``tests/test_nexmark.py``, and the Spark backend's against the
embedded engine's here.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from sluice.errors import SluiceError
from sluice.experiments.results import write_results
from sluice.progress import progress, say
from sluice.workloads import to_table
from sluice.workloads.nexmark import COLUMNS, DDL, NexmarkGenerator, as_rows, categories

ROOT = Path(__file__).resolve().parents[2]
QUERY_DIR = ROOT / "benchmarks" / "nexmark"
PEER_DIR = ROOT / "benchmarks" / "peers"
PEERS = ("pathway", "bytewax", "flink")
ENGINES = ("embedded", "spark", *PEERS)

# DuckDB's final answer for the stream queries: the multiset of everything they emit.
DUCKDB = {
    "q0": "select auction, bidder, price, dateTime from bid",
    "q1": "select auction, price * 0.89, bidder, dateTime from bid",
    "q2": "select auction, price from bid where auction in (1007, 1020, 2001, 2019, 2087)",
    "q3": "select p.name, p.city, p.state, a.id from auction a, person p "
    "where a.seller = p.id and p.state in ('OR', 'ID', 'CA') and a.category = 10",
}


def doltoeur(x: Any) -> Any:
    """Q1's currency conversion, registered vectorized: one Arrow multiplication per batch, as
    the peers inline it (``price * 0.89``); on one row's array the same value as ``x * 0.89``.
    """
    import pyarrow.compute as pc

    return pc.multiply(pc.cast(x, "float64"), 0.89)


def _norm(row: Any) -> tuple[Any, ...]:
    from decimal import Decimal

    # DuckDB computes bigint * 0.89 in exact DECIMAL; compare as floats to 6 places
    return tuple(round(float(v), 6) if isinstance(v, float | Decimal) else v for v in row)


def _answer(rows: Any) -> Counter[tuple[Any, ...]]:
    return Counter(_norm(r) for r in rows)


def _catalog() -> Any:
    from sluice.catalog import Catalog
    from sluice.cql.ast import TimeUnit
    from sluice.plan import execute

    cat = Catalog(time_unit=TimeUnit.MILLISECOND)
    execute(cat, DDL)
    cat.register_function("DOLTOEUR", doltoeur, "float", ["bigint"], vectorized=True)
    return cat


def _tables(rows: dict[str, list[Any]]) -> dict[str, Any]:
    """Each stream's events as an Arrow table (``ts`` and the attributes), sorted by ``ts``."""
    return {s: to_table(["ts", *COLUMNS[s]], rs) for s, rs in rows.items()}


def run_embedded(
    text: str, tables: dict[str, Any], batch: int, options: dict[str, Any] | None = None
) -> tuple[dict[str, Any], Any]:
    """``text`` over ``tables`` pushed ``batch`` events at a time; ``options``: the engine's
    (scheduler, sharing, …: what ``sluice bench`` takes as every command's engine options).
    """
    from sluice.backends.embedded import EmbeddedEngine
    from sluice.backends.rows import table_to_batch

    eng = EmbeddedEngine(_catalog(), start=0, **(options or {}))
    q = eng.register_query(text)
    typed = {}
    for s, t in tables.items():  # typing the input is parsing, not the query's work
        d = eng.catalog.lookup(s)
        typed[s], errors = table_to_batch(t, d.schema, False, "ts", "sign", s)
        if errors:
            raise SluiceError(f"NEXMark input does not fit its schema: {errors[:3]}")
    stamps = {s: b.column(0).to_numpy() for s, b in typed.items()}
    merged = np.sort(np.concatenate(list(stamps.values())))
    bounds = [int(merged[min(i + batch, len(merged)) - 1]) for i in range(0, len(merged), batch)]
    latencies: list[np.ndarray] = []
    marks: list[int] = []  # last event ts of each pushed batch
    walls: list[float] = []  # wall time it was pushed

    def on_output(b: Any) -> None:
        now = time.perf_counter()
        k = np.searchsorted(np.asarray(marks), b.column(0).to_numpy(), side="left")
        k = k[k < len(walls)]
        latencies.append(now - np.asarray(walls)[k])

    q.subscribe_arrow(on_output)
    eng.push("Category", categories())
    lo = {s: 0 for s in typed}
    peak = 0
    t0 = time.perf_counter()
    for bound in bounds:
        marks.append(bound)
        walls.append(time.perf_counter())
        for s, b in typed.items():
            hi = int(np.searchsorted(stamps[s], bound, side="right"))
            if hi > lo[s]:
                eng.push_batch(s, b.slice(lo[s], hi - lo[s]))
                lo[s] = hi
        eng.heartbeat(bound - 1)
        eng.run()
        peak = max(peak, eng.statistics().memory_bytes)
    eng.close()
    seconds = time.perf_counter() - t0
    events = sum(t.num_rows for t in tables.values())
    lat = np.concatenate(latencies) if latencies else np.zeros(0)
    return {
        "events_per_s": round(events / seconds),
        "seconds": round(seconds, 3),
        "p50_latency_ms": round(float(np.percentile(lat, 50)) * 1000, 2) if lat.size else None,
        "p99_latency_ms": round(float(np.percentile(lat, 99)) * 1000, 2) if lat.size else None,
        "peak_memory_bytes": peak,
        "output_elements": q.count,
    }, q.results()


def reference_check(text: str, rate: int, events: int, options: dict[str, Any] | None = None) -> dict[str, Any]:
    """The engine equals the reference evaluator on the first ``events`` events of the same input
    (the oracle computes every instant by definition, so the full run is out of its reach).
    """
    from sluice.backends.embedded import EmbeddedEngine
    from sluice.plan import bind_query
    from sluice.reference import evaluate
    from sluice.reference.compare import diff_outputs

    rows: dict[str, list[Any]] = dict(as_rows(NexmarkGenerator(rate=rate, extras=False).events(events)))
    until = int(max(r[0] for rs in rows.values() for r in rs))
    cat = _catalog()
    cats: list[Any] = [(t, s, tuple(r)) for t, s, *r in categories()]
    data: dict[str, Any] = {k: [(r[0], tuple(r[1:])) for r in v] for k, v in rows.items()}
    seed = (options or {}).get("seed", 0)
    expected = evaluate(bind_query(cat, text), data, {"Category": cats}, start=0, until=until, seed=seed)
    eng = EmbeddedEngine(cat, start=0, **(options or {}))
    q = eng.register_query(text)
    eng.push("Category", categories())
    for name, rs in rows.items():
        eng.push(name, rs)
    eng.close(until)
    diffs = diff_outputs(expected, q.results())
    if diffs:
        raise AssertionError("the engine differs from the reference evaluator:\n" + "\n".join(diffs[:5]))
    return {"events": events, "equal": True, "output_elements": len(expected)}


def run_duckdb(name: str, tables: dict[str, Any]) -> tuple[float, list[Any]]:
    import duckdb

    con = duckdb.connect()
    for s, t in tables.items():
        con.register(s.lower(), t.drop(["ts"]))
    t0 = time.perf_counter()
    final = con.execute(DUCKDB[name]).fetchall()
    return time.perf_counter() - t0, final


def run_spark(
    text: str, tables: dict[str, Any], master: str, options: dict[str, Any] | None = None
) -> tuple[dict[str, Any], Any]:
    from sluice.backends.spark.engine import SparkEngine

    def once(tabs: dict[str, Any]) -> tuple[float, Any, str]:
        from sluice.cql.ast import TimeUnit

        eng = SparkEngine(
            master,
            workdir=tempfile.mkdtemp(prefix="sluice-bench-"),
            start=0,
            time_unit=TimeUnit.MILLISECOND,
            **(options or {}),
        )
        eng.register_function("DOLTOEUR", doltoeur, "float", ["bigint"], vectorized=True)
        eng.execute(DDL)
        q = eng.register_query(text)
        t0 = time.perf_counter()
        eng.push("Category", categories())
        for s, t in tabs.items():
            eng.push(s, t)
        eng.close()
        got = eng.results(q)
        seconds = time.perf_counter() - t0
        note = eng.explain(q).splitlines()[0]
        eng.stop()
        return seconds, got, note

    w0 = time.perf_counter()
    once({s: t.slice(0, 1000) for s, t in tables.items()})  # untimed: worker start-up, code paths
    warm = time.perf_counter() - w0
    seconds, got, note = once(tables)
    events = sum(t.num_rows for t in tables.values())
    return {
        "master": master,
        "events_per_s": round(events / seconds),
        "seconds": round(seconds, 3),
        "warmup_seconds": round(warm, 2),
        "partitioning": note,
    }, got


def peer_python(peer: str) -> Path:
    return ROOT / ".venv-peers" / peer / "bin" / "python"


def run_peer(peer: str, name: str, data: Path, expected: Counter[tuple[Any, ...]] | None) -> dict[str, Any]:
    py = peer_python(peer)
    if not py.exists():
        return {"status": "not installed", "why": f"{py} is missing: run `make peers`"}
    out = data / f"{peer}-{name}.json"
    cmd = [str(py), str(PEER_DIR / f"{peer}_nexmark.py"), "--data", str(data), "--query", name, "--out", str(out)]
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=PEER_DIR, timeout=3600)
    if r.returncode != 0 or not out.exists():
        return {"status": "failed", "why": (r.stderr.strip().splitlines() or ["(no output)"])[-1][:300]}
    doc = json.loads(out.read_text())
    if "unsupported" in doc:
        return {"status": "cannot express", "why": doc["unsupported"], "version": doc["version"]}
    if expected is None:
        return {"status": "unchecked", "why": "no reference answer for this query", "version": doc["version"]}
    if _answer(doc["rows"]) != expected:
        raise AssertionError(f"{peer} {name}: the answer differs from the reference (DuckDB)")
    return {
        "status": "ok",
        "version": doc["version"],
        "seconds": round(doc["seconds"], 3),
        "warmup_seconds": round(doc.get("warmup_seconds", 0.0), 2),
        "answer_equal": True,
    }


def generate(events: int, rate: int) -> dict[str, Any]:
    """The NEXMark events as one Arrow table per stream — made once per run, read by every query."""
    t0 = time.perf_counter()
    print(f"generating {events:,} NEXMark events ...", file=sys.stderr, flush=True)
    tables = _tables(dict(as_rows(NexmarkGenerator(rate=rate, extras=False).events(events))))
    print(f"generated in {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
    return tables


def run_query(
    name: str,
    events: int,
    batch: int,
    rate: int,
    engines: tuple[str, ...],
    master: str,
    check: int = 3000,
    tables: dict[str, Any] | None = None,
    options: dict[str, Any] | None = None,
) -> dict[str, Any]:
    if tables is None:
        tables = generate(events, rate)
    text = (QUERY_DIR / f"{name}.cql").read_text()
    out: dict[str, Any] = {"query": " ".join(line for line in text.splitlines() if not line.startswith("--"))}
    out["events"] = events
    out["reference_check"] = reference_check(text, rate, min(check, events), options) if check else None
    stats, answer = run_embedded(text, tables, batch, options)
    out["embedded"] = stats
    expected: Counter[tuple[Any, ...]] | None = None
    if name in DUCKDB:
        seconds, final = run_duckdb(name, tables)
        expected = _answer(final)
        if _answer(e.row for e in answer if e.sign == "+") != expected:
            raise AssertionError(f"{name}: the embedded engine's answer differs from DuckDB's")
        out["duckdb"] = {"seconds": round(seconds, 4), "events_per_s": round(events / seconds), "answer_equal": True}
    else:
        out["duckdb"] = None
    if "spark" in engines:
        from sluice.reference.compare import diff_outputs

        stats, got = run_spark(text, tables, master, options)
        if diff_outputs(answer, got):
            raise AssertionError(f"{name}: the Spark backend's answer differs from the embedded engine's")
        out["spark"] = {**stats, "answer_equal": True}
    peers = [p for p in engines if p in PEERS]
    if peers:
        import pyarrow.parquet as pq

        with tempfile.TemporaryDirectory(prefix="sluice-peers-") as tmp:
            data = Path(tmp)
            for s, t in tables.items():
                pq.write_table(t, data / f"{s}.parquet")
            for p in peers:
                res = run_peer(p, name, data, expected)
                if res["status"] == "ok":
                    res["events_per_s"] = round(events / res["seconds"]) if res["seconds"] > 0 else None
                out[p] = res
    return out


def bench(
    queries: list[str],
    events: int,
    batch: int = 10_000,
    rate: int = 10_000,
    out: str | Path = "benchmarks/results/nexmark.json",
    engines: tuple[str, ...] = ENGINES,
    master: str = "local[2]",
    check: int = 3000,
    options: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Each of ``queries`` on ``engines`` beside DuckDB, answers checked equal first; ``options``:
    the Sluice engines' options (both backends get the same).
    """
    unknown = set(engines) - set(ENGINES)
    if unknown:
        raise ValueError(f"unknown engine(s) {', '.join(sorted(unknown))}; known: {', '.join(ENGINES)}")
    results: dict[str, Any] = {}
    doc: dict[str, Any] = {}
    tables = generate(events, rate)
    with progress("queries", total=len(queries), unit="query") as bar:
        for i, q in enumerate(queries):
            bar.set_postfix_str(q)
            say(f"{q} ...")
            results[q] = run_query(q, events, batch, rate, engines, master, check, tables, options)
            # saved and printed as each query finishes: a long run that is stopped keeps what it did
            doc = write_results(
                out, "nexmark", events=events, batch=batch, rate=rate, engines=list(engines), results=results,
                options={"scheduler": "the engine's default", **(options or {})},
                complete=i == len(queries) - 1,
            )  # fmt: skip
            lines = table({**doc, "results": {q: results[q]}}).split("\n")
            say("\n".join(lines[:2] if i == 0 else []) + ("\n" if i == 0 else "") + lines[2])
            bar.update()
    return doc


def _cell(r: dict[str, Any] | None) -> str:
    if r is None:
        return "—"
    if "status" in r and r["status"] != "ok":
        return r["status"]
    return f"{r['events_per_s']:,}"


def table(doc: dict[str, Any]) -> str:
    engines = [e for e in doc.get("engines", ["embedded"]) if e != "embedded"]
    head = ["query", "embedded ev/s", "p50 ms", "p99 ms", "peak memory", "DuckDB (final answer)"]
    head += [f"{e} ev/s" for e in engines]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    notes: dict[str, str] = {}
    for q, r in doc["results"].items():
        e = r["embedded"]
        d = r["duckdb"]
        duck = f"{d['events_per_s']:,} ev/s, equal" if d else "n/a (no SQL snapshot)"
        cells = [q, f"{e['events_per_s']:,}", str(e["p50_latency_ms"]), str(e["p99_latency_ms"])]
        cells += [f"{e['peak_memory_bytes']:,} B", duck]
        for name in engines:
            cells.append(_cell(r.get(name)))
            res = r.get(name)
            if isinstance(res, dict) and res.get("why"):
                notes.setdefault(f"{name}: {res['status']}", res["why"])
        lines.append("| " + " | ".join(cells) + " |")
    for k, why in notes.items():
        lines.append(f"\n{k} — {why}")
    return "\n".join(lines)
