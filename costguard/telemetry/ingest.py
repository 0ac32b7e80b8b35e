"""`POST /v1/telemetry`: where agents push their per-minute GPU summaries.

Request (documented in docs/agent.md):

    POST /v1/telemetry
    Authorization: Bearer <agent token>
    Content-Type: application/json

    {"minutes": [<GpuMinute as JSON>, ...]}     (a bare JSON list is accepted too)

Responses, all JSON:
    200 {"received": n, "written": k, "duplicates": n - k}
    401 bad or missing token          413 body over the limit (1 MiB by default)
    400 body refused (not JSON, nested    422 a summary is invalid ({"error", "index", "detail"}):
        deeper than 8 levels               a minute not whole, in the future or over 7 days
                                           old; an empty instance id; a gpu_index the
                                           instance does not have
    503 the store could not take the batch; retry later

The batch is validated whole before anything is written, and the injected `sink` writes it
all-or-nothing, so a bad item never leaves half a batch behind. A summary is identified by
(provider, instance_id, gpu_index, minute): sending it again is harmless (the agent re-sends
after a crash between a push and its acknowledgement). Nothing here answers 500.
"""

from __future__ import annotations

import hmac
import logging
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import TypeAdapter, ValidationError
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from costguard.daemon.bodies import BodyRefused, BodyTooLarge, parse_json, read_limited
from costguard.errors import ConfigError
from costguard.model import GpuMinute
from costguard.telemetry.hooks import OUTCOMES

if TYPE_CHECKING:
    from costguard.daemon.identity import IdentityAuthority

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 2**20
MAX_JSON_DEPTH = 8  # a batch is {"minutes": [{...}]}: depth 3
MAX_CLOCK_SKEW = timedelta(minutes=5)  # a host's clock may run this far ahead of the daemon's
MAX_AGE = timedelta(days=7)  # older than any agent's buffer holds: refused
INGEST_PATH = "/v1/telemetry"
CREDENTIAL_PREFIX = "cgi1."  # an instance credential (costguard.daemon.identity)
MAX_INSTANCE_ID = 128  # the store's gpu_readings.instance_id column (VARCHAR(128))
MinuteKey = tuple[str, str, int, datetime]
Sink = Callable[[list[GpuMinute]], int]
_BATCH = TypeAdapter(list[GpuMinute])  # built once; validates a whole batch in one call


def minute_key(m: GpuMinute) -> MinuteKey:
    return (m.provider, m.instance_id, m.gpu_index, m.minute)


def _error(status: int, message: str, **extra: Any) -> JSONResponse:
    return JSONResponse({"error": message, **extra}, status_code=status)


def parse_batch(payload: Any, now: datetime | None = None) -> list[GpuMinute]:
    """Validate a decoded body into summaries; raises ValueError naming the bad item.

    Beyond the model, a summary must fit the store and count honestly: an aware `minute` (a
    naive one cannot be placed in UTC) that is a whole minute (seconds zero: the unit of
    coverage), not in the future beyond `MAX_CLOCK_SKEW` nor older than `MAX_AGE` (given
    `now`), and a non-empty instance id within the column. Anything else would either fail
    in the database (a 503 the agent would retry forever) or count as coverage it is not."""
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
        if m.minute.second or m.minute.microsecond:
            raise _BadItem(index, "minute", "must be a whole UTC minute, seconds zero "
                                            "(e.g. 2026-11-02T09:00:00Z)")
        if now is not None and m.minute > now + MAX_CLOCK_SKEW:
            raise _BadItem(index, "minute", f"is in the future ({m.minute.isoformat()}; the "
                                            f"daemon's time is {now.isoformat()}): check the "
                                            "host's clock")
        if now is not None and m.minute < now - MAX_AGE:
            raise _BadItem(index, "minute", f"is older than {MAX_AGE.days} days, more than any "
                                            "agent buffers: not accepted")
        if not m.instance_id.strip():
            raise _BadItem(index, "instance_id", "is empty")
        if len(m.instance_id) > MAX_INSTANCE_ID:
            raise _BadItem(index, "instance_id", f"longer than {MAX_INSTANCE_ID} characters")
    return out


