"""Request bodies read within a limit while they stream in: an oversized or endless upload
is refused after `limit` bytes, before anything (a signature check, a JSON parser) holds it
whole. Shared by every route that reads a body (agent ingest, identity, Slack
interactivity).

`parse_json` (costguard/limited_json.py) is the one rule for every JSON text the daemon
takes from outside (a body, a Slack payload, an identity document); what it refuses is
`BodyRefused` with the reason, a 400 for the routes."""

from __future__ import annotations

from starlette.requests import Request

from costguard.limited_json import JsonRefused, json_depth, parse_json

__all__ = ["BodyRefused", "BodyTooLarge", "json_depth", "parse_json", "read_limited"]

BodyRefused = JsonRefused  # a body's JSON refused: 400 with the reason


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
