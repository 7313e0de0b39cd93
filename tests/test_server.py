"""``sluice serve``'s HTTP API in process (Starlette's TestClient): registration with caret
errors, pushes in every format through the admission check, subscriptions with bounded
backlogs, control tables, limits, the token.  A real server process (kill and restart) is
``test_server_process.py``.
"""

from __future__ import annotations

import io
import json
import threading
import time
from urllib.parse import quote

import pyarrow as pa
import pytest
from sluice.backends.embedded import EmbeddedEngine
from sluice.errors import SluiceError
from sluice.server import build_session, check_exposure, create_app, is_loopback, read_token, serve
from sluice.server.session import ServerSession
from sluice.server.subscriptions import Subscription
from starlette.testclient import TestClient


def client(session: ServerSession | None = None, **kw) -> TestClient:
    return TestClient(create_app(session or ServerSession(EmbeddedEngine()), **kw))


def jsonl(*rows: dict) -> bytes:
    return "\n".join(json.dumps(r) for r in rows).encode()


def setup(c: TestClient) -> None:
    r = c.post(
        "/cql",
        content="register stream S (A integer, B varchar(3)); register query big as select A, B from S where A > 1",
    )
    assert r.status_code == 200, r.text
    assert r.json()["results"] == [
        {"kind": "stream", "name": "S"},
        {"kind": "query", "name": "big", "output": "stream", "columns": ["A", "B"]},
    ]


def test_register_push_and_read():
    c = client()
    setup(c)
    r = c.post(
        "/sources/S/rows?heartbeat=3",
        content=jsonl({"ts": 1, "A": 1, "B": "x"}, {"ts": 2, "A": 5, "B": "y"}, {"ts": 3, "A": 7, "B": None}),
    )
    assert r.status_code == 200 and r.json() == {"accepted": 3, "rejected": [], "late": 0, "dropped": 0}
    out = c.get("/queries/big/results").json()
    assert out["delivered"] == 2 and out["kept"] == 2
    assert out["elements"] == [
        {"ts": 2, "sign": "+", "row": {"A": 5, "B": "y"}},
        {"ts": 3, "sign": "+", "row": {"A": 7, "B": None}},
    ]
    assert c.get("/queries/big/results?last=1").json()["elements"] == [
        {"ts": 3, "sign": "+", "row": {"A": 7, "B": None}}
    ]
    assert [q["name"] for q in c.get("/queries").json()["queries"]] == ["big"]
    assert c.get("/sources").json()["sources"] == [
        {"name": "S", "kind": "stream", "columns": [["A", "integer"], ["B", "varchar(3)"]]}
    ]
    plan = c.get("/queries/big/explain").text
    assert plan.startswith("query big: select A, B from S where A > 1  -> stream") and "Select [(A > 1)]" in plan
    assert c.get("/health").json()["status"] == "ok"


def test_register_through_json_with_settings_and_generated_names():
    c = client()
    c.post("/cql", content="register stream S (A integer)")
    r = c.post("/queries", json={"text": "select A from S [Rows 2]", "weight": 2, "retain": 5})
    assert r.status_code == 201 and r.json()["name"] == "q1" and r.json()["output"] == "relation"
    assert c.post("/queries", json={"text": "select A from S"}).json()["name"] == "q2"
    assert c.get("/controls").json()["queries"][0] == {"name": "q1", "weight": 2.0, "active": True}
    bad = c.post("/queries", json={"text": "select A from S", "colour": 1})
    assert bad.status_code == 400 and "colour" in bad.json()["error"]["message"]
    assert c.post("/queries", content=b"[1]").status_code == 400
    assert c.post("/queries", json={"name": "x"}).status_code == 400


def test_cql_errors_are_json_with_the_caret_of_the_text_sent():
    c = client()
    r = c.post("/cql", content="register stream S (A integer);\nselect A,\n  Nope from S")
    assert r.status_code == 400
    body = r.json()
    err = body["error"]
    assert err["type"] == "BindError" and (err["line"], err["col"]) == (3, 3)
    assert "3 |   Nope from S" in err["excerpt"] and "  |   ^^^^" in err["excerpt"]
    assert body["applied"] == [{"kind": "stream", "name": "S"}]  # the statement before it stayed
    r = c.post("/cql", content="select from where")
    assert r.status_code == 400 and r.json()["error"]["type"] == "ParseError" and r.json()["applied"] == []
    r = c.post("/queries", json={"text": "select A from Missing"})
    assert r.status_code == 400 and r.json()["error"]["col"] == 15 and "^" in r.json()["error"]["excerpt"]
    r = c.post("/cql", content="register stream S (A integer)")  # already registered
    assert r.status_code == 400 and "already registered" in r.json()["error"]["message"]


def test_a_bad_row_is_rejected_alone_with_its_number_and_counted():
    c = client()
    setup(c)
    body = (
        jsonl({"ts": 1, "A": 2, "B": "ok"}, {"ts": 2, "A": "x", "B": "ok"}, {"ts": 3, "A": 3, "B": "toolong"})
        + b"\nnot json\n"
        + jsonl({"ts": 4, "A": 9, "B": "z"})
    )
    r = c.post("/sources/S/rows", content=body, headers={"content-type": "application/x-ndjson"})
    assert r.status_code == 200
    rep = r.json()
    assert rep["accepted"] == 2
    assert [x["row"] for x in rep["rejected"]] == [2, 3, 4]
    assert (
        "'x' is not an integer" in rep["rejected"][0]["reason"]
        and "longer than varchar(3)" in rep["rejected"][1]["reason"]
    )
    src = c.get("/statistics").json()["engine"]["sources"][0]
    assert src["accepted"] == 2 and src["rejected"] == 3
    c.post("/heartbeat", json={"ts": 4})
    assert [e["row"]["A"] for e in c.get("/queries/big/results").json()["elements"]] == [2, 9]
    # a late row: the lateness rule rejects it after the checks, and the answer says so
    assert c.post("/sources/S/rows", content=jsonl({"ts": 4, "A": 5, "B": "l"})).json()["late"] == 1


