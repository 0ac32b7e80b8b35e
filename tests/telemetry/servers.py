"""Apps the telemetry tests serve on 127.0.0.1 (with tests/fakes/loopback.py): instance
metadata, and a request counter around any app."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

GCE_IDENTITY = "instance/service-accounts/default/identity"


def metadata_app(
    *, ec2: dict[str, str] | None = None, gce: dict[str, str] | None = None,
    gce_tokens: dict[tuple[str, str], str] | None = None,
) -> tuple[Starlette, list[str]]:
    """EC2 IMDSv2 and/or GCE metadata emulation; returns the app and a request log. GCE's
    identity tokens are served by (audience, format) from `gce_tokens`: as the real server
    does, a request without an audience is a 400 (format defaults to `standard`)."""
    seen: list[str] = []
    token = "imds-session-token"

    async def imds_token(request: Request) -> Response:
        seen.append(f"{request.method} {request.url.path}")
        if ec2 is None or "x-aws-ec2-metadata-token-ttl-seconds" not in request.headers:
            return Response(status_code=400 if ec2 else 404)
        return PlainTextResponse(token)

    async def imds_get(request: Request) -> Response:
        seen.append(f"{request.method} {request.url.path}")
        if ec2 is None:
            return Response(status_code=404)
        if request.headers.get("x-aws-ec2-metadata-token") != token:
            return Response(status_code=401)  # IMDSv2 refuses requests without a token
        value = ec2.get(request.path_params["item"])
        return PlainTextResponse(value) if value else Response(status_code=404)

    async def gce_get(request: Request) -> Response:
        seen.append(f"{request.method} {request.url.path}")
        if gce is None or request.headers.get("metadata-flavor") != "Google":
            return Response(status_code=403 if gce else 404)
        if request.path_params["item"] == GCE_IDENTITY:
            audience = request.query_params.get("audience")
            if not audience:
                return PlainTextResponse("non-empty audience parameter required",
                                         status_code=400)
            fmt = request.query_params.get("format", "standard")
            seen.append(f"identity for {audience} ({fmt})")
            token = (gce_tokens or {}).get((audience, fmt))
            return (PlainTextResponse(token, headers={"Metadata-Flavor": "Google"})
                    if token else Response(status_code=404))
        value = gce.get(request.path_params["item"])
        if value is None:
            return Response(status_code=404)
        return PlainTextResponse(value, headers={"Metadata-Flavor": "Google"})

    async def imds_dynamic(request: Request) -> Response:  # instance-identity/document ...
        seen.append(f"{request.method} {request.url.path}")
        if ec2 is None or request.headers.get("x-aws-ec2-metadata-token") != token:
            return Response(status_code=401 if ec2 else 404)
        value = ec2.get("dynamic/" + request.path_params["item"])
        return PlainTextResponse(value) if value else Response(status_code=404)

    routes = [
        Route("/latest/api/token", imds_token, methods=["PUT"]),
        Route("/latest/meta-data/{item:path}", imds_get),
        Route("/latest/dynamic/{item:path}", imds_dynamic),
        Route("/computeMetadata/v1/{item:path}", gce_get),
    ]
    return Starlette(routes=routes), seen


def counting(app: Any, counter: Callable[[], None]) -> Any:
    """Wrap an ASGI app to count HTTP requests."""

    async def wrapped(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            counter()
        await app(scope, receive, send)

    return wrapped
