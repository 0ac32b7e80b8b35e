"""What the agent reads of an answer from the daemon (or from whatever its --url reaches).

A daemon's answers are a few hundred bytes of JSON; a server that is not one (a proxy's TLS
port, a web server, a misconfigured URL) may answer anything, of any length. `ask` reads at
most `MAX_ANSWER_BYTES` of it; `Answer` holds its status, its body as a JSON object when it
is one, and the start of its text, on one line, for a message.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx

from costguard.bounded_read import read_at_most
from costguard.controls import TERMINAL_CONTROLS
from costguard.limited_json import parse_json

MAX_ANSWER_BYTES = 1 << 20  # read of one answer


@dataclass(frozen=True)
class Answer:
    """An answer: its status, its body as a JSON object (None if it is not one, or is longer
    than `MAX_ANSWER_BYTES`), and the start of its text for a message."""

    status: int
    payload: dict[str, Any] | None
    text: str

    @classmethod
    def read(cls, status: int, data: bytes) -> Answer:
        """`data` as `ask` read it: longer than `MAX_ANSWER_BYTES`, it is no JSON object."""
        try:  # JSON from outside, under the project's one rule (nesting, numbers, text)
            parsed = parse_json(data) if len(data) <= MAX_ANSWER_BYTES else None
        except ValueError:  # JsonRefused, not JSON, not UTF-8
            parsed = None
        payload = parsed if isinstance(parsed, dict) else None
        # one line, no terminal controls: the body of whatever answered
        text = " ".join(TERMINAL_CONTROLS.sub("?", data[:200].decode("utf-8", "replace"))
                        .split())
        return cls(status, payload, text + ("..." if len(data) > 200 else ""))

    def from_ingest(self, sent: int) -> bool:
        """Whether costguard's ingest gave this answer to a batch of `sent` summaries: an
        acknowledgement counts what it received, a refusal says why; other statuses (401,
        404, 429, 5xx) keep the batch whoever gave them."""
        if self.status == 200:
            return self.payload is not None and self.payload.get("received") == sent
        if self.status in (400, 403, 413, 422):
            return self.payload is not None and isinstance(self.payload.get("error"), str)
        return True


def ask(client: httpx.Client, method: str, url: str, **kwargs: Any) -> Answer:
    """One request; its answer read up to `MAX_ANSWER_BYTES`. Raises httpx.HTTPError."""
    with client.stream(method, url, **kwargs) as response:
        data = read_at_most(response, MAX_ANSWER_BYTES)
    return Answer.read(response.status_code, data)
