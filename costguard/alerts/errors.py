"""Errors of the alert channels."""

from __future__ import annotations

from costguard.errors import CostguardError


class DeliveryError(CostguardError):
    """A message could not be delivered now.

    `permanent`: retrying cannot help (unknown channel, rejected address): the delivery fails.
    `retry_after`: the receiver asked to wait this many seconds (Slack 429 Retry-After).
    """

    def __init__(self, message: str, *, permanent: bool = False,
                 retry_after: float | None = None) -> None:
        super().__init__(message)
        self.permanent = permanent
        self.retry_after = retry_after
