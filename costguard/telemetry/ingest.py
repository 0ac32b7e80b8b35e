"""`POST /v1/telemetry`: where agents push their per-minute GPU summaries.

Request (documented in docs/agent.md):

    POST /v1/telemetry
    Authorization: Bearer <agent token>
    Content-Type: application/json

    {"minutes": [<GpuMinute as JSON>, ...]}     (a bare JSON list is accepted too)

Responses, all JSON:
    200 {"received": n, "written": k, "duplicates": n - k}
    401 bad or missing token          413 body over the limit (1 MiB by default)
    400 body is not JSON              422 a summary is invalid ({"error", "index", "detail"})
    503 the store could not take the batch; retry later

The batch is validated whole before anything is written, and the injected `sink` writes it
all-or-nothing, so a bad item never leaves half a batch behind. A summary is identified by
(provider, instance_id, gpu_index, minute): sending it again is harmless (the agent re-sends
after a crash between a push and its acknowledgement). Nothing here answers 500.
"""

from __future__ import annotations

import hmac
import json
import logging
import threading
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from pydantic import TypeAdapter, ValidationError
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from costguard.errors import ConfigError
from costguard.model import GpuMinute

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 2**20
INGEST_PATH = "/v1/telemetry"
MinuteKey = tuple[str, str, int, datetime]
Sink = Callable[[list[GpuMinute]], int]
_MINUTE = TypeAdapter(GpuMinute)


def minute_key(m: GpuMinute) -> MinuteKey:
    return (m.provider, m.instance_id, m.gpu_index, m.minute)


class _TooLarge(Exception):
    pass


async def _read_limited(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise _TooLarge
    body = bytearray()
    async for chunk in request.stream():
        body.extend(chunk)
        if len(body) > limit:  # chunked uploads have no Content-Length to trust
            raise _TooLarge
    return bytes(body)


def _error(status: int, message: str, **extra: Any) -> JSONResponse:
    return JSONResponse({"error": message, **extra}, status_code=status)


def parse_batch(payload: Any) -> list[GpuMinute]:
    """Validate a decoded body into summaries; raises ValueError naming the bad item."""
    items = payload.get("minutes") if isinstance(payload, dict) else payload
    if not isinstance(items, list):
        raise ValueError('expected {"minutes": [...]} or a JSON list of GPU minutes')
    out: list[GpuMinute] = []
    for index, item in enumerate(items):
        try:
            out.append(_MINUTE.validate_python(item))
        except ValidationError as exc:
            raise _BadItem(index, exc) from None
    return out


class _BadItem(ValueError):
    def __init__(self, index: int, exc: ValidationError) -> None:
        self.index = index
        self.detail = [
            {"loc": ".".join(str(p) for p in e["loc"]), "msg": e["msg"]} for e in exc.errors()
        ]
        first = self.detail[0] if self.detail else {"loc": "", "msg": "invalid"}
        super().__init__(f"minutes[{index}].{first['loc']}: {first['msg']}")


def telemetry_routes(
    *, token: str, sink: Sink, max_body_bytes: int = MAX_BODY_BYTES, path: str = INGEST_PATH
) -> list[Route]:
    """The ingest route, for mounting into the daemon's Starlette app."""
    if not token:
        raise ConfigError(
            "the agent ingest endpoint needs a token: set COSTGUARD_AGENT_TOKEN "
            "(agents send it as `Authorization: Bearer <token>`)"
        )
    expected = f"Bearer {token}".encode()

    async def ingest(request: Request) -> JSONResponse:
        given = request.headers.get("authorization", "").encode("utf-8", "replace")
        if not hmac.compare_digest(given, expected):
            return _error(401, "missing or wrong agent token", hint="send Authorization: Bearer")
        try:
            body = await _read_limited(request, max_body_bytes)
        except _TooLarge:
            return _error(413, f"body over {max_body_bytes} bytes; send smaller batches")
        except ClientDisconnect:
            return _error(400, "client disconnected before the body was read")
        try:
            payload = json.loads(body)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            return _error(400, f"body is not JSON: {exc}")
        try:
            minutes = parse_batch(payload)
        except _BadItem as exc:
            return _error(422, str(exc), index=exc.index, detail=exc.detail)
        except ValueError as exc:
            return _error(422, str(exc))
        unique = list({minute_key(m): m for m in minutes}.values())
        try:
            written = sink(unique) if unique else 0
        except Exception:  # the store's problem, not the agent's: it keeps and retries
            log.exception("telemetry sink failed for a batch of %d summaries", len(unique))
            return _error(503, "the store could not take this batch; retry later")
        return JSONResponse(
            {"received": len(minutes), "written": written, "duplicates": len(minutes) - written}
        )

    return [Route(path, ingest, methods=["POST"])]


def telemetry_app(*, token: str, sink: Sink, max_body_bytes: int = MAX_BODY_BYTES) -> Starlette:
    """A standalone app serving only the ingest route (tests, or a bare receiver)."""
    return Starlette(routes=telemetry_routes(token=token, sink=sink, max_body_bytes=max_body_bytes))


class MemorySink:
    """An in-memory, idempotent, all-or-nothing sink: the reference behaviour a store sink
    must match (first write of a key wins; a batch is written whole or not at all)."""

    def __init__(self) -> None:
        self.rows: dict[MinuteKey, GpuMinute] = {}
        self.order: list[MinuteKey] = []
        self._lock = threading.Lock()

    def __call__(self, minutes: Sequence[GpuMinute]) -> int:
        with self._lock:
            new = [m for m in minutes if minute_key(m) not in self.rows]
            for m in new:
                self.rows[minute_key(m)] = m
                self.order.append(minute_key(m))
            return len(new)
