"""Fuzzing the agent ingest endpoint over real HTTP: never a 500, never a traceback, never
half a batch written."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import func, select

from costguard.clock import ManualClock
from costguard.daemon.http import HttpServer, ServiceState, build_app
from costguard.daemon.metrics import DaemonMetrics
from costguard.daemon.sink import StoreSink
from costguard.store.db import Database
from costguard.store.tables import GpuReadingRow
from costguard.telemetry.ingest import telemetry_routes
from tests.reliability import figures

TOKEN = "fuzz-token-0b7d2c"
ALLOWED = {200, 400, 401, 413, 422}
_T0 = datetime(2026, 11, 1, tzinfo=UTC)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[httpx.Client, Database]]:
    path: Path = tmp_path_factory.mktemp("fuzz") / "cg.db"
    db = Database(f"sqlite:///{path}")
    metrics = DaemonMetrics()
    clock = ManualClock(_T0)
    app = build_app(db, ServiceState(poll_interval=timedelta(minutes=1)), metrics, clock,
                    extra_routes=telemetry_routes(token=TOKEN, sink=StoreSink(db, metrics),
                                                  max_body_bytes=64 * 1024,
                                                  clock=clock.now))
    server = HttpServer(app, "127.0.0.1", 0)
    server.start()
    with httpx.Client(base_url=f"http://127.0.0.1:{server.port}", timeout=10) as client:
        yield client, db
    server.stop()
    db.dispose()


def _count(db: Database) -> int:
    with db.session() as s:
        return int(s.execute(select(func.count()).select_from(GpuReadingRow)).scalar() or 0)


# text as it comes: any character, and (hypothesis leaves them out by default) unpaired
# surrogates, which JSON escapes carry and no store takes, beside control characters
texts = st.text(max_size=20) | st.text(st.characters(categories=["Cs", "Cc", "Ll", "Nd"]),
                                       max_size=8)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | texts,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(texts, inner, max_size=4),
    max_leaves=20)

FIELDS = ["provider", "instance_id", "gpu_index", "minute", "source", "samples", "util_mean",
          "util_p95", "util_max", "util_active_share", "sm_mean", "sm_p95", "sm_max",
          "mem_used_bytes", "mem_total_bytes", "power_w_mean", "process_count",
          "top_process_pid", "top_process_bytes"]


def _valid(i: int) -> dict[str, Any]:
    return {"provider": "sim", "instance_id": f"i-fuzz{i % 7}", "gpu_index": i % 4,
            "minute": (_T0 + timedelta(minutes=i)).isoformat(), "source": "agent",
            "util_mean": 3.0, "sm_mean": 1.0, "samples": 60}


@st.composite
def near_valid_batches(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Mostly valid summaries with a few fields replaced by anything at all."""
    base = draw(st.integers(min_value=0, max_value=10**6))
    items = [_valid(base + k) for k in range(draw(st.integers(min_value=1, max_value=6)))]
    for item in items:
        for field in draw(st.lists(st.sampled_from(FIELDS), max_size=2)):
            item[field] = draw(json_values)
    return items


def _check(answer: httpx.Response, before: int, db: Database) -> None:
    figures.count("ingest: fuzzed requests answered 2xx/4xx, no traceback",
                  answer.status_code < 500 and "Traceback" not in answer.text)
    assert answer.status_code in ALLOWED, (answer.status_code, answer.text)
    assert "Traceback" not in answer.text
    body = answer.json()
    after = _count(db)
    if answer.status_code == 200:
        assert after - before == body["written"]
    else:
        assert after == before, "a refused batch left rows behind"


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(payload=json_values)
def test_any_json_body_gets_a_clear_answer(served: tuple[httpx.Client, Database],
                                           payload: Any) -> None:
    client, db = served
    before = _count(db)
    _check(client.post("/v1/telemetry", content=json.dumps(payload),
                       headers={"Authorization": f"Bearer {TOKEN}"}), before, db)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(batch=near_valid_batches(), wrap=st.booleans())
