"""A reverse proxy that makes a loopback fake answer like a cloud API: every call waits
`latency_ms` before it is forwarded, and a share `throttle` of calls is refused with the
throttling error the API's protocol defines, without reaching the fake.

Throttling errors, as AWS documents them per protocol:
- EC2 (query in, XML out): HTTP 503, `<Response><Errors><Error><Code>RequestLimitExceeded`;
- query services (STS, Auto Scaling): HTTP 400, `<ErrorResponse><Error><Code>Throttling`;
- JSON 1.0 services (CloudWatch, awsQueryCompatible): HTTP 400, `__type` ThrottlingException
  and `x-amzn-query-error: Throttling;Sender`;
- anything else (Google APIs over REST): HTTP 429 with a google.rpc.Status body,
  RESOURCE_EXHAUSTED.

Which calls are refused is drawn from a seeded generator, so a run repeats. Counts of
forwarded and refused calls are served at GET /_proxy (the backend's own GET paths are
forwarded as they are, without latency or throttling).

`python -m bench._latency_proxy PORT BACKEND_URL LATENCY_MS THROTTLE` serves until killed;
it prints "ready" once listening.
"""

from __future__ import annotations

import http.client
import json
import random
import re
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from costguard.demo.gcp_fake.http import LoopbackServer

_SERVICE = re.compile(r"Credential=[^/]+/\d{8}/[^/]+/([^/]+)/aws4_request")
# hop-by-hop headers are the proxy's own (RFC 9110 7.6.1)
_HOP = frozenset({"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te",
                  "trailer", "upgrade", "host", "content-length"})


class Gate:
    """Latency and throttling, and what passed through."""

    def __init__(self, latency_ms: float, throttle: float, seed: int = 7) -> None:
        self.latency_s = latency_ms / 1000
        self.throttle = throttle
        self._rng = random.Random(seed)
        self.lock = threading.Lock()
        self.forwarded = 0
        self.throttled = 0

    def refuse(self) -> bool:
        with self.lock:
            refused = self._rng.random() < self.throttle
            if refused:
                self.throttled += 1
            else:
                self.forwarded += 1
            return refused


def throttling_error(headers: Any) -> tuple[int, dict[str, str], bytes]:
    """The throttling answer a call with these request headers would get."""
    rid = str(uuid.uuid4())
    if headers.get("X-Amz-Target"):
        body = json.dumps({"__type": "ThrottlingException", "message": "Rate exceeded"})
        return 400, {"Content-Type": "application/x-amz-json-1.0",
                     "x-amzn-query-error": "Throttling;Sender",
                     "x-amzn-RequestId": rid}, body.encode()
    m = _SERVICE.search(headers.get("Authorization", ""))
    if m is not None and m.group(1) == "ec2":
        return 503, {"Content-Type": "text/xml"}, (
            '<?xml version="1.0" encoding="UTF-8"?>\n<Response><Errors><Error><Code>'
            "RequestLimitExceeded</Code><Message>Request limit exceeded.</Message></Error>"
            f"</Errors><RequestID>{rid}</RequestID></Response>").encode()
    if m is not None:
        return 400, {"Content-Type": "text/xml", "x-amzn-RequestId": rid}, (
            "<ErrorResponse><Error><Type>Sender</Type><Code>Throttling</Code><Message>Rate "
            f"exceeded</Message></Error><RequestId>{rid}</RequestId></ErrorResponse>").encode()
    body = json.dumps({"error": {"code": 429, "message": "Quota exceeded for quota metric "
                                 "'Read requests' of service 'compute.googleapis.com'.",
                                 "status": "RESOURCE_EXHAUSTED"}})
    return 429, {"Content-Type": "application/json; charset=UTF-8"}, body.encode()


def make_handler(backend: str, gate: Gate) -> type[BaseHTTPRequestHandler]:
    target = urlsplit(backend)
    local = threading.local()

    def connection() -> http.client.HTTPConnection:
        conn: http.client.HTTPConnection | None = getattr(local, "conn", None)
        if conn is None:
            conn = http.client.HTTPConnection(target.hostname or "127.0.0.1", target.port,
                                              timeout=300)
            local.conn = conn
        return conn

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _answer(self, status: int, headers: dict[str, str], body: bytes) -> None:
            self.send_response(status)
            for k, v in headers.items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _forward(self, method: str, body: bytes | None) -> None:
            headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
            if body is not None:
                headers["Content-Length"] = str(len(body))
            for attempt in (1, 2):  # a kept-alive connection the backend closed: once more
                conn = connection()
                try:
                    conn.request(method, self.path, body=body, headers=headers)
                    response = conn.getresponse()
                    data = response.read()
                    break
                except (ConnectionError, http.client.HTTPException):
                    conn.close()
                    local.conn = None
                    if attempt == 2:
                        raise
            kept = {k: v for k, v in response.getheaders() if k.lower() not in _HOP}
            self._answer(response.status, kept, data)

        def do_GET(self) -> None:
            if self.path == "/_proxy":
                with gate.lock:
                    counts = {"forwarded": gate.forwarded, "throttled": gate.throttled}
                self._answer(200, {"Content-Type": "application/json"},
                             json.dumps(counts).encode())
            elif self.path.startswith("/_"):
                self._forward("GET", None)
            else:
                self._call("GET", None)

        def do_POST(self) -> None:
            self._call("POST", self.rfile.read(int(self.headers.get("Content-Length", "0"))))

        def _call(self, method: str, body: bytes | None) -> None:
            time.sleep(gate.latency_s)  # a refusal takes its round trip too
            if gate.refuse():
                self._answer(*throttling_error(self.headers))
                return
            self._forward(method, body)

    return Handler


def serve(backend: str, latency_ms: float, throttle: float, port: int = 0
          ) -> tuple[ThreadingHTTPServer, Gate]:
    gate = Gate(latency_ms, throttle)
    server = LoopbackServer(("127.0.0.1", port), make_handler(backend, gate))
    return server, gate


def main(port: int, backend: str, latency_ms: float, throttle: float) -> None:
    server, _gate = serve(backend, latency_ms, throttle, port)
    print("ready", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2], float(sys.argv[3]), float(sys.argv[4]))
