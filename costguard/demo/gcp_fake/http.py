"""HTTP plumbing of the Compute fake: Google-style JSON errors and the request handler, which
also answers batch requests (`POST /batch/compute/v1`, multipart/mixed) as Compute Engine's
"Batching requests" guide describes them."""

from __future__ import annotations

import json
import socket
import struct
import uuid
from collections.abc import Callable
from email.parser import BytesParser
from email.policy import HTTP
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from costguard.demo.gcp_fake import fields as partial

Handle = Callable[[str, str, dict[str, str], Any], tuple[int, Any]]
# what `handle` answers for a connection reset: the socket is closed with a TCP RST and no
# answer, as a load balancer dropping a connection does (`FakeCompute.inject(RESET)`)
RESET = 0

_STATUS_NAMES = {
    400: "INVALID_ARGUMENT",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    412: "FAILED_PRECONDITION",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    501: "UNIMPLEMENTED",
    503: "UNAVAILABLE",
}


def error(code: int, message: str, *, reason: str = "") -> dict[str, Any]:
    return {
        "error": {
            "code": code,
            "message": message,
            "status": _STATUS_NAMES.get(code, "UNKNOWN"),
            "errors": [
                {"message": message, "domain": "global", "reason": reason or "backendError"}
            ],
        }
    }


def forbidden(project: str, why: str) -> dict[str, Any]:
    if why == "SERVICE_DISABLED":
        message = (
            f"Compute Engine API has not been used in project {project} before or it is disabled."
        )
        body = error(403, message, reason="accessNotConfigured")
        body["error"]["details"] = [
            {
                "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                "reason": "SERVICE_DISABLED",
                "domain": "googleapis.com",
                "metadata": {"service": "compute.googleapis.com"},
            }
        ]
        return body
    return error(
        403,
        f"Required 'compute.instances.list' permission for 'projects/{project}'",
        reason="forbidden",
    )


BATCH_PATH = "/batch/compute/v1"


def _batch_calls(content_type: str, raw: bytes) -> list[tuple[str, str, str, Any]]:
    """(Content-ID, method, path?query, JSON body) of each call in a batch request."""
    message = BytesParser(policy=HTTP).parsebytes(
        f"Content-Type: {content_type}\r\n\r\n".encode() + raw)
    if not message.is_multipart():
        raise ValueError("a batch request is multipart/mixed")
    calls = []
    for part in message.iter_parts():
        if part.get_content_type() != "application/http":
            raise ValueError("each part of a batch is Content-Type: application/http")
        payload = part.get_payload(decode=True)
        if not isinstance(payload, bytes):
            raise ValueError("an empty part")
        head, _, body = payload.replace(b"\r\n", b"\n").partition(b"\n\n")
        method, target, _version = head.split(b"\n", 1)[0].decode().split(" ", 2)
        if "://" in target:
            raise ValueError("an inner request names only the path of its URL")
        text = body.strip()
        calls.append((str(part.get("Content-ID", "")).strip().strip("<>"), method, target,
                      json.loads(text) if text else {}))
    if len(calls) > 1000:
        raise ValueError("at most 1000 calls in a batch request")
    return calls


def _batch_answer(answers: list[tuple[str, int, Any]], boundary: str) -> bytes:
    out = []
    for cid, status, payload in answers:
        data = json.dumps(payload)
        out.append(f"--{boundary}\r\nContent-Type: application/http\r\n"
                   f"Content-ID: <response-{cid}>\r\n\r\n"
                   f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\n"
                   "Content-Type: application/json; charset=UTF-8\r\n"
                   f"Content-Length: {len(data.encode())}\r\n\r\n{data}\r\n")
    return ("".join(out) + f"--{boundary}--\r\n").encode()


class LoopbackServer(ThreadingHTTPServer):
    """A threaded HTTP server for the fakes: a thread per connection, and a listen backlog
    that many workers connecting at once fit in. The backlog is a class attribute because
    the server calls listen() as it is built: setting it on the instance afterwards (as the
    benchmarks' servers did) left the default of 5, and the kernel dropped the connections
    beyond it (each waited out a SYN retry: a second or more)."""

    daemon_threads = True
    request_queue_size = 256


# the `fields` system parameter, as a query parameter or a header (fields.py)
_FIELDS_PARAMS = ("fields", "$fields")
FIELDS_HEADER = "X-Goog-FieldMask"


def handler_for(handle: Handle, on_batch: Callable[[int], None] | None = None,
                on_fields: Callable[[str], bool] | None = None
                ) -> type[BaseHTTPRequestHandler]:
    """The request handler; `on_batch(calls)` is told of each batch request, whose calls
    each go through `handle` as if sent alone. A request that names the fields it wants
    gets a partial response (fields.py); `on_fields(value)` is told of each and answers
    whether the fake takes it (False: a 400, as an API that rejects the selection)."""
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # headers and body go out as two writes: without TCP_NODELAY, Nagle holds the body
        # until the client's delayed ACK (40 ms on Linux), so every call took 44 ms on
        # loopback, a stall of this fake, not of Google's API or of costguard
        disable_nagle_algorithm = True

        def _serve(self, method: str) -> None:
            parts = urlsplit(self.path)
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            if parts.path == BATCH_PATH and method == "POST":
                self._batch(raw)
                return
            query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
            mask = self.headers.get(FIELDS_HEADER)
            for name in _FIELDS_PARAMS:
                mask = query.pop(name, mask)
            body = json.loads(raw) if raw else {}
            selection = None
            if mask is not None:
                try:
                    selection = partial.parse(mask)
                    taken = on_fields is None or on_fields(mask)
                except ValueError as exc:
                    taken, why = False, str(exc)
                else:
                    why = f"Invalid field selection {mask}"
                if not taken:
                    self._send(400, "application/json; charset=UTF-8",
                               json.dumps(error(400, why, reason="invalidParameter")).encode())
                    return
            status, payload = handle(method, parts.path, query, body)
            if status == RESET:
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                           struct.pack("ii", 1, 0))
                self.close_connection = True
                return
            if status == 200:
                payload = partial.apply(payload, selection)
            self._send(status, "application/json; charset=UTF-8", json.dumps(payload).encode())

        def _batch(self, raw: bytes) -> None:
            try:
                calls = _batch_calls(self.headers.get("Content-Type", ""), raw)
            except ValueError as exc:
                self._send(400, "application/json; charset=UTF-8",
                           json.dumps(error(400, f"bad batch request: {exc}")).encode())
                return
            if on_batch is not None:
                on_batch(len(calls))
            answers = []
            for cid, method, target, body in calls:
                inner = urlsplit(target)
                query = {k: v[-1] for k, v in parse_qs(inner.query).items()}
                status, payload = handle(method, inner.path, query, body)
                answers.append((cid, status, payload))
            boundary = f"batch_{uuid.uuid4().hex}"
            self._send(200, f"multipart/mixed; boundary={boundary}",
                       _batch_answer(answers, boundary))

        def _send(self, status: int, content_type: str, data: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            self._serve("GET")

        def do_POST(self) -> None:
            self._serve("POST")

        def do_DELETE(self) -> None:
            self._serve("DELETE")

        def do_PATCH(self) -> None:
            self._serve("PATCH")

        def log_message(self, format: str, *args: Any) -> None:
            return  # keep test output clean

    return Handler
