"""The HTTP side of the org-scale AWS fake (bench/_org_aws.py holds the organisation and
its answers): which account, region and service a signed request is for, the handler that
routes the query, EC2 and JSON protocols to `OrgAws` and writes AWS's error documents, and
the server.

`python -m bench._org_aws_http PORT SPEC_JSON` serves until killed; it prints "ready" once
listening. GET /_state answers what changed ({"stopped": [...], "tags": {id: {k: v}}}) and
GET /_calls the calls served, by operation.
"""

from __future__ import annotations

import json
import re
import sys
import uuid
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs
from xml.sax.saxutils import escape

from bench._org_aws import ApiError, OrgAws
from bench._org_fleet import AMBIENT_ACCOUNT, generate
from costguard.demo.gcp_fake.http import LoopbackServer

_SCOPE = re.compile(r"Credential=([^/]+)/\d{8}/([^/]+)/([^/]+)/aws4_request")


def _scope(headers: Any) -> tuple[str, str, str]:
    """(account, region, service) of a signed request."""
    m = _SCOPE.search(headers.get("Authorization", ""))
    if m is None:
        raise ApiError(403, "MissingAuthenticationToken", "Request is missing Authentication")
    key, region, service = m.groups()
    account = key[4:16] if key.startswith("ASIA") and len(key) == 20 else AMBIENT_ACCOUNT
    return account, region, service


def make_handler(org: OrgAws) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _send(self, status: int, body: str, ctype: str,
                  extra: dict[str, str] | None = None) -> None:
            data = body.encode()
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.send_header("x-amzn-RequestId", str(uuid.uuid4()))
            for k, v in (extra or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path == "/_state":
                self._send(200, json.dumps(org.changes()), "application/json")
            elif self.path == "/_calls":
                with org.lock:
                    self._send(200, json.dumps(dict(org.calls)), "application/json")
            else:
                self._send(404, "", "text/plain")

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            target = self.headers.get("X-Amz-Target")
            service = "?"
            try:
                account, region, service = _scope(self.headers)
                if target:
                    self._json(target, raw, account)
                    return
                params = {k: v[0] for k, v in parse_qs(raw.decode(),
                                                       keep_blank_values=True).items()}
                action = params.get("Action", "")
                with org.lock:
                    org.calls[f"{service}.{action}"] += 1
                if service == "ec2":
                    self._send(200, org.ec2(action, params, account, region), "text/xml")
                else:
                    self._send(200, org.query(service, action, params, account, region),
                               "text/xml")
            except ApiError as exc:
                self._error(service, target, exc)

        def _json(self, target: str, raw: bytes, account: str) -> None:
            operation = target.rpartition(".")[2]
            with org.lock:
                org.calls[f"monitoring.{operation}"] += 1
            if operation != "GetMetricData":
                raise ApiError(400, "InvalidAction", f"{operation} is not served here")
            answer = org.get_metric_data(json.loads(raw), account)
            self._send(200, json.dumps(answer), "application/x-amz-json-1.0")

        def _error(self, service: str, target: str | None, exc: ApiError) -> None:
            if target:  # JSON 1.0 with awsQueryCompatible: the query code in a header
                self._send(exc.status, json.dumps({"__type": exc.code, "message": exc.message}),
                           "application/x-amz-json-1.0",
                           {"x-amzn-query-error": f"{exc.code};Sender"})
            elif service == "ec2":
                self._send(exc.status,
                           f'<?xml version="1.0" encoding="UTF-8"?>\n<Response><Errors><Error>'
                           f"<Code>{exc.code}</Code><Message>{escape(exc.message)}</Message>"
                           f"</Error></Errors><RequestID>{uuid.uuid4()}</RequestID></Response>",
                           "text/xml")
            else:
                self._send(exc.status,
                           f"<ErrorResponse><Error><Type>Sender</Type><Code>{exc.code}</Code>"
                           f"<Message>{escape(exc.message)}</Message></Error><RequestId>"
                           f"{uuid.uuid4()}</RequestId></ErrorResponse>", "text/xml")

    return Handler


def serve(org: OrgAws, port: int = 0) -> ThreadingHTTPServer:
    server = LoopbackServer(("127.0.0.1", port), make_handler(org))
    return server


def main(port: int, spec_json: str) -> None:
    spec = json.loads(spec_json)
    fleet = generate(spec["instances"], spec["accounts"], spec["regions"],
                     datetime.fromisoformat(spec["now"]), spec.get("seed", 22))
    server = serve(OrgAws(fleet), port)
    print("ready", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2])
