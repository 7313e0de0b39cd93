"""Queries registered while the engine runs, one after another before an instant is released:
the second shares the first's operators only while they have sent nothing (found by the server,
whose clients register at any time)."""

from __future__ import annotations

from sluice.backends.embedded import EmbeddedEngine


def run_two_identical_late_queries() -> tuple[list, list]:
    e = EmbeddedEngine()
    e.execute("register stream S (A integer)")
    e.register_query("select A from S")
    e.push("S", [(5, 1)])
    e.heartbeat(5)
    e.run()  # S released up to 5: queries registered now start at instant 6
    e.execute("register relation R (K integer)")  # its own time: 1, 2, 3 are not late on it
    first = e.register_query("select K from R", "first")
    e.push("R", [(1, "+", 1), (2, "+", 2), (3, "-", 1)])
    e.heartbeat(3)
    e.run()
    second = e.register_query("select K from R", "second")
    e.push("R", [(6, "+", 7)])
    e.heartbeat(6)
    e.run()
    return first.results(), second.results()


def test_a_query_registered_later_in_the_same_epoch_sees_the_relation_as_it_is():
    first, second = run_two_identical_late_queries()
    # R holds {2} when both start (at instant 6), then 7 is inserted: both answers are {2, 7}
    assert [tuple(x) for x in first] == [(6, "+", (2,)), (6, "+", (7,))]
    assert [tuple(x) for x in second] == [(6, "+", (2,)), (6, "+", (7,))]


def test_queries_registered_together_still_share():
    e = EmbeddedEngine()
    e.execute("register stream S (A integer)")
    e.register_query("select A from S")
    e.push("S", [(5, 1)])
    e.heartbeat(5)
    e.run()
    a = e.register_query("select A from S [Rows 3]", "a")
    b = e.register_query("select A from S [Rows 3]", "b")
    assert "shared with b" in e.explain("a")
    e.push("S", [(6, 2)])
    e.close()
    assert a.results() == b.results() and [tuple(x) for x in a.results()] == [(6, "+", (2,))]
