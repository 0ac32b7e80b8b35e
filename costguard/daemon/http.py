"""The daemon's HTTP surface: one small Starlette app, served by uvicorn in a thread.

    GET  /healthz        liveness: the process answers (no dependency is checked)
    GET  /readyz         the database answers and the last good cycle is recent
    GET  /metrics        Prometheus text format
    POST /v1/telemetry   agent ingest (Bearer token), see costguard.telemetry.ingest
    POST /slack/...      Slack interactivity, when a signing secret is configured

Every answer is JSON (or the Prometheus format). Bad input gets a 4xx saying what is wrong;
an unexpected failure gets a 503 (retry later) and a log line, never a 500 with a traceback.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote_to_bytes, urlsplit

import uvicorn
from prometheus_client import CONTENT_TYPE_LATEST
from sqlalchemy import func, select
from sqlmodel import col
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from costguard.clock import Clock, utc
from costguard.daemon.connections import (
    BODY_TIMEOUT_S,
    HEAD_TIMEOUT_S,
    MAX_CONNECTIONS,
    limited,
)
from costguard.daemon.headers import SecurityHeadersMiddleware
from costguard.daemon.health import last_governed, unreadable
from costguard.daemon.logs import UNEXPECTED
from costguard.daemon.metrics import DaemonMetrics
from costguard.errors import ConfigError
from costguard.store.db import Database
from costguard.store.tables import CycleRow

if TYPE_CHECKING:
    from costguard.config import Settings

unexpected = logging.getLogger(UNEXPECTED)  # throttled: each a client can repeat (logs.py)


READY_TIMEOUT_S = 0.1  # /readyz answers within this, whatever the store does


@dataclass
class ServiceState:
    """What the scheduler tells the HTTP side (read from other threads: plain values only)."""

    poll_interval: timedelta
    readiness_factor: float = 3.0
    started_at: datetime | None = None
    leader: bool = False
    last_cycle_at: datetime | None = None
    last_cycle_id: int | None = None
    last_error: str | None = None
    extra: dict[str, str] = field(default_factory=dict)
    ready_timeout_s: float = READY_TIMEOUT_S  # /readyz answers within this, stalled or not


def _last_ok_cycle(db: Database) -> datetime | None:
    with db.session() as s:
        value = s.execute(select(func.max(col(CycleRow.finished_at)))
                          .where(col(CycleRow.status) == "ok")).scalar()
    return utc(value) if value is not None else None


def readiness(db: Database, state: ServiceState, clock: Clock) -> tuple[bool, dict[str, object]]:
    """Ready when the store answers and some replica finished a cycle recently enough."""
    now = clock.now()
    limit = state.poll_interval * state.readiness_factor
    try:
        last = _last_ok_cycle(db)
    except Exception as exc:  # any driver error means "not reachable" here
        return False, {"database": "unreachable", "error": type(exc).__name__}
    body: dict[str, object] = {"database": "ok", "leader": state.leader,
                               "last_cycle": last.isoformat() if last else None}
    if last is not None and now - last < limit:
        return _governing(db, state, now, body)
    started = state.started_at or now
    # just started: give the first cycle its chance before calling the service unready
    if (last is None or last < started) and now - started < limit:
        body["waiting_for_first_cycle"] = True
        return True, body
    body["error"] = f"no successful cycle for over {limit.total_seconds():.0f}s"
    return False, body


def _governing(db: Database, state: ServiceState, now: datetime, body: dict[str, object]
               ) -> tuple[bool, dict[str, object]]:
    """Cycling: ready, but "degraded" while scopes stay unreadable, and not ready while the
    cycles govern nothing because every scope is unreadable."""
    try:
        with db.session() as s:
            gaps = unreadable(s, now, state.poll_interval)
            governed = last_governed(s)
    except Exception as exc:
        return False, {**body, "database": "unreachable", "error": type(exc).__name__}
    body["health"] = "degraded" if gaps else "ok"
    if gaps:
        body["unreadable"] = gaps
    if gaps and governed == 0:
        body["error"] = "governing 0 instances: every scope is unreadable"
        return False, body
    return True, body


class PortUnavailable(ConfigError, OSError):
    """The daemon's port is taken (a one-line error for the CLI, never a traceback)."""


