"""The ``sluice`` command.

sluice check FILE.cql ...                 parse and bind every statement; EXPLAIN each query
sluice reference FILE.cql --stream S=s.csv --relation R=r.csv [--until N]
                                          answer the file's queries by definition (the oracle)
sluice demo                               the seed paper's web-proxy queries on generated data
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sluice.backends.rows import admit_rows
from sluice.catalog import Catalog, Kind, SourceDef
from sluice.cli_engine import UNITS, add_engine_options, build_engine, engine_key, engine_opts
from sluice.cql import CQLError
from sluice.errors import SluiceError
from sluice.io.csv_input import read_csv
from sluice.plan import BoundQuery, execute
from sluice.plan.explain import explain
from sluice.progress import progress, say


def _load(files: Sequence[str], time_unit: str = "second") -> tuple[Catalog, list[BoundQuery | str | None]]:
    cat = Catalog(time_unit=time_unit)
    results: list[BoundQuery | str | None] = []
    for f in files:
        text = read_cql(f)
        try:
            results += execute(cat, text)
        except CQLError as e:
            raise SluiceError(f"{f}:{e.render()}") from None
    return cat, results


def _check(args: argparse.Namespace) -> int:
    _cat, results = _load(args.files)
    for r in results:
        if isinstance(r, BoundQuery):
            print(r.text.strip())
            print(explain(r.plan))
            print()
        elif isinstance(r, str):
            print(r)
            print()
    return 0


def read_cql(path: str | Path) -> str:
    """A CQL file's text; one clear error (file:line:column) if it is not UTF-8."""
    data = Path(path).read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        col = e.start - (data.rfind(b"\n", 0, e.start) + 1) + 1
        raise SluiceError(f"{path}:{line}:{col}: not UTF-8 (byte {data[e.start]:#04x})") from None


