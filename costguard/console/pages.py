"""The console's HTML pages (Starlette + Jinja2, no script): mounted at /console.

    GET  /                                  overview: spend, idle, unattributed, spot, waste
    GET  /teams/{team}                      one team's instances and their spend
    GET  /instances/{provider}/{id}         `explain` with 24 h of SM activity and VRAM
    POST /instances/{provider}/{id}/snooze  admin only, CSRF-checked, journaled
    POST /instances/{provider}/{id}/stop    admin only: "stop now" (due at the next cycle)
    GET  /pending                           warned and snoozed instances: who stops when, why
    GET  /anomalies                         spend anomalies and budgets
    GET  /audit                             the audit trail
    GET  /clusters                          Kubernetes: GPU spend by namespace, workload and
                                            team, and underused GPU pods (docs/kubernetes.md)
Every page takes `window=7d` or `since=`/`until=` as `costguard report` does.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import timedelta
from functools import cache
from typing import Any, TypeVar
from urllib.parse import urlencode

from jinja2 import Environment, PackageLoader, select_autoescape
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from costguard.alerts.content import snooze_options
from costguard.clock import Clock
from costguard.config import Settings
from costguard.console import views
from costguard.console.auth import (
    Viewer,
    csrf_ok,
    csrf_token,
    instance_path,
    login_url,
    viewer,
)
from costguard.errors import CostguardError
from costguard.policy.schema import PolicySet
from costguard.store.db import Database

log = logging.getLogger("costguard.console")
T = TypeVar("T")
WINDOWS = ("1d", "7d", "30d", "90d")
AUDIT_LINES = 500


@cache
def _env() -> Environment:
    env = Environment(loader=PackageLoader("costguard.console", "templates"),
                      autoescape=select_autoescape(["html", "j2"]))
    env.filters["usd"] = lambda v: "-" if v is None else f"${float(v):,.2f}"
    env.filters["pct"] = lambda v: "-" if v is None else f"{float(v):.0%}"
    env.filters["when"] = lambda v: "-" if not v else str(v)[:16].replace("T", " ")
    return env


class Pages:
    def __init__(self, settings: Settings, db: Database, clock: Clock,
                 policies: Callable[[], PolicySet]) -> None:
        self.settings, self.db, self.clock, self.policies = settings, db, clock, policies
        self.cfg = settings.console

    # -- plumbing -------------------------------------------------------------------
    def render(self, request: Request, who: Viewer, name: str, status: int = 200,
               **context: Any) -> HTMLResponse:
        query = {k: v for k, v in request.query_params.items()
                 if k in ("window", "since", "until")}
        body = _env().get_template(name).render(
            viewer=who, auth=self.cfg.auth, path=request.url.path, query=urlencode(query),
            window=query.get("window", "" if "since" in query else views.DEFAULT_WINDOW),
            since_value=_date_only(query.get("since")), until_value=_date_only(query.get("until")),
            windows=WINDOWS, flash=request.session.pop("flash", None),
            kubernetes=bool(self.settings.kubernetes.clusters), **context)
        return HTMLResponse(body, status_code=status)

    def who(self, request: Request) -> Viewer | Response:
        person = viewer(request, self.cfg)
        if person is not None:
            return person
        if self.cfg.auth == "oidc":
            target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
            return RedirectResponse(login_url(target), 303)
        return HTMLResponse("<h1>401</h1><p>Not logged in: the reverse proxy in front of "
                            "costguard did not say who you are.</p>", 401)

    async def read(self, fn: Callable[..., T], *args: Any) -> T:
        def run() -> T:
            with self.db.session() as s:
                return fn(s, *args)
        return await run_in_threadpool(run)

    async def page(self, request: Request, template: str,
                   build: Callable[[Viewer, views.Window], Any]) -> Response:
        who = self.who(request)
        if isinstance(who, Response):
            return who
        now = self.clock.now()
        try:
            win = views.window_of(request.query_params, now)
            context = await build(who, win)
        except CostguardError as exc:
            status = 404 if isinstance(exc, LookupError) else 400
            return self.render(request, who, "error.html.j2", status, error=str(exc))
        return self.render(request, who, template, win=win, now=now, **context)

    # -- pages ----------------------------------------------------------------------
    async def overview(self, request: Request) -> Response:
        async def build(who: Viewer, win: views.Window) -> dict[str, Any]:
            return await self.read(views.overview, self.settings, win, self.clock.now())
        return await self.page(request, "overview.html.j2", build)

    async def team(self, request: Request) -> Response:
        name = request.path_params["team"]

        async def build(who: Viewer, win: views.Window) -> dict[str, Any]:
            return await self.read(views.team, self.settings, win, name)
        return await self.page(request, "team.html.j2", build)

    async def instance(self, request: Request) -> Response:
        ref = request.path_params["instance_id"]

        async def build(who: Viewer, win: views.Window) -> dict[str, Any]:
            data = await self.read(views.instance, self.settings, self.policies(), ref,
                                   self.clock.now(), win)
            max_snooze = self.settings.alerts.max_snooze
            return {**data, "csrf": csrf_token(request) if who.admin else "",
                    "snooze_choices": snooze_options(max_snooze)}
        return await self.page(request, "instance.html.j2", build)

    async def pending(self, request: Request) -> Response:
        async def build(who: Viewer, win: views.Window) -> dict[str, Any]:
            return {"pending": await self.read(views.pending, self.policies())}
        return await self.page(request, "pending.html.j2", build)

    async def anomalies(self, request: Request) -> Response:
        async def build(who: Viewer, win: views.Window) -> dict[str, Any]:
            found = await self.read(views.anomalies, win)
            budgets = await self.read(views.budgets, self.policies(), self.clock.now())
            return {"anomalies": found, "budgets": budgets}
        return await self.page(request, "anomalies.html.j2", build)

    async def clusters(self, request: Request) -> Response:
        async def build(who: Viewer, win: views.Window) -> dict[str, Any]:
            return await self.read(views.clusters, self.settings, win)
        return await self.page(request, "clusters.html.j2", build)

    async def audit(self, request: Request) -> Response:
        asked = {k: request.query_params.get(k, "").strip()[:200]
                 for k in ("policy", "instance", "kind")}
        if asked["kind"] and asked["kind"] not in views.AUDIT_KINDS:
            asked["kind"] = ""

        async def build(who: Viewer, win: views.Window) -> dict[str, Any]:
            return {"events": await self.read(views.audit, win, AUDIT_LINES, asked["policy"],
                                              asked["instance"], asked["kind"]),
                    "most": AUDIT_LINES, "asked": asked, "kinds": views.AUDIT_KINDS}
        return await self.page(request, "audit.html.j2", build)

    async def search(self, request: Request) -> Response:
        text = request.query_params.get("q", "").strip()[:200]

        async def build(who: Viewer, win: views.Window) -> dict[str, Any]:
            found = await self.read(views.search, self.policies(), text) if text else []
            return {"asked_for": text, "search_text": text, "found": found,
                    "most": views.SEARCH_LIMIT}
        return await self.page(request, "instances.html.j2", build)

    # -- acting ---------------------------------------------------------------------
    async def act(self, request: Request) -> Response:
        """Snooze or stop now, from an admin's form: the same as the Slack buttons."""
        from costguard.alerts.interactive import SlackAction, journal_actions

        who = self.who(request)
        if isinstance(who, Response):
            return who
        provider = request.path_params["provider"]
        instance_id = request.path_params["instance_id"]
        kind = "snooze" if request.url.path.endswith("/snooze") else "stop-now"
        if not who.admin:
            log.warning("console: %s refused (not in the admin group)", kind,
                        extra={"user": who.name or "anonymous"})
            group = (f"the admin group ({self.cfg.admin_group})" if self.cfg.admin_group
                     else "an admin group, and none is configured (console.admin_group)")
            return self.render(request, who, "error.html.j2", 403, error=(
                f"Only members of {group} may {kind.replace('-', ' ')} instances from the "
                "console."))
        form = await request.form()
        if not csrf_ok(request, _text(form.get("csrf"))):
            return self.render(request, who, "error.html.j2", 403, error=(
                "The form has expired or did not come from this console: reload the page "
                "and try again."))
        policy = _text(form.get("policy"))
        choice = _text(form.get("for")) or "1h"
        if not policy or (kind == "snooze" and choice not in
                          {t for t, _ in snooze_options(timedelta(days=3650))}):
            return self.render(request, who, "error.html.j2", 400,
                               error="Choose a policy (and a snooze length) from the page.")
        on_action = journal_actions(self.db, self.clock, self.settings.alerts.max_snooze)
        click = SlackAction(action=kind, policy=policy, provider=provider,
                            instance_id=instance_id, choice=choice, user_id=who.name,
                            user_name=who.name, via="console")
        reply = await run_in_threadpool(on_action, click)
        request.session["flash"] = reply.text if not isinstance(reply, str) else reply
        return RedirectResponse(instance_path(provider, instance_id), 303)

    def routes(self) -> list[BaseRoute]:
        return [
            Route("/", self.overview, methods=["GET"], name="overview"),
            Route("/teams/{team}", self.team, methods=["GET"], name="team"),
            Route("/instances/{provider}/{instance_id}", self.instance, methods=["GET"],
                  name="instance"),
            Route("/instances/{provider}/{instance_id}/snooze", self.act, methods=["POST"]),
            Route("/instances/{provider}/{instance_id}/stop", self.act, methods=["POST"]),
            Route("/pending", self.pending, methods=["GET"], name="pending"),
            Route("/anomalies", self.anomalies, methods=["GET"], name="anomalies"),
            Route("/audit", self.audit, methods=["GET"], name="audit"),
            Route("/clusters", self.clusters, methods=["GET"], name="clusters"),
            Route("/instances", self.search, methods=["GET"], name="instances"),
        ]


def _date_only(value: str | None) -> str:
    """A `since`/`until` that is a date, as the date input shows it ("" for a duration)."""
    text = (value or "")[:10]
    return text if len(text) == 10 and text[4] == "-" and text[7] == "-" else ""


def _text(value: object) -> str | None:
    """A form field's text; None for none, or for text no record holds (NUL)."""
    return value.strip() if isinstance(value, str) and "\x00" not in value else None
