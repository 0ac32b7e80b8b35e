"""Ingest counts honestly and fails small: a summary must be a whole UTC minute, not in the
future nor older than any buffer, for a GPU its instance has, with an instance id; deep JSON
is a 400; a slow store never holds up /healthz; the agent drops what the daemon refuses for
good instead of sending it forever."""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from costguard.clock import ManualClock
from costguard.daemon.http import HttpServer, ServiceState, build_app
from costguard.daemon.metrics import DaemonMetrics
from costguard.model import GpuMinute, TelemetrySource
from costguard.store.db import Database
from costguard.telemetry.agent import Pusher
from costguard.telemetry.buffer import DiskBuffer
from costguard.telemetry.identity import exchange_proof
from costguard.telemetry.ingest import MemorySink, telemetry_app, telemetry_routes
from tests.fakes.loopback import serve
from tests.reliability import figures

TOKEN = "agent-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
NOW = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)
GPUS = {("aws", "i-1gpu"): 1, ("aws", "i-cpu"): 0}


def _minute(at: datetime, *, instance: str = "i-1gpu", gpu: int = 0) -> dict[str, Any]:
    m = GpuMinute(provider="aws", instance_id=instance, gpu_index=gpu, minute=at,
                  source=TelemetrySource.AGENT, util_mean=0.0, sm_mean=0.0)
    return m.model_dump(mode="json")


@pytest.fixture
def client() -> Iterator[tuple[httpx.Client, MemorySink]]:
    sink = MemorySink()
    app = telemetry_app(token=TOKEN, sink=sink, clock=lambda: NOW,
                        gpu_counts=lambda keys: {k: n for k, n in GPUS.items() if k in keys})
    with serve(app) as url, httpx.Client(base_url=url, timeout=5) as c:
        yield c, sink


@pytest.mark.parametrize(("item", "field", "words"), [
    (_minute(NOW - timedelta(minutes=3, seconds=-17)), "minute", "whole UTC minute"),
    (_minute(NOW + timedelta(minutes=30)), "minute", "in the future"),
    (_minute(NOW - timedelta(days=8)), "minute", "older than 7 days"),
    (_minute(datetime(9999, 12, 31, 23, 59, tzinfo=UTC)), "minute", "in the future"),
    (_minute(NOW, instance=" "), "instance_id", "is empty"),
    (_minute(NOW, gpu=1), "gpu_index", "i-1gpu has 1 GPUs"),
    (_minute(NOW, instance="i-cpu"), "gpu_index", "i-cpu has 0 GPUs"),
    # JSON's NaN and Infinity tokens, as Python writes them: no figure, not 0 and not huge
    ({**_minute(NOW), "sm_mean": math.nan}, "sm_mean", "finite number"),
    ({**_minute(NOW), "power_w_mean": math.inf}, "power_w_mean", "finite number"),
])
def test_a_dishonest_summary_is_a_422_naming_the_field(
        client: tuple[httpx.Client, MemorySink], item: dict[str, Any], field: str,
        words: str) -> None:
    c, sink = client
    # as Python's json writes it (NaN and Infinity tokens; httpx's json= refuses them)
    answer = c.post("/v1/telemetry", headers={**AUTH, "Content-Type": "application/json"},
                    content=json.dumps([_minute(NOW), item]))
    figures.count("ingest: forged or impossible summaries refused (422)",
                  answer.status_code == 422)
    assert answer.status_code == 422, answer.text
    body = answer.json()
    assert body["index"] == 1 and body["detail"][0]["loc"] == field
    assert words in body["error"]
    assert sink.rows == {}  # nothing of the batch is written


def test_within_clock_skew_and_for_instances_inventory_does_not_know_yet_is_accepted(
        client: tuple[httpx.Client, MemorySink]) -> None:
    c, sink = client
    batch = [_minute(NOW + timedelta(minutes=4)), _minute(NOW - timedelta(days=6)),
             _minute(NOW, instance="i-new", gpu=3)]
    answer = c.post("/v1/telemetry", headers=AUTH, json=batch)
    assert answer.status_code == 200 and answer.json()["written"] == 3
    assert len(sink.rows) == 3


def test_json_nested_deeply_is_a_400_not_a_5xx(client: tuple[httpx.Client, MemorySink]) -> None:
    c, _ = client
    for body in (b"[" * 100_000 + b"]" * 100_000, b'{"minutes": [[[[[[[[[[]]]]]]]]]]}'):
        answer = c.post("/v1/telemetry", headers={**AUTH, "Content-Type": "application/json"},
                        content=body)
        assert answer.status_code == 400 and "nests deeper" in answer.json()["error"]


@pytest.mark.parametrize(("status", "kept"), [(400, False), (403, False), (422, False),
                                              (401, True), (404, True), (429, True),
                                              (503, True)])