def _positive(text: str) -> int:
    """An argparse type: an integer ≥ 1 (a one-line error otherwise)."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {n}")
    return n


def _fractions(text: str) -> list[float]:
    """An argparse type: comma-separated numbers in [0, 1]."""
    out = []
    for part in filter(None, (x.strip() for x in text.split(","))):
        try:
            f = float(part)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{part!r} is not a number") from None
        if not 0.0 <= f <= 1.0:
            raise argparse.ArgumentTypeError(f"a selectivity is between 0 and 1, got {f}")
        out.append(f)
    return out


def _pairs(items: Sequence[str], what: str) -> dict[str, list[str]]:
    """``NAME=PATH`` options by name (case-insensitive); a name given twice reads every file."""
    out: dict[str, list[str]] = {}
    for item in items:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise SluiceError(f"--{what} takes NAME=PATH, got {item!r}")
        out.setdefault(name.lower(), []).append(path)
    return out


def _read_rows(path: str, schema: Any, relation: bool, name: str, tick_ns: int) -> tuple[list[Any], list[str]]:
    """A source file's rows for the reference evaluator, ``(ts, row)`` (relations ``(ts, sign,
    row)``), and messages for its bad rows: CSV line by line, JSON lines and Parquet through the
    reader ``sluice run`` uses (a Parquet file read as CSV had every row rejected as not UTF-8).
    """
    if Path(path).suffix.lower() in (".csv", ".txt", ".dat"):
        return read_csv(path, schema, relation)
    from sluice.io.feed import read_chunks
    from sluice.runtime.batch import to_elements

    rows: list[Any] = []
    errors: list[str] = []
    try:  # (datetimes in ``ts`` as ticks of the query file's unit, as ``sluice run`` reads them)
        chunks = list(read_chunks(path, schema, relation, name, tick_ns))
    except ValueError as e:
        raise SluiceError(f"{name}={path}: {e}") from None
    for b, errs, _ in chunks:
        errors += errs
        elements = to_elements(b)
        rows += elements if relation else [(t, row) for t, _, row in elements]
    return rows, errors


def _reference(args: argparse.Namespace) -> int:
    from sluice.compat.stream_script import format_element
    from sluice.reference import evaluate

    cat, results = _load([args.file], args.time_unit)  # (one tick as ``run --time-unit`` makes it)
    streams: dict[str, Any] = {}
    relations: dict[str, Any] = {}
    bad = 0
    for what, mapping, target in (("stream", args.stream, streams), ("relation", args.relation, relations)):
        for name, paths in _pairs(mapping, what).items():
            try:
                d = cat.lookup(name)
            except KeyError:
                raise SluiceError(f"--{what} {name}: no such {what} in {args.file}") from None
            if not isinstance(d, SourceDef) or d.kind is not (Kind.STREAM if what == "stream" else Kind.RELATION):
                raise SluiceError(f"--{what} {name}: {name} is not a registered {what}")
            rows, errors = [], []
            for path in paths:
                got, errs = _read_rows(path, d.schema, what == "relation", d.name, cat.time_unit.millis * 1_000_000)
                rows += got
                errors += errs
            rows.sort(key=lambda r: r[0])  # files of one source merged by timestamp (stable)
            rows, more = admit_rows(rows, d.schema, what == "relation", d.name)  # the engine's checks
            for msg in errors + more:
                print(f"rejected: {msg}", file=sys.stderr)
            bad += len(errors) + len(more)
            target[d.name] = rows
    for r in results:
        if not isinstance(r, BoundQuery):
            continue
        print(f"# {' '.join(r.text.split())}")
        for e in evaluate(r, streams, relations, start=args.start, until=args.until, seed=args.seed):
            print(format_element(e.ts, e.sign, e.row))
    if bad:
        print(f"{bad} input row(s) rejected (see above); the rest were used", file=sys.stderr)
    return 0


def _serve(args: argparse.Namespace) -> int:
    from sluice.server import serve

    retain = None if args.retain < 0 else args.retain
    serve(
        args.host,
        args.port,
        token=args.token,
        token_file=args.token_file,
        state=args.state,
        backend=args.backend,
        retain=retain,
        backlog=args.backlog,
        max_body=args.max_body,
        sample_every=args.sample_every,
        **engine_opts(args),
    )
    return 0


class _Outputs:
    """Each query's output written as its instants complete: to ``DIR/NAME.out`` through a
    ``NAME.out.partial`` renamed when the run completes (a file named ``.out`` is always
    whole), or spooled to a temporary file and printed at the end, grouped per query.
    ``resume`` (from a checkpoint) cuts each partial file back to what the checkpoint saw.
    """

    def __init__(
        self, queries: list[Any], out_dir: Path | None, resume: dict[str, tuple[int, int]] | None = None
    ) -> None:
        import tempfile

        from sluice.compat.stream_script import format_element

        self.fmt = format_element
        self.out_dir = out_dir
        self.files: dict[str, Any] = {}
        self.counts: dict[str, int] = {}
        for q in queries:
            if out_dir is None:
                self.files[q.name] = tempfile.TemporaryFile("w+b")
                self.counts[q.name] = 0
                continue
            out_dir.mkdir(parents=True, exist_ok=True)
            partial = out_dir / f"{q.name}.out.partial"
            if resume is not None:
                size, count = resume[q.name]
                f = partial.open("r+b")
                f.truncate(size)
                f.seek(size)
                self.files[q.name], self.counts[q.name] = f, count
            else:
                self.files[q.name], self.counts[q.name] = partial.open("wb"), 0

    def write(self, name: str, elements: Any) -> None:
        f = self.files[name]
        n = 0
        for e in elements:
            f.write((self.fmt(e.ts, e.sign, e.row) + "\n").encode())
            n += 1
        self.counts[name] += n

    def subscribe(self, q: Any) -> None:
        """Deliver the query's output here only (it keeps none: memory stays bounded)."""
        from sluice.plan.element import Element
        from sluice.runtime.batch import to_elements

        q.retain = 0
        q.batches.clear()
        q.subscribe_arrow(lambda b, name=q.name: self.write(name, (Element(*e) for e in to_elements(b))))

    def sync(self) -> dict[str, tuple[int, int]]:
        """Flush every file to disk; (size, elements) per query — what a checkpoint records."""
        out = {}
        for name, f in self.files.items():
            f.flush()
            os.fsync(f.fileno())
            out[name] = (f.tell(), self.counts[name])
        return out

    def finish(self, queries: list[Any], complete: bool, explain: Any = None) -> None:
        for q in queries:
            f = self.files[q.name]
            if self.out_dir is not None:
                f.flush()
                os.fsync(f.fileno())
                f.close()
                partial = self.out_dir / f"{q.name}.out.partial"
                if complete:
                    dest = self.out_dir / f"{q.name}.out"
                    partial.replace(dest)  # atomic: the .out file appears whole
                    print(f"{q.name}: {self.counts[q.name]} elements -> {dest}", file=sys.stderr)
                else:
                    n = self.counts[q.name]
                    print(f"{q.name}: {n} elements of completed instants -> {partial}", file=sys.stderr)
                continue
            where = f" ({explain(q).splitlines()[0]})" if explain is not None else ""
            print(f"# {q.name}{where}: {' '.join(q.bound.text.split())}")
            sys.stdout.flush()
            f.seek(0)
            for line in f:
                sys.stdout.write(line.decode())
            f.close()
        sys.stdout.flush()