def test_csv_and_arrow_bodies_and_a_relation():
    c = client()
    setup(c)
    r = c.post("/sources/S/rows?format=csv", content=b"ts,A,B\n1,4,ab\n2,zz,cd\n3,6,\n")
    assert r.json()["accepted"] == 2 and r.json()["rejected"][0]["row"] == 3
    t = pa.table({"ts": [4, 5], "A": [10, None], "B": ["p", "q"]})
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, t.schema) as w:
        w.write_table(t)
    r = c.post(
        "/sources/S/rows?heartbeat=5",
        content=sink.getvalue(),
        headers={"content-type": "application/vnd.apache.arrow.stream"},
    )
    assert r.json() == {"accepted": 2, "rejected": [], "late": 0, "dropped": 0}
    assert [e["row"]["A"] for e in c.get("/queries/big/results").json()["elements"]] == [4, 6, 10]
    missing = pa.table({"ts": [6]})
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, missing.schema) as w:
        w.write_table(missing)
    r = c.post("/sources/S/rows?format=arrow", content=sink.getvalue())
    assert r.status_code == 400 and "column 'A' is missing" in r.json()["error"]["message"]
    assert c.post("/sources/S/rows?format=arrow", content=b"garbage").status_code == 400
    # a relation: signs, and its current answer (kept whole: retain None)
    c.post("/cql", content="register relation R (K integer); register query cur as select K from R")
    assert (
        c.post("/queries", json={"text": "select K from R where K > 0", "name": "whole", "retain": None}).status_code
        == 201
    )
    r = c.post(
        "/sources/R/rows?heartbeat=7",
        content=jsonl(
            {"ts": 6, "sign": "+", "K": 1},
            {"ts": 6, "sign": "+", "K": 2},
            {"ts": 7, "sign": "-", "K": 1},
            {"ts": 7, "sign": "?", "K": 5},
        ),
    )
    assert (
        r.json()["accepted"] == 3
        and r.json()["rejected"][0]["row"] == 4
        and "sign" in r.json()["rejected"][0]["reason"]
    )
    ans = c.get("/queries/cur/answer")
    assert ans.status_code == 409 and "retain" in ans.json()["error"]["message"]  # retain=10000 by default
    c.post("/sources/R/rows?heartbeat=8", content=jsonl({"ts": 8, "sign": "+", "K": 7}))
    assert c.get("/queries/whole/answer").json() == {"query": "whole", "rows": [{"K": 2}, {"K": 7}]}
    assert c.get("/queries/big/answer").status_code == 409


def test_bad_requests_say_why():
    c = client(max_body=100)
    setup(c)
    r = c.post("/sources/T/rows", content=b"")
    assert r.status_code == 404 and "no stream or relation named 'T'" in r.json()["error"]["message"]
    r = c.post("/sources/S/rows", content=b"{}", headers={"content-type": "image/png"})
    assert r.status_code == 400 and "Content-Type" in r.json()["error"]["message"]
    assert c.post("/sources/S/rows?format=xml", content=b"").status_code == 400
    r = c.post("/sources/S/rows", content=b"x" * 101)
    assert r.status_code == 413 and "at most 100" in r.json()["error"]["message"]
    assert c.post("/sources/S/rows?heartbeat=soon", content=b"").status_code == 400
    assert c.post("/heartbeat", json={"ts": "1"}).status_code == 400
    assert c.get("/queries/nope/results").status_code == 404
    assert c.delete("/queries/nope").status_code == 404
    assert c.get("/queries/nope/events").status_code == 404
    r = c.post("/cql", content=b"\xff\xfe")
    assert r.status_code == 400 or r.status_code == 500
    # nothing of a refused request reached the engine
    assert c.get("/statistics").json()["engine"]["sources"][0]["accepted"] == 0