def check_gpus(minutes: Sequence[GpuMinute], gpus: Mapping[tuple[str, str], int]) -> None:
    """Each summary's `gpu_index` must exist on its instance, where inventory knows the
    instance (`gpus`: (provider, instance id) -> GPU count). Raises _BadItem."""
    for index, m in enumerate(minutes):
        count = gpus.get((m.provider, m.instance_id))
        if count is not None and m.gpu_index >= count:
            raise _BadItem(index, "gpu_index", f"{m.gpu_index} does not exist: "
                                               f"{m.instance_id} has {count} GPUs")


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


GpuCounts = Callable[[set[tuple[str, str]]], Mapping[tuple[str, str], int]]
HOOK_PATH = "/v1/hooks/{hook_id}"
_HOOK_ID = re.compile(r"[0-9a-f]{32}")


class HookDesk(Protocol):
    """Where pre-stop hooks are handed to agents and their reports taken (the store's:
    `costguard.daemon.sink.StoreHooks`; actions/prestop.py)."""

    def deliver(self, refs: set[tuple[str, str]], now: datetime) -> list[dict[str, Any]]: ...

    def report(self, hook_id: str, ref: tuple[str, str] | None, status: str, detail: str,
               now: datetime) -> bool: ...


def _wall_clock() -> datetime:
    return datetime.now(UTC)


def telemetry_routes(
    *, token: str, sink: Sink, max_body_bytes: int = MAX_BODY_BYTES, path: str = INGEST_PATH,
    clock: Callable[[], datetime] = _wall_clock, gpu_counts: GpuCounts | None = None,
    identity: IdentityAuthority | None = None, hooks: HookDesk | None = None,
) -> list[Route]:
    """The ingest route, for mounting into the daemon's Starlette app.

    `clock` bounds the minutes accepted; `gpu_counts` answers the GPU count of the instances
    inventory knows (checked against each summary's gpu_index). Both it and the sink run in
    a worker thread: a slow or locked store never holds up the event loop (/healthz).

    With `identity`, an agent may authenticate with the credential it got for its proven
    instance (costguard.daemon.identity): then every summary must be that instance's (403
    naming the first that is not). In `required` mode the shared token is refused for
    cloud instances (403); it stays for the simulated cloud.

    With `hooks`, the answer also carries the pre-stop hooks waiting for the batch's
    instances (`"hooks": [...]`), and `POST /v1/hooks/{id}` takes an agent's report of one
    ({"status": "succeeded" | "failed" | "timed_out" | "skipped", "detail": "..."}):
    200, 401, 403 (a proven agent reporting another instance's hook), 404, 422."""
    if not token:
        raise ConfigError(
            "the agent ingest endpoint needs a token: set COSTGUARD_AGENT_TOKEN "
            "(agents send it as `Authorization: Bearer <token>`)"
        )
    expected = f"Bearer {token}".encode()

    def authenticate(request: Request) -> tuple[tuple[str, str] | None, JSONResponse | None]:
        """(the instance a credential proves, or None for the shared token; a 401)."""
        header = request.headers.get("authorization", "")
        if identity is not None and header.startswith(f"Bearer {CREDENTIAL_PREFIX}"):
            bound = identity.credentials.check(header.removeprefix("Bearer "), clock())
            if bound is None:
                return None, _error(401, "instance credential invalid or expired: prove the "
                                         "instance again (POST /v1/identity)")
            return bound, None
        if not hmac.compare_digest(header.encode("utf-8", "replace"), expected):
            return None, _error(401, "missing or wrong agent token",
                                hint="send Authorization: Bearer")
        return None, None

    async def ingest(request: Request) -> JSONResponse:
        bound, refused_auth = authenticate(request)
        if refused_auth is not None:
            return refused_auth
        try:
            body = await read_limited(request, max_body_bytes)
        except BodyTooLarge:
            return _error(413, f"body over {max_body_bytes} bytes; send smaller batches")
        except ClientDisconnect:
            return _error(400, "client disconnected before the body was read")
        try:
            payload = parse_json(body, max_depth=MAX_JSON_DEPTH)
        except BodyRefused as exc:
            return _error(400, f"body refused: {exc}; a batch is "
                               '{"minutes": [{...}, ...]}')
        try:
            minutes = parse_batch(payload, clock())
            if gpu_counts is not None and minutes:
                check_gpus(minutes, await run_in_threadpool(
                    gpu_counts, {(m.provider, m.instance_id) for m in minutes}))
        except _BadItem as exc:
            return _error(422, str(exc), index=exc.index, detail=exc.detail)
        except ValueError as exc:
            return _error(422, str(exc))
        except Exception:  # the store's, while looking up GPU counts: the agent retries
            log.exception("telemetry: GPU counts not read for a batch")
            return _error(503, "the store could not check this batch; retry later")
        refused = _not_allowed(minutes, bound, identity)
        if refused is not None:
            return _error(403, refused[1], index=refused[0])
        unique = first_of_each_key(minutes)
        try:
            written = await run_in_threadpool(sink, unique) if unique else 0
        except Exception:  # the store's problem, not the agent's: it keeps and retries
            log.exception("telemetry sink failed for a batch of %d summaries", len(unique))
            return _error(503, "the store could not take this batch; retry later")
        answer: dict[str, Any] = {"received": len(minutes), "written": written,
                                  "duplicates": len(minutes) - written}
        if hooks is not None and minutes:
            refs: set[tuple[str, str]] = {(m.provider, m.instance_id) for m in minutes}
            try:
                answer["hooks"] = await run_in_threadpool(hooks.deliver, refs, clock())
            except Exception:  # the batch is stored: the hooks come with the next one
                log.exception("telemetry: pre-stop hooks not read for a batch")
        return JSONResponse(answer)

    async def hook_report(request: Request) -> JSONResponse:
        bound, refused_auth = authenticate(request)
        if refused_auth is not None:
            return refused_auth
        if hooks is None:
            return _error(404, "this daemon runs no pre-stop hooks")
        if bound is None and identity is not None and identity.required:
            return _error(403, "pre-stop hooks are reported by a proven agent "
                               "(http.identity.mode: required)")
        try:
            payload = parse_json(await read_limited(request, 64 * 1024), max_depth=2)
        except BodyTooLarge:
            return _error(413, "a hook's report is at most 64 KiB")
        except (BodyRefused, ClientDisconnect) as exc:
            return _error(400, f"body refused: {exc}")
        status = payload.get("status") if isinstance(payload, dict) else None
        detail = payload.get("detail", "") if isinstance(payload, dict) else ""
        if status not in OUTCOMES or not isinstance(detail, str):
            return _error(422, "expected {\"status\": one of " + ", ".join(OUTCOMES)
                          + ', "detail": "text"}')
        hook_id = request.path_params["hook_id"]
        if not _HOOK_ID.fullmatch(hook_id):  # the daemon's ids are 32 hex digits
            return _error(404, f"no pre-stop hook {hook_id[:40]!r} for this agent")
        try:
            known = await run_in_threadpool(hooks.report, hook_id, bound, status, detail,
                                            clock())
        except Exception:
            log.exception("telemetry: a pre-stop hook's report was not stored")
            return _error(503, "the store could not take this report; retry later")
        if not known:
            return _error(404, f"no pre-stop hook {hook_id[:40]!r} for this agent")
        return JSONResponse({"id": hook_id, "status": status})

    return [Route(path, ingest, methods=["POST"]),
            Route(HOOK_PATH, hook_report, methods=["POST"])]


