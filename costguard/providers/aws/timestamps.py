"""Timestamps in AWS responses, parsed without dateutil on the common paths."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from botocore.utils import parse_timestamp


def fast_timestamp(value: Any) -> datetime:
    """botocore's timestamp parser, without dateutil on the common paths.

    botocore parses every timestamp in a response (an instance's LaunchTime, each volume's
    AttachTime, each metric datapoint) with dateutil, which was the largest single cost of
    reading a fleet. ISO-8601 with an offset and epoch numbers, what EC2 and CloudWatch send,
    give the same instant through the standard library; anything else goes to botocore.
    """
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError:
            parsed = None
        if parsed is not None and parsed.tzinfo is not None:
            return parsed
    elif isinstance(value, int | float) and not isinstance(value, bool):
        return datetime.fromtimestamp(value, UTC)
    result: datetime = parse_timestamp(value)
    return result
