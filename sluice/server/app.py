"""The HTTP API of ``sluice serve`` (Starlette): routes, errors as JSON, size limits, the token.

Every route that touches the engine runs the session's call on one of the app's few worker threads
(the engine is synchronous; ``ServerSession.lock`` takes them one at a time) so that subscribers'
streams keep flowing meanwhile.  Errors are one JSON object, ``{"error": {"type", "message", …}}``, with the
line, column and caret excerpt of a CQL error; 4xx always says why.

>>> from starlette.testclient import TestClient
>>> from sluice.backends.embedded import EmbeddedEngine
>>> client = TestClient(create_app(ServerSession(EmbeddedEngine())))
>>> client.post("/cql", content="register stream S (A integer)").json()["results"]
[{'kind': 'stream', 'name': 'S'}]
>>> client.post("/cql", content="select B from S").json()["error"]["col"]
8
"""

from __future__ import annotations

import asyncio
import functools
import hmac
import json
import logging
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import fields, is_dataclass
from typing import Any
from urllib.parse import urlsplit

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from sluice.cql.errors import CQLError
from sluice.errors import InUseError, SluiceError
from sluice.server.controls import Controls
from sluice.server.formats import BadBody, format_of
from sluice.server.session import NotFound, Refused, ScriptError, ServerSession
from sluice.server.ui import PAGE, metrics, plan_graph

log = logging.getLogger("sluice.server")

MAX_BODY = 16 * 1024 * 1024  # bytes a request may send (``--max-body``)


class TooLarge(SluiceError):
    """The request body is over the server's limit."""


class BadRequest(SluiceError):
    """A request's parameters or JSON are not what the route takes."""


# the HTTP status of each kind of error, most specific first (looked up along the class's MRO)
STATUS: dict[type[BaseException], int] = {
    NotFound: 404,
    Refused: 409,
    InUseError: 409,
    TooLarge: 413,
    BadBody: 400,
    BadRequest: 400,
    CQLError: 400,
    SluiceError: 400,
}


def error_json(e: BaseException) -> dict[str, Any]:
    """An error as the API reports it; a CQL error with where it is and the caret excerpt."""
    if isinstance(e, CQLError):
        return {
            "type": type(e).__name__,
            "message": e.message,
            "line": e.line,
            "col": e.col,
            "start": e.span.start,
            "end": e.span.end,
            "excerpt": e.render(),
            "hint": e.hint,
            "note": e.note,
        }
    return {"type": type(e).__name__, "message": str(e)}


def status_of(e: BaseException) -> int:
    for cls in type(e).__mro__:
        if cls in STATUS:
            return STATUS[cls]
    return 500


def _fail(e: BaseException) -> JSONResponse:
    if isinstance(e, ScriptError):
        return JSONResponse({"error": error_json(e.error), "applied": e.applied}, status_of(e.error))
    if not isinstance(e, SluiceError):  # a bug: logged with its traceback, reported without it
        log.exception("internal error", exc_info=e)
        return JSONResponse({"error": {"type": "InternalError", "message": f"{type(e).__name__}: {e}"}}, 500)
    return JSONResponse({"error": error_json(e)}, status_of(e))


def _jsonable(x: Any) -> Any:
    if is_dataclass(x) and not isinstance(x, type):  # (private fields, nested ones too, are bookkeeping: a deque)
        return {f.name: _jsonable(getattr(x, f.name)) for f in fields(x) if not f.name.startswith("_")}
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_jsonable(v) for v in x]
    if isinstance(x, float) and x != x:
        return None
    if isinstance(x, float) and x in (float("inf"), float("-inf")):
        return "Infinity" if x > 0 else "-Infinity"
    return x


async def read_body(request: Request, limit: int) -> bytes:
    """The body, refused (413) as soon as it passes ``limit`` bytes, announced or not."""
    announced = request.headers.get("content-length")
    if announced is not None and announced.isdigit() and int(announced) > limit:
        raise TooLarge(f"the body is {announced} bytes; this server takes at most {limit} (--max-body)")
    parts: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise TooLarge(f"the body is over {limit} bytes; this server takes at most {limit} (--max-body)")
        parts.append(chunk)
    return b"".join(parts)