def test_token_required_off_loopback_and_checked():
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.168.1.4") and not is_loopback("example.org")
    with pytest.raises(SluiceError, match="needs a token"):
        check_exposure("0.0.0.0", None)
    check_exposure("0.0.0.0", "s3cret")
    check_exposure("127.0.0.1", None)
    c = client(token="s3cret")
    r = c.get("/health")
    assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
    assert c.get("/health", headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert c.get("/health", headers={"Authorization": "Bearer s3cret"}).status_code == 200
    assert c.get("/health?token=s3cret").status_code == 200


def test_token_from_a_file(tmp_path, capsys):
    f = tmp_path / "token"
    f.write_text("s3cret\n")
    f.chmod(0o600)
    assert read_token(f) == "s3cret" and not capsys.readouterr().err
    f.chmod(0o644)
    assert read_token(f) == "s3cret" and "chmod 600" in capsys.readouterr().err
    f.write_text("\n")
    with pytest.raises(SluiceError, match="empty"):
        read_token(f)
    with pytest.raises(SluiceError, match="cannot read"):
        read_token(tmp_path / "missing")
    with pytest.raises(SluiceError, match="not both"):
        serve("0.0.0.0", token="a", token_file=f)


def read_events(lines, count: int) -> list[tuple[str, object]]:
    out, event = [], None
    for line in lines:
        if line.startswith("event: "):
            event = line[7:]
        elif line.startswith("data: "):
            out.append((event, json.loads(line[6:])))
            if len(out) == count:
                break
    return out


def test_subscribe_to_a_query_through_server_sent_events():
    c = client()
    setup(c)
    got: list = []
    with c.stream("GET", "/queries/big/events?max_events=2") as resp:
        assert resp.headers["content-type"].startswith("text/event-stream")
        lines = resp.iter_lines()
        got += read_events(lines, 1)  # subscribed
        c.post("/sources/S/rows?heartbeat=2", content=jsonl({"ts": 1, "A": 3, "B": "a"}, {"ts": 2, "A": 0, "B": "b"}))
        got += read_events(lines, 1)
        c.post("/sources/S/rows?heartbeat=3", content=jsonl({"ts": 3, "A": 4, "B": "c"}))
        got += read_events(lines, 1)
    assert got == [
        ("subscribed", {"query": "big", "backlog": 10000}),
        ("elements", [{"ts": 1, "sign": "+", "row": {"A": 3, "B": "a"}}]),
        ("elements", [{"ts": 3, "sign": "+", "row": {"A": 4, "B": "c"}}]),
    ]
    # the stream ended: unsubscribed (by the sender's last step, on a session thread: bounded wait)
    deadline = time.monotonic() + 10
    while c.get("/health").json()["subscribers"] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert c.get("/health").json()["subscribers"] == 0


def test_a_reconnecting_subscriber_resumes_after_its_last_event_id():
    c = client()
    setup(c)
    c.post("/sources/S/rows?heartbeat=2", content=jsonl({"ts": 1, "A": 3, "B": "a"}, {"ts": 2, "A": 5, "B": "b"}))

    def first_events(path: str, count: int = 1, **kw) -> list[tuple[str, str | None, object]]:
        out: list[tuple[str, str | None, object]] = []
        with c.stream("GET", path, **kw) as resp:
            assert resp.status_code == 200, resp.read()
            event, event_id = "", None
            for line in resp.iter_lines():
                if line.startswith("event: "):
                    event, event_id = line[7:], None
                elif line.startswith("id: "):
                    event_id = line[4:]
                elif line.startswith("data: ") and event != "subscribed":
                    data = json.loads(line[6:])
                    out.append((event, event_id, [e["row"]["A"] for e in data] if event == "elements" else data))
                    if len(out) == count:
                        return out
        raise AssertionError(f"the stream ended after {out}")

    [(_, all_id, values)] = first_events("/queries/big/events?max_events=1&after=0")  # its whole output
    epoch, _, pos = all_id.rpartition(":")
    assert (pos, values) == ("2", [3, 5]) and epoch
    headers = {"Last-Event-ID": f"{epoch}:1"}
    assert first_events("/queries/big/events?max_events=1", headers=headers) == [("elements", all_id, [5])]
    # an id of another run of the query (re-registered, a restart): told, then its whole kept output
    gap, elements = first_events("/queries/big/events?max_events=1", 2, headers={"Last-Event-ID": "0ther:2"})
    assert gap[0] == "gap" and gap[2]["dropped"] is None and "started again" in gap[2]["reason"]
    assert elements == ("elements", all_id, [3, 5])
    # past its output: told at once, though the query is idle
    [(event, _, data)] = first_events("/queries/big/events", headers={"Last-Event-ID": f"{epoch}:7"})
    assert event == "gap" and data["reason"] == "position 7 is past the query's output (2)"
    for bad in ("x", "\u00b2", f"{epoch}:-1"):
        r = c.get("/queries/big/events", headers={"Last-Event-ID": bad.encode()})
        assert r.status_code == 400 and "Last-Event-ID" in r.json()["error"]["message"], bad
    assert c.get("/queries/big/events?after=-1").status_code == 400


def test_a_resumed_subscription_is_told_what_is_no_longer_kept():
    session = ServerSession(EmbeddedEngine(), retain=2)
    session.execute("register stream S (A integer); register query all_a as select A from S")
    session.push("S", "jsonl", jsonl(*({"ts": i, "A": i} for i in range(5))), heartbeat=4)
    reason = "no longer kept (--retain) or more than a subscriber's --backlog"
    els, gap = session.subscribe("all_a", None, after=1).take_json()
    assert gap == {"dropped": 2, "from_ts": None, "to_ts": None, "reason": reason}
    assert [e["row"]["A"] for e in els] == [3, 4]
    sub = session.subscribe("all_a", None, after=9)
    assert sub.take_json() == (
        [],
        {"dropped": None, "from_ts": None, "to_ts": None, "reason": "position 9 is past the query's output (5)"},
    )
    assert sub.position == sub.taken == 5
    session.push("S", "jsonl", jsonl({"ts": 5, "A": 5}), heartbeat=5)
    assert sub.take_json()[0][0]["row"] == {"A": 5} and sub.taken == 6
    # everything kept, but more than a backlog: the replay starts a backlog before the end
    whole = ServerSession(EmbeddedEngine(), retain=None, backlog=3)
    whole.execute("register stream S (A integer); register query all_a as select A from S")
    whole.push("S", "jsonl", jsonl(*({"ts": i, "A": i} for i in range(5))), heartbeat=4)
    els, gap = whole.subscribe("all_a", None, after=0).take_json()
    assert gap is not None and gap["dropped"] == 2 and [e["row"]["A"] for e in els] == [2, 3, 4]


def test_a_slow_subscriber_loses_its_oldest_elements_counted_and_does_not_hold_back_others():
    session = ServerSession(EmbeddedEngine(), backlog=50)
    session.execute("register stream S (A integer); register query all_a as select A from S")
    fast, slow = session.subscribe("all_a", None), session.subscribe("all_a", None)
    seen: list[int] = []
    for i in range(20):  # 20 pushes of 10 rows; the fast reader keeps up, the slow one never reads
        body = jsonl(*({"ts": i, "A": i * 10 + k} for k in range(10)))
        session.push("S", "jsonl", body, heartbeat=i)
        els, gap = fast.take_json()
        assert gap is None
        seen += [e["row"]["A"] for e in els]
        assert slow.held <= 50
    assert seen == list(range(200))
    assert (slow.held, slow.dropped, slow.peak) == (50, 150, 50)
    els, gap = slow.take_json()
    assert gap == {"dropped": 150, "from_ts": 0, "to_ts": 14}
    assert [e["row"]["A"] for e in els] == list(range(150, 200))
    stats = {s["id"]: s for s in session.queries()[0]["subscribers"]}
    assert stats[slow.id]["dropped"] == 150 and stats[fast.id]["dropped"] == 0


def test_subscription_gap_is_told_once_and_partial_batches_cut():
    s = Subscription("q", limit=3)
    s.offer([(1, "1"), (1, "1")])
    s.offer([(2, "2"), (2, "2"), (3, "3")])
    assert s.held == 3 and s.dropped == 2
    assert s.take_json() == ([2, 2, 3], {"dropped": 2, "from_ts": 1, "to_ts": 1})
    s.offer([(4, "4")])
    assert s.take() == ([(4, "4")], None)
    # over the limit the oldest batch is cut element by element; the newest is never cut
    s.offer([(5, "5"), (5, "5")])
    s.offer([(6, "6")] * 4)
    assert s.held == 4 and s.take_json() == ([6, 6, 6, 6], {"dropped": 2, "from_ts": 5, "to_ts": 5})
    s.offer([(7, "7")] * 2)
    s.offer([(8, "8")] * 2)
    assert s.take_json() == ([7, 8, 8], {"dropped": 1, "from_ts": 7, "to_ts": 7})


def test_controls_scheduler_weight_activity_and_synopsis_limits():
    c = client()
    c.post("/cql", content="register stream S (A integer); register query w as select A from S [Rows 2]")
    t = c.get("/controls").json()
    assert t["backend"] == "embedded" and t["scheduler"] == "round-robin" and "chain" in t["schedulers"]
    assert c.patch("/controls", json={"scheduler": "chain"}).json()["scheduler"] == "chain"
    r = c.patch("/controls", json={"scheduler": "fastest"})
    assert r.status_code == 400 and "unknown scheduler" in r.json()["error"]["message"]
    assert c.patch("/controls", json={"colour": 1}).status_code == 400
    assert c.patch("/controls/queries/w", json={"weight": 3}).json()["queries"] == [
        {"name": "w", "weight": 3.0, "active": True}
    ]
    assert c.patch("/controls/queries/w", json={"weight": -1}).status_code == 400
    assert c.patch("/controls/queries/nope", json={"weight": 1}).status_code == 404
    syn = c.get("/controls").json()["synopses"]
    assert [s["kind"] for s in syn] == ["JoinBuffer"]  # the Rows window's buffer (a shared window)
    op = quote(syn[0]["operator"], safe="")  # operator names hold '#': encoded in a URL
    c.post("/sources/S/rows?heartbeat=3", content=jsonl({"ts": 1, "A": 1}, {"ts": 2, "A": 2}, {"ts": 3, "A": 3}))
    after = [
        s
        for s in c.patch(f"/controls/synopses/{op}", json={"limit": 1}).json()["synopses"]
        if s["operator"] == syn[0]["operator"]
    ]
    assert after[0]["limit"] == 1 and after[0]["over"] is True and after[0]["bytes"] > 1
    assert c.patch("/controls/synopses/nope", json={"limit": 1}).status_code == 400
    assert c.patch(f"/controls/synopses/{op}", json={"limit": "lots"}).status_code == 400
    assert c.patch("/controls/tables/x", json={"limit": 1}).status_code == 404
    # deactivate: the relation's answer empties at the next instant (it needs the whole output); activate resumes it
    r = c.patch("/controls/queries/w", json={"active": False})
    assert r.status_code == 409 and "retain=None" in r.json()["error"]["message"]
    c.delete("/queries/w")
    c.post("/queries", json={"text": "select A from S [Rows 2]", "name": "w", "retain": None})
    assert c.patch("/controls/queries/w", json={"active": False}).json()["queries"][0]["active"] is False
    assert c.patch("/controls/queries/w", json={"active": "maybe"}).status_code == 400
    assert c.patch("/controls/queries/w", json={"active": True}).json()["queries"][0]["active"] is True


def test_unregister_ends_subscriptions_and_frees_the_name():
    session = ServerSession(EmbeddedEngine())
    session.execute("register stream S (A integer); register query a as select A from S")
    sub = session.subscribe("a", None)
    c = client(session)
    assert c.delete("/queries/a").json() == {"unregistered": "a"}
    assert sub.closed
    assert c.get("/queries/a/results").status_code == 404
    assert c.post("/queries", json={"text": "select A from S", "name": "a"}).status_code == 201


def test_registrations_and_controls_survive_a_new_session_on_the_same_state(tmp_path):
    s1, restored = build_session("embedded", tmp_path)
    assert restored == {"objects": 0, "queries": 0, "pushes": 0}
    s1.execute(
        "register stream S (A integer); register view V as select A from S where A > 0;"
        "register query keep weight 2 as select A from V [Rows 3]; select A from S"
    )
    s1.register_query("select A + 1 from S", "plus", retain=None)
    s1.unregister("q2")
    c = client(s1)
    c.patch("/controls", json={"scheduler": "fifo"})
    c.patch("/controls/queries/plus", json={"active": False})
    s1.close()
    s2, restored = build_session("embedded", tmp_path)
    assert restored == {"objects": 2, "queries": 2, "pushes": 0}
    qs = {q["name"]: q for q in s2.queries()}
    assert set(qs) == {"keep", "plus"}
    assert qs["keep"]["weight"] == 2.0 and qs["plus"]["active"] is False
    assert s2.engine.strategy.name == "fifo"
    s2.push("S", "jsonl", jsonl({"ts": 1, "A": 5}, {"ts": 2, "A": -1}), heartbeat=2)
    assert s2.results("keep")["elements"] == [{"ts": 1, "sign": "+", "row": {"A": 5}}]
    with pytest.raises(SluiceError, match="--time-unit second"):
        build_session("embedded", tmp_path, time_unit="millisecond")
    s2.close()


def test_concurrent_pushes_are_taken_one_at_a_time_and_none_is_lost():
    session = ServerSession(EmbeddedEngine(slack=1000))
    session.execute("register stream S (A integer); register query n as select Count(*) from S [Range Unbounded]")
    c = client(session)
    errors: list[str] = []

    def pusher(k: int) -> None:
        for i in range(10):
            r = c.post("/sources/S/rows", content=jsonl(*({"ts": 1 + i, "A": k} for _ in range(5))))
            if r.status_code != 200 or r.json()["accepted"] != 5:
                errors.append(r.text)

    threads = [threading.Thread(target=pusher, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert errors == []
    c.post("/heartbeat", json={"ts": 2000})
    last = c.get("/queries/n/results?last=1").json()["elements"][0]
    assert last["sign"] == "+" and last["row"] == {"Count(*)": 400} or list(last["row"].values()) == [400]


def system_session(tmp_path=None) -> ServerSession:
    return build_session("embedded", tmp_path)[0]


def test_system_streams_answer_ordinary_cql():
    s = system_session()
    assert {d["name"] for d in s.sources() if d.get("system")} == {
        "SysQueues",
        "SysOperators",
        "SysSynopses",
        "SysQueries",
    }
    s.execute(
        "register stream S (A integer); register query big as select A from S where A > 1;"
        "register query held as Select queue, Max(held) From SysQueues [Range 1 Minute] Where queue = 'S' Group By queue;"
        "register query ops as select operator, tuples_in, tuples_out, selectivity from SysOperators [Now] where operator = 'S';"
        "register query lat as select query, delivered, shed, fn from SysQueries [Now] where query = 'big'"
    )
    s.push("S", "jsonl", jsonl(*({"ts": 1, "A": a} for a in range(4))), heartbeat=1)
    s.push("S", "jsonl", jsonl({"ts": 2, "A": 9}), heartbeat=2)
    held = s.results("held")["elements"]
    assert held[0] == {"ts": 1, "sign": "+", "row": {"queue": "S", "max": 0}}  # the source's queue was drained
    ops = [(e["ts"], e["sign"], e["row"]["tuples_in"], e["row"]["tuples_out"]) for e in s.results("ops")["elements"]]
    # a source's tuples in and out: 4 by instant 1, 5 by instant 2 ([Now]: the sample replaced each instant)
    assert ops == [(1, "+", 4, 4), (2, "-", 4, 4), (2, "+", 5, 5)]
    lat = [
        (e["ts"], e["sign"], e["row"]["delivered"], e["row"]["shed"], e["row"]["fn"])
        for e in s.results("lat")["elements"]
    ]
    assert lat == [(1, "+", 2, 0, 0.0), (2, "-", 2, 0, 0.0), (2, "+", 3, 0, 0.0)]
    with pytest.raises(SluiceError, match="system stream"):
        s.push("SysQueues", "jsonl", jsonl({"ts": 3, "queue": "x", "held": 1, "bytes": 1}))


def test_system_synopses_show_limits_and_queries_over_them_survive_a_restart(tmp_path):
    s = system_session(tmp_path)
    s.execute(
        "register stream S (A integer); register query w as select A from S [Rows 2];"
        "register query syn as select operator, bytes, budget from SysSynopses [Now]"
    )
    c = client(s)
    op = c.get("/controls").json()["synopses"][0]["operator"]
    c.patch(f"/controls/synopses/{quote(op, safe='')}", json={"limit": 4096})
    c.post("/sources/S/rows?heartbeat=1", content=jsonl({"ts": 1, "A": 1}))
    rows = [e["row"] for e in s.results("syn")["elements"]]
    assert rows[0]["operator"] == op and rows[0]["budget"] == 4096 and rows[0]["bytes"] > 0
    s.close()
    s2 = system_session(tmp_path)
    assert {q["name"] for q in s2.queries()} == {"w", "syn"}
    s2.push("S", "jsonl", jsonl({"ts": 5, "A": 2}), heartbeat=5)
    rows = [e["row"] for e in s2.results("syn")["elements"]]
    assert {r["operator"]: r["budget"] for r in rows}[op] == 4096  # the limit was restored with the controls
    s2.close()


def test_system_streams_are_sampled_only_while_read_and_every_so_many_ticks():
    s, _ = build_session("embedded", None, sample_every=3)
    s.execute("register stream S (A integer); register query a as select A from S")
    for ts in range(1, 5):
        s.push("S", "jsonl", jsonl({"ts": ts, "A": ts}), heartbeat=ts)
    assert s.engine.sources["sysqueues"].source_statistics().accepted == 0  # nobody reads it: no sample
    s.execute("register query q as select queue, held from SysQueues [Now] where queue = 'S'")
    for ts in range(5, 12):
        s.push("S", "jsonl", jsonl({"ts": ts, "A": ts}), heartbeat=ts)
    # samples at instants 5, 8 and 11 (every 3 ticks), each replacing the one before ([Now])
    assert [(e["ts"], e["sign"]) for e in s.results("q")["elements"]] == [
        (5, "+"),
        (6, "-"),
        (8, "+"),
        (9, "-"),
        (11, "+"),
    ]


def test_system_samples_are_journaled_so_a_killed_server_goes_on_with_them(tmp_path):
    s, _ = build_session("embedded", tmp_path, sample_every=1)
    s.execute(
        "register stream S (A integer); register query a as select A from S;"
        "register query d as select query, delivered from SysQueries [Range 100] where query = 'a'"
    )
    for ts in range(1, 5):
        s.push("S", "jsonl", jsonl({"ts": ts, "A": ts}), heartbeat=ts)
    before = s.results("d")["elements"]
    assert [e["row"]["delivered"] for e in before if e["sign"] == "+"] == [1, 2, 3, 4]
    assert s.journal is not None
    s.journal.close()  # a kill: the journal's file shut, nothing else (no checkpoint at close)
    s2, restored = build_session("embedded", tmp_path, sample_every=1)  # a kill: s never closed
    assert restored["pushes"] > 8 and s2.results("d")["elements"] == before  # the samples replayed too
    s2.push("S", "jsonl", jsonl({"ts": 5, "A": 5}), heartbeat=5)
    after = s2.results("d")["elements"]
    assert after[: len(before)] == before and [e["row"]["delivered"] for e in after[len(before) :]] == [5]
    s2.close()


def test_unregister_streams_and_views_only_once_nothing_uses_them(tmp_path):
    s = system_session(tmp_path)
    c = client(s)
    c.post(
        "/cql",
        content="register stream S (A integer); register stream T (B integer);"
        "register view V as select A from S where A > 0; register query q as select A from V",
    )
    r = c.delete("/sources/S")
    assert r.status_code == 409 and r.json()["error"]["message"] == "S is used by V, q: unregister those first"
    assert c.delete("/sources/V").json()["error"]["message"] == "V is used by q: unregister those first"
    assert c.delete("/queries/q").status_code == 200
    assert c.delete("/sources/V").json() == {"unregistered": "V", "kind": "view"}
    assert c.delete("/sources/S").json() == {"unregistered": "S", "kind": "stream"}
    assert c.delete("/sources/S").status_code == 404
    assert c.delete("/sources/SysQueues").status_code == 409
    assert [d["name"] for d in c.get("/sources").json()["sources"] if not d.get("system")] == ["T"]
    assert c.post("/sources/S/rows", content=jsonl({"ts": 1, "A": 1})).status_code == 404
    s.close()
    s2 = system_session(tmp_path)  # a restart: what was unregistered stays away, and the name is free
    assert [d["name"] for d in s2.sources() if not d.get("system")] == ["T"]
    assert [r["kind"] for r in s2.execute("register stream S (A varchar(2)); select A from S")] == ["stream", "query"]
    s2.close()


def test_restart_replays_the_journal_and_reconciles_with_the_store(tmp_path):
    from sluice.server.store import StoredQuery

    s1 = system_session(tmp_path)
    s1.execute("register stream S (A integer); register query q as select Sum(A) from S [Range 10]")
    s1.push("S", "jsonl", jsonl({"ts": 1, "A": 2}, {"ts": 2, "A": "x"}), heartbeat=1)
    s1.push("S", "jsonl", jsonl({"ts": 2, "A": 3}), heartbeat=2)
    before = s1.results("q")["elements"]
    # registered in the store, then the kill before the checkpoint: the restart adds it
    s1.store.add_query(StoredQuery("late_comer", "select A from S"))
    s1.close()  # closing writes nothing more: what is on disk is what a kill leaves
    s2, restored = build_session("embedded", tmp_path)
    assert restored == {"objects": 1, "queries": 2, "pushes": 4}  # two pushes, two heartbeats
    assert s2.results("q")["elements"] == before  # the output kept, nothing twice
    assert {q["name"] for q in s2.queries()} == {"q", "late_comer"}
    assert len([m for m in s2.engine.rejected() if "'x' is not an integer" in m]) == 1  # counted once
    s2.push("S", "jsonl", jsonl({"ts": 3, "A": 5}), heartbeat=3)
    assert [e["row"]["sum"] for e in s2.results("q")["elements"] if e["sign"] == "+"] == [2, 5, 10]
    s2.close()


def test_a_journal_record_cut_short_by_a_kill_is_ignored(tmp_path):
    from sluice.server.journal import Journal, Record

    j = Journal(tmp_path)
    eng = EmbeddedEngine()
    eng.execute("register stream S (A integer)")
    j.checkpoint(eng)
    j.append([Record("heartbeat", "S", heartbeat=1), Record("heartbeat", "S", heartbeat=2)])
    j.close()
    log = tmp_path / "journal.1.log"
    log.write_bytes(log.read_bytes() + Record("heartbeat", "S", heartbeat=3).encode()[:-3])
    assert [r.heartbeat for r in Journal(tmp_path).records()] == [1, 2]


# -- fixes from a fresh-eyes review ------------------------------------------------------------
def test_a_heartbeat_out_of_range_is_refused_and_pushes_go_on():
    c = client()
    setup(c)
    r = c.post("/heartbeat", json={"ts": 10**30})
    assert r.status_code == 400 and "outside the timestamps" in r.json()["error"]["message"]
    r = c.post("/sources/S/rows?heartbeat=99999999999999999999999", content=jsonl({"ts": 1, "A": 5, "B": "x"}))
    assert r.status_code == 400
    r = c.post("/sources/S/rows?heartbeat=2", content=jsonl({"ts": 2, "A": 5, "B": "x"}))
    assert r.status_code == 200 and r.json()["accepted"] == 1


def test_a_push_failing_in_a_group_fails_alone_and_what_reached_the_engine_is_journaled(tmp_path):
    session, _ = build_session("embedded", tmp_path)
    session.execute("register stream S (A integer); register stream T (A integer)")
    poisoned = session.engine.push_batch

    def push_batch(name, batch):
        if name.lower() == "t":
            raise RuntimeError("boom")
        poisoned(name, batch)

    session.engine.push_batch = push_batch  # type: ignore[method-assign]
    ok = session.push("S", "jsonl", jsonl({"ts": 1, "A": 1}))
    assert ok["accepted"] == 1
    with pytest.raises(SluiceError, match="push failed: RuntimeError"):
        session.push("T", "jsonl", jsonl({"ts": 1, "A": 2}))
    kinds = [(r.kind, r.name) for r in session.journal.records()]
    assert ("push", "S") in kinds and ("push", "T") in kinds  # T reached push_batch: journaled too
    session.close()


def test_a_damaged_journal_record_ends_the_replay_there(tmp_path):
    session, _ = build_session("embedded", tmp_path)
    session.execute("register stream S (A integer); register query q as select A from S")
    session.push("S", "jsonl", jsonl({"ts": 1, "A": 1}))
    session.push("S", "jsonl", jsonl({"ts": 2, "A": 2}))  # (and the first instant: a "start" record)
    session.push("S", "jsonl", jsonl({"ts": 3, "A": 3}))
    log = session.journal._log(session.journal.generation)
    session.close()
    data = bytearray(log.read_bytes())
    data[-3] ^= 0xFF  # a flipped byte in the last record (power lost mid-write)
    log.write_bytes(bytes(data))
    again, restored = build_session("embedded", tmp_path)
    assert restored["pushes"] == 2
    again.close()


def test_loopback_guard_refuses_other_hosts_and_cross_site_changes():
    c = TestClient(
        create_app(ServerSession(EmbeddedEngine()), hosts=["127.0.0.1", "localhost"]), base_url="http://127.0.0.1:8765"
    )
    assert c.get("/health").status_code == 200
    assert c.post("/cql", content="register stream S (A integer)").status_code == 200
    r = c.get("/health", headers={"host": "evil.example"})  # DNS rebinding: the page's own host name
    assert r.status_code == 403 and "not 'evil.example'" in r.json()["error"]["message"]
    r = c.post("/cql", content="register stream T (A integer)", headers={"origin": "http://evil.example"})
    assert r.status_code == 403 and "another origin" in r.json()["error"]["message"]
    assert c.post(
        "/cql", content="register stream T (A integer)", headers={"origin": "http://127.0.0.1:8765"}
    ).is_success
    assert c.get("/sources", headers={"origin": "http://evil.example"}).status_code == 200  # reading is no change


def test_compressed_arrow_is_capped_by_what_it_decodes_to(monkeypatch):
    import sluice.server.formats as formats

    monkeypatch.setattr(formats, "ARROW_MAX", 50_000)
    c = client()
    setup(c)
    t = pa.table({"ts": pa.array([1] * 5000, pa.int64()), "A": pa.array([7] * 5000, pa.int64()), "B": ["x"] * 5000})
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, t.schema, options=pa.ipc.IpcWriteOptions(compression="zstd")) as w:
        w.write_table(t)
    assert len(sink.getvalue()) < 50_000  # the body is under the cap; what it decodes to is not
    r = c.post(
        "/sources/S/rows", content=sink.getvalue(), headers={"content-type": "application/vnd.apache.arrow.stream"}
    )
    assert r.status_code == 400 and "decodes to over 50000 bytes" in r.json()["error"]["message"]


def test_bad_fields_and_bodies_are_400s_not_500s():
    c = client()
    setup(c)
    assert c.post("/cql", content=b"register stream \xff (A integer)").status_code == 400
    for bad in ({"name": "a/b"}, {"name": 5}, {"retain": "x"}, {"max_latency": [1]}, {"weight": "heavy"}):
        r = c.post("/queries", json={"text": "select A from S", **bad})
        assert r.status_code == 400, (bad, r.text)
    # a control PATCH failing on one key keeps (and stores) what it applied before
    assert c.post("/queries", json={"text": "select A from S", "name": "w"}).status_code == 201
    assert c.patch("/controls/queries/w", json={"weight": 2, "active": 7}).status_code == 400
    assert [q["weight"] for q in c.get("/queries").json()["queries"] if q["name"] == "w"] == [2.0]


def test_a_push_to_a_static_relation_is_refused_whole_and_never_journaled(tmp_path):
    """Review of attach_static: the refusal came after the push was marked admitted, so it was
    journaled and the restart's replay failed on it (and its bad rows were counted)."""
    from sluice.server.journal import Journal
    from sluice.server.session import Refused

    eng = EmbeddedEngine()
    eng.execute("register stream S (K integer); register relation R (K integer)")
    eng.attach_static("R", [(1,), (2,)])
    j = Journal(tmp_path)
    j.checkpoint(eng)
    s = ServerSession(eng, journal=j)
    q = s.execute("select S.K from S, R where S.K = R.K")[0]["name"]
    with pytest.raises(Refused, match=r"R is static \(attach_static\): its contents cannot change"):
        s.push("R", "jsonl", jsonl({"ts": 1, "sign": "+", "K": 3}, {"ts": 1, "sign": "+", "K": "x"}))
    s.push("S", "jsonl", jsonl({"ts": 1, "K": 1}, {"ts": 2, "K": 3}), heartbeat=2)
    assert [r.kind for r in j.records()] == ["push", "heartbeat", "start"]  # the refused push is not there
    assert not eng.rejected()
    assert [e["row"] for e in s.results(q)["elements"]] == [{"K": 1}]
    again = j.load()
    assert j.replay(again) == 2  # the restart replays what was taken, and only that
    assert [tuple(e.row) for e in again.queries[q].results()] == [(1,)]
    s.close()


def test_a_replay_fixes_the_first_instant_where_the_live_server_did(tmp_path):
    """Design 004: the first instant is fixed at the first run that can release an element; a
    replay runs once, after every push, so the journal says where the live server fixed it —
    else an element the live server rejected as before the first instant would be taken."""
    from sluice.server.journal import Journal

    eng = EmbeddedEngine(slack=2)
    eng.execute("register stream S (K integer); register stream T (K integer)")
    j = Journal(tmp_path)
    j.checkpoint(eng)
    s = ServerSession(eng, journal=j)
    q = s.execute("select K, count(*) from T [Range 5] group by K")[0]["name"]
    s.push("S", "jsonl", jsonl({"ts": 5, "K": 1}))  # not yet releasable (slack 2): nothing fixed
    assert eng.ctx.start is None
    s.push("S", "jsonl", jsonl({"ts": 8, "K": 1}))  # instant 5 complete: fixed at 5
    assert eng.ctx.start == 5
    report = s.push("T", "jsonl", jsonl({"ts": 3, "K": 2}, {"ts": 6, "K": 2}))
    assert report["accepted"] == 2 and report["late"] == 1  # T's first element: before the first instant
    s.heartbeat(9)
    live = s.results(q)["elements"]
    assert [r.kind for r in j.records()] == ["push", "push", "start", "push", "heartbeat"]
    s.close()  # what a kill leaves
    again = j.load()
    assert j.replay(again) == 4
    assert again.ctx.start == 5
    assert live and [(e.ts, e.sign, e.row) for e in again.queries[q].results()] == [
        (e["ts"], e["sign"], tuple(e["row"].values())) for e in live
    ]
    assert sum(1 for m in again.rejected() if "before the first instant 5" in m) == 1


def test_a_system_sample_does_not_fix_the_first_instant(tmp_path):
    """Review: a sample of the system streams, pushed after a run that fixed nothing, fixed the
    first instant from the server's clock — rejecting user rows the data's own rule takes — and a
    replay (no such record) fixed another."""
    s, _ = build_session("embedded", tmp_path, slack=3, sample_every=1)
    s.execute(
        "register stream S (K integer); register stream T (K integer); "
        "register query m as select queue, Max(held) from SysQueues [Range 10] group by queue; "
        "register query q as select K, count(*) from T [Range 5] group by K"
    )
    s.push("S", "jsonl", jsonl({"ts": 10, "K": 1}))  # instant 10 not complete (slack 3): nothing fixed
    assert s.engine.ctx.start is None
    report = s.push("T", "jsonl", jsonl({"ts": 5, "K": 2}, {"ts": 9, "K": 2}))
    assert report["late"] == 0
    s.heartbeat(12)
    live = s.results("q")["elements"]
    assert s.engine.ctx.start == 5 and live[0]["ts"] == 5
    s.close()
    again, _ = build_session("embedded", tmp_path, slack=3, sample_every=1)
    assert again.engine.ctx.start == 5 and again.results("q")["elements"] == live
    again.close()


def test_punctuations_over_http_are_checked_journaled_and_replayed(tmp_path):
    """``POST /sources/F/punctuations`` (design 023, "Punctuations"): the join forgets the order
    it closes, a later fulfillment of it is rejected — also after a kill and a restart, which
    replays the punctuation from the journal at the ``ts`` it took.
    """
    s, _ = build_session("embedded", tmp_path)
    c = client(s)
    c.post(
        "/cql",
        content="register stream O (oid integer) UNIQUE BY oid; register stream F (oid integer, qty integer) "
        "PUNCTUATED BY oid; register query j as Istream(select O.oid, F.qty from O, F where O.oid = F.oid)",
    )
    c.post("/sources/O/rows", content=jsonl({"ts": 1, "oid": 1}, {"ts": 2, "oid": 2}))
    c.post("/sources/F/rows", content=jsonl({"ts": 3, "oid": 1, "qty": 5}))
    r = c.post("/sources/F/punctuations", json={"column": "oid", "values": [1]})
    assert r.status_code == 200 and r.json() == {"punctuated": "F", "column": "oid", "ts": 3}
    bad = [
        ({"column": "oid"}, 400, "a punctuation is"),
        ({"column": "qty", "upto": 3}, 400, "PUNCTUATED BY qty"),
        ({"column": "oid", "values": 1}, 400, '"values" is a list'),
        ({"column": "oid", "upto": 1, "ts": "x"}, 400, '"ts" is an integer'),
    ]
    for body, status, message in bad:
        r = c.post("/sources/F/punctuations", json=body)
        assert r.status_code == status and message in r.json()["error"]["message"], (body, r.json())
    assert c.post("/sources/X/punctuations", json={"column": "oid", "upto": 1}).status_code == 404
    s.journal.close()  # a kill: no checkpoint
    s2, restored = build_session("embedded", tmp_path)
    assert restored["pushes"] == 3  # two pushes and the punctuation
    c2 = client(s2)
    c2.post("/sources/F/rows?heartbeat=9", content=jsonl({"ts": 9, "oid": 1, "qty": 7}, {"ts": 9, "oid": 2, "qty": 8}))
    rows = [e["row"] for e in c2.get("/queries/j/results").json()["elements"]]
    assert rows == [{"oid": 1, "qty": 5}, {"oid": 2, "qty": 8}]
    assert [m for m in s2.engine.rejected() if "PUNCTUATED BY oid" in m] == [
        "F: element at ts 9: oid = 1 violates PUNCTUATED BY oid: a punctuation before it excluded that value"
    ]
    s2.close()
