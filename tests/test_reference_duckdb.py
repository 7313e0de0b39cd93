"""Differential: the reference evaluator's relational core against DuckDB at one instant.

Random relations (small integers with NULLs) and random SQL from the shared subset of CQL and
DuckDB — predicates under three-valued logic, aggregates, joins, set operations, subqueries —
must give the same multiset.  (Integer '/' is left out: CQL truncates, DuckDB's '/' is real.)
"""

from __future__ import annotations

from collections import Counter

import duckdb
from hypothesis import given, settings
from hypothesis import strategies as st
from sluice.catalog import Catalog
from sluice.plan import bind_query
from sluice.reference import evaluate

ints = st.one_of(st.none(), st.integers(-3, 3))
rows = st.lists(st.tuples(ints, ints), max_size=6)

cols_r = ["R.a", "R.b"]
atoms = st.one_of(st.sampled_from(cols_r), st.integers(-3, 3).map(str), st.just("NULL"))


def _arith(children):
    return st.one_of(
        st.builds(lambda a, op, b: f"({a} {op} {b})", children, st.sampled_from(["+", "-", "*"]), children),
        st.builds(lambda a, b: f"COALESCE({a}, {b})", children, children),
        st.builds(lambda a, b, c: f"(CASE WHEN {a} > {b} THEN {c} ELSE {a} END)", children, children, children),
    )


values = st.recursive(atoms, _arith, max_leaves=4)


def _preds(children):
    return st.one_of(
        st.builds(lambda a, b: f"({a} AND {b})", children, children),
        st.builds(lambda a, b: f"({a} OR {b})", children, children),
        st.builds(lambda a: f"(NOT {a})", children),
    )


leaf_preds = st.one_of(
    st.builds(lambda a, op, b: f"({a} {op} {b})", values, st.sampled_from(["=", "<>", "<", "<=", ">", ">="]), values),
    st.builds(lambda a, n: f"({a} IS {n}NULL)", values, st.sampled_from(["", "NOT "])),
    st.builds(lambda a, lo, hi: f"({a} BETWEEN {lo} AND {hi})", values, values, values),
    st.builds(
        lambda a, xs, n: f"({a} {n}IN ({', '.join(xs)}))",
        values,
        st.lists(atoms, min_size=1, max_size=3),
        st.sampled_from(["", "NOT "]),
    ),
    st.builds(lambda n: f"({n}EXISTS (SELECT * FROM T WHERE T.a = R.a))", st.sampled_from(["", "NOT "])),
    st.builds(lambda a, n: f"({a} {n}IN (SELECT T.c FROM T))", values, st.sampled_from(["", "NOT "])),
    st.builds(
        lambda a, op, q: f"({a} {op} {q} (SELECT T.c FROM T WHERE T.a <> R.b))",
        values,
        st.sampled_from(["<", "=", ">="]),
        st.sampled_from(["ALL", "ANY"]),
    ),
)
preds = st.recursive(leaf_preds, _preds, max_leaves=4)

queries = st.one_of(
    st.builds(
        lambda v, p, d: f"SELECT {d}{v}, R.b FROM R WHERE {p}", values, preds, st.sampled_from(["", "DISTINCT "])
    ),
    st.builds(
        lambda p, h: (
            f"SELECT R.a, COUNT(*), COUNT(R.b), SUM(R.b), MIN(R.b), MAX(R.b), COUNT(DISTINCT R.b), AVG(R.b) "
            f"FROM R WHERE {p} GROUP BY R.a{h}"
        ),
        preds,
        st.sampled_from(["", " HAVING COUNT(*) > 1", " HAVING SUM(R.b) IS NULL"]),
    ),
    st.builds(lambda p: f"SELECT COUNT(*), SUM(R.a), MAX(R.b) FROM R WHERE {p}", preds),
    st.builds(lambda p: f"SELECT R.a, T.c FROM R, T WHERE R.a = T.a AND {p}", preds),
    st.builds(lambda p: f"SELECT R.b, T.c FROM R, T WHERE R.b < T.c OR {p}", preds),
    st.builds(
        lambda op: f"SELECT R.a FROM R {op} SELECT T.c FROM T",
        st.sampled_from(["UNION", "UNION ALL", "EXCEPT", "INTERSECT", "EXCEPT ALL", "INTERSECT ALL"]),
    ),
    st.builds(lambda v: f"SELECT {v}, (SELECT MAX(T.c) FROM T WHERE T.a = R.a) FROM R", values),
)


def _catalog() -> Catalog:
    cat = Catalog()
    cat.register_relation("R", [("a", "integer"), ("b", "integer")])
    cat.register_relation("T", [("a", "integer"), ("c", "integer")])
    return cat


CATALOG = _catalog()


def _norm(row):
    return tuple(round(v, 9) if isinstance(v, float) else v for v in row)


@settings(max_examples=400)
@given(rows, rows, queries)
def test_reference_matches_duckdb(r_rows, t_rows, sql) -> None:
    con = duckdb.connect()
    con.execute("CREATE TABLE R (a INTEGER, b INTEGER); CREATE TABLE T (a INTEGER, c INTEGER)")
    if r_rows:
        con.executemany("INSERT INTO R VALUES (?, ?)", r_rows)
    if t_rows:
        con.executemany("INSERT INTO T VALUES (?, ?)", t_rows)
    expected = Counter(_norm(tuple(r)) for r in con.execute(sql).fetchall())
    bq = bind_query(CATALOG, sql)
    out = evaluate(
        bq,
        relations={"R": [(0, "+", r) for r in r_rows], "T": [(0, "+", r) for r in t_rows]},
        start=0,
        until=0,
    )
    assert all(e.sign == "+" and e.ts == 0 for e in out)
    got = Counter(_norm(e.row) for e in out)
    assert got == expected, sql
