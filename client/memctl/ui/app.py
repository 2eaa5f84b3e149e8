"""The memory browser's web app: Starlette routes over the daemon's typed requests, behind a
guard that admits only this run's token, from this machine, under our own host name.

Safe by construction (issue 18): everything memoryd holds came from transcripts and is untrusted
text. The page renders it with ``textContent`` only, and a strict Content-Security-Policy allows
no inline script or style. Every request must carry this run's token: the page and its assets in
the address (first load) or the cookie it then sets; the API only in the ``X-Memoryd-Token``
header, which no other site can make a browser send, so no cross-site request can read or act.
The ``Host`` header must name 127.0.0.1 or localhost at our port (no DNS rebinding), and the
server listens on loopback only.
"""

from __future__ import annotations

import functools
import hmac
import importlib.resources
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, MutableMapping
from http.cookies import SimpleCookie
from typing import Any, TypeVar
from urllib.parse import parse_qs

import anyio.to_thread
import msgspec
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from memctl import protocol as p
from memctl.transport import Client, DaemonUnavailable, MessageTooLarge

R = TypeVar("R", bound=msgspec.Struct)
Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

TOKEN_HEADER = "x-memoryd-token"
ASSETS = {
    "app.js": "text/javascript; charset=utf-8",
    "app.css": "text/css; charset=utf-8",
}
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; font-src 'none'; object-src 'none'; base-uri 'none'; "
    "form-action 'none'; frame-ancestors 'none'"
)
SECURITY_HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),  # the token is in the first address
    (b"x-frame-options", b"DENY"),
    (b"cache-control", b"no-store"),
    (b"cross-origin-resource-policy", b"same-origin"),
]
STATUS_OF_ERROR = {
    p.ErrorCode.BAD_REQUEST: 400,
    p.ErrorCode.FORBIDDEN: 403,
    p.ErrorCode.NOT_FOUND: 404,
    p.ErrorCode.CONFLICT: 409,
    p.ErrorCode.TOO_LARGE: 413,
    p.ErrorCode.UNAVAILABLE: 503,
    p.ErrorCode.VERSION_MISMATCH: 502,
}
AUDIT_WAIT_MS = 10_000  # one long poll of the live audit stream
REVIEW_LIMIT = 500
PAGE = 100  # entries per page of the memory view without a query

_json = msgspec.json.Encoder()


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


class Backend:
    """The daemon, as the page sees it: one client, the project the page acts on."""

    def __init__(self, project: str, explicit: bool, budget_s: float | None = None) -> None:
        self.project = project
        self.explicit = explicit  # named with --project, or picked in the Projects view
        self.budget_s = budget_s or 5.0
        self.client = Client(budget_s=self.budget_s)
        self._lock = threading.Lock()

    def close(self) -> None:
        self.client.close()

    def call(self, request: p.Request[R], budget_s: float | None = None) -> R:
        with self._lock:
            project, explicit = self.project, self.explicit
        request.project = project
        request.project_explicit = explicit
        try:
            msgspec.convert(msgspec.to_builtins(request), type(request))
        except msgspec.ValidationError as exc:
            raise ApiError(400, "bad_request", f"invalid value: {exc}") from None
        try:
            reply = self.client.call(request, budget_s or self.budget_s)
        except DaemonUnavailable as exc:
            raise ApiError(503, "unavailable", str(exc)) from None
        except MessageTooLarge as exc:
            raise ApiError(413, "too_large", str(exc)) from None
        if isinstance(reply, p.Error):
            raise ApiError(STATUS_OF_ERROR.get(reply.code, 500), reply.code.value, reply.message)
        return p.result_of(request, reply)

    def switch(self, path: str) -> None:
        with self._lock:
            self.project, self.explicit = path, True


# --------------------------------------------------------------------------- the guard


