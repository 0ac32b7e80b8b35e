"""Cloud Monitoring requests and points as the GPU and TPU readings share them: a filter of
one metric type on one monitored resource type, a request aligned to 60 s, a point's number
and the minute an aligned point stands for."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from google.cloud import monitoring_v3
from google.protobuf import duration_pb2, timestamp_pb2

from costguard.clock import utc


def series_filter(metric_type: str, resource_type: str) -> str:
    return f'metric.type = "{metric_type}" AND resource.type = "{resource_type}"'


def _ts(dt: datetime) -> timestamp_pb2.Timestamp:
    stamp = timestamp_pb2.Timestamp()
    stamp.FromDatetime(utc(dt))
    return stamp


def aligned_request(project: str, filter_: str, aligner: Any, start: datetime,
                    end: datetime) -> monitoring_v3.ListTimeSeriesRequest:
    """ListTimeSeries of `project`'s series matching `filter_` in [start, end], each aligned
    to 60 s with `aligner` on the server."""
    return monitoring_v3.ListTimeSeriesRequest(
        name=f"projects/{project}",
        filter=filter_,
        interval=monitoring_v3.TimeInterval(start_time=_ts(start), end_time=_ts(end)),
        aggregation=monitoring_v3.Aggregation(
            alignment_period=duration_pb2.Duration(seconds=60),
            per_series_aligner=aligner,
        ),
        view=monitoring_v3.ListTimeSeriesRequest.TimeSeriesView.FULL,
    )


def value_of(point: Any) -> float | None:
    """The number in a raw protobuf `Point` (double or int64), or None for other kinds."""
    value = point.value  # each access builds a view of the field: once (~25 % of a point)
    which = value.WhichOneof("value")
    if which == "double_value":
        number: float = value.double_value  # a Python float already
        return number
    if which == "int64_value":
        return float(value.int64_value)
    return None


def minute_of(end_seconds: int) -> int:
    """Start of the 60 s window that ends at `end_seconds` (epoch), on a minute boundary."""
    start = end_seconds - 60
    return start - start % 60
