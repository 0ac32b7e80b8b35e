"""What a client's connections may hold of the daemon's HTTP server (daemon/connections.py),
over real loopback sockets: a request head or body that does not arrive whole in time closes
its connection, connections beyond the cap are closed at once, asyncio's per-accept errors are
held to one a minute, and a daemon whose descriptors a slow client tried to use up goes on
with its cycles."""

from __future__ import annotations

import asyncio
import logging
import os
import resource
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from costguard.config import Settings
from costguard.daemon.bodies import read_limited
from costguard.daemon.connections import limited
from costguard.daemon.http import HttpServer
from costguard.daemon.logs import Throttle
from tests.daemon_log import daemon_log


async def _hello(_request: Request) -> PlainTextResponse:
    return PlainTextResponse("hello")


async def _slow(request: Request) -> PlainTextResponse:
    body = await request.body()
    await asyncio.sleep(1.5)  # longer than the head's deadline and the body's
    return PlainTextResponse(f"slow hello {len(body)}")


TAKEN: list[bytes | str] = []  # what /take read, or how its read ended


async def _take(request: Request) -> PlainTextResponse:
    try:
        TAKEN.append(await read_limited(request, 1024))
    except ClientDisconnect:
        TAKEN.append("client gone")
        raise
    return PlainTextResponse(f"took {len(TAKEN[-1])}")


@pytest.fixture
def server() -> Iterator[HttpServer]:
    app = Starlette(routes=[Route("/", _hello), Route("/slow", _slow, methods=["GET", "POST"]),
                            Route("/take", _take, methods=["POST"])])
    running = HttpServer(app, "127.0.0.1", 0, head_timeout_s=0.5, body_timeout_s=1.0,
                         max_connections=4)
    running.start()
    yield running
    running.stop()


def _connect(server: HttpServer) -> socket.socket:
    return socket.create_connection(("127.0.0.1", server.port), timeout=5)


def _closed(sock: socket.socket, within_s: float) -> bool:
    """Whether the server closed `sock` (EOF or reset) within `within_s`."""
    sock.settimeout(within_s)
    try:
        return sock.recv(4096) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def _answer(sock: socket.socket, ending: bytes) -> bytes:
    answer = b""
    while not answer.endswith(ending):
        chunk = sock.recv(4096)
        assert chunk, answer
        answer += chunk
    return answer


def _get(sock: socket.socket) -> bytes:
    sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    return _answer(sock, b"hello")


def test_a_head_that_does_not_arrive_in_time_closes_its_connection(
        server: HttpServer) -> None:
    sock = _connect(server)
    sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n")  # never the blank line
    assert _closed(sock, within_s=3)


def test_a_connection_that_sends_nothing_is_closed(server: HttpServer) -> None:
    assert _closed(_connect(server), within_s=3)


def test_a_head_sent_in_pieces_within_the_time_is_answered(server: HttpServer) -> None:
    sock = _connect(server)
    for piece in (b"GET / HTTP/1.1\r\n", b"Host: x\r\n", b"\r\n"):
        sock.sendall(piece)
        time.sleep(0.1)
    sock.settimeout(5)
    assert sock.recv(4096).endswith(b"hello")


def test_a_kept_alive_connection_waits_for_its_next_head_no_longer(
        server: HttpServer) -> None:
    sock = _connect(server)
    assert b"200 OK" in _get(sock)
    assert b"200 OK" in _get(sock)  # kept alive, and a whole head is answered at once
    sock.sendall(b"GET / HTTP/1.1\r\n")  # the next head, trickled
    assert _closed(sock, within_s=3)


def test_a_slow_answer_is_never_cut_by_the_head_s_deadline(server: HttpServer) -> None:
    """A whole head starts an answer that takes as long as it takes, a pipelined one too
    (it began while the one before it was answered)."""
    sock = _connect(server)
    sock.sendall(b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n" * 2)
    answer = b""
    sock.settimeout(5)
    while answer.count(b"slow hello") < 2:
        chunk = sock.recv(4096)
        assert chunk, answer
        answer += chunk
    assert answer.count(b"200 OK") == 2


def _post_head(sock: socket.socket, path: str, length: int) -> None:
    sock.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {length}\r\n\r\n"
                 .encode())