class Guard:
    """Refuses what is not this run's page asking: see the module's docstring."""

    def __init__(self, app: ASGIApp, token: str, port: int) -> None:
        self.app = app
        self.token = token.encode()
        self.hosts = {f"127.0.0.1:{port}".encode(), f"localhost:{port}".encode()}
        self.origins = {b"http://" + h for h in self.hosts}
        self.cookie = f"memoryd_ui_{port}"  # cookies are not kept apart by port: the name is

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return  # no websockets; lifespan is off
        headers: dict[bytes, bytes] = {}
        for name, value in scope["headers"]:
            headers.setdefault(name.lower(), value)
        problem, set_cookie = self._refusal(scope, headers)
        if problem:
            await _plain(send, 403, f"refused: {problem}\n")
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                extra = list(SECURITY_HEADERS)
                if set_cookie:
                    value = (
                        f"{self.cookie}={self.token.decode()}; Path=/; HttpOnly; SameSite=Strict"
                    )
                    extra.append((b"set-cookie", value.encode()))
                message["headers"] = [*message.get("headers", []), *extra]
            await send(message)

        await self.app(scope, receive, send_with_headers)

    def _same(self, given: bytes | str | None) -> bool:
        if given is None:
            return False
        raw = given.encode() if isinstance(given, str) else given
        return hmac.compare_digest(raw, self.token)

    def _refusal(self, scope: Scope, headers: dict[bytes, bytes]) -> tuple[str, bool]:
        """(why it is refused or "", whether to set the cookie)."""
        if headers.get(b"host") not in self.hosts:
            return "unknown Host (open the address memctl ui printed)", False
        path, method = scope["path"], scope["method"]
        if path.startswith("/api/"):
            if not self._same(headers.get(TOKEN_HEADER.encode())):
                return "the API needs this run's token in the X-Memoryd-Token header", False
            if method not in ("GET", "POST"):
                return f"method {method} not allowed", False
            if method == "POST":
                origin = headers.get(b"origin")
                if origin is not None and origin not in self.origins:
                    return "a request from another origin", False
                if headers.get(b"sec-fetch-site", b"same-origin") != b"same-origin":
                    return "a cross-site request", False
                if not headers.get(b"content-type", b"").startswith(b"application/json"):
                    return "a change must be sent as application/json", False
            return "", False
        if method not in ("GET", "HEAD"):
            return f"method {method} not allowed", False
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        if any(self._same(t) for t in query.get("token", [])):
            return "", True
        cookie = SimpleCookie()
        try:
            cookie.load(headers.get(b"cookie", b"").decode("latin-1"))
        except Exception:  # a malformed cookie header is no token
            return "no token (open the address memctl ui printed)", False
        morsel = cookie.get(self.cookie)
        if morsel is not None and self._same(morsel.value):
            return "", False
        return "no token (open the address memctl ui printed)", False


async def _plain(send: Send, status: int, text: str) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"text/plain; charset=utf-8"), *SECURITY_HEADERS],
        }
    )
    await send({"type": "http.response.body", "body": text.encode()})


# --------------------------------------------------------------------------- routes


def _ok(value: Any, status: int = 200) -> Response:
    return Response(_json.encode(value), status_code=status, media_type="application/json")


def _failed(exc: ApiError) -> Response:
    return _ok({"error": exc.code, "message": exc.message}, exc.status)


def _int(request: Request, name: str, default: int) -> int:
    value = request.query_params.get(name)
    if value in (None, ""):
        return default
    try:
        return int(value)
    except ValueError:
        raise ApiError(400, "bad_request", f"{name} must be a whole number") from None


def _text(request: Request, name: str) -> str:
    return request.query_params.get(name, "")


async def _body(request: Request) -> dict[str, Any]:
    try:
        body = msgspec.json.decode(await request.body())
    except msgspec.DecodeError:
        raise ApiError(400, "bad_request", "the body is not JSON") from None
    if not isinstance(body, dict):
        raise ApiError(400, "bad_request", "the body must be a JSON object")
    return body


