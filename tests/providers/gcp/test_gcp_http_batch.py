"""Compute Engine HTTP batch requests (http_batch.py): the wire format as the "Batching
requests" guide describes it, answered by the fake's batch endpoint; answers matched by
Content-ID in any order; retries of throttled calls and of a refused batch; a batch that
cannot be read is an error, never a silent success; at most 1,000 calls a batch."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import pytest
import requests

from costguard.demo.gcp_fake.http import _batch_answer, _batch_calls
from costguard.demo.gcp_fake.server import FakeGcp
from costguard.errors import ProviderError
from costguard.model import ActionOutcome, InstanceState
from costguard.providers.gcp import GcpProvider, http_batch
from costguard.providers.gcp.settings import RetrySettings

FAST = RetrySettings(initial_s=0.01, maximum_s=0.02, multiplier=2, deadline_s=2)
ZONE = "us-central1-a"


def no_sleep(seconds: float) -> None:
    return None


def test_the_request_is_multipart_mixed_with_one_http_request_per_part() -> None:
    calls = [http_batch.Call("POST", "/compute/v1/projects/p/zones/z/instances/a/stop"
                                     "?requestId=r-1"),
             http_batch.Call("POST", "/compute/v1/projects/p/zones/z/instances/b/setLabels",
                             {"labels": {"team": "nlp"}, "labelFingerprint": "abc="})]
    raw = http_batch.encode(calls, "batch_xyz")
    text = raw.decode()
    assert text.startswith("--batch_xyz\r\nContent-Type: application/http\r\n")
    assert "POST /compute/v1/projects/p/zones/z/instances/a/stop?requestId=r-1 HTTP/1.1" in text
    assert text.endswith("--batch_xyz--\r\n")
    parsed = _batch_calls("multipart/mixed; boundary=batch_xyz", raw)
    assert [(m, t, b) for _, m, t, b in parsed] == [
        ("POST", calls[0].path, {}),
        ("POST", calls[1].path, {"labels": {"team": "nlp"}, "labelFingerprint": "abc="})]
    assert [cid for cid, *_ in parsed] == ["item-0", "item-1"]


def test_answers_are_matched_by_content_id_in_any_order() -> None:
    body = _batch_answer([("item-1", 404, {"error": {"message": "b not found"}}),
                          ("item-0", 200, {"name": "op-a", "status": "RUNNING"})], "b1")
    answers = http_batch.decode("multipart/mixed; boundary=b1", body, 2)
    assert [(a.status, a.ok) for a in answers] == [(200, True), (404, False)]
    assert answers[0].body["name"] == "op-a"
    assert "b not found" in str(answers[1].error())
    with pytest.raises(ValueError, match="1 of 3 calls unanswered"):
        http_batch.decode("multipart/mixed; boundary=b1", body, 3)
    with pytest.raises(ValueError, match="not a multipart answer"):
        http_batch.decode("application/json", b"{}", 1)
    # a quoted boundary reads the same; an answer cut before its closing boundary does not
    assert http_batch.decode('multipart/mixed; boundary="b1"', body, 2) == answers
    with pytest.raises(ValueError, match="cut short"):
        http_batch.decode("multipart/mixed; boundary=b1", body[:-10], 2)
    with pytest.raises(ValueError, match="without a boundary"):
        http_batch.decode("multipart/mixed", body, 2)


def _post(answers: list[tuple[int, str, bytes]]) -> Callable[..., tuple[int, str, bytes]]:
    sent: list[bytes] = []

    def post(url: str, data: bytes, headers: dict[str, str]) -> tuple[int, str, bytes]:
        assert url.endswith("/batch/compute/v1")
        assert headers["Content-Type"].startswith("multipart/mixed; boundary=batch_")
        sent.append(data)
        return answers.pop(0)
    post.sent = sent  # type: ignore[attr-defined]
    return post


def test_a_refused_batch_and_throttled_calls_are_sent_again() -> None:
    ok = _batch_answer([("item-0", 200, {"name": "op"})], "b")
    throttled = _batch_answer([("item-0", 429, {"error": {"message": "slow down"}}),
                               ("item-1", 200, {"name": "op-1"})], "b")
    post = _post([(503, "text/html", b"busy"),
                  (200, "multipart/mixed; boundary=b", throttled),
                  (200, "multipart/mixed; boundary=b", ok)])
    calls = [http_batch.Call("GET", "/compute/v1/a"), http_batch.Call("GET", "/compute/v1/b")]
    answers = http_batch.send(partial(http_batch.one_batch, post, "http://x"), calls, FAST,
                              "p/batch", sleep=no_sleep)
    assert [(a.status, a.body.get("name")) for a in answers] == [(200, "op"), (200, "op-1")]
    assert len(post.sent) == 3  # type: ignore[attr-defined]
    assert b"/compute/v1/b" not in post.sent[2]  # type: ignore[attr-defined]


def test_a_batch_refused_for_good_or_unreadable_is_an_error() -> None:
    calls = [http_batch.Call("GET", "/compute/v1/a")]
    with pytest.raises(ProviderError, match="HTTP 403"):
        http_batch.send(partial(http_batch.one_batch,
                                _post([(403, "application/json", b'{"error": {}}')]), "http://x"),
                        calls, FAST, "p/batch", sleep=no_sleep)
    with pytest.raises(ProviderError, match="unreadable") as info:
        http_batch.send(partial(http_batch.one_batch,
                                _post([(200, "multipart/mixed; boundary=q", b"--q--\r\n")]),
                                "http://x"), calls, FAST, "p/batch", sleep=no_sleep)
    assert info.value.retryable


def test_more_than_a_thousand_calls_go_in_several_batches(fake: FakeGcp) -> None:
    post = http_batch.requests_post(requests.Session())
    calls = [http_batch.Call("GET", f"/compute/v1/projects/p/zones/{ZONE}/instances/vm-{i}")
             for i in range(1001)]
    answers = http_batch.send(partial(http_batch.one_batch, post, fake.compute.url), calls,
                              FAST, "p/batch", sleep=no_sleep)
    assert len(answers) == 1001 and {a.status for a in answers} == {404}
    assert fake.compute.batch_sizes == [1000, 1]
    assert fake.compute.calls["GET get"] == 1001


def test_stops_and_their_polls_go_in_batches(
        fake: FakeGcp, make_provider: Callable[..., GcpProvider],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(http_batch, "MAX_CALLS", 4)
    for i in range(6):
        fake.compute.add_instance("ml-prod", ZONE, f"vm-{i}", "a2-highgpu-1g")
    fake.compute.operation_delay_s = 0.3  # the first poll finds them running
    provider = make_provider()
    vms = provider.list_instances().instances
    fake.compute.calls.clear()
    results = provider.stop_many(vms, dry_run=False)
    assert {r.outcome for r in results.values()} == {ActionOutcome.DONE}
    assert {r.state_after for r in results.values()} == {InstanceState.STOPPED}
    assert fake.compute.calls["POST stop"] == 6 and fake.compute.calls["POST operation_wait"] == 0
    assert fake.compute.calls["GET operation_get"] >= 12  # polled at least twice each
    # 6 stops in batches of 4 and 2; then each round of polls the same way
    assert fake.compute.batch_sizes[:2] == [4, 2]
    assert sum(fake.compute.batch_sizes) == 6 + fake.compute.calls["GET operation_get"]
