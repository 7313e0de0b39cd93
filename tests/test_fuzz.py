"""Fuzz: any input text yields a plan or a CQLError carrying line:column — never another exception."""

from __future__ import annotations

import re

from hypothesis import example, given, settings
from hypothesis import strategies as st
from sluice.catalog import Catalog
from sluice.cql import CQLError
from sluice.plan import execute

import strategies as S

_DDL = """
register stream S (A integer, B float, C char(4));
register relation R (A integer, K varchar(8));
register view V as select A, B from S where A > 0;
"""


def _catalog() -> Catalog:
    cat = Catalog()
    execute(cat, _DDL)
    return cat


CATALOG = _catalog()


def _check(text: str) -> None:
    try:
        execute(CATALOG, text) if text.lstrip().lower().startswith(
            ("explain", "select", "(", "istream", "dstream", "rstream")
        ) else _fresh(text)
    except CQLError as e:
        assert e.line >= 1 and e.col >= 1
        assert re.match(r"^\d+:\d+: ", str(e)), str(e)


def _fresh(text: str) -> None:
    # DDL mutates the catalog: use a fresh one so examples stay independent.
    execute(_catalog(), text)


@settings(max_examples=10_000)
@given(st.text(max_size=80))
@example("select")
@example("select * from S [")
@example("'")
@example("select * from S where A in ()")
def test_random_text(text: str) -> None:
    _check(text)


@settings(max_examples=10_000)
@given(S.token_soup)
def test_cql_token_soup(text: str) -> None:
    _check(text)


@settings(max_examples=2_000)
@given(st.text(alphabet="select*fromSRAB,()[]'\" \n", max_size=40))
def test_near_cql_text(text: str) -> None:
    _check(text)
