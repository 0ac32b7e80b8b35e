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
MAX_INSTANCE_ID = 128  # the store's gpu_readings.instance_id column (VARCHAR(128))
MinuteKey = tuple[str, str, int, datetime]
Sink = Callable[[list[GpuMinute]], int]
_BATCH = TypeAdapter(list[GpuMinute])  # built once; validates a whole batch in one call


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
    """Validate a decoded body into summaries; raises ValueError naming the bad item.

    Beyond the model, a summary must fit the store: an aware `minute` (a naive one cannot be
    placed in UTC) and an instance id within the column. Either would otherwise fail in the
    database, a 503 the agent would retry forever."""
    items = payload.get("minutes") if isinstance(payload, dict) else payload
    if not isinstance(items, list):
        raise ValueError('expected {"minutes": [...]} or a JSON list of GPU minutes')
    try:
        out = _BATCH.validate_python(items)
    except ValidationError as exc:
        raise _BadItem.from_validation(exc) from None
    for index, m in enumerate(out):
        if m.minute.tzinfo is None or m.minute.utcoffset() is None:
            raise _BadItem(index, "minute", "needs a UTC offset (e.g. 2026-11-02T09:00:00Z)")
        if len(m.instance_id) > MAX_INSTANCE_ID:
            raise _BadItem(index, "instance_id", f"longer than {MAX_INSTANCE_ID} characters")
    return out


def first_of_each_key(minutes: Sequence[GpuMinute]) -> list[GpuMinute]:
    """One summary per key, the first sent (as in the store: the first write wins)."""
    seen: dict[MinuteKey, GpuMinute] = {}
    for m in minutes:
        seen.setdefault(minute_key(m), m)
    return list(seen.values())


class _BadItem(ValueError):
    def __init__(self, index: int, loc: str, msg: str,
                 detail: list[dict[str, str]] | None = None) -> None:
        self.index = index
        self.detail = detail if detail is not None else [{"loc": loc, "msg": msg}]
        super().__init__(f"minutes[{index}].{loc}: {msg}")

    @classmethod
    def from_validation(cls, exc: ValidationError) -> _BadItem:
        """The first failing item's errors; `loc` is relative to the item, as before."""
        errors = exc.errors()
        index = int(errors[0]["loc"][0]) if errors and errors[0]["loc"] else 0
        detail = [{"loc": ".".join(str(p) for p in e["loc"][1:]), "msg": e["msg"]}
                  for e in errors if e["loc"] and e["loc"][0] == index]
        first = detail[0] if detail else {"loc": "", "msg": "invalid"}
        return cls(index, first["loc"], first["msg"], detail)


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
        unique = first_of_each_key(minutes)
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