def test_the_agent_drops_a_batch_refused_for_good_and_keeps_the_rest(
        tmp_path: Path, status: int, kept: bool) -> None:
    transport = httpx.MockTransport(
        lambda request: httpx.Response(status, json={"error": "the daemon's reason"}))
    buffer = DiskBuffer(tmp_path / "b.sqlite3")
    buffer.append(['{"x": 1}', '{"x": 2}'])
    with httpx.Client(transport=transport) as c:
        result = Pusher(c, "http://daemon", TOKEN, buffer).flush()
    assert (len(buffer) == 2) is kept
    assert buffer.dropped == (0 if kept else 2) and result.discarded == (0 if kept else 2)


# what answers when --url is not the daemon: nginx's answer to plain HTTP on its TLS port, a
# web server's 403 page, a JSON API's own error, a catch-all that says 200 to any POST, and
# an answer of costguard's shape that counted another batch
NOT_THE_INGEST = [
    (400, "text/html", b"<html><head><title>400 The plain HTTP request was sent to HTTPS "
                       b"port</title></head><body>nginx</body></html>"),
    (403, "text/html", b"<html><body><h1>403 Forbidden</h1></body></html>"),
    (422, "application/json", b'{"detail": [{"msg": "field required"}]}'),
    (200, "text/html", b"<html><body>Welcome</body></html>"),
    (200, "application/json", b'{"ok": true}'),
    (200, "application/json", b'{"received": 1, "written": 1, "duplicates": 0}'),
]


@pytest.mark.parametrize(("status", "kind", "body"), NOT_THE_INGEST)
def test_an_answer_that_is_not_the_ingest_s_neither_takes_nor_drops_a_batch(
        tmp_path: Path, status: int, kind: str, body: bytes) -> None:
    """Only costguard's ingest acknowledges or refuses a batch for good: an agent pointed at
    a proxy's TLS port (nginx answers 400) dropped every summary it had, as refused; one
    pointed at a web server that says 200 to anything, as delivered."""
    transport = httpx.MockTransport(
        lambda request: httpx.Response(status, headers={"Content-Type": kind}, content=body))
    buffer = DiskBuffer(tmp_path / "b.sqlite3")
    buffer.append(['{"x": 1}', '{"x": 2}'])
    with httpx.Client(transport=transport) as c:
        result = Pusher(c, "http://daemon", TOKEN, buffer).flush()
    assert len(buffer) == 2 and buffer.dropped == 0 and result.discarded == 0
    assert result.sent == 0 and not result.reachable
    assert result.error is not None and "is --url the daemon?" in result.error
    assert f"answered {status}" in result.error and "\n" not in result.error


def test_a_proxy_s_413_halves_the_batch_as_the_daemon_s_does(tmp_path: Path) -> None:
    """nginx's body limit (client_max_body_size) answers 413 in HTML: the batch is halved
    until it passes, whoever said it; a single summary it still refuses is kept."""
    sizes: list[int] = []

    def proxy(request: httpx.Request) -> httpx.Response:
        n = len(json.loads(request.content)["minutes"])
        sizes.append(n)
        if n > 2:
            return httpx.Response(413, text="<html><h1>413 Request Entity Too Large</h1>")
        return httpx.Response(200, json={"received": n, "written": n, "duplicates": 0})

    buffer = DiskBuffer(tmp_path / "b.sqlite3")
    buffer.append([json.dumps({"x": i}) for i in range(8)])
    with httpx.Client(transport=httpx.MockTransport(proxy)) as c:
        result = Pusher(c, "http://daemon", TOKEN, buffer).flush()
    assert sizes[:3] == [8, 4, 2] and result.sent == 8 and len(buffer) == 0

    refusing = httpx.MockTransport(lambda request: httpx.Response(413, text="<h1>413</h1>"))
    buffer.append(['{"x": 1}'])
    with httpx.Client(transport=refusing) as c:
        result = Pusher(c, "http://daemon", TOKEN, buffer).flush()
    assert len(buffer) == 1 and result.discarded == 0 and not result.reachable


def test_an_answer_of_any_length_is_read_no_further_than_a_mebibyte(tmp_path: Path) -> None:
    served = [0]

    def endless() -> Iterator[bytes]:
        while served[0] < 10_000:  # 640 MB, were it all read
            served[0] += 1
            yield b"x" * 65_536

    transport = httpx.MockTransport(lambda request: httpx.Response(200, content=endless()))
    buffer = DiskBuffer(tmp_path / "b.sqlite3")
    buffer.append(['{"x": 1}'])
    with httpx.Client(transport=transport) as c:
        result = Pusher(c, "http://daemon", TOKEN, buffer).flush()
    assert served[0] <= 17 and len(buffer) == 1 and not result.reachable
    assert result.error is not None and result.error.endswith("xxx...)")