def _run(args: argparse.Namespace) -> int:
    import hashlib
    import pickle
    import signal
    import time

    from sluice.catalog import Kind
    from sluice.io.atomic import write_atomic
    from sluice.io.feed import Feeder
    from sluice.runtime.batch import dumps

    spark = args.backend == "spark"
    ck = Path(args.checkpoint) / "run.ckpt" if args.checkpoint else None
    if ck is not None and (spark or not args.out):
        raise SluiceError("--checkpoint is for the embedded engine writing --out DIR (Spark checkpoints by itself)")
    text = read_cql(args.file)
    # what must not change between a run and its resumption
    fingerprint = hashlib.sha256(
        # (punctuation files only when given: older checkpoints keep their fingerprint)
        repr(
            (text, args.source, args.static, args.until, engine_key(args))
            + ((args.punctuations,) if args.punctuations else ())
        ).encode()
    ).hexdigest()
    saved: dict[str, Any] | None = None
    if ck is not None and ck.exists():
        with ck.open("rb") as fh:
            saved = pickle.load(fh)
        if saved["fingerprint"] != fingerprint:
            raise SluiceError(f"{ck} is from a run with another CQL file, sources or options: remove it to start over")
        eng = saved["engine"]
        queries = list(eng.queries.values())
        print(f"resuming from {ck} ({saved['rows']} input rows done)", file=sys.stderr)
    else:
        eng = build_engine(args)
        try:
            results = eng.execute(text)
        except CQLError as e:
            raise SluiceError(f"{args.file}:{e.render()}") from None
        queries = [r for r in results if hasattr(r, "bound")]
        _attach_static(eng, args)
    if not queries:
        raise SluiceError(f"{args.file} registers no query")
    files: list[tuple[str, str]] = []
    schemas: dict[str, Any] = {}
    for name, paths in _pairs(args.source, "source").items():
        try:
            d = eng.catalog.lookup(name)
        except KeyError:
            raise SluiceError(f"--source {name}: no such stream or relation in {args.file}") from None
        for path in paths:
            p = Path(path)
            if not p.is_file():
                raise SluiceError(f"--source {name}={path}: no such file")
            if p.suffix.lower() not in (".csv", ".txt", ".dat", ".jsonl", ".json", ".ndjson", ".parquet"):
                raise SluiceError(f"--source {name}={path}: unknown file type {p.suffix!r} (.csv, .jsonl or .parquet)")
            files.append((d.name, path))
        schemas[d.name] = (d.schema, d.kind is Kind.RELATION)
    from sluice.io.punctuations import punctuation_files

    punctuations = punctuation_files(eng, _pairs(args.punctuations, "punctuations"), args.file)
    outputs = _Outputs(queries, Path(args.out) if args.out else None, saved["outputs"] if saved else None)
    if not spark:
        for q in queries:
            outputs.subscribe(q)
    stopping: list[int] = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: stopping.append(signum))
    try:
        tick_ns = eng.catalog.time_unit.millis * 1_000_000
        chunk = 1_000_000 if spark else 65_536  # each round is a Spark micro-batch per query
        feeder = Feeder(
            eng,
            files,
            schemas,
            tick_ns=tick_ns,
            chunk=chunk,
            resume=saved["feed"] if saved else None,
            punctuations=punctuations,
            punctuated=saved.get("punctuated") if saved else None,
            notes=saved.get("punctuation_notes") if saved else None,
        )
        last = time.monotonic()
        with progress("input") as bar:
            bar.update(feeder.total)
            while not stopping and feeder.round():
                bar.update(feeder.total - bar.n)
                if ck is not None and time.monotonic() - last >= args.checkpoint_every:
                    state = {"fingerprint": fingerprint, "engine": eng, "feed": feeder.state()}
                    state.update(punctuated=feeder.punctuated, punctuation_notes=feeder.notes)
                    state.update(outputs=outputs.sync(), rows=feeder.total)
                    # atomic: a kill leaves the previous checkpoint or this one
                    write_atomic(ck, dumps(state))
                    last = time.monotonic()
        if not stopping:
            eng.close(args.until)
    finally:
        signal.signal(signal.SIGTERM, previous)
    for note in feeder.notes:
        print(note, file=sys.stderr)
    if spark:
        for q in queries:
            outputs.write(q.name, eng.results(q))
    outputs.finish(queries, complete=not stopping, explain=eng.explain if spark else None)
    if spark:
        stats = eng.statistics()
        eng.stop()
        for m in stats["rejected"][:20] + [m for q in stats["queries"].values() for m in q["rejected"]][:20]:
            print(f"rejected: {m}", file=sys.stderr)
        if stats["key_memory_limit"] is not None:  # what the limit did, said whether or not it did anything
            for name, q in stats["queries"].items():
                dropped = sum(s.dropped for s in q["shedding"])
                print(
                    f"{name}: key memory limit {stats['key_memory_limit']} B: peak {q['peak_key_memory']} B between "
                    f"runs ({q['peak_key_memory_in_runs']} B within them) on one of {q['keys']} key(s), {dropped} "
                    f"stream elements dropped; {q['approximation'].describe()}",
                    file=sys.stderr,
                )
    else:
        for st in eng.statistics().sources:
            if st.rejected:
                reasons = ", ".join(f"{n} {r}" for r, n in st.rejected_reasons)
                print(f"{st.name}: {st.accepted} accepted, {st.rejected} rejected ({reasons})", file=sys.stderr)
        for m in eng.rejected()[:20]:
            print(f"rejected: {m}", file=sys.stderr)
        for name, why in eng.failures.items():
            print(f"query {name} stopped: {why}", file=sys.stderr)
        limited = eng.statistics()
        if limited.memory_limit is not None:  # what the limit did, said whether or not it did anything
            print(
                f"memory limit {limited.memory_limit} B: peak {limited.peak_memory} B between runs "
                f"({limited.peak_memory_in_runs} B within them), {limited.shed} stream elements dropped",
                file=sys.stderr,
            )
            for name, a in limited.approximations:
                print(f"{name}: {a.describe()}", file=sys.stderr)
        for name, lat in limited.latency:
            if lat.target is not None:
                print(f"{name}: {lat.describe()}", file=sys.stderr)
    if stopping:
        print("sluice: interrupted (SIGTERM): input not finished; outputs hold the completed instants", file=sys.stderr)
        return 128 + signal.SIGTERM
    if ck is not None and ck.exists():
        ck.unlink()  # the run is complete: a new one starts over
    return 0


