"""The web view as an ASGI app (Starlette): static pages filled by the browser from JSON.

Routes: `/` the swarm, `/idea/<id>` one idea, `/api/overview` and `/api/idea/<id>` their data,
`/api/whatif` the sweep table (where the workspace's seed secret is at hand), `/chart/progress.svg`
the progress plot. Read-only: nothing here writes. Every response forbids inline script and
scripts from anywhere else (Content-Security-Policy), so text a researcher wrote can only ever
be shown, never run, even if it reached the page as markup. Beyond loopback every request must
carry the credentials `WebOptions.credentials` names (HTTP Basic).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hmac
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from ledger.sql_protocol import LedgerUnavailable, SqlError
from swarm.report_data import load
from swarm.report_plot import render_progress
from swarm.web import pages
from swarm.web.source import Source, rows

log = logging.getLogger(__name__)
STATIC = Path(__file__).resolve().parent / "static"
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
        "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
REALM = 'Basic realm="research-swarm", charset="UTF-8"'

# The what-if table of a sweep (`/api/whatif?sweep=...`), made by the caller: None where it
# cannot be made here (no seed secret: a remote swarm).
WhatIf = Callable[[str], Awaitable[dict[str, Any]]]


@dataclass(frozen=True)
class WebOptions:
    title: str
    lower_is_better: bool = True
    refresh_s: float = 2.0
    credentials: tuple[str, str] | None = None  # (user, password); None: loopback, no login
    whatif: WhatIf | None = None
    # The Host headers served without credentials: a page elsewhere that points its own name at
    # 127.0.0.1 (DNS rebinding) sends its own name, and is refused.
    hosts: frozenset[str] = frozenset({"127.0.0.1", "localhost", "::1"})


def make_app(source: Source, options: WebOptions) -> Starlette:
    chart = _Chart(source, options.lower_is_better)
    # Every open page asks every refresh_s: one answer shared for half that long, however many
    # ask (a flood of requests would otherwise take the ledger's SQL from everyone else).
    shared = _Shared(options.refresh_s / 2)

    async def overview(request: Request) -> Response:
        try:
            page = await shared.get(lambda: pages.overview(source, options.lower_is_better))
        except (LedgerUnavailable, SqlError, TimeoutError) as exc:
            return JSONResponse({"error": f"ledger: {exc}"}, status_code=503)
        return JSONResponse({**page, "title": options.title, "refresh_s": options.refresh_s})

    async def idea(request: Request) -> Response:
        try:
            page = await pages.idea(source, request.path_params["idea_id"])
            if page is not None:
                page["lower_is_better"] = options.lower_is_better
        except (LedgerUnavailable, SqlError, TimeoutError) as exc:
            return JSONResponse({"error": f"ledger: {exc}"}, status_code=503)
        if page is None:
            return JSONResponse({"error": "no idea has this id"}, status_code=404)
        return JSONResponse(page)

    async def whatif(request: Request) -> Response:
        if options.whatif is None:
            reason = "what-if needs the workspace's seed secret: run `swarm web` where it ran"
            return JSONResponse({"error": reason}, status_code=404)
        sweep = request.query_params.get("sweep", "sigmas=1,2,3")
        try:
            return JSONResponse(await options.whatif(sweep))
        # ConfigError is a ValueError; SwarmError (no history yet) a RuntimeError
        except (ValueError, RuntimeError, LedgerUnavailable, SqlError) as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)

    async def progress(request: Request) -> Response:
        try:
            svg = await chart.svg()
        except (LedgerUnavailable, SqlError, TimeoutError) as exc:
            return Response(f"ledger: {exc}", status_code=503, media_type="text/plain")
        return Response(svg, media_type="image/svg+xml")

    routes = [
        Route("/", lambda _: FileResponse(STATIC / "index.html")),
        Route("/idea/{idea_id:path}", lambda _: FileResponse(STATIC / "idea.html")),
        Route("/api/overview", overview),
        Route("/api/idea/{idea_id:path}", idea),
        Route("/api/whatif", whatif),
        Route("/chart/progress.svg", progress),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ]
    middleware = [Middleware(_Guard, credentials=options.credentials, hosts=options.hosts)]
    return Starlette(routes=routes, middleware=middleware)


class _Guard(BaseHTTPMiddleware):
    """The security headers on every response, errors included; HTTP Basic where credentials
    are set, else only requests naming a loopback host."""

    def __init__(
        self, app: Any, credentials: tuple[str, str] | None, hosts: frozenset[str]
    ) -> None:
        super().__init__(app)
        self.credentials, self.hosts = credentials, hosts

    async def dispatch(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
        if self.credentials is not None and not _authorized(request, self.credentials):
            response = Response("credentials needed", status_code=401, media_type="text/plain")
            response.headers["WWW-Authenticate"] = REALM
        elif self.credentials is None and _host(request) not in self.hosts:
            response = Response("not this host", status_code=421, media_type="text/plain")
        else:
            try:
                response = await call_next(request)
            except Exception:  # a bug of ours: logged, and answered with the headers still on
                log.exception("web view: %s", request.url.path)
                response = Response("internal error", status_code=500, media_type="text/plain")
        response.headers.update(SECURITY_HEADERS)
        return response


def _host(request: Request) -> str:
    """The Host header's name, without its port ("[::1]:8765" -> "::1")."""
    host = request.headers.get("host", "")
    if host.startswith("["):
        return host[1:].partition("]")[0]
    return host.rpartition(":")[0] if host.count(":") == 1 else host


class _Shared:
    """One answer for `ttl_s`, made once however many ask for it meanwhile."""

    def __init__(self, ttl_s: float) -> None:
        self.ttl_s = ttl_s
        self.made: tuple[float, dict[str, Any]] | None = None
        self.lock = asyncio.Lock()

    async def get(self, make: Callable[[], Awaitable[dict[str, Any]]]) -> dict[str, Any]:
        async with self.lock:
            now = time.monotonic()
            if self.made is None or now - self.made[0] > self.ttl_s:
                self.made = (now, await make())
            return self.made[1]


def _authorized(request: Request, credentials: tuple[str, str]) -> bool:
    scheme, _, encoded = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "basic":
        return False
    try:
        user, _, password = base64.b64decode(encoded, validate=True).decode().partition(":")
    except (binascii.Error, UnicodeDecodeError):
        return False
    # compare both in constant time, so a wrong user takes as long as a wrong password
    user_ok = hmac.compare_digest(user.encode(), credentials[0].encode())
    password_ok = hmac.compare_digest(password.encode(), credentials[1].encode())
    return user_ok and password_ok


class _Chart:
    """The progress plot, drawn again only when the ledger holds more runs (matplotlib takes
    a second or so; every open page asks for it)."""

    def __init__(self, source: Source, lower_is_better: bool) -> None:
        self.source, self.lower_is_better = source, lower_is_better
        self.drawn: tuple[int, bytes] | None = None
        self.lock = asyncio.Lock()

    async def svg(self) -> bytes:
        async with self.lock:
            counted = await rows(self.source, "SELECT count(*) AS n FROM runs")
            n = int(counted[0]["n"])
            if self.drawn is None or self.drawn[0] != n:
                loop = asyncio.get_running_loop()

                def ask(sql: str) -> Any:  # report_data.load asks from its thread, on this loop
                    return asyncio.run_coroutine_threadsafe(self.source.table(sql), loop).result()

                data = await asyncio.to_thread(load, ask, self.lower_is_better)
                self.drawn = (n, await asyncio.to_thread(render_progress, data, "svg"))
            return self.drawn[1]