def test_near_valid_batches_are_written_whole_or_not_at_all(
        served: tuple[httpx.Client, Database], batch: list[dict[str, Any]], wrap: bool) -> None:
    client, db = served
    before = _count(db)
    body = {"minutes": batch} if wrap else batch
    _check(client.post("/v1/telemetry", content=json.dumps(body, default=str),
                       headers={"Authorization": f"Bearer {TOKEN}"}), before, db)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(raw=st.binary(max_size=2048), auth=st.sampled_from([TOKEN, "x", TOKEN + "x", TOKEN[:-1]]),
       ctype=st.sampled_from(["application/json", "text/plain", "application/x-www-form"]))
def test_raw_bytes_and_bad_tokens_never_crash_the_endpoint(
        served: tuple[httpx.Client, Database], raw: bytes, auth: str, ctype: str) -> None:
    client, db = served
    before = _count(db)
    answer = client.post("/v1/telemetry", content=raw,
                         headers={"Authorization": f"Bearer {auth}", "Content-Type": ctype})
    _check(answer, before, db)
    if auth != TOKEN:
        assert answer.status_code == 401


def test_an_oversized_body_is_refused_without_writing(served: tuple[httpx.Client, Database]
                                                      ) -> None:
    client, db = served
    before = _count(db)
    batch = [_valid(i) for i in range(2000)]
    answer = client.post("/v1/telemetry", json=batch,
                         headers={"Authorization": f"Bearer {TOKEN}"})
    assert answer.status_code == 413 and _count(db) == before


@pytest.mark.parametrize("field", ["gpu_index", "samples", "mem_used_bytes", "top_process_pid"])
def test_integers_too_large_for_the_store_are_a_client_error(
        served: tuple[httpx.Client, Database], field: str) -> None:
    client, db = served
    before = _count(db)
    item = _valid(10**7)
    item[field] = 2**70
    answer = client.post("/v1/telemetry", json=[item],
                         headers={"Authorization": f"Bearer {TOKEN}"})
    _check(answer, before, db)
    assert answer.status_code == 422  # the agent's fault, said so: not a 503 to retry forever


def _raw_item(field: str, json_text: str) -> bytes:
    """A one-summary batch whose `field` holds `json_text` exactly as written."""
    item = json.dumps(_valid(10**7 + 5))
    return f'[{item[:-1]}, "{field}": {json_text}}}]'.encode()


@pytest.mark.parametrize(("body", "reason"), [
    # a 5,000-digit integer anywhere: int() refused it past the handlers (a 500 before)
    (_raw_item("samples", "9" * 5000), "a number of 5000 characters"),
    (_raw_item("extra", "[" + "1" * 5000 + "]"), "a number of 5000 characters"),
    (_raw_item("util_mean", "1e99999"), "finite number"),
    (_raw_item("util_mean", "NaN"), "finite number"),
    # NUL in a string: PostgreSQL refuses it in text (a 503 an agent retried for ever)
    (_raw_item("instance_id", '"i-\\u0000x"'), "NUL character"),
    # an unpaired surrogate: valid JSON, not Unicode text (no store encodes it: the same 503)
    (_raw_item("instance_id", '"i-\\ud800x"'), "unpaired surrogate"),
    (_raw_item("instance_id", '"i-\\uDFFF"'), "unpaired surrogate"),
    (_raw_item("extra", '{"\\udc80": 1}'), "unpaired surrogate"),
    (_raw_item("instance_id", '"i-"').replace(b'"i-"', b'"i-\xed\xa0\x80"'),
     "unpaired surrogate"),
    (_raw_item("minute", '"0001-01-01T00:00:00+05:00"'), ""),
    (_raw_item("minute", '"9999-12-31T23:00:00-05:00"'), ""),
    (b"[" * 30_000, "nests deeper"),
])
def test_hostile_bodies_are_refused_with_a_reason(served: tuple[httpx.Client, Database],
                                                  body: bytes, reason: str) -> None:
    client, db = served
    before = _count(db)
    answer = client.post("/v1/telemetry", content=body,
                         headers={"Authorization": f"Bearer {TOKEN}"})
    _check(answer, before, db)
    assert answer.status_code in (400, 422), answer.text
    assert reason in answer.json()["error"]
    figures.count("ingest: hostile bodies refused 4xx with a reason", True)