def _attach_static(eng: Any, args: argparse.Namespace) -> None:
    """``--static NAME=CSV``: each named relation holds the file's rows at every instant."""
    from sluice.io.csv_input import read_static_csv

    pushed = _pairs(args.source, "source")
    for name, paths in _pairs(args.static, "static").items():
        try:
            d = eng.catalog.lookup(name)
        except KeyError:
            d = None
        if not isinstance(d, SourceDef) or d.kind is not Kind.RELATION:
            what = "a stream" if isinstance(d, SourceDef) else "a view" if d is not None else "not registered"
            shown = d.name if d is not None else name
            raise SluiceError(f"--static {shown}: only a registered relation can be static ({shown} is {what})")
        if name in pushed:
            raise SluiceError(f"--static {d.name}: also given as --source (a static relation takes no pushes)")
        rows: list[tuple[Any, ...]] = []
        for path in paths:
            if not Path(path).is_file():
                raise SluiceError(f"--static {d.name}={path}: no such file")
            if Path(path).suffix.lower() not in (".csv", ".txt", ".dat"):
                raise SluiceError(f"--static {d.name}={path}: a static relation is read from CSV (.csv)")
            got, errors = read_static_csv(path, d.schema)
            if errors:  # a static relation is all its rows or none: nothing runs on part of it
                more = f" (and {len(errors) - 5} more)" if len(errors) > 5 else ""
                raise SluiceError(f"--static {d.name}: " + "; ".join(errors[:5]) + more)
            rows += got
        eng.attach_static(d.name, rows)


