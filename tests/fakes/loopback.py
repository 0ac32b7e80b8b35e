"""Real HTTP servers on 127.0.0.1 for tests: an ASGI app served by uvicorn in a thread.

Shared by the alert fakes (Slack, the click endpoint) and the telemetry tests (ingest,
instance metadata).
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn


def free_port() -> int:
    """A port nobody listens on right now (for a server started later, or for "nowhere")."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def serve(app: Any, port: int | None = None,
          tls: tuple[str, str] | None = None) -> Iterator[str]:
    """Run `app` on 127.0.0.1 (on `port`, or any free one; over HTTPS with `tls`, a
    (certificate file, key file) pair) until the block ends; yields its base URL. No access
    log: request paths may carry secrets (webhook, response_url)."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port or 0))
    bound = int(sock.getsockname()[1])
    certs = {"ssl_certfile": tls[0], "ssl_keyfile": tls[1]} if tls else {}
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off",
                            **certs)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline:
            raise RuntimeError("test server did not start")
        time.sleep(0.01)
    try:
        yield f"{'https' if tls else 'http'}://127.0.0.1:{bound}"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()