async def read_json(request: Request, limit: int) -> dict[str, Any]:
    raw = await read_body(request, limit)
    try:
        obj = json.loads(raw or b"{}")
    except ValueError as e:
        raise BadRequest(f"the body is not JSON: {e}") from None
    if not isinstance(obj, dict):
        raise BadRequest("the body must be a JSON object")
    return obj


def int_param(request: Request, key: str) -> int | None:
    v = request.query_params.get(key)
    if v is None or v == "":
        return None
    try:
        return int(v)
    except ValueError:
        raise BadRequest(f"parameter {key}={v!r} is not an integer") from None


def _position(text: str | None) -> tuple[int | None, str | None]:
    """A resumed subscription's start: ``EPOCH:P`` (an SSE id: ``Last-Event-ID``) or ``P`` (``?after=``)."""
    if not text:
        return None, None
    epoch, _, pos = text.rpartition(":")
    if not (pos.isascii() and pos.isdigit()):
        raise BadRequest(
            f"Last-Event-ID/after must be an event id EPOCH:POSITION or a position (0 or more), not {text!r}"
        )
    return int(pos), epoch or None


Handler = Callable[[Request], Awaitable[Response]]


def handled(fn: Handler) -> Handler:
    async def wrapper(request: Request) -> Response:
        try:
            return await fn(request)
        except Exception as e:  # every failure becomes one JSON error (bugs as 500, logged)
            return _fail(e)

    return wrapper


class TokenGuard:
    """Every request needs ``Authorization: Bearer TOKEN`` (or ``?token=TOKEN``, for browsers'
    EventSource) when the server has a token: off loopback it must have one.
    """

    def __init__(self, app: ASGIApp, token: str | None) -> None:
        self.app = app
        self.token = token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.token is None or scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        given = request.headers.get("authorization", "")
        given = given[7:] if given.lower().startswith("bearer ") else request.query_params.get("token", "")
        if not hmac.compare_digest(given.encode(), self.token.encode()):
            resp = JSONResponse(
                {"error": {"type": "Unauthorized", "message": "this server needs its token: Authorization: Bearer …"}},
                401,
                headers={"WWW-Authenticate": "Bearer"},
            )
            await resp(scope, receive, send)
            return
        await self.app(scope, receive, send)


QUERY_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]{0,127}")


def _check_query_fields(body: dict[str, Any]) -> None:
    """The fields of a query registration, each of its type (a 400 naming it, not a 500)."""
    name = body.get("name")
    if name is not None and not (isinstance(name, str) and QUERY_NAME.fullmatch(name)):
        raise BadRequest(
            f"name {name!r}: a query name is letters, digits, '_', '.' or '-' (at most 128; it is part of URLs)"
        )
    for k in ("weight", "min_precision"):
        if k in body and (isinstance(body[k], bool) or not isinstance(body[k], int | float)):
            raise BadRequest(f"{k} must be a number, not {body[k]!r}")
    if "max_latency" in body and body["max_latency"] is not None:
        v = body["max_latency"]
        if isinstance(v, bool) or not isinstance(v, int | float | str):
            raise BadRequest(f'max_latency must be seconds or a duration such as "200ms", not {v!r}')
    if "retain" in body and body["retain"] is not None:
        v = body["retain"]
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise BadRequest(f"retain must be null (all), 0 or a positive number of elements, not {v!r}")


class LoopbackGuard:
    """A token-less server on loopback answers only requests addressed to a loopback name (a DNS
    rebinding page cannot reach it under its own host name), and changes nothing for a page of
    another origin (a plain-text POST from any site the user visits is a "simple" cross-site
    request a browser sends without asking).  ``hosts``: the names the server is reached by.
    """

    CHANGES = frozenset({"POST", "PUT", "PATCH", "DELETE"})

    def __init__(self, app: ASGIApp, hosts: Sequence[str]) -> None:
        self.app = app
        self.hosts = {h.lower().strip("[]") for h in hosts}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        host = urlsplit("//" + request.headers.get("host", "")).hostname or ""
        origin = request.headers.get("origin")
        why = None
        if host.lower() not in self.hosts:
            why = f"this server answers requests to {', '.join(sorted(self.hosts))}, not {host!r}"
        elif origin is not None and request.method in self.CHANGES:
            o = (urlsplit(origin).hostname or "").lower()
            if o not in self.hosts:
                why = f"a page of another origin ({origin}) may not change this server"
        if why is not None:
            resp = JSONResponse({"error": {"type": "Forbidden", "message": why}}, 403)
            await resp(scope, receive, send)
            return
        await self.app(scope, receive, send)