def _script(args: argparse.Namespace) -> int:
    from sluice.compat.runner import run_script

    run = run_script(args.file, base=args.base, out_dir=args.out, engine=build_engine(args))
    for msg in run.rejected:
        print(f"rejected: {msg}", file=sys.stderr)
    for dest, n in run.counts.items():
        print(f"{dest.name}: {n} elements -> {dest}")
    if args.backend == "spark":
        run.engine.stop()
    return 0


def _experiment(args: argparse.Namespace) -> int:
    from sluice.experiments import dispatch

    known = dispatch.known()
    names = known if args.name == "all" else [args.name]
    summaries: dict[str, Any] = {}
    seconds: dict[str, float] = {}
    if args.name == "list":
        print("\n".join(known + ["sweep (with --on-spark)", "page (the results page from the JSON in --out)"]))
        return 0
    if args.name == "page":
        from sluice.experiments import page

        written = page.rebuild(Path(args.out), known)
        say(f"results page: {written}")
        return 0
    if args.name == "sweep" or args.on_spark:
        if not args.on_spark:
            raise SluiceError("the sweep runs on Spark: add --on-spark")
        from sluice.experiments.sweep import sweep

        df = sweep(args.out, seeds=args.seeds or 4, slots=args.slots or 2000, master=args.master)
        print(df.groupby(["workload", "strategy"])["peak_memory"].mean().unstack("strategy").round(3).to_string())
        print(f"sweep: {len(df)} runs -> {args.out}/sweep.parquet, sweep.json, sweep.png", file=sys.stderr)
        return 0
    for n in names:
        if n not in known:
            raise SluiceError(f"unknown experiment {n!r}; known: {', '.join(known)}, all, list")
    with progress("experiments", total=len(names), unit="exp") as bar:
        for n in names:
            bar.set_postfix_str(n)
            t0 = time.perf_counter()
            summary, shown = dispatch.run_one(n, args, say)
            summaries[n] = summary
            seconds[n] = time.perf_counter() - t0
            page_times = Path(args.out) / "seconds.json"  # for 'sluice experiment page'
            done = json.loads(page_times.read_text()) if page_times.exists() else {}
            page_times.write_text(json.dumps(done | {n: round(seconds[n], 1)}, indent=1) + "\n")
            print(json.dumps(shown, indent=1))
            files = [f"{n}.{x}" for x in ("csv", "png", "json") if (Path(args.out) / f"{n}.{x}").exists()]
            say(f"{n}: wrote {', '.join(files)} in {args.out}")
            bar.update()
    if args.name == "all":
        from sluice.experiments import page

        flags = " --quick" if args.quick else ""
        written = page.write(Path(args.out), summaries, f"sluice experiment all --out {args.out}{flags}", seconds)
        say(f"results page: {written}")
    return 0


