"""One HTTP batch for many projects (batch_joiner.py): calls that threads send at about the
same time go in one request, each thread gets its own answers in its order, a request that
fails fails each thread under its own scope, a full batch is sent at once, and nothing waits
forever on a request that raised."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

from costguard.demo.gcp_fake.http import _batch_answer, _batch_calls
from costguard.errors import ProviderError
from costguard.providers.gcp import http_batch
from costguard.providers.gcp.batch_joiner import Joiner
from costguard.providers.gcp.settings import RetrySettings

Post = Callable[[str, bytes, dict[str, str]], tuple[int, str, bytes]]


def _echo(fail: BaseException | None = None, status: int = 200) -> tuple[Post, list[int]]:
    """A batch endpoint answering each call with its own path; the sizes of the requests."""
    sizes: list[int] = []

    def post(url: str, data: bytes, headers: dict[str, str]) -> tuple[int, str, bytes]:
        calls = _batch_calls(headers["Content-Type"], data)
        sizes.append(len(calls))
        if fail is not None:
            raise fail
        if status != 200:
            return status, "application/json", b'{"error": {"message": "no"}}'
        return 200, "multipart/mixed; boundary=b", _batch_answer(
            [(cid, 200, {"path": path})
             for cid, _, path, _ in calls], "b")
    return post, sizes


def _calls(project: str, n: int) -> list[http_batch.Call]:
    return [http_batch.Call("POST", f"/compute/v1/projects/{project}/zones/z/instances/"
                                    f"vm-{i}/stop") for i in range(n)]


def _together(joiner: Joiner, sends: dict[str, int]) -> dict[str, Any]:
    """Each project's calls sent from its own thread, all released at once."""
    start = threading.Barrier(len(sends))
    out: dict[str, Any] = {}

    def one(project: str, n: int) -> None:
        start.wait()
        try:
            out[project] = joiner.send(_calls(project, n), f"{project}/batch")
        except ProviderError as exc:
            out[project] = exc

    threads = [threading.Thread(target=one, args=item) for item in sends.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    return out


def test_calls_sent_together_go_in_one_request_and_come_back_to_their_sender() -> None:
    post, sizes = _echo()
    joiner = Joiner(post, "http://x", wait_s=0.5)
    got = _together(joiner, {"p-a": 3, "p-b": 1, "p-c": 5})
    assert sizes == [9] and joiner.requests == 1
    for project, n in (("p-a", 3), ("p-b", 1), ("p-c", 5)):
        assert [a.body["path"] for a in got[project]] == [c.path for c in _calls(project, n)]


def test_without_a_wait_each_sender_has_its_own_request() -> None:
    post, sizes = _echo()
    joiner = Joiner(post, "http://x", wait_s=0)
    got = _together(joiner, {"p-a": 2, "p-b": 3})
    assert sorted(sizes) == [2, 3] and joiner.requests == 2
    assert len(got["p-a"]) == 2 and len(got["p-b"]) == 3


def test_a_full_batch_is_sent_at_once_and_a_call_that_does_not_fit_opens_the_next() -> None:
    post, sizes = _echo()
    joiner = Joiner(post, "http://x", wait_s=30.0)  # would time a test out if waited on
    got = _together(joiner, {"p-a": 600, "p-b": 400})  # exactly full: sent without waiting
    assert sizes == [1000] and len(got["p-a"]) == 600 and len(got["p-b"]) == 400
    sizes.clear()
    joiner = Joiner(post, "http://x", wait_s=0.2)
    got = _together(joiner, {"p-a": 700, "p-b": 700})  # no room: two requests
    assert sorted(sizes) == [700, 700]
    assert [a.body["path"] for a in got["p-b"]] == [c.path for c in _calls("p-b", 700)]


def test_a_failed_request_fails_every_sender_under_its_own_scope() -> None:
    post, _ = _echo(status=403)
    got = _together(Joiner(post, "http://x", wait_s=0.5), {"p-a": 1, "p-b": 2})
    for project in ("p-a", "p-b"):
        exc = got[project]
        assert isinstance(exc, ProviderError) and exc.scope == f"{project}/batch"
        assert "HTTP 403" in str(exc) and not exc.retryable
        assert str(exc).count("gcp ") == 1  # said once, under the sender's own scope
    post, _ = _echo(fail=ConnectionResetError("reset by peer"))
    got = _together(Joiner(post, "http://x", wait_s=0.5), {"p-a": 1, "p-b": 2})
    assert all(isinstance(got[p], ProviderError) and got[p].retryable for p in ("p-a", "p-b"))


def test_an_unexpected_error_in_the_sender_does_not_leave_the_others_waiting() -> None:
    post, _ = _echo(fail=KeyError("bug"))
    joiner = Joiner(post, "http://x", wait_s=0.5)
    errors: list[BaseException] = []
    results: dict[str, Any] = {}

    def one(project: str) -> None:
        try:
            results[project] = joiner.send(_calls(project, 1), f"{project}/batch")
        except BaseException as exc:  # the opener sees the bug itself, the other an error
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(p,)) for p in ("p-a", "p-b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(5)
    assert not any(t.is_alive() for t in threads)
    assert sorted(type(e).__name__ for e in errors) == ["KeyError", "ProviderError"]


def test_send_retries_throttled_calls_through_the_joiner() -> None:
    throttled = _batch_answer([("item-0", 429, {"error": {"message": "slow"}}),
                               ("item-1", 200, {"name": "op-1"})], "b")
    ok = _batch_answer([("item-0", 200, {"name": "op-0"})], "b")
    answers = [(200, "multipart/mixed; boundary=b", throttled),
               (200, "multipart/mixed; boundary=b", ok)]

    def post(url: str, data: bytes, headers: dict[str, str]) -> tuple[int, str, bytes]:
        return answers.pop(0)

    joiner = Joiner(post, "http://x", wait_s=0.01)
    fast = RetrySettings(initial_s=0.01, maximum_s=0.02, multiplier=2, deadline_s=2)
    got = http_batch.send(joiner.send, _calls("p", 2), fast, "p/batch", sleep=lambda s: None)
    assert [a.body["name"] for a in got] == ["op-0", "op-1"] and joiner.requests == 2


@pytest.mark.parametrize("wait_s", [0.0, 0.05])
def test_no_calls_no_request(wait_s: float) -> None:
    post, sizes = _echo()
    assert Joiner(post, "http://x", wait_s=wait_s).send([], "p/batch") == [] and sizes == []