def test_a_body_that_does_not_arrive_in_time_closes_its_connection(
        server: HttpServer) -> None:
    """A whole head and then a body a byte at a time: each byte comes well within the head's
    deadline, the whole body never within the body's; the endpoint waiting for it sees the
    client gone."""
    TAKEN.clear()
    sock = _connect(server)
    _post_head(sock, "/take", 100)
    started = time.monotonic()
    sock.settimeout(0.2)
    closed = False
    while time.monotonic() - started < 4 and not closed:
        try:
            sock.sendall(b"a")
            closed = sock.recv(4096) == b""
        except TimeoutError:
            continue
        except (ConnectionResetError, BrokenPipeError):
            closed = True
    assert closed and 0.9 < time.monotonic() - started < 2.5
    deadline = time.monotonic() + 3
    while not TAKEN and time.monotonic() < deadline:
        time.sleep(0.05)
    assert TAKEN == ["client gone"]


def test_a_body_sent_in_pieces_within_the_time_is_answered(server: HttpServer) -> None:
    TAKEN.clear()
    sock = _connect(server)
    _post_head(sock, "/take", 30)
    for _ in range(3):
        time.sleep(0.2)
        sock.sendall(b"x" * 10)
    sock.settimeout(5)
    assert b"200 OK" in _answer(sock, b"took 30")
    assert TAKEN == [b"x" * 30]


def test_a_slow_answer_to_a_whole_body_is_never_cut(server: HttpServer) -> None:
    """The body's deadline is the body's: an endpoint that answers after it, a kept-alive
    connection's next request and its body too, are answered."""
    sock = _connect(server)
    sock.settimeout(5)
    for _ in range(2):
        _post_head(sock, "/slow", 5)
        sock.sendall(b"hello")
        assert b"200 OK" in _answer(sock, b"slow hello 5")


def test_beyond_the_cap_the_longest_waiting_for_a_head_makes_room(
        server: HttpServer) -> None:
    """Connections that never finish a head hold every place: a new client (a health
    probe) still gets in, and the connection that waited longest is the one closed."""
    held = [_connect(server) for _ in range(4)]
    for sock in held:
        sock.sendall(b"G")  # each a head begun
        time.sleep(0.02)
    time.sleep(0.1)
    probe = _connect(server)
    assert b"200 OK" in _get(probe)
    assert _closed(held[0], within_s=0.3)  # at once, not at the head's deadline
    assert not any(_closed(sock, within_s=0.05) for sock in held[1:])
    assert httpx.get(f"http://127.0.0.1:{server.port}/").text == "hello"  # made room again


def test_beyond_the_cap_with_every_connection_inside_a_request_a_new_one_is_closed(
        server: HttpServer) -> None:
    """A connection whose head came whole is inside a request: never closed to make room;
    with all of them so, a new connection is closed at once, and room comes back when one
    ends."""
    held = [_connect(server) for _ in range(4)]
    for sock in held:
        _post_head(sock, "/take", 3)  # a whole head; the body to come
    time.sleep(0.2)
    refused = _connect(server)
    assert _closed(refused, within_s=0.4)
    for sock in held:
        sock.sendall(b"abc")
        assert b"took 3" in _answer(sock, b"took 3")
        sock.close()
    time.sleep(0.2)
    assert httpx.get(f"http://127.0.0.1:{server.port}/").text == "hello"


def test_connections_and_backlog_share_half_the_open_files_limit() -> None:
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    protocol, backlog = limited(max_connections=10**6)
    assert protocol.max_connections + backlog == soft // 2 and backlog == 128
    assert limited(max_connections=16)[0].max_connections == 16
    low = subprocess.run(
        [sys.executable, "-c", "from costguard.daemon.connections import limited; "
         "p, b = limited(); print(p.max_connections, b)"],
        capture_output=True, text=True, check=True, timeout=60,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256)))
    assert low.stdout.split() == ["96", "32"]


def test_asyncio_s_refused_accepts_are_logged_once_a_minute() -> None:
    now = [0.0]
    throttle = Throttle(60.0, clock=lambda: now[0])
    logger = logging.getLogger("test.throttle")

    def record(msg: str) -> logging.LogRecord:
        return logger.makeRecord(logger.name, logging.ERROR, __file__, 1, msg, None, None)

    first = record("socket.accept() out of system resource")
    assert throttle.filter(first)
    assert first.getMessage() == "socket.accept() out of system resource"
    assert not any(throttle.filter(record("socket.accept() out of system resource"))
                   for _ in range(5000))
    assert throttle.filter(record("another message"))  # each message its own
    assert throttle.filter(logger.makeRecord(logger.name, logging.ERROR, __file__, 1,
                                             "request to %s failed", ("a",), None))
    assert throttle.filter(logger.makeRecord(logger.name, logging.ERROR, __file__, 1,
                                             "request to %s failed", ("b",), None))

    # a call whose arguments do not fit its message passes on, for the handler to report
    assert throttle.filter(logger.makeRecord(logger.name, logging.ERROR, __file__, 1,
                                             "%s and %s", ("one",), None))

    def failed(exc: Exception) -> logging.LogRecord:
        return logger.makeRecord(logger.name, logging.ERROR, __file__, 1,
                                 "Exception in ASGI application\n", None,
                                 (type(exc), exc, None))

    assert throttle.filter(failed(KeyError("a")))
    assert throttle.filter(failed(ValueError("b")))  # another error: its own traceback
    assert not throttle.filter(failed(KeyError("a")))  # the same one again
    now[0] = 61.0
    later = record("socket.accept() out of system resource")
    assert throttle.filter(later)
    assert later.getMessage() == ("socket.accept() out of system resource "
                                  "(5,000 more like it in the last 60 s, left out)")