def _p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


def test_healthz_and_readyz_answer_within_100_ms_while_the_store_stalls(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    release = threading.Event()

    def stalled(*_: object) -> object:
        release.wait(10)  # a locked or unreachable database
        return None

    db = Database(f"sqlite:///{tmp_path / 'cg.db'}")
    clock = ManualClock(NOW)
    monkeypatch.setattr("costguard.daemon.http._last_ok_cycle", stalled)
    app = build_app(db, ServiceState(poll_interval=timedelta(minutes=5)), DaemonMetrics(),
                    clock, extra_routes=telemetry_routes(
                        token=TOKEN, sink=lambda batch: int(bool(stalled())), clock=clock.now))
    server = HttpServer(app, "127.0.0.1", 0)
    server.start()
    base = f"http://127.0.0.1:{server.port}"
    pushes = [threading.Thread(target=httpx.post, args=(f"{base}/v1/telemetry",),
                               kwargs={"headers": AUTH, "json": [_minute(NOW)], "timeout": 15})
              for _ in range(3)]
    try:
        for t in pushes:
            t.start()
        time.sleep(0.3)  # three writes hang in the store now
        health, ready = [], []
        with httpx.Client(base_url=base, timeout=5) as c:
            for _ in range(50):
                t0 = time.perf_counter()
                assert c.get("/healthz").status_code == 200
                health.append(time.perf_counter() - t0)
            for _ in range(10):
                t0 = time.perf_counter()
                answer = c.get("/readyz")
                ready.append(time.perf_counter() - t0)
                assert answer.status_code == 503 and answer.json()["database"] == "stalled"
    finally:
        release.set()
        for t in pushes:
            t.join()
        server.stop()
        db.dispose()
    figures.measure("/healthz p99 while the store is stalled", _p99(health) * 1000, "ms",
                    "< 100 ms")
    figures.measure("/readyz p99 while the store is stalled", _p99(ready) * 1000, "ms",
                    "answers 'stalled' within 100 ms (+ HTTP)")
    assert _p99(health) < 0.1 and _p99(ready) < 0.3


def test_concurrent_oversized_bodies_do_not_grow_the_process(tmp_path: Path) -> None:
    """Four 64 MiB uploads at once (chunked, so no Content-Length to refuse up front): each
    is cut off at the limit, and the process does not grow by their size."""
    import resource

    sink = MemorySink()
    app = telemetry_app(token=TOKEN, sink=sink, clock=lambda: NOW)

    def chunks() -> Iterator[bytes]:
        for _ in range(1024):
            yield b"[" + b" " * 65534 + b"]"

    def upload(url: str, answers: list[int]) -> None:
        try:
            answers.append(httpx.post(f"{url}/v1/telemetry", content=chunks(), headers=AUTH,
                                      timeout=60).status_code)
        except httpx.HTTPError:
            answers.append(413)  # cut off mid-upload: refused as well

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    answers: list[int] = []
    with serve(app) as url:
        threads = [threading.Thread(target=upload, args=(url, answers)) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    grown_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    figures.measure("peak RSS growth under 4 concurrent 64 MiB uploads", grown_mib, "MiB",
                    "< 64 MiB (the uploads total 256 MiB)")
    assert answers == [413] * 4 and sink.rows == {}
    assert grown_mib < 64


@pytest.mark.parametrize(("status", "body"), [
    (200, b"<html><body>Welcome</body></html>"),  # not JSON: it raised out of the agent
    (200, b'["credential"]'),  # JSON, not an object: it raised too
    (200, b'{"credential": 42}'),
    (200, b"[" * 200_000 + b"]" * 200_000),  # deeper than Python's JSON reader goes
    (403, b"<h1>Forbidden</h1>"),
])
def test_an_identity_answer_that_is_not_the_daemon_s_proves_nothing(
        status: int, body: bytes, caplog: pytest.LogCaptureFixture) -> None:
    transport = httpx.MockTransport(lambda request: httpx.Response(status, content=body))
    with httpx.Client(transport=transport) as c:
        assert exchange_proof(c, "http://daemon", TOKEN, {"provider": "aws"}) is None
    assert f"identity not proven ({status})" in caplog.text


def test_an_identity_answer_of_the_daemon_s_gives_its_credential() -> None:
    transport = httpx.MockTransport(
        lambda request: httpx.Response(200, json={"credential": "c-1", "expires_at": "x"}))
    with httpx.Client(transport=transport) as c:
        assert exchange_proof(c, "http://daemon", TOKEN, {"provider": "aws"}) == "c-1"
