"""POST /v1/telemetry over real HTTP on 127.0.0.1."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from random import Random

import httpx
import pytest

from costguard.errors import ConfigError
from costguard.model import GpuMinute
from costguard.telemetry.ingest import MemorySink, telemetry_app
from costguard.telemetry.summary import sim_minute
from tests.fakes.loopback import serve

TOKEN = "s3cret-agent-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
START = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)
DAEMON_NOW = START + timedelta(hours=1)  # the daemon's clock: the data is recent


def minutes(n: int, instance: str = "i-1") -> list[dict[str, object]]:
    rng = Random(n)
    return [
        sim_minute("bursty", "aws", instance, 0, START + timedelta(minutes=k), rng).model_dump(
            mode="json"
        )
        for k in range(n)
    ]


class FlakySink(MemorySink):
    def __init__(self) -> None:
        super().__init__()
        self.fail = False

    def __call__(self, batch):  # type: ignore[no-untyped-def]
        if self.fail:
            raise RuntimeError("database is locked")
        return super().__call__(batch)


@pytest.fixture
def daemon() -> Iterator[tuple[httpx.Client, FlakySink]]:
    sink = FlakySink()
    app = telemetry_app(token=TOKEN, sink=sink, max_body_bytes=64 * 1024,
                        clock=lambda: DAEMON_NOW)
    with serve(app) as url, httpx.Client(base_url=url, timeout=5) as client:
        yield client, sink


def test_a_valid_batch_is_written_and_counted(daemon):  # type: ignore[no-untyped-def]
    client, sink = daemon
    r = client.post("/v1/telemetry", json={"minutes": minutes(5)}, headers=AUTH)
    assert r.status_code == 200
    assert r.json() == {"received": 5, "written": 5, "duplicates": 0}
    assert len(sink.rows) == 5
    assert all(isinstance(m, GpuMinute) for m in sink.rows.values())


def test_sending_the_same_minutes_again_writes_nothing_new(daemon):  # type: ignore[no-untyped-def]
    client, sink = daemon
    batch = minutes(4)
    client.post("/v1/telemetry", json={"minutes": batch}, headers=AUTH)
    again = client.post("/v1/telemetry", json=batch + batch[:1], headers=AUTH)  # bare list too
    assert again.status_code == 200
    assert again.json() == {"received": 5, "written": 0, "duplicates": 5}
    assert len(sink.rows) == 4


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer wrong"},
        {"Authorization": TOKEN},
        {"Authorization": "Bearer s3cret"},
    ],
)
def test_a_missing_or_wrong_token_is_401_and_writes_nothing(daemon, headers):  # type: ignore[no-untyped-def]
    client, sink = daemon
    r = client.post("/v1/telemetry", json=minutes(2), headers=headers)
    assert r.status_code == 401
    assert TOKEN not in r.text
    assert sink.rows == {}


def test_a_body_over_the_limit_is_413_even_without_content_length(daemon):  # type: ignore[no-untyped-def]
    client, sink = daemon
    big = json.dumps({"minutes": minutes(200)}).encode()
    assert len(big) > 64 * 1024
    assert client.post("/v1/telemetry", content=big, headers=AUTH).status_code == 413

    def chunks() -> Iterator[bytes]:
        for i in range(0, len(big), 4096):
            yield big[i : i + 4096]

    r = client.post("/v1/telemetry", content=chunks(), headers=AUTH)
    assert r.status_code == 413
    assert sink.rows == {}


def test_one_bad_item_rejects_the_whole_batch_with_its_index(daemon):  # type: ignore[no-untyped-def]
    client, sink = daemon
    batch = minutes(6)
    batch[3] = {**batch[3], "util_mean": 250}
    r = client.post("/v1/telemetry", json={"minutes": batch}, headers=AUTH)
    assert r.status_code == 422
    body = r.json()
    assert body["index"] == 3
    assert "minutes[3].util_mean" in body["error"]
    assert sink.rows == {}  # no partial write


@pytest.mark.parametrize(
    ("body", "status"),
    [(b"not json", 400), (b'{"minutes": 3}', 422), (b'{"other": []}', 422), (b"[{}]", 422)],
)
def test_malformed_bodies_are_refused_with_a_reason(daemon, body, status):  # type: ignore[no-untyped-def]
    client, sink = daemon
    r = client.post("/v1/telemetry", content=body, headers=AUTH)
    assert r.status_code == status
    assert r.json()["error"]
    assert sink.rows == {}


def test_a_failing_store_answers_503_not_500_and_the_agent_can_retry(daemon):  # type: ignore[no-untyped-def]
    client, sink = daemon
    sink.fail = True
    batch = minutes(3)
    assert client.post("/v1/telemetry", json=batch, headers=AUTH).status_code == 503
    sink.fail = False
    assert client.post("/v1/telemetry", json=batch, headers=AUTH).json()["written"] == 3


def test_only_post_is_served(daemon):  # type: ignore[no-untyped-def]
    client, _ = daemon
    assert client.get("/v1/telemetry", headers=AUTH).status_code == 405


def test_the_endpoint_refuses_to_start_without_a_token():
    with pytest.raises(ConfigError, match="COSTGUARD_AGENT_TOKEN"):
        telemetry_app(token="", sink=MemorySink())
