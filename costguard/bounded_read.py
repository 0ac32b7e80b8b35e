"""An HTTP answer's body read no further than a limit: a server that answers gigabytes (a
misconfigured URL, a login page, a hostile or broken one) never fills costguard's memory.
The agent's pushes (telemetry/answers.py), its Jupyter probe (telemetry/activity.py) and
the clusters' Prometheus (k8s/prometheus.py) read their answers through it."""

from __future__ import annotations

import httpx


def read_at_most(response: httpx.Response, most: int) -> bytes:
    """The body of a streamed `response`; one longer than `most` bytes is read no further
    than its first `most + 1` (so `len(body) > most` says it ran past)."""
    body = bytearray()  # appended in place: no copy of all so far per chunk
    for chunk in response.iter_bytes():
        body += chunk
        if len(body) > most:
            break
    return bytes(body[:most + 1])