def test_the_limits_are_settings_with_bounds() -> None:
    http = Settings(http={"head_timeout": "30s", "body_timeout": "2m",
                          "max_connections": 200}).http
    assert http.head_timeout.total_seconds() == 30 and http.max_connections == 200
    assert http.body_timeout.total_seconds() == 120
    assert Settings().http.body_timeout.total_seconds() == 60
    for key in ("head_timeout", "body_timeout"):
        with pytest.raises(ValidationError, match="must be at least 1s"):
            Settings(http={key: "0s"})
    with pytest.raises(ValidationError, match="greater than or equal to 16"):
        Settings(http={"max_connections": 1})


_RAISE = """
import resource, sys
from costguard.daemon.connections import raise_open_files_limit
print(raise_open_files_limit(), raise_open_files_limit(),
      resource.getrlimit(resource.RLIMIT_NOFILE)[0])
"""


def test_the_soft_open_files_limit_is_raised_to_the_hard_one() -> None:
    def low() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, 512))

    done = subprocess.run([sys.executable, "-c", _RAISE], capture_output=True, text=True,
                          check=True, timeout=60, preexec_fn=low)
    assert done.stdout.split() == ["(256,", "512)", "None", "512"]


def test_a_daemon_a_slow_client_tries_to_starve_goes_on(tmp_path: Path) -> None:
    """400 connections that never finish a head, against a daemon allowed 256 descriptors:
    they held all of them (its cycles failed "Too many open files", /healthz went unanswered,
    asyncio logged 115 MB in half a minute). Now at most half are held, each for the
    head's deadline, and the daemon answers and cycles throughout."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = tmp_path / "costguard.yaml"
    config.write_text(f"database_url: sqlite:///{tmp_path / 'cg.db'}\npolicy_paths: []\n"
                      f"poll_interval: 10s\nhttp:\n  port: {port}\n  head_timeout: 1s\n")

    def low() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))

    run = "import sys; sys.argv[0] = 'costguard'; from costguard.entry import main; main()"
    log = tmp_path / "run.log"
    with log.open("w") as out:
        daemon = subprocess.Popen([sys.executable, "-c", run, "run", "--config", str(config)],
                                  cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT,
                                  preexec_fn=low, env={**os.environ, "NO_COLOR": "1"})
    socks: list[socket.socket] = []
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{base}/healthz").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        for _ in range(400):
            try:
                sock = socket.create_connection(("127.0.0.1", port), timeout=2)
                sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
                socks.append(sock)
            except OSError:
                break
        time.sleep(2.5)  # past the head's deadline
        assert httpx.get(f"{base}/healthz", timeout=5).status_code == 200
        time.sleep(9)  # the next cycle, with every slow connection opened meanwhile
        assert httpx.get(f"{base}/healthz", timeout=5).status_code == 200
    finally:
        for sock in socks:
            sock.close()
        daemon.terminate()
        daemon.wait(timeout=30)
    text = log.read_text()
    assert "cycle failed" not in text, text[-3000:]
    assert "cycle=2" in text, text[-3000:]
    assert len(text) < 100_000, len(text)


def test_a_flood_of_malformed_requests_logs_one_line_a_minute(server: HttpServer) -> None:
    """uvicorn logs "Invalid HTTP request received." for each malformed request: at the
    client's will, a line each (the daemon's logging holds it to one a minute)."""
    with daemon_log("uvicorn.error") as out:
        for _ in range(30):
            with _connect(server) as sock:
                sock.sendall(b"NOT HTTP AT ALL\r\n\r\n")
                assert b"400" in sock.recv(4096)
    assert out.getvalue().count("Invalid HTTP request received.") == 1, out.getvalue()
