"""One HTTP batch for the calls of many projects: `Joiner`.

A Compute Engine batch request may hold calls to any project and zone of the API (its
"Batching requests" guide asks only that every inner call go to the same API, and at most
1,000 of them). The act stage works on projects concurrently, each project its own scope:
sent alone, each project's stops and its relabels were a batch request each, 600 requests
for 300 projects where a handful hold them all.

The first thread to send opens a batch and waits up to `wait_s` for other threads' calls
to join it, or until it is full; then it sends the batch and hands each thread the answers
to its own calls, in their order. The wait is short beside a stop (tens of seconds) and
beside one call's round trip (50-300 ms against the real API). When the request fails as a
whole, each thread gets that failure as a ProviderError of its own scope, just as it would
have for a batch of its own.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from costguard.errors import ProviderError
from costguard.providers.gcp.http_batch import MAX_CALLS, Answer, Call, Post, one_batch


@dataclass(eq=False)
class _Joint:
    calls: list[Call]
    scope: str  # the opener's: a failure of the whole request names it first
    answers: list[Answer] = field(default_factory=list)
    error: ProviderError | None = None
    done: threading.Event = field(default_factory=threading.Event)


class Joiner:
    """Joins the batches threads send within `wait_s` of one another (0: each alone)."""

    def __init__(self, post: Post, base_url: str, wait_s: float) -> None:
        self._post = post
        self._base_url = base_url
        self._wait_s = wait_s
        self._cond = threading.Condition()
        self._open: _Joint | None = None  # the batch still taking calls
        self.requests = 0  # HTTP requests sent (tests read it)

    def send(self, calls: Sequence[Call], scope: str) -> list[Answer]:
        """The answers to `calls` (at most MAX_CALLS), sent with whatever joins them."""
        if not calls:
            return []
        if self._wait_s <= 0:
            return self._request(list(calls), scope)
        with self._cond:
            joint = self._open
            if joint is not None and len(joint.calls) + len(calls) <= MAX_CALLS:
                first, opener = len(joint.calls), False
                joint.calls.extend(calls)
                if len(joint.calls) == MAX_CALLS:
                    self._close(joint)
            else:
                if joint is not None:
                    self._close(joint)  # no room: its opener sends it now
                joint = self._open = _Joint(list(calls), scope)
                first, opener = 0, True
        if opener:
            self._send_when_ready(joint)
        else:
            joint.done.wait()
        error = joint.error
        if error is not None:
            if error.scope == scope:
                raise error
            said = str(error).removeprefix(f"{error.provider} {error.scope}: ")
            raise ProviderError("gcp", scope, f"{said} (a batch request shared with "
                                f"{joint.scope})", retryable=error.retryable) from error
        return joint.answers[first:first + len(calls)]

    def _close(self, joint: _Joint) -> None:
        """Take `joint` off the open slot and wake its opener (the caller holds the lock)."""
        if self._open is joint:
            self._open = None
        self._cond.notify_all()

    def _send_when_ready(self, joint: _Joint) -> None:
        deadline = time.monotonic() + self._wait_s
        with self._cond:
            while self._open is joint and (left := deadline - time.monotonic()) > 0:
                self._cond.wait(left)
            self._close(joint)
        try:
            joint.answers = self._request(joint.calls, joint.scope)
        except ProviderError as exc:
            joint.error = exc
        except BaseException as exc:
            # the others must not wait forever on a request that never ends
            joint.error = ProviderError("gcp", joint.scope, f"batch request failed: "
                                        f"{type(exc).__name__}: {exc}", retryable=True)
            raise
        finally:
            joint.done.set()

    def _request(self, calls: list[Call], scope: str) -> list[Answer]:
        with self._cond:
            self.requests += 1
        return one_batch(self._post, self._base_url, calls, scope)
