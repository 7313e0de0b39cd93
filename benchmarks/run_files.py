"""`sluice run` on CSV files, end to end, at 2 M and 20 M events: peak memory and throughput.

Issue #17 ("bounded memory on unbounded streams"): `sluice run` must stream its input and its
output, so a 20 M-event run's peak RSS stays within 10% of a 2 M-event run's.  Each size:

1. a CSV file of millisecond events (10 keys) is written (streamed by pyarrow, never held whole);
2. `sluice run` runs the tumbling group-by below in a child process, writing `--out DIR`; the
   child reports its own peak RSS (VmHWM) and wall time;
3. in this process, DuckDB (one thread) reads the same file and computes the same answer in SQL;
   the two answers are checked equal, element by element, before any figure is reported.

    .venv/bin/python benchmarks/run_files.py            # 2,000,000 and 20,000,000 events
    .venv/bin/python benchmarks/run_files.py --sizes 200000,2000000

Writes `benchmarks/results/run_files.json`.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
from sluice.experiments.results import write_results

WINDOW = 10_000  # ms
QUERY = "Istream(select A, count(*), sum(B) from S [Range 10 Seconds Slide 10 Seconds] group by A)"
CQL = f"register stream S (A integer, B integer);\n{QUERY};\n"
DUCKDB = f"""
with x as (
    select (ts + {WINDOW - 1}) // {WINDOW} as w, A, B from S           -- window ⌈t/W⌉·W holds t
    union all
    select ts // {WINDOW} + 1, A, B from S where ts % {WINDOW} = 0    -- and the next one, on a boundary
), g as (select w, A, count(*) as c, sum(B) as s from x group by w, A)
select g.w * {WINDOW} as ts, g.A, g.c, g.s
from g left join g as p on p.w = g.w - 1 and p.A = g.A
where g.w * {WINDOW} <= (select max(ts) from S) and (p.c is null or p.c <> g.c or p.s <> g.s)
"""

CHILD = """
import sys, time
from sluice.cli import main
t0 = time.perf_counter()
rc = main(sys.argv[1:])
dt = time.perf_counter() - t0
hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM:')][0].split()[1]
print(f'{rc} {dt} {int(hwm) * 1024}', file=sys.stderr)
"""


def write_csv(path: Path, n: int, seed: int = 11) -> int:
    """``n`` events, sorted millisecond stamps (≈ 0.68·n distinct), A in 0..9, B in 0..99."""
    rng = np.random.default_rng(seed)
    piece, base = 1_000_000, 0
    schema = pa.schema([("ts", pa.int64()), ("A", pa.int64()), ("B", pa.int64())])
    opts = pacsv.WriteOptions(include_header=False)
    with pacsv.CSVWriter(str(path), schema, write_options=opts) as w:
        for i in range(0, n, piece):
            k = min(piece, n - i)
            ts = base + np.sort(rng.integers(0, int(k * 1.2), k))
            base = int(ts[-1]) + 1
            w.write_table(pa.table([ts, rng.integers(0, 10, k), rng.integers(0, 100, k)], schema=schema))
    return base - 1


def read_output(path: Path) -> list[tuple[int, int, int, int]]:
    out = []
    for line in path.read_text().splitlines():
        stamp, sign, vals = line.split(":", 2)
        assert sign == "+", f"Istream emitted {line!r}"
        a, c, s = (int(v) for v in vals.split(","))
        out.append((int(stamp.strip("[]")), a, c, s))
    return out


def one(n: int, work: Path) -> dict[str, Any]:
    csv = work / f"s{n}.csv"
    g0 = time.perf_counter()
    last = write_csv(csv, n)
    gen_s = time.perf_counter() - g0
    (work / "q.cql").write_text(CQL)
    out = work / f"out{n}"
    args = ["run", str(work / "q.cql"), "--source", f"S={csv}", "--out", str(out), "--time-unit", "millisecond"]
    r = subprocess.run([sys.executable, "-c", CHILD, *args], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"sluice run failed:\n{r.stderr[-2000:]}")
    rc, secs, rss = r.stderr.strip().splitlines()[-1].split()
    assert rc == "0", r.stderr
    got = read_output(out / "q1.out")
    con = duckdb.connect()
    con.execute("set threads = 1")
    d0 = time.perf_counter()
    con.execute(
        f"create view S as select * from read_csv('{csv}', header = false, "
        "columns = {'ts': 'BIGINT', 'A': 'BIGINT', 'B': 'BIGINT'})"
    )
    want = con.execute(DUCKDB).fetchall()
    duck_s = time.perf_counter() - d0
    assert sorted(got) == sorted(want), f"{n}: sluice run's answer differs from DuckDB's"
    row = {
        "events": n,
        "last_ts": last,
        "csv_bytes": csv.stat().st_size,
        "generate_seconds": round(gen_s, 2),
        "sluice_run_seconds": round(float(secs), 2),
        "sluice_events_per_s": round(n / float(secs)),
        "peak_rss_bytes": int(rss),
        "output_elements": len(got),
        "duckdb_seconds": round(duck_s, 2),
        "duckdb_events_per_s": round(n / duck_s),
        "vs_duckdb": round(duck_s / float(secs), 3),
        "checked_equal_to_duckdb": True,
    }
    print(
        f"{n:>12,} events: sluice run {row['sluice_events_per_s']:>10,} ev/s, peak RSS "
        f"{int(rss) / 2**20:7.1f} MiB; DuckDB {row['duckdb_events_per_s']:>10,} ev/s "
        f"(ratio {row['vs_duckdb']}); {len(got):,} elements, equal",
        flush=True,
    )
    csv.unlink()
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="2000000,20000000")
    ap.add_argument("--out", default="benchmarks/results/run_files.json")
    args = ap.parse_args()
    sizes = [int(x) for x in args.sizes.split(",")]
    with tempfile.TemporaryDirectory() as d:
        runs = [one(n, Path(d)) for n in sizes]
    ratio = runs[-1]["peak_rss_bytes"] / runs[0]["peak_rss_bytes"]
    print(f"peak RSS {sizes[-1]:,} vs {sizes[0]:,} events: ratio {ratio:.3f}")
    write_results(
        args.out, "run_files", query=QUERY, duckdb_sql=DUCKDB.strip(), runs=runs, peak_rss_ratio=round(ratio, 3)
    )
    print(f"-> {args.out}")


if __name__ == "__main__":
    main()
