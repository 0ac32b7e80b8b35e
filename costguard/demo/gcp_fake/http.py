"""HTTP plumbing of the Compute fake: Google-style JSON errors and the request handler."""

from __future__ import annotations

import json
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, urlsplit

Handle = Callable[[str, str, dict[str, str], Any], tuple[int, Any]]

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


def handler_for(handle: Handle) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # headers and body go out as two writes: without TCP_NODELAY, Nagle holds the body
        # until the client's delayed ACK (40 ms on Linux), so every call took 44 ms on
        # loopback, a stall of this fake, not of Google's API or of costguard
        disable_nagle_algorithm = True

        def _serve(self, method: str) -> None:
            parts = urlsplit(self.path)
            query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            body = json.loads(raw) if raw else {}
            status, payload = handle(method, parts.path, query, body)
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json; charset=UTF-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            self._serve("GET")

        def do_POST(self) -> None:
            self._serve("POST")

        def do_DELETE(self) -> None:
            self._serve("DELETE")

        def log_message(self, format: str, *args: Any) -> None:
            return  # keep test output clean

    return Handler
