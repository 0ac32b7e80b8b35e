"""Request bodies read within a limit while they stream in: an oversized or endless upload
is refused after `limit` bytes, before anything (a signature check, a JSON parser) holds it
whole. Shared by every route that reads a body (agent ingest, Slack interactivity)."""

from __future__ import annotations

from starlette.requests import Request


class BodyTooLarge(Exception):
    """The body is over the route's limit (413)."""


async def read_limited(request: Request, limit: int) -> bytes:
    """The body, or BodyTooLarge as soon as it passes `limit` bytes (a declared
    Content-Length over the limit is refused before reading anything)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise BodyTooLarge
    body = bytearray()
    async for chunk in request.stream():
        body.extend(chunk)
        if len(body) > limit:  # chunked uploads have no Content-Length to trust
            raise BodyTooLarge
    return bytes(body)
