"""What one client's connections may hold of the daemon's HTTP server (and the console's).

uvicorn keeps a connection for as long as its client keeps it open and has not finished a
request: a client that sends a request's head a byte at a time, or opens connections and
sends nothing, held a file descriptor each, for ever. Four hundred such connections took a
daemon with 256 descriptors to the end of them: its cycles failed ("Too many open files"),
`/healthz` went unanswered, and asyncio logged every refused accept (115 MB of log in half
a minute). Here:
- a request's head (its line and headers) must arrive whole within `head_timeout_s` of the
  connection's opening, or of the previous response on a kept-alive connection; else the
  connection is closed;
- a request's body must arrive whole within `body_timeout_s` of its head (a client that
  sent a whole head and then its body a byte a minute held its connection, and an endpoint
  waiting for the body, for as long as it liked: the identity and Slack endpoints read a
  body before they can tell who sent it); else the connection is closed and the endpoint
  sees the client gone. An answer, however long it takes, is never cut;
- beyond `max_connections` open at once (and never more than half the process's limit of
  open files), the connection that has waited longest for a request's head (a slow
  client's, or an idle kept-alive one) is closed to make room for the new one: a client
  holding every connection with heads that never finish no longer keeps a health probe
  out. Where every connection is inside a request (its head whole), the new one is closed
  at once, unanswered;
- `raise_open_files_limit` raises the process's soft limit of open files to its hard limit
  at start (many container runtimes start a process at 1,024 soft, and a daemon over many
  accounts holds a kept-alive connection to each cloud endpoint it reads).
"""

from __future__ import annotations

import asyncio
import logging
import resource
from collections import OrderedDict
from typing import Any, ClassVar

from uvicorn.protocols.http.h11_impl import H11Protocol, RequestResponseCycle

log = logging.getLogger("costguard.http")

HEAD_TIMEOUT_S = 10.0
BODY_TIMEOUT_S = 60.0
MAX_CONNECTIONS = 1_000


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a deadline for each request's head and one for its body,
    and a cap on the connections open at once (`limited` sets them)."""

    head_timeout_s = HEAD_TIMEOUT_S
    body_timeout_s = BODY_TIMEOUT_S
    max_connections = MAX_CONNECTIONS
    # the server's connections awaiting a request's head, longest waiting first (`limited`
    # gives each server its own)
    awaiting: ClassVar[OrderedDict[GuardedH11Protocol, None]] = OrderedDict()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_timer: asyncio.TimerHandle | None = None
        self._waiting_after: object = None  # the cycle whose successor's head is awaited
        self._body_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > self.max_connections and not self._make_room():
            transport.abort()  # unanswered: the client may try again later
            return
        self._await_head()

    def _make_room(self) -> bool:
        """Close the connection that has waited longest for a request's head; False where
        none waits for one (every other connection is inside a request)."""
        while self.awaiting:
            oldest, _ = self.awaiting.popitem(last=False)
            if oldest is not self and not oldest.transport.is_closing():
                oldest._cancel_head_timer()
                oldest.transport.abort()
                return True
        return False

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self._head_timer is not None and self.cycle is not self._waiting_after:
            self._cancel_head_timer()  # a whole head arrived: a request began
            self._await_body()

    def on_response_complete(self) -> None:
        self._cancel_body_timer()
        super().on_response_complete()  # may begin a pipelined request, already whole
        if self.transport.is_closing():
            return
        if self.cycle is None or self.cycle.response_complete:
            self._await_head()
        else:
            self._await_body()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_head_timer()
        self._cancel_body_timer()
        super().connection_lost(exc)

    def _await_body(self) -> None:
        """The body of the request that began must be whole by `body_timeout_s` from now."""
        self._cancel_body_timer()
        if self.cycle is not None and self.cycle.more_body:
            self._body_timer = self.loop.call_later(self.body_timeout_s, self._body_late,
                                                    self.cycle)

    def _cancel_body_timer(self) -> None:
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None

    def _body_late(self, cycle: RequestResponseCycle) -> None:
        self._body_timer = None
        # an answer already given (the endpoint refused before reading) is the head
        # timer's: the next head is awaited, the rest of this body with it
        if (cycle is self.cycle and cycle.more_body and not cycle.response_complete
                and not self.transport.is_closing()):
            self.transport.abort()

    def _await_head(self) -> None:
        self._cancel_head_timer()
        self._waiting_after = self.cycle
        self._head_timer = self.loop.call_later(self.head_timeout_s, self._head_late)
        self.awaiting[self] = None

    def _cancel_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        self.awaiting.pop(self, None)

    def _head_late(self) -> None:
        self._head_timer = None
        self.awaiting.pop(self, None)
        if self.cycle is self._waiting_after and not self.transport.is_closing():
            self.transport.abort()


BACKLOG = 128  # connections the kernel queues, and asyncio accepts at one wake-up


def limited(head_timeout_s: float = HEAD_TIMEOUT_S, max_connections: int = MAX_CONNECTIONS,
            body_timeout_s: float = BODY_TIMEOUT_S) -> tuple[type[GuardedH11Protocol], int]:
    """The protocol class for uvicorn's `http=`, with these limits, and the listening
    socket's backlog. Clients get half the process's limit of open files whatever
    `max_connections` says (the other half is the store's, the clouds', the alerts' and
    Python's own imports'): asyncio accepts up to the backlog at once before a connection
    over the cap is closed, so the backlog and the cap share that half."""
    backlog = BACKLOG
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY:
        share = max(soft // 2, 2)
        backlog = min(backlog, max(share // 4, 1))
        max_connections = min(max_connections, share - backlog)
    protocol = type("GuardedH11Protocol", (GuardedH11Protocol,),
                    {"head_timeout_s": head_timeout_s, "body_timeout_s": body_timeout_s,
                     "max_connections": max_connections, "awaiting": OrderedDict()})
    return protocol, backlog


def raise_open_files_limit() -> tuple[int, int] | None:
    """Raise the soft limit of open files to the hard one: (before, after), or None where it
    is there already or cannot be raised."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    # Linux refuses more than fs.nr_open (1,048,576 by default) for an unlimited hard limit
    target = 1 << 20 if hard == resource.RLIM_INFINITY else hard
    if soft == resource.RLIM_INFINITY or soft >= target:
        return None
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ValueError, OSError) as exc:
        log.info("open files: the soft limit stays at %d (%s)", soft, exc)
        return None
    log.info("open files: soft limit raised from %d to %d", soft, target)
    return soft, target
