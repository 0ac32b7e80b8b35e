"""A local fake of Cloud Monitoring's `MetricService.ListTimeSeries`, for tests and the demo.

A plaintext gRPC server on 127.0.0.1 (Monitoring has no REST transport in the Python
client). The real `MetricServiceClient` talks to it over an insecure channel.

Implemented: filters of the form `metric.type = "X" AND resource.type = "Y"`, with
`AND metric.labels.KEY = "V"` clauses (equality only; any other clause is
INVALID_ARGUMENT, so a query the fake cannot honour fails loudly), interval
filtering, `ALIGN_MEAN` / `ALIGN_MAX` / `ALIGN_MIN` / `ALIGN_NONE` with an alignment
period, paging by series, points newest first (as the real service returns them), injected
failures, and for benchmarks a real API's pace: `latency_s` before each answer and a
seeded share `throttle` of calls refused with RESOURCE_EXHAUSTED (the quota error), as the
latency proxy does for the REST fakes (bench/_latency_proxy.py). Series of `gce_instance`
(GPU VMs) and of `tpu_worker` (Cloud TPU hosts). Not implemented: cross-series reducers,
resource label filters, label functions (`monitoring.regex.full_match`), views other than
FULL.
"""

from __future__ import annotations

import random
import re
import threading
import time
from collections import Counter
from collections.abc import Sequence
from concurrent import futures
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import grpc  # type: ignore[import-untyped]
from google.cloud.monitoring_v3.types import common, metric, metric_service

_SERVICE = "google.monitoring.v3.MetricService"
_CLAUSE = re.compile(
    r'^\s*(metric\.type|resource\.type|metric\.labels\.[a-z_][a-z0-9_]*)\s*=\s*"([^"]*)"\s*$')


@dataclass
class FakeSeries:
    project: str
    metric_type: str
    resource_labels: dict[str, str]
    metric_labels: dict[str, str]
    points: list[tuple[datetime, float]]  # (sample time, value)
    integer: bool = False
    resource_type: str = "gce_instance"  # or "tpu_worker" (a Cloud TPU VM's host)


@dataclass
class _Failure:
    code: Any  # grpc.StatusCode
    remaining: int
    project: str | None


@dataclass
class FakeMonitoring:
    """Series store + gRPC server. Thread-safe; use as a context manager."""

    series: list[FakeSeries] = field(default_factory=list)
    requests: list[metric_service.ListTimeSeriesRequest] = field(default_factory=list)
    # metric type -> queries (first pages only; `requests` holds every RPC, pages included)
    calls: Counter[str] = field(default_factory=Counter)
    page_series: int = 500  # series per page when the request does not say
    latency_s: float = 0.0  # each call waits this long before it is answered
    throttle: float = 0.0  # this share of calls is refused with RESOURCE_EXHAUSTED
    throttled: int = 0  # calls refused so far by `throttle`
    seed: int = 0  # which calls are refused (seeded: a run repeats)
    workers: int = 8  # calls served at once
    most_at_once: int = 0  # the most calls in flight at one time so far
    _at_once: int = 0
    _failures: list[_Failure] = field(default_factory=list)
    _by_project: dict[str, list[FakeSeries]] = field(default_factory=dict)  # of `series`
    _indexed: int = 0  # how many of `series` `_by_project` holds (series may be appended)
    _rng: random.Random = field(default_factory=random.Random)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _server: Any = None
    _port: int = 0

    def add_gpu_series(
        self,
        project: str,
        metric_type: str,
        instance_id: str,
        points: Sequence[tuple[datetime, float]],
        *,
        zone: str = "us-central1-a",
        gpu_number: int = 0,
        model: str = "NVIDIA A100-SXM4-40GB",
        extra_labels: dict[str, str] | None = None,
        integer: bool = False,
    ) -> FakeSeries:
        labels = {
            "gpu_number": str(gpu_number),
            "model": model,
            "uuid": f"GPU-{instance_id}-{gpu_number}",
        }
        labels.update(extra_labels or {})
        return self._added(FakeSeries(
            project=project,
            metric_type=metric_type,
            resource_labels={"project_id": project, "instance_id": instance_id, "zone": zone},
            metric_labels=labels,
            points=list(points),
            integer=integer,
        ))

    def _added(self, series: FakeSeries) -> FakeSeries:
        with self._lock:
            self.series.append(series)
        return series

    def add_tpu_series(
        self,
        project: str,
        metric_type: str,
        node: str,
        points: Sequence[tuple[datetime, float]],
        *,
        zone: str = "us-central1-a",
        worker: int = 0,
        chip: int = 0,
        chip_label: str = "chip",
        integer: bool = False,
    ) -> FakeSeries:
        """A series of one chip of a Cloud TPU node's host (`tpu_worker`: node_id is the
        node's name, worker_id the host's index in the slice)."""
        return self._added(FakeSeries(
            project=project, metric_type=metric_type,
            resource_labels={"project_id": project, "zone": zone, "node_id": node,
                             "worker_id": str(worker)},
            metric_labels={chip_label: str(chip)}, points=list(points), integer=integer,
            resource_type="tpu_worker"))

    def fail_next(self, code: Any, times: int = 1, *, project: str | None = None) -> None:
        """The next `times` calls fail with gRPC status `code` (grpc.StatusCode.UNAVAILABLE)."""
        with self._lock:
            self._failures.append(_Failure(code, times, project))

    @property
    def endpoint(self) -> str:
        """What `GcpSettings.monitoring_endpoint` takes: `http://` means plaintext gRPC."""
        if self._server is None:
            raise RuntimeError("FakeMonitoring is not started; call start() first")
        return f"http://127.0.0.1:{self._port}"

    def start(self) -> FakeMonitoring:
        self._rng.seed(self.seed)
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=self.workers))
        handler = grpc.method_handlers_generic_handler(
            _SERVICE,
            {
                "ListTimeSeries": grpc.unary_unary_rpc_method_handler(
                    self._list_time_series,
                    request_deserializer=metric_service.ListTimeSeriesRequest.deserialize,
                    response_serializer=metric_service.ListTimeSeriesResponse.serialize,
                )
            },
        )
        server.add_generic_rpc_handlers((handler,))
        self._port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        self._server = server
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop(grace=None)
            self._server = None

    def __enter__(self) -> FakeMonitoring:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- the RPC ----------------------------------------------------------------------
    def _list_time_series(
        self, request: metric_service.ListTimeSeriesRequest, context: Any
    ) -> metric_service.ListTimeSeriesResponse:
        with self._lock:
            self._at_once += 1
            self.most_at_once = max(self.most_at_once, self._at_once)
        try:
            if self.latency_s:
                time.sleep(self.latency_s)
        finally:
            with self._lock:
                self._at_once -= 1
        with self._lock:
            if self.throttle and self._rng.random() < self.throttle:  # refused: not counted
                self.throttled += 1
                context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED,
                              "Quota exceeded for quota metric 'Time series queries'")
            self.requests.append(request)
            project = request.name.removeprefix("projects/")
            for failure in self._failures:
                if failure.remaining > 0 and failure.project in (None, project):
                    failure.remaining -= 1
                    context.abort(failure.code, "injected failure")
        wanted = _parse_filter(request.filter, context)
        metric_type = wanted.get("metric.type")
        if not request.page_token:
            self.calls[metric_type or "?"] += 1
        start = _dt(request.interval.start_time)
        end = _dt(request.interval.end_time)
        with self._lock:
            if self._indexed != len(self.series):
                self._by_project = {}
                for s in self.series:
                    self._by_project.setdefault(s.project, []).append(s)
                self._indexed = len(self.series)
            matching = [
                s
                for s in self._by_project.get(project, ())
                if (metric_type is None or s.metric_type == metric_type)
                and wanted.get("resource.type", s.resource_type) == s.resource_type
                and all(s.metric_labels.get(k.removeprefix("metric.labels.")) == v
                        for k, v in wanted.items() if k.startswith("metric.labels."))
            ]
        offset = int(request.page_token or 0)
        size = request.page_size or self.page_series
        out = []
        for s in matching[offset : offset + size]:
            points = _aligned(s, start, end, request.aggregation)
            if points:
                out.append(_to_proto(s, points))
        token = str(offset + size) if offset + size < len(matching) else ""
        return metric_service.ListTimeSeriesResponse(time_series=out, next_page_token=token)


