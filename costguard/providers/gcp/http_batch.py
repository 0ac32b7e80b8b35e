"""Compute Engine HTTP batch requests: many calls in one HTTP request.

As Compute Engine's "Batching requests" guide describes it: one `POST /batch/compute/v1`
with `Content-Type: multipart/mixed; boundary=...`, at most 1,000 calls. Each part is
`Content-Type: application/http` with a `Content-ID`, and holds one whole HTTP request with
only the path of its URL (`POST /compute/v1/projects/P/zones/Z/instances/N/stop HTTP/1.1`),
its headers and its body; the outer request's authorization covers every inner one. The
answer is `multipart/mixed` too, one `application/http` part per call holding its HTTP
response, named `Content-ID: <response-ID>`; the calls may run, and answer, in any order.

Each inner call counts against the API's quota as itself: a batch saves round trips and the
client's per-call cost (one HTTP request, no client library objects per call), not quota.
google-cloud-compute has no batch support, so this speaks the wire format with the
requests session the credentials authorize.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from google.api_core import exceptions as gexc

from costguard.errors import ProviderError
from costguard.providers.gcp.settings import RetrySettings

MAX_CALLS = 1000  # the API's limit per batch request
BATCH_PATH = "/batch/compute/v1"
RETRYABLE_STATUS = {429, 500, 503, 504}


@dataclass(frozen=True)
class Call:
    method: str
    path: str  # /compute/v1/projects/...?query
    body: dict[str, Any] | None = None


@dataclass(frozen=True)
class Answer:
    status: int
    body: dict[str, Any]

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    def error(self) -> gexc.GoogleAPICallError:
        """The exception the client library would have raised for this answer."""
        found = self.body.get("error")
        err: dict[str, Any] = found if isinstance(found, dict) else {}
        message = str(err.get("message") or f"HTTP {self.status}")
        errors = err.get("errors") if isinstance(err.get("errors"), list) else []
        exc: gexc.GoogleAPICallError = gexc.from_http_status(  # type: ignore[no-untyped-call]
            self.status, message, errors=errors)
        return exc


def encode(calls: Sequence[Call], boundary: str) -> bytes:
    parts = []
    for n, call in enumerate(calls):
        body = json.dumps(call.body) if call.body is not None else ""
        head = f"{call.method} {call.path} HTTP/1.1\r\n"
        if call.body is not None:
            head += "Content-Type: application/json\r\n"
        parts.append(f"--{boundary}\r\nContent-Type: application/http\r\n"
                     f"Content-ID: <item-{n}>\r\n\r\n{head}\r\n{body}\r\n")
    return ("".join(parts) + f"--{boundary}--\r\n").encode()


def _inner_response(payload: bytes) -> Answer:
    head, _, body = payload.partition(b"\r\n\r\n")
    if not _:
        head, _, body = payload.partition(b"\n\n")
    status_line = head.split(b"\n", 1)[0].decode("latin-1").strip()
    try:
        status = int(status_line.split()[1])
    except (IndexError, ValueError):
        raise ValueError(f"not an HTTP status line: {status_line[:80]!r}") from None
    text = body.strip()
    try:
        parsed = json.loads(text) if text else {}
    except ValueError:
        parsed = {"error": {"message": text[:200].decode("utf-8", "replace")}}
    return Answer(status, parsed if isinstance(parsed, dict) else {"value": parsed})


def _boundary(content_type: str) -> bytes:
    kind, _, params = content_type.partition(";")
    if kind.strip().lower() != "multipart/mixed":
        raise ValueError(f"not a multipart answer ({content_type or 'no content type'})")
    for param in params.split(";"):
        key, _, value = param.strip().partition("=")
        if key.lower() == "boundary" and value.strip('"'):
            return value.strip('"').encode()
    raise ValueError("a multipart answer without a boundary")


def _parts(boundary: bytes, data: bytes) -> list[tuple[dict[str, str], bytes]]:
    """(headers, body) of each part of a multipart body (RFC 2046: parts between
    `--boundary` lines, the last closed by `--boundary--`). Split by hand: the email
    package's parser cost ~2 ms a part, more than the rest of a call."""
    delimiter = b"--" + boundary
    chunks = data.split(delimiter)
    out: list[tuple[dict[str, str], bytes]] = []
    for chunk in chunks[1:]:
        if chunk.startswith(b"--"):
            return out
        chunk = chunk.removeprefix(b"\r\n").removeprefix(b"\n")
        head, sep, body = chunk.partition(b"\r\n\r\n")
        if not sep:
            head, sep, body = chunk.partition(b"\n\n")
        headers = {}
        for line in head.decode("latin-1").splitlines():
            name, colon, value = line.partition(":")
            if colon:
                headers[name.strip().lower()] = value.strip()
        out.append((headers, body.removesuffix(b"\r\n").removesuffix(b"\n")))
    raise ValueError("a multipart answer cut short (no closing boundary)")