def _not_allowed(minutes: Sequence[GpuMinute], bound: tuple[str, str] | None,
                 identity: IdentityAuthority | None) -> tuple[int, str] | None:
    """(index, why) of the first summary this sender may not report, or None."""
    for index, m in enumerate(minutes):
        if bound is not None and (m.provider, m.instance_id) != bound:
            return index, (f"minutes[{index}]: this agent proved it runs on "
                           f"{bound[0]}:{bound[1]}, not {m.provider}:{m.instance_id}")
        if bound is None and identity is not None and identity.required and m.provider != "sim":
            return index, (f"minutes[{index}]: {m.provider} instances must prove their "
                           "identity (http.identity.mode: required): the agent does so at "
                           "POST /v1/identity")
    return None


def telemetry_app(*, token: str, sink: Sink, max_body_bytes: int = MAX_BODY_BYTES,
                  clock: Callable[[], datetime] = _wall_clock,
                  gpu_counts: GpuCounts | None = None,
                  identity: IdentityAuthority | None = None,
                  hooks: HookDesk | None = None) -> Starlette:
    """A standalone app serving only the ingest route (and the identity route, given
    `identity`): tests, or a bare receiver."""
    routes = telemetry_routes(token=token, sink=sink, max_body_bytes=max_body_bytes,
                              clock=clock, gpu_counts=gpu_counts, identity=identity,
                              hooks=hooks)
    if identity is not None:
        from costguard.daemon.identity import identity_routes

        routes += identity_routes(identity, token=token, clock=clock)
    return Starlette(routes=routes)


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