def _parse_filter(text: str, context: Any) -> dict[str, str]:
    wanted: dict[str, str] = {}
    for clause in re.split(r"\s+AND\s+", text.strip()):
        m = _CLAUSE.match(clause)
        if m is None:
            context.abort(
                grpc.StatusCode.INVALID_ARGUMENT, f"fake cannot evaluate filter clause {clause!r}"
            )
            raise AssertionError("unreachable: abort raises")
        wanted[m.group(1)] = m.group(2)
    return wanted


def _dt(ts: Any) -> datetime:
    # proto-plus maps Timestamp to DatetimeWithNanoseconds (a datetime subclass).
    return ts.astimezone(UTC) if isinstance(ts, datetime) else datetime.fromtimestamp(0, UTC)


def _aligned(
    s: FakeSeries, start: datetime, end: datetime, aggregation: common.Aggregation
) -> list[tuple[datetime, float]]:
    inside = [(t, v) for t, v in s.points if start < t <= end]
    period = aggregation.alignment_period.total_seconds() if aggregation.alignment_period else 0
    aligner = aggregation.per_series_aligner
    if not period or aligner == common.Aggregation.Aligner.ALIGN_NONE:
        return sorted(inside, reverse=True)
    buckets: dict[datetime, list[float]] = {}
    for t, v in inside:
        epoch = t.timestamp()
        bucket_end = datetime.fromtimestamp(epoch - epoch % period, UTC)
        if bucket_end < t:
            bucket_end += timedelta(seconds=period)
        buckets.setdefault(bucket_end, []).append(v)
    if aligner == common.Aggregation.Aligner.ALIGN_MAX:
        reduced = {k: max(v) for k, v in buckets.items()}
    elif aligner == common.Aggregation.Aligner.ALIGN_MIN:
        reduced = {k: min(v) for k, v in buckets.items()}
    else:
        reduced = {k: sum(v) / len(v) for k, v in buckets.items()}
    return sorted(reduced.items(), reverse=True)


def _to_proto(s: FakeSeries, points: list[tuple[datetime, float]]) -> metric.TimeSeries:
    # Built as raw protobuf and wrapped once: proto-plus objects per point made the fake,
    # not the client, the slowest part of a 3,000-VM benchmark.
    raw = metric.TimeSeries.pb()()
    raw.metric.type = s.metric_type
    raw.metric.labels.update(s.metric_labels)
    raw.resource.type = s.resource_type
    raw.resource.labels.update(s.resource_labels)
    for t, v in points:
        point = raw.points.add()
        point.interval.end_time.FromDatetime(t)
        if s.integer:
            point.value.int64_value = int(v)
        else:
            point.value.double_value = v
    wrapped: metric.TimeSeries = metric.TimeSeries.wrap(raw)
    return wrapped
