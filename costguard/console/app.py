"""The console's routes for the daemon's HTTP app: pages at /console, the API at /api/v1,
`/` sends a browser to the overview. Both share one signed session cookie (the OIDC login,
the CSRF token, a message after an action)."""

from __future__ import annotations

import logging
import secrets
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.sessions import SessionMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route

from costguard.clock import Clock
from costguard.config import Settings
from costguard.console.auth import MOUNT, is_loopback
from costguard.policy.schema import PolicySet
from costguard.store.db import Database

if TYPE_CHECKING:
    from costguard.daemon.http import HttpServer
    from costguard.daemon.metrics import DaemonMetrics

log = logging.getLogger("costguard.console")
SESSION_COOKIE = "costguard_session"


def host_check(settings: Settings, host: str) -> list[str] | None:
    """The Host names every route accepts besides loopback's, when the console is served
    without login (auth none, on loopback): `http.allowed_hosts`. None: no check (a console
    with a login, or none served, leaves nothing for another site to read)."""
    cfg = settings.console
    if cfg.enabled and cfg.auth == "none" and is_loopback(host):
        return list(settings.http.allowed_hosts)
    return None


def console_routes(settings: Settings, db: Database, clock: Clock,
                   policies: Callable[[], PolicySet], host: str) -> list[BaseRoute]:
    """The console's routes, or none: when it is off, or when it would serve pages without a
    login on an address other people reach (refused, with the fix in the log)."""
    cfg = settings.console
    if not cfg.enabled:
        return []
    if cfg.auth == "none" and not is_loopback(host):
        why = (f"console not served: http.host is {host} and console.auth is none, so anyone "
               "who reaches the port would read every team's spend. Set console.auth to oidc "
               "or proxy (docs/console.md), or serve on 127.0.0.1")
        log.error("%s", why)
        return refused_routes(why)
    from costguard.console.api import Api
    from costguard.console.pages import Pages

    secret = cfg.session_secret.get_secret_value() if cfg.session_secret else None
    if not secret:
        secret = secrets.token_urlsafe(32)
        if cfg.auth == "oidc":
            log.warning("console.session_secret is not set: logins end when the daemon "
                        "restarts, and replicas do not share them")
    # Secure when people reach the console over https (the login's public URL says so): the
    # cookie then never travels in clear text, even to a plain-http link
    https = (cfg.oidc.public_url or "").startswith("https://")
    session = Middleware(SessionMiddleware, secret_key=secret, session_cookie=SESSION_COOKIE,
                         max_age=cfg.session_hours * 3600, same_site="lax", https_only=https)
    page_routes = Pages(settings, db, clock, policies).routes()
    if cfg.auth == "oidc":
        with warnings.catch_warnings():  # Authlib's own deprecation notes, not ours to fix
            warnings.simplefilter("ignore")
            from costguard.console.oidc import oidc_routes
        page_routes += oidc_routes(cfg)

    async def not_found(request: Request, exc: Exception) -> Response:
        return JSONResponse({"error": f"no route {request.url.path}"}, 404)

    async def failed(request: Request, exc: Exception) -> Response:
        # as the daemon's own routes answer (daemon/http.py GuardMiddleware): the store's
        # failure is the client's to retry, never a 500 (logged where it is raised)
        return JSONResponse({"error": "internal error; retry later"}, 503)

    handlers: dict[Any, Any] = {404: not_found, Exception: failed}
    pages = Starlette(routes=page_routes, middleware=[session], exception_handlers=handlers)
    api = Starlette(routes=Api(settings, db, clock, policies).routes(), middleware=[session],
                    exception_handlers=handlers)

    async def home(request: Request) -> Response:
        return RedirectResponse("/console/", 307)

    return [Route("/", home, methods=["GET"]), Mount(MOUNT, app=pages, name="console"),
            Mount("/api/v1", app=api, name="api")]


def refused_routes(why: str) -> list[BaseRoute]:
    """What a person who opens the console's URL gets when it is not served: the reason and
    the fix (403), not a bare "no route"."""

    async def refused(request: Request) -> Response:
        return JSONResponse({"error": why}, 403)

    off = Starlette(routes=[Route("/{path:path}", refused, methods=["GET", "POST"])])
    return [Mount(MOUNT, app=off), Mount("/api/v1", app=off)]


def console_server(settings: Settings, db: Database, clock: Clock,
                   policies: Callable[[], PolicySet], *, metrics: DaemonMetrics | None = None,
                   bind: str | None = None, port: int | None = None) -> HttpServer:
    """The daemon's app without its scheduler (health, metrics, console, API), started:
    `costguard console`, the console's tests and bench. Routes are judged by `http.host`;
    `bind` and `port` override where it listens (default: http.host, http.port)."""
    from costguard.daemon.connections import raise_open_files_limit
    from costguard.daemon.http import HttpServer, ServiceState, build_app, http_limits
    from costguard.daemon.metrics import DaemonMetrics

    host = settings.http.host
    routes = console_routes(settings, db, clock, policies, host)
    state = ServiceState(poll_interval=settings.poll_interval)
    app = build_app(db, state, metrics or DaemonMetrics(), clock, extra_routes=routes,
                    allowed_hosts=host_check(settings, host))
    raise_open_files_limit()  # a descriptor per client connection
    server = HttpServer(app, bind or host, settings.http.port if port is None else port,
                        **http_limits(settings))
    server.start()
    return server