def _field(body: dict[str, Any], name: str, kind: type = str) -> Any:
    value = body.get(name)
    if not isinstance(value, kind):
        raise ApiError(400, "bad_request", f"{name} is missing or not a {kind.__name__}")
    return value


# What a POST's action asks of the daemon, from its body and target id.
Action = Callable[[dict[str, Any], str], "p.Request[Any]"]


def _reason(body: dict[str, Any]) -> str:
    reason = body.get("reason") or ""
    if not isinstance(reason, str):
        raise ApiError(400, "bad_request", "reason must be text")
    return reason


ENTRY_ACTIONS: dict[str, Action] = {
    "pin": lambda body, target: p.Pin(target=target),
    "unpin": lambda body, target: p.Unpin(target=target),
    "archive": lambda body, target: p.Archive(targets=[target]),
    "unarchive": lambda body, target: p.Unarchive(target=target),
    "supersede": lambda body, target: p.Supersede(target=target, content=_field(body, "content")),
}
REVIEW_ACTIONS: dict[str, Action] = {
    "accept": lambda body, target: p.ReviewAccept(ids=[target]),
    "reject": lambda body, target: p.ReviewReject(ids=[target], reason=_reason(body)),
    "edit": lambda body, target: p.ReviewEdit(target=target, content=_field(body, "content")),
}


