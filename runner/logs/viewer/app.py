"""The viewer's ASGI application: routes, templates, and the guard in front of them.

Security, and why:
- The database is opened read-only for every request (`LogStore(read_only=True)`: SQLite
  `mode=ro` plus `query_only`), so no page, bug or crafted request can change the log.
- Jinja2 autoescapes every value; the few pieces of HTML the code builds come from
  Pygments (which escapes) or from `html.hits` (which escapes). Program output and model
  replies are hostile: they show as text, control characters as visible escapes.
- Content-Security-Policy `default-src 'none'`: no script runs at all (the pages need
  none), styles only from this server, no frames, forms only to this server.
- On loopback, requests must name a loopback host (a web page that rebinds its own DNS
  name to 127.0.0.1 cannot read the log), and come from the user who started the server
  or root (peer.py: loopback is every local user's, and the log holds their files). On
  any other address a token is required on
  every request: `?token=` once (answered with a cookie and a redirect that drops it from
  the address bar), then the cookie or an `Authorization: Bearer` header.

Adding pages: write the handlers (a function `(request, store) -> response`), add `Route`s
for them to `ROUTES` and, for a top-level page, a `Section` to `SECTIONS` (the navigation
bar), with templates extending `base.html`. See `pages.py`.
"""

from __future__ import annotations

import ipaddress
import secrets
import time
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from http.cookies import SimpleCookie
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from ..query import PAGE_SIZE
from ..store import LogStore
from . import file_pages, math_pages, pages
from .common import EXCEPTION_HANDLERS
from .html import stylesheet
from .peer import same_user

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

TOKEN_COOKIE = "runner_viewer_token"
CSP = ("default-src 'none'; style-src 'self'; img-src 'self' data:; form-action 'self'; "
       "base-uri 'none'; frame-ancestors 'none'")
SECURITY_HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cache-control", b"no-store"),
]
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1", "[::1]"})
_STATIC = Path(__file__).parent / "static"


def is_loopback(host: str) -> bool:
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class Guard:
    """Security headers on every response; the host check or the token check on every
    request (see the module docstring)."""

    def __init__(self, app: ASGIApp, *, token: str | None) -> None:
        self.app = app
        self.token = token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        started = time.perf_counter()

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                names = {name for name, _ in message.get("headers", [])}
                # Server-Timing: how long the page took to make (benchmarks read it).
                took = f"app;dur={(time.perf_counter() - started) * 1000:.1f}".encode()
                message["headers"] = [*message.get("headers", []),
                                      *(h for h in SECURITY_HEADERS if h[0] not in names),
                                      (b"server-timing", took)]
            await send(message)

        rejection = self._unauthorized(scope)
        if rejection is not None:
            await rejection(scope, receive, send_with_headers)
            return
        await self.app(scope, receive, send_with_headers)

    def _unauthorized(self, scope: Scope) -> Response | None:
        """The response that turns this request away (a host or token this viewer does not
        serve), or None to let it through."""
        request = Request(scope)
        if self.token is None:
            host = request.url.hostname or ""
            if not is_loopback(host):
                return PlainTextResponse(
                    f"this viewer serves loopback addresses only, not host {host!r}\n", 421)
            client, server = scope.get("client"), scope.get("server")
            # (an in-process client, as tests make, has no socket: nothing to look up)
            if client and server and _is_address(str(client[0])) \
                    and not same_user(int(client[1]), int(server[1])):
                return PlainTextResponse(
                    "this server on loopback serves the user who started it (and root), not "
                    "other users of this machine\n", 403)
            return None
        from_query = request.query_params.get("token")
        supplied = [from_query, request.cookies.get(TOKEN_COOKIE), _bearer(request)]
        if not any(value and secrets.compare_digest(value.encode(), self.token.encode())
                   for value in supplied):
            return PlainTextResponse(
                "this viewer needs its token: open the address it printed when it started "
                "(the one with ?token=)\n", 401)
        if from_query:
            # Keep the token out of the address bar, the history and Referer headers.
            rest = urlencode([(k, v) for k, v in parse_qsl(request.url.query) if k != "token"])
            response = RedirectResponse(request.url.path + (f"?{rest}" if rest else ""), 303)
            cookie: SimpleCookie = SimpleCookie()
            cookie[TOKEN_COOKIE] = self.token
            cookie[TOKEN_COOKIE]["httponly"] = True
            cookie[TOKEN_COOKIE]["samesite"] = "Strict"
            cookie[TOKEN_COOKIE]["path"] = "/"
            response.headers.append("set-cookie", cookie[TOKEN_COOKIE].OutputString())
            return response
        return None


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _bearer(request: Request) -> str | None:
    value = request.headers.get("authorization", "")
    return value[7:].strip() if value.lower().startswith("bearer ") else None


def create_app(db_path: Path | str, *, token: str | None = None,
               routes: Sequence[BaseRoute] = (), page_size: int = PAGE_SIZE) -> ASGIApp:
    """The viewer of the log at `db_path` (opened read-only per request). `token`, when
    given, is required on every request; `routes` are added to the built-in ones;
    `page_size` rows make a page of a list."""
    path = Path(db_path)
    LogStore(path, read_only=True).close()  # fail now, with a clear error, not on the first page
    css = stylesheet()

    async def pygments_css(request: Request) -> Response:
        return Response(css, media_type="text/css")

    app = Starlette(
        routes=[*pages.routes(), *file_pages.routes(), *math_pages.routes(), *routes,
                Route("/static/pygments.css", pygments_css),
                Mount("/static", app=StaticFiles(directory=_STATIC), name="static")],
        exception_handlers=EXCEPTION_HANDLERS,
    )
    app.state.db_path = path
    app.state.page_size = page_size
    return Guard(app, token=token)