def create_app(
    session: ServerSession,
    *,
    token: str | None = None,
    hosts: Sequence[str] | None = None,
    max_body: int = MAX_BODY,
    keepalive: float = 15.0,
    workers: int = 4,
) -> ASGIApp:
    """The ASGI application of ``sluice serve`` over ``session``.

    Session calls run on ``workers`` threads of the app's own, not on the framework's pool of 40:
    the engine takes one call at a time anyway, and every thread that touches Arrow keeps its own
    allocator heap (mimalloc), so 50 concurrent pushers on 40 threads held ~3× the memory.
    """
    controls = Controls(session)
    executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="sluice-session")

    def call(fn: Callable[..., Any], *args: Any) -> Awaitable[Any]:
        return asyncio.get_running_loop().run_in_executor(executor, functools.partial(fn, *args))

    @handled
    async def health(request: Request) -> Response:
        return JSONResponse(await call(session.health))

    @handled
    async def cql(request: Request) -> Response:
        try:
            text = (await read_body(request, max_body)).decode("utf-8", errors="strict")
        except UnicodeDecodeError as e:
            raise BadRequest(f"CQL must be UTF-8: byte {e.start} is not") from None
        return JSONResponse({"results": await call(session.execute, text)})

    @handled
    async def queries(request: Request) -> Response:
        if request.method == "POST":
            body = await read_json(request, max_body)
            if not isinstance(body.get("text"), str):
                raise BadRequest('register a query with {"text": "<CQL>", "name": …, "weight": …, "retain": …}')
            unknown = set(body) - {"text", "name", "weight", "min_precision", "max_latency", "retain"}
            if unknown:
                raise BadRequest(f"unknown field(s) {', '.join(sorted(unknown))}")
            _check_query_fields(body)
            kw = {k: body[k] for k in ("weight", "min_precision", "max_latency", "retain") if k in body}
            out = await call(lambda: session.register_query(body["text"], body.get("name"), **kw))
            return JSONResponse(out, 201)
        return JSONResponse({"queries": await call(session.queries)})

    @handled
    async def query(request: Request) -> Response:
        name = request.path_params["name"]
        if request.method == "DELETE":
            await call(session.unregister, name)
            return JSONResponse({"unregistered": name})
        mine = [q for q in await call(session.queries) if q["name"] == name]
        if not mine:
            raise NotFound(f"no query named {name!r}")
        return JSONResponse(mine[0])

    @handled
    async def results(request: Request) -> Response:
        return JSONResponse(await call(session.results, request.path_params["name"], int_param(request, "last")))

    @handled
    async def answer(request: Request) -> Response:
        return JSONResponse(await call(session.answer, request.path_params["name"]))

    @handled
    async def explain(request: Request) -> Response:
        return PlainTextResponse(await call(session.explain, request.path_params.get("name")))

    @handled
    async def sources(request: Request) -> Response:
        return JSONResponse({"sources": await call(session.sources)})

    @handled
    async def source(request: Request) -> Response:
        return JSONResponse(await call(session.drop, request.path_params["name"]))

    @handled
    async def push(request: Request) -> Response:
        name = request.path_params["name"]
        fmt = format_of(request.headers.get("content-type"), request.query_params.get("format"))
        heartbeat = int_param(request, "heartbeat")
        body = await read_body(request, max_body)
        return JSONResponse(await call(session.push, name, fmt, body, heartbeat))

    @handled
    async def heartbeat(request: Request) -> Response:
        body = await read_json(request, max_body)
        ts = body.get("ts")
        if isinstance(ts, bool) or not isinstance(ts, int):
            raise BadRequest('a heartbeat is {"ts": <integer>}: no element stamped at or before ts is still to come')
        await call(session.heartbeat, ts)
        return JSONResponse({"heartbeat": ts})

    @handled
    async def punctuate(request: Request) -> Response:
        name = request.path_params["name"]
        body = await read_json(request, max_body)
        column, ts = body.get("column"), body.get("ts")
        if not isinstance(column, str) or ("values" in body) == ("upto" in body):
            raise BadRequest(
                'a punctuation is {"column": <attribute>, "values": [...]} or {"column": <attribute>, '
                '"upto": <value>}, with an optional "ts": <integer> (default: the latest pushed)'
            )
        if ts is not None and (isinstance(ts, bool) or not isinstance(ts, int)):
            raise BadRequest('a punctuation\'s "ts" is an integer')
        values = body.get("values")
        if values is not None and not isinstance(values, list):
            raise BadRequest('a punctuation\'s "values" is a list')
        at = await call(session.punctuate, name, column, values, body.get("upto"), ts)
        return JSONResponse({"punctuated": name, "column": column, "ts": at})

    @handled
    async def statistics(request: Request) -> Response:
        return JSONResponse(_jsonable(await call(controls.statistics)))

    @handled
    async def control(request: Request) -> Response:
        what, name = request.path_params.get("what"), request.path_params.get("name")
        if request.method == "PATCH":
            body = await read_json(request, max_body)
            await call(controls.update, what, name, body)
        return JSONResponse(await call(controls.tables))

    async def page(request: Request) -> Response:
        return HTMLResponse(PAGE.read_text(encoding="utf-8"))

    @handled
    async def ui_plan(request: Request) -> Response:
        return JSONResponse(await call(plan_graph, session))

    @handled
    async def ui_metrics(request: Request) -> Response:
        return JSONResponse(_jsonable(await call(metrics, session)))

    async def events(request: Request) -> Response:
        name = request.path_params["name"]
        try:
            most = int_param(request, "max_events")
            after, epoch = _position(request.headers.get("last-event-id") or request.query_params.get("after"))
            sub = await call(session.subscribe, name, asyncio.get_running_loop(), after, epoch)
        except Exception as e:
            return _fail(e)
        return StreamingResponse(
            _stream(request, sub, keepalive, most, lambda: executor.submit(session.unsubscribe, sub)),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

    routes = [
        Route("/", page),
        Route("/ui/plan", ui_plan),
        Route("/ui/metrics", ui_metrics),
        Route("/health", health),
        Route("/cql", cql, methods=["POST"]),
        Route("/queries", queries, methods=["GET", "POST"]),
        Route("/queries/{name}", query, methods=["GET", "DELETE"]),
        Route("/queries/{name}/results", results),
        Route("/queries/{name}/answer", answer),
        Route("/queries/{name}/events", events),
        Route("/queries/{name}/explain", explain),
        Route("/explain", explain),
        Route("/sources", sources),
        Route("/sources/{name}", source, methods=["DELETE"]),
        Route("/sources/{name}/rows", push, methods=["POST"]),
        Route("/sources/{name}/punctuations", punctuate, methods=["POST"]),
        Route("/heartbeat", heartbeat, methods=["POST"]),
        Route("/statistics", statistics),
        Route("/controls", control, methods=["GET", "PATCH"]),
        Route("/controls/{what}/{name}", control, methods=["PATCH"]),
    ]
    app = Starlette(routes=routes)
    guarded: ASGIApp = LoopbackGuard(app, hosts) if hosts is not None and token is None else app
    return TokenGuard(guarded, token)


async def _stream(
    request: Request, sub: Any, keepalive: float, most: int | None, release: Callable[[], Any]
) -> AsyncIterator[str]:
    """Server-Sent Events: ``elements`` (a JSON list of ``{ts, sign, row}``), ``gap`` (what this
    subscriber lost by falling behind) and ``end`` (the query was unregistered).
    """
    sent = 0
    try:
        yield f"event: subscribed\ndata: {json.dumps({'query': sub.query, 'backlog': sub.limit})}\n\n"
        while most is None or sent < most:
            try:
                await asyncio.wait_for(sub.ready.wait(), timeout=keepalive)
            except TimeoutError:
                if await request.is_disconnected():
                    return
                yield ": keep-alive\n\n"
                continue
            els, gap = sub.take()
            if gap is not None:
                yield f"event: gap\ndata: {json.dumps(gap)}\n\n"
            if els:
                yield f"event: elements\nid: {sub.epoch}:{sub.taken}\ndata: {sub.event_data(els)}\n\n"
                sent += 1
            if sub.closed and not sub.held:
                yield "event: end\ndata: {}\n\n"
                return
    finally:
        # not awaited: when the client went away this runs in a cancelled task, where an await
        # would be cancelled before it unsubscribed
        sub.close()
        release()