class GuardMiddleware:
    """Counts requests per route and turns any escaped exception into a JSON 503."""

    def __init__(self, app: ASGIApp, metrics: DaemonMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False
        status = 0

        async def tracking_send(message: Message) -> None:
            nonlocal started, status
            if message["type"] == "http.response.start":
                started, status = True, int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, tracking_send)
        except Exception:
            unexpected.exception("unexpected error serving %s %s", scope.get("method"),
                                 scope.get("path"))
            if not started:
                status = 503
                await JSONResponse({"error": "internal error; retry later"}, 503)(
                    scope, receive, send)
        route = _route_label(str(scope.get("path", "")))
        self.metrics.http.labels(route, str(status)).inc()


class NulGuardMiddleware:
    """Refuses (400) a request whose path or query holds NUL (`%00`): no name, id or filter
    costguard records holds one, and PostgreSQL refuses it in any text it is asked to
    compare (a console page or an API call with `%00` in an instance id was a 500)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and (
                "\x00" in str(scope.get("path", ""))
                or b"\x00" in unquote_to_bytes(bytes(scope.get("query_string", b"")))):
            await JSONResponse({"error": "the URL holds a NUL character (%00): no name "
                                "costguard records holds one"}, 400)(scope, receive, send)
            return
        await self.app(scope, receive, send)


class HostCheckMiddleware:
    """Refuses (421) a request whose Host header names neither a loopback host nor one of
    `allowed`: served without login on 127.0.0.1, the daemon is otherwise readable by any web
    page a local user opens, through DNS rebinding (a name of the attacker's that resolves
    to 127.0.0.1). Django's ALLOWED_HOSTS and Jupyter's local_hostnames do the same."""

    def __init__(self, app: ASGIApp, allowed: Sequence[str]) -> None:
        from costguard.console.auth import is_loopback

        self.app = app
        self.allowed = {h.lower().rstrip(".") for h in allowed}
        self.is_loopback = is_loopback

    def accepts(self, header: str) -> bool:
        try:
            name = (urlsplit(f"//{header}").hostname or "").rstrip(".")
        except ValueError:
            return False
        return bool(name) and (self.is_loopback(name) or name in self.allowed)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            headers = dict(scope.get("headers") or ())
            host = headers.get(b"host")
            if host is not None and not self.accepts(host.decode("latin-1")):
                await JSONResponse({"error": "this costguard serves loopback names only (the "
                                    "console has no login): open it as 127.0.0.1 or "
                                    "localhost, or add the name to http.allowed_hosts"},
                                   421)(scope, receive, send)
                return
        await self.app(scope, receive, send)


_KNOWN = ("/healthz", "/readyz", "/metrics", "/v1/telemetry")


def _route_label(path: str) -> str:
    # a bounded label set: unknown paths would otherwise grow the metric without limit
    if path in _KNOWN:
        return path
    for prefix in ("/slack", "/console", "/api/v1"):
        if path.startswith(prefix):
            return prefix
    return "other"


def build_app(
    db: Database, state: ServiceState, metrics: DaemonMetrics, clock: Clock, *,
    extra_routes: Sequence[BaseRoute] = (), allowed_hosts: Sequence[str] | None = None,
) -> Starlette:
    """The daemon's app. `allowed_hosts` (see `host_check`): with it, every route refuses a
    Host header naming anything but loopback and those names."""
    async def healthz(request: Request) -> JSONResponse:
        return JSONResponse({"status": "ok", "leader": state.leader})

    async def readyz(request: Request) -> JSONResponse:
        try:  # a stalled store must not stall the probe: answer "stalled" within the limit
            ok, body = await asyncio.wait_for(run_in_threadpool(readiness, db, state, clock),
                                              state.ready_timeout_s)
        except TimeoutError:
            ok, body = False, {"database": "stalled", "error": "the store did not answer "
                               f"within {state.ready_timeout_s:g} s"}
        body["status"] = "ready" if ok else "unready"
        return JSONResponse(body, status_code=200 if ok else 503)

    async def metrics_view(request: Request) -> Response:
        return Response(metrics.render(), media_type=CONTENT_TYPE_LATEST)

    async def not_found(request: Request, exc: Exception) -> JSONResponse:
        return JSONResponse({"error": f"no route {request.url.path}",
                             "routes": list(_KNOWN)}, status_code=404)

    async def bad_method(request: Request, exc: Exception) -> JSONResponse:
        return JSONResponse({"error": f"{request.method} not allowed here"}, status_code=405)

    routes: list[BaseRoute] = [
        Route("/healthz", healthz, methods=["GET"]),
        Route("/readyz", readyz, methods=["GET"]),
        Route("/metrics", metrics_view, methods=["GET"]),
        *extra_routes,
    ]
    app = Starlette(routes=routes, exception_handlers={404: not_found, 405: bad_method})
    if allowed_hosts is not None:
        app.add_middleware(HostCheckMiddleware, allowed=allowed_hosts)
    app.add_middleware(NulGuardMiddleware)
    app.add_middleware(GuardMiddleware, metrics=metrics)
    app.add_middleware(SecurityHeadersMiddleware)  # outermost: a 503 carries them too
    return app


def http_limits(settings: Settings) -> dict[str, Any]:
    """`HttpServer`'s connection limits from `http.head_timeout`, `http.body_timeout` and
    `http.max_connections`."""
    return {"head_timeout_s": settings.http.head_timeout.total_seconds(),
            "body_timeout_s": settings.http.body_timeout.total_seconds(),
            "max_connections": settings.http.max_connections}


class HttpServer:
    """uvicorn in a daemon thread, stopped with `stop()` (signals stay with the main thread)."""

    def __init__(self, app: Starlette, host: str, port: int, *,
                 head_timeout_s: float = HEAD_TIMEOUT_S,
                 body_timeout_s: float = BODY_TIMEOUT_S,
                 max_connections: int = MAX_CONNECTIONS) -> None:
        # proxy_headers off: uvicorn would otherwise replace the peer's address with an
        # X-Forwarded-For value when the peer is loopback, and the console's proxy mode
        # decides whom to believe by the peer that connected (a sidecar proxy is loopback)
        protocol, backlog = limited(head_timeout_s, max_connections, body_timeout_s)
        config = uvicorn.Config(app, host=host, port=port, log_config=None, lifespan="off",
                                access_log=False, timeout_graceful_shutdown=5,
                                proxy_headers=False,
                                http=protocol, backlog=backlog)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self._serve, name="costguard-http",
                                       daemon=True)
        self.host, self.port = host, port

    def _serve(self) -> None:
        # uvicorn exits when it cannot bind: start() says why, once
        with contextlib.suppress(SystemExit):
            self.server.run()

    def _unavailable(self) -> PortUnavailable:
        return PortUnavailable(
            f"the HTTP server could not listen on {self.host}:{self.port}: is another "
            "costguard (or anything) using the port? Set http.port or "
            "COSTGUARD_HTTP__PORT")

    def _check_port(self) -> None:
        """Bind the port as uvicorn will (SO_REUSEADDR) and let it go: a port in use is
        costguard's one line, before uvicorn logs its own bind error and start-up lines."""
        import errno
        import socket

        if self.port == 0:
            return
        try:
            family = socket.getaddrinfo(self.host, self.port, type=socket.SOCK_STREAM)[0][0]
        except OSError:
            return  # an unresolvable host: uvicorn says so
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind((self.host, self.port))
            except OSError as exc:
                if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                    raise self._unavailable() from None

    def start(self, timeout: float = 10.0) -> None:
        self._check_port()
        self.thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if not self.thread.is_alive():
                raise self._unavailable()
            if time.monotonic() > deadline:
                raise TimeoutError(f"HTTP server did not start on {self.host}:{self.port}")
            time.sleep(0.02)
        sockets = [s for srv in self.server.servers for s in (srv.sockets or ())]
        if sockets:  # port 0 asks the OS for a free port: report the real one
            self.port = int(sockets[0].getsockname()[1])

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)