def _gen(args: argparse.Namespace) -> int:
    import pyarrow.parquet as pq

    from sluice.workloads import examples, to_table
    from sluice.workloads.nexmark import write

    if args.kind == "nexmark":
        with progress("events", total=args.events, unit="events") as bar:

            def wrap(events: Any) -> Any:
                for e in events:
                    bar.update()
                    yield e

            counts = write(args.out, args.events, rate=args.rate, wrap=wrap)
        for name, n in counts.items():
            print(f"{name}: {n} rows -> {args.out}/{name}.parquet")
        print(f"schema: {args.out}/schema.cql (Person, Auction, Bid streams; Category relation)")
        return 0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    streams: dict[str, tuple[list[str], list[tuple[Any, ...]]]] = {}
    if args.kind == "requests":
        streams["Requests"] = (
            ["ts", "client_id", "domain", "URL"],
            [(t, *r) for t, r in examples.requests(args.events)],
        )
        streams["Domains"] = (["ts", "sign", "domain", "type"], [(t, s, *r) for t, s, r in examples.domains()])
        ddl = examples.REQUESTS_DDL
    elif args.kind == "datacenter":
        for name, readings in examples.datacenter(args.seconds, locations=args.locations).items():
            streams[name] = (["ts", "LocationId", "Value"], [(t, *r) for t, r in readings])
        ddl = examples.DATACENTER_DDL
    elif args.kind == "trace":
        sels = args.selectivities
        packets: list[tuple[Any, ...]] = examples.trace_stream(
            args.trace, args.events, speedup=args.speedup, selectivities=sels
        )
        names = [f"a{i}" for i in range(len(sels))] or ["seq"]
        if not sels:  # one attribute: the packet's number
            packets = [(r[0], i) for i, r in enumerate(packets)]
        streams["Packets"] = (["ts", *names], packets)
        ddl = f"REGISTER STREAM Packets ({', '.join(f'{n} integer' for n in names)}) UNIT MILLISECOND;"
        for i, sel in enumerate(sels):
            print(f"a{i} < {examples.threshold(sel)} selects {sel:.0%} of the packets")
    else:
        raise SluiceError(f"unknown generator {args.kind!r}; known: nexmark, requests, datacenter, trace")
    for name, (cols, rows) in streams.items():
        pq.write_table(to_table(cols, rows), out / f"{name}.parquet")
        print(f"{name}: {len(rows)} rows -> {out}/{name}.parquet")
    (out / "schema.cql").write_text(ddl.strip() + "\n")
    print(f"schema -> {out}/schema.cql")
    return 0


def _bench(args: argparse.Namespace) -> int:
    from sluice.experiments.bench import bench, table

    engines = tuple(e.strip() for e in args.engines.split(",") if e.strip())
    doc = bench(
        args.queries.split(","), args.events, args.batch, args.rate, args.out, engines, args.master, args.check,
        engine_opts(args),
    )  # fmt: skip
    print(table(doc))
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