def decode(content_type: str, data: bytes, calls: int) -> list[Answer]:
    """The answers of a batch response, in the order of its calls (matched by Content-ID).
    Raises ValueError when the response is not a batch answer to these calls."""
    out: list[Answer | None] = [None] * calls
    for headers, payload in _parts(_boundary(content_type), data):
        cid = headers.get("content-id", "").strip("<>")
        key = cid.removeprefix("response-").removeprefix("item-")
        if not key.isdigit() or not 0 <= int(key) < calls:
            raise ValueError(f"an answer to no call of the batch: Content-ID {cid!r}")
        out[int(key)] = _inner_response(payload)
    missing = [n for n, a in enumerate(out) if a is None]
    if missing:
        raise ValueError(f"{len(missing)} of {calls} calls unanswered")
    return [a for a in out if a is not None]


Post = Callable[[str, bytes, dict[str, str]], tuple[int, str, bytes]]


def requests_post(session: Any, timeout_s: float = 120.0) -> Post:
    """A Post over a requests session (google.auth's AuthorizedSession)."""
    def post(url: str, data: bytes, headers: dict[str, str]) -> tuple[int, str, bytes]:
        r = session.post(url, data=data, headers=headers, timeout=timeout_s)
        return r.status_code, r.headers.get("Content-Type", ""), r.content
    return post


Send = Callable[[Sequence[Call], str], list[Answer]]  # one batch request's answers


def send(one: Send, calls: Sequence[Call], retry: RetrySettings, scope: str,
         sleep: Callable[[float], None] = time.sleep) -> list[Answer]:
    """Every call's answer, in order: batches of at most MAX_CALLS; a batch answered 429 or
    5xx whole, and each inner call answered so, is sent again with backoff until the retry
    deadline (its last answer stands then). Raises ProviderError when a batch cannot be
    sent at all. `one` sends each batch: batch_joiner.Joiner.send (with other projects'
    calls), or `one_batch` bound to a Post and a base URL (alone)."""
    answers: list[Answer | None] = [None] * len(calls)
    todo = list(range(len(calls)))
    delay, deadline = retry.initial_s, time.monotonic() + retry.deadline_s
    while todo:
        again: list[int] = []
        for start in range(0, len(todo), MAX_CALLS):
            chunk = todo[start:start + MAX_CALLS]
            part = [calls[i] for i in chunk]
            got = one(part, scope)
            for i, answer in zip(chunk, got, strict=True):
                answers[i] = answer
                if answer.status in RETRYABLE_STATUS:
                    again.append(i)
        if not again or time.monotonic() + delay > deadline:
            break
        sleep(delay)
        delay = min(delay * retry.multiplier, retry.maximum_s)
        todo = again
    return [a for a in answers if a is not None]


def one_batch(post: Post, base_url: str, calls: Sequence[Call], scope: str) -> list[Answer]:
    boundary = f"batch_{uuid.uuid4().hex}"
    try:
        status, content_type, data = post(
            base_url.rstrip("/") + BATCH_PATH, encode(calls, boundary),
            {"Content-Type": f"multipart/mixed; boundary={boundary}"})
    except OSError as exc:  # requests' ConnectionError and Timeout are OSErrors
        raise ProviderError("gcp", scope, f"batch request failed: {type(exc).__name__}: "
                            f"{exc}", retryable=True) from exc
    if status in RETRYABLE_STATUS:  # the batch as a whole was refused: each call again
        return [Answer(status, {"error": {"message": f"batch answered HTTP {status}"}})
                for _ in calls]
    if not 200 <= status < 300:
        body = data[:300].decode("utf-8", "replace")
        raise ProviderError("gcp", scope, f"batch request refused: HTTP {status}: {body}",
                            retryable=False)
    try:
        return decode(content_type, data, len(calls))
    except ValueError as exc:
        raise ProviderError("gcp", scope, f"batch answer unreadable: {exc}",
                            retryable=True) from exc