def build_app(backend: Backend, *, token: str, port: int) -> ASGIApp:
    static = importlib.resources.files("memctl.ui") / "static"
    index = (static / "index.html").read_text(encoding="utf-8").replace("{{TOKEN}}", token)
    assets = {name: (static / name).read_bytes() for name in ASSETS}

    async def run(fn: Callable[[], Any]) -> Response:
        try:
            return _ok(await anyio.to_thread.run_sync(fn))
        except ApiError as exc:
            return _failed(exc)

    async def page(request: Request) -> Response:
        return Response(index, media_type="text/html; charset=utf-8")

    async def asset(request: Request) -> Response:
        name = request.path_params["name"]
        if name not in assets:
            return Response("not found\n", status_code=404, media_type="text/plain")
        return Response(assets[name], media_type=ASSETS[name])

    async def favicon(request: Request) -> Response:
        return Response(status_code=204)

    async def status(request: Request) -> Response:
        def go() -> Any:
            result = backend.call(p.StatusRequest())
            return {"status": result, "project": backend.project}

        return await run(go)

    async def projects(request: Request) -> Response:
        def go() -> Any:
            # One request: the daemon describes each project, reading one that is not open
            # without opening it (a status per project would open, and evict, every one).
            known = backend.call(p.Projects()).projects
            return {"projects": known, "current": backend.project}

        return await run(go)

    async def switch(request: Request) -> Response:
        try:
            path = _field(await _body(request), "path")
        except ApiError as exc:
            return _failed(exc)

        def go() -> Any:
            known = {x.path for x in backend.call(p.Projects()).projects}
            if path not in known:
                raise ApiError(404, "not_found", f"{path} is not a project the daemon knows")
            backend.switch(path)
            return {"project": path}

        return await run(go)

    async def entries(request: Request) -> Response:
        def go() -> Any:
            query = _text(request, "q").strip()
            archived = _text(request, "archived") == "1"
            category = _text(request, "category") or None
            status = _text(request, "status") or None
            tag = _text(request, "tag").strip()
            if query:
                k = _int(request, "k", 20)
                found = backend.call(p.Search(query=query, k=k, archive=archived)).results
                items = [
                    r
                    for r in found
                    if (category is None or r.category == category)
                    and (status is None or r.status == status)
                    and (not tag or tag in r.tags)
                ]
                return {"mode": "search", "items": items, "searched": len(found)}
            offset = _int(request, "offset", 0)
            listed = backend.call(
                p.ListEntries(
                    category=category,  # type: ignore[arg-type]  # checked by the request
                    status=status,  # type: ignore[arg-type]
                    archived=archived,
                    limit=PAGE,
                    offset=offset,
                )
            )
            items2 = [e for e in listed.entries if not tag or tag in e.tags]
            return {"mode": "list", "items": items2, "total": listed.total, "offset": offset}

        return await run(go)

    async def entry(request: Request) -> Response:
        return await run(lambda: backend.call(p.Show(target=_text(request, "id"))))

    async def act(request: Request, actions: Mapping[str, Action]) -> Response:
        """A state-changing POST: ``{"action", "id", ...}`` → the request its action makes."""
        try:
            body = await _body(request)
            action, target = _field(body, "action"), _field(body, "id")
        except ApiError as exc:
            return _failed(exc)
        make = actions.get(action)
        if make is None:
            return _failed(ApiError(400, "bad_request", f"unknown action {action[:40]!r}"))
        return await run(lambda: backend.call(make(body, target)))

    async def entry_action(request: Request) -> Response:
        return await act(request, ENTRY_ACTIONS)

    async def review(request: Request) -> Response:
        return await run(lambda: backend.call(p.Review(limit=REVIEW_LIMIT)))

    async def review_action(request: Request) -> Response:
        return await act(request, REVIEW_ACTIONS)

    async def inject(request: Request) -> Response:
        def go() -> Any:
            fmt = _text(request, "format") or "plain"
            return backend.call(p.Inject(format=fmt, query=_text(request, "query")))  # type: ignore[arg-type]

        return await run(go)

    async def audit(request: Request) -> Response:
        return await run(lambda: backend.call(p.AuditTail(n=_int(request, "n", 200))))

    async def check(request: Request) -> Response:
        return await run(lambda: backend.call(p.Check(), 30.0))

    async def health(request: Request) -> Response:
        return await run(lambda: backend.call(p.Health(samples=300)))

    async def episodes(request: Request) -> Response:
        return await run(lambda: backend.call(p.Episodes(query=_text(request, "q"), limit=50)))

    async def session(request: Request) -> Response:
        return await run(lambda: backend.call(p.SessionShow(session_id=_text(request, "id"))))

    async def graph(request: Request) -> Response:
        def go() -> Any:
            depth = _int(request, "depth", 2)
            return backend.call(p.Graph(target=_text(request, "id"), depth=depth))

        return await run(go)

    async def audit_stream(request: Request) -> Response:
        try:
            after = _int(request, "after", 0)
        except ApiError as exc:
            return _failed(exc)

        async def events() -> AsyncIterator[bytes]:
            last = after
            yield b": live\n\n"
            while not await request.is_disconnected():
                tail = p.AuditTail(n=10_000, after_seq=last, wait_ms=AUDIT_WAIT_MS)
                try:
                    result = await anyio.to_thread.run_sync(
                        functools.partial(backend.call, tail, AUDIT_WAIT_MS / 1000 + 5)
                    )
                except ApiError as exc:
                    yield b"event: failed\ndata: " + _json.encode(exc.message) + b"\n\n"
                    return
                for event in result.events:
                    yield b"id: %d\ndata: " % event.seq + _json.encode(event) + b"\n\n"
                    last = max(last, event.seq)
                if not result.events:
                    yield b": waiting\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    routes = [
        Route("/", page),
        Route("/static/{name}", asset),
        Route("/favicon.ico", favicon),
        Route("/api/status", status),
        Route("/api/projects", projects),
        Route("/api/project", switch, methods=["POST"]),
        Route("/api/entries", entries),
        Route("/api/entry", entry),
        Route("/api/entry", entry_action, methods=["POST"]),
        Route("/api/review", review),
        Route("/api/review", review_action, methods=["POST"]),
        Route("/api/inject", inject),
        Route("/api/audit", audit),
        Route("/api/audit/stream", audit_stream),
        Route("/api/check", check),
        Route("/api/health", health),
        Route("/api/episodes", episodes),
        Route("/api/session", session),
        Route("/api/graph", graph),
    ]
    return Guard(Starlette(routes=routes), token, port)
