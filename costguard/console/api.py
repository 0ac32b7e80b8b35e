"""The report API, mounted at /api/v1: JSON with the CLI's figures, behind the console's
login. `openapi.json` documents every answer (costguard/console/openapi.py).

    GET /spend?window=7d&by=team,instance_type&filter=team=research   report --format json
    GET /instances/{id}                                                 explain --format json
    GET /recommendations?filter=...&all=true                           recommend --format json
    GET /anomalies?window=30d                                           anomaly list
    GET /budgets                                                        budget status
    GET /pending                                                        warned and snoozed
Lists are paginated: `limit` (default console.page_size) and `offset`; `page.next` is the
URL of the next page, null on the last. Bad parameters get a 400 saying what would work.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from costguard.clock import Clock
from costguard.config import Settings
from costguard.console import params, views
from costguard.console.auth import viewer
from costguard.console.openapi import openapi_document
from costguard.errors import CostguardError
from costguard.policy.schema import PolicySet
from costguard.store.db import Database

T = TypeVar("T")


def paginate(request: Request, items: list[Any], page_size: int) -> tuple[list[Any],
                                                                           dict[str, Any]]:
    limit = params.whole(request.query_params, "limit", page_size, 1, params.MAX_LIMIT)
    offset = params.whole(request.query_params, "offset", 0, 0, params.MAX_OFFSET)
    shown = items[offset:offset + limit]
    nxt = None
    if offset + limit < len(items):
        nxt = str(request.url.include_query_params(offset=offset + limit, limit=limit))
    return shown, {"offset": offset, "limit": limit, "total": len(items), "next": nxt}


def _filters(request: Request) -> list[str]:
    return params.filters(request.query_params.getlist("filter"))


class Api:
    def __init__(self, settings: Settings, db: Database, clock: Clock,
                 policies: Callable[[], PolicySet]) -> None:
        self.settings, self.db, self.clock, self.policies = settings, db, clock, policies
        self.cfg = settings.console

    async def answer(self, request: Request, build: Callable[[Any], dict[str, Any]]
                     ) -> Response:
        if viewer(request, self.cfg) is None:
            return JSONResponse({"error": "not logged in: log in at /console/login, or come "
                                 "through the configured reverse proxy"}, 401)

        def run() -> dict[str, Any]:
            with self.db.session() as s:
                return build(s)
        try:
            return JSONResponse(await run_in_threadpool(run))
        except LookupError as exc:
            return JSONResponse({"error": str(exc)}, 404)
        except (CostguardError, ValueError) as exc:
            return JSONResponse({"error": str(exc)}, 400)

    def window(self, request: Request) -> views.Window:
        return views.window_of(params.when_params(request.query_params), self.clock.now())

    async def spend(self, request: Request) -> Response:
        def build(s: Any) -> dict[str, Any]:
            doc = views.spend_doc(s, self.settings, self.window(request),
                                  params.dimensions(request.query_params.get("by")),
                                  _filters(request))
            doc["rows"], doc["page"] = paginate(request, doc["rows"], self.cfg.page_size)
            return doc
        return await self.answer(request, build)

    async def instance(self, request: Request) -> Response:
        ref = request.path_params["instance_id"]

        def build(s: Any) -> dict[str, Any]:
            data = views.instance(s, self.settings, self.policies(), ref, self.clock.now(),
                                  self.window(request))
            explained: dict[str, Any] = data["explain"]
            return explained
        return await self.answer(request, build)

    async def recommendations(self, request: Request) -> Response:
        def build(s: Any) -> dict[str, Any]:
            everything = params.flag(request.query_params, "all")
            doc = views.recommendations(s, self.settings, self.clock.now(), _filters(request),
                                        everything)
            doc["items"], doc["page"] = paginate(request, doc["items"], self.cfg.page_size)
            return doc
        return await self.answer(request, build)

    def _listing(self, request: Request, items: list[Any]) -> dict[str, Any]:
        shown, page = paginate(request, items, self.cfg.page_size)
        return {"items": shown, "page": page}

    async def anomalies(self, request: Request) -> Response:
        return await self.answer(request, lambda s: self._listing(
            request, views.anomalies(s, self.window(request))))

    async def budgets(self, request: Request) -> Response:
        return await self.answer(request, lambda s: self._listing(
            request, views.budgets(s, self.policies(), self.clock.now())))

    async def pending(self, request: Request) -> Response:
        return await self.answer(request, lambda s: self._listing(
            request, views.pending(s, self.policies())))

    async def openapi(self, request: Request) -> Response:
        return JSONResponse(openapi_document())

    def routes(self) -> list[BaseRoute]:
        return [
            Route("/spend", self.spend, methods=["GET"]),
            Route("/instances/{instance_id}", self.instance, methods=["GET"]),
            Route("/recommendations", self.recommendations, methods=["GET"]),
            Route("/anomalies", self.anomalies, methods=["GET"]),
            Route("/budgets", self.budgets, methods=["GET"]),
            Route("/pending", self.pending, methods=["GET"]),
            Route("/openapi.json", self.openapi, methods=["GET"]),
        ]