def _demo(args: argparse.Namespace) -> int:
    from sluice.demo import run

    run(args.requests, args.data_seed, backend=args.backend, **engine_opts(args))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sluice", description="Sluice: continuous CQL queries, exact answers.")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("run", help="run a CQL file's queries over file sources (embedded engine, or --backend spark)")
    p.add_argument("file")
    p.add_argument("--source", action="append", default=[], metavar="NAME=PATH", help=".csv, .jsonl or .parquet")
    p.add_argument(
        "--punctuations",
        action="append",
        default=[],
        metavar="NAME=JSONL",
        help='punctuations of stream NAME (declared PUNCTUATED BY), one a line: {"ts": t, "column": "a", '
        '"values": [...]} or "upto": v',
    )
    p.add_argument(
        "--static",
        action="append",
        default=[],
        metavar="NAME=CSV",
        help="a relation that never changes: rows v1,v2,… (no timestamp or sign), held at every instant",
    )
    p.add_argument("--out", help="write each query's output to DIR/NAME.out instead of printing it")
    p.add_argument("--until", type=int, default=None, help="complete instants up to this timestamp")
    p.add_argument("--checkpoint", metavar="DIR", help="save the run's state here; a killed run resumes from it")
    p.add_argument(
        "--checkpoint-every", type=float, default=10.0, metavar="SECONDS", help="how often to checkpoint (default 10)"
    )
    add_engine_options(p)
    p.set_defaults(fn=_run)
    p = sub.add_parser("script", help="run a STREAM 0.6.0 script file unchanged")
    p.add_argument("file")
    p.add_argument("--base", default=None, help="directory the script's paths are relative to (default: .)")
    p.add_argument("--out", default=None, help="write outputs into this directory instead of the dest paths")
    add_engine_options(p)
    p.set_defaults(fn=_script)
    p = sub.add_parser("check", help="parse and bind CQL files; print each query's plan")
    p.add_argument("files", nargs="+")
    p.set_defaults(fn=_check)
    p = sub.add_parser("reference", help="answer a file's queries with the reference evaluator")
    p.add_argument("file")
    p.add_argument(
        "--stream",
        action="append",
        default=[],
        metavar="NAME=PATH",
        help=".csv (ts,v1,v2,... rows), .jsonl or .parquet",
    )
    p.add_argument(
        "--relation",
        action="append",
        default=[],
        metavar="NAME=PATH",
        help=".csv (ts,+|-,v1,... rows), .jsonl or .parquet",
    )
    p.add_argument("--start", type=int, default=None)
    p.add_argument("--until", type=int, default=None)
    p.add_argument("--seed", type=int, default=0, help="seed of Sample()")
    p.add_argument("--time-unit", default="second", choices=UNITS, help="what one tick is, as for run")
    p.set_defaults(fn=_reference)
    p = sub.add_parser("experiment", help="reproduce a scheduling paper's experiment (CSV, PNG, JSON)")
    p.add_argument("name", help="an experiment name, 'all', or 'list'")
    p.add_argument("--out", default="out/experiments")
    p.add_argument("--slots", type=_positive, default=None, help="simulated time units")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument(
        "--clock",
        choices=["measured", "cpu", "work"],
        default="measured",
        help="hammad-*: virtual time advances by each engine turn's wall time (perf_counter), its CPU time, "
        "or the join's work (deterministic)",
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="hammad-*, overload: the small test size (seconds per run); all: the page too",
    )
    p.add_argument("--on-spark", action="store_true", help="fan the strategy × workload × seed grid out on Spark")
    p.add_argument(
        "--seeds",
        type=int,
        default=None,
        help="draws per chain-* experiment and jiang-compare (default 5); per cell of the Spark sweep (default 4)",
    )
    p.add_argument("--master", default="local[2]")
    p.set_defaults(fn=_experiment)
    p = sub.add_parser("gen", help="generate a workload (nexmark, requests, datacenter, trace) as Parquet files")
    p.add_argument("kind", help="nexmark | requests | datacenter | trace")
    p.add_argument("--events", type=_positive, default=100_000, help="events (nexmark), requests, or trace packets")
    p.add_argument("--rate", type=_positive, default=10_000, help="nexmark: events per second of event time")
    p.add_argument("--seconds", type=_positive, default=3600, help="datacenter: seconds of readings")
    p.add_argument("--locations", type=_positive, default=100, help="datacenter: sensor locations")
    p.add_argument("--trace", default="dec-pkt-1-udp", help="trace: dec-pkt-1-udp, bc-aug89, … (../shared/data/traces)")
    p.add_argument("--speedup", type=float, default=1.0, help="trace: replay this many times faster")
    p.add_argument(
        "--selectivities",
        type=_fractions,
        default=[],
        help="trace: e.g. 0.5,0.1 — attributes a0, a1 with these selectivities",
    )
    p.add_argument("--out", default="out/nexmark")
    p.set_defaults(fn=_gen)
    p = sub.add_parser("bench", help="NEXMark queries on Sluice's engines, DuckDB and peers (JSON + table)")
    p.add_argument("--queries", default="q0,q1,q2,q3,q5,q7,q8")
    p.add_argument("--events", type=_positive, default=200_000)
    p.add_argument("--batch", type=_positive, default=10_000)
    p.add_argument("--rate", type=_positive, default=10_000, help="events per second of event time")
    p.add_argument("--out", default="benchmarks/results/nexmark.json")
    p.add_argument(
        "--engines",
        default="embedded,spark,pathway,bytewax,flink",
        help="besides DuckDB: embedded, spark, and the peers pathway, bytewax, flink (installed by `make peers`)",
    )
    p.add_argument("--master", default="local[2]", help="Spark master for the spark column")
    p.add_argument("--check", type=int, default=3000, help="events on which the engine must equal the reference first")
    add_engine_options(p, exact=True)
    p.set_defaults(fn=_bench)
    p = sub.add_parser("serve", help="run Sluice as a server: HTTP API for queries, pushes, subscriptions, controls")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default loopback; any other needs --token)")
    p.add_argument("--port", type=int, default=8765)
    p.add_argument("--token", default=None, help="clients must send Authorization: Bearer TOKEN (env SLUICE_TOKEN)")
    p.add_argument(
        "--token-file", default=None, metavar="FILE", help="the token from FILE's first line (not in the process list)"
    )
    p.add_argument(
        "--state",
        default=None,
        metavar="DIR",
        help="keep registrations and controls here (SQLite) and, on the embedded engine, a checkpoint and a journal "
        "of every answered push: a restart resumes from it",
    )
    p.add_argument("--retain", type=int, default=10_000, help="output elements kept per query for /results (-1: all)")
    p.add_argument(
        "--backlog", type=_positive, default=10_000, help="elements a subscriber may lag before losing the oldest"
    )
    p.add_argument("--max-body", type=_positive, default=16 * 1024 * 1024, help="largest request body (bytes)")
    p.add_argument(
        "--sample-every",
        type=_positive,
        default=None,
        metavar="TICKS",
        help="system streams (SysQueues, …): a sample each time data time advances this much (default: 1 second)",
    )
    add_engine_options(p)
    p.set_defaults(fn=_serve)
    p = sub.add_parser("demo", help="the seed paper's web-proxy queries over a generated bursty stream")
    p.add_argument("--requests", type=_positive, default=3000)
    p.add_argument("--data-seed", type=int, default=7, help="seed of the generated Requests stream")
    add_engine_options(p)
    p.set_defaults(fn=_demo)
    args = parser.parse_args(argv)
    try:
        return int(args.fn(args))
    except SluiceError as e:
        print(f"sluice: {e}", file=sys.stderr)
        return 1
    except (OSError, BrokenPipeError) as e:
        print(f"sluice: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
