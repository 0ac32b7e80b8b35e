"""CloudWatch readings for one (account, region): discover series once, fetch them batched.

The CloudWatch agent's nvidia_smi plugin writes `nvidia_smi_*` into `CWAgent` with dimensions
`host`, `index`, `name` — plus `InstanceId` only when `append_dimensions` is configured.
CloudWatch matches dimension sets exactly, so the series are found with ListMetrics first and
then asked for with their full dimension set, 500 queries per GetMetricData call.
"""

from __future__ import annotations

import logging
import math
from bisect import bisect_right
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal

from costguard.clock import utc
from costguard.minute_rows import LEAD, names_of
from costguard.model import TelemetrySource
from costguard.providers.aws.boundary import aws_call
from costguard.providers.aws.inventory import HostNames
from costguard.providers.cloud_readings import busiest, whole_bytes

if TYPE_CHECKING:
    from mypy_boto3_cloudwatch import CloudWatchClient

log = logging.getLogger(__name__)

GPU_UTIL = "nvidia_smi_utilization_gpu"
GPU_MEM_USED = "nvidia_smi_memory_used"
GPU_MEM_TOTAL = "nvidia_smi_memory_total"
GPU_METRICS = (GPU_UTIL, GPU_MEM_USED, GPU_MEM_TOTAL)
# the agent's `measurement` names -> the metric names it publishes
METRIC_OF = {"utilization_gpu": GPU_UTIL, "memory_used": GPU_MEM_USED,
             "memory_total": GPU_MEM_TOTAL}
CPU_NAMESPACE = "AWS/EC2"
CPU_METRIC = "CPUUtilization"
MAX_QUERIES_PER_CALL = 500
MAX_DATAPOINTS_PER_CALL = 100_800  # GetMetricData's limit on the points one call returns
PERIOD_S = 60
ALL_GPUS = -1  # gpu_index of a series that rolls up every GPU of its instance
_MIB = 1024 * 1024

Layout = bool | Literal["auto"]


@dataclass(frozen=True)
class Series:
    """One CloudWatch metric series attributed to an instance's GPU."""

    instance_id: str
    gpu_index: int
    metric: str
    dimensions: tuple[tuple[str, str], ...]

    @property
    def all_gpus(self) -> bool:
        return self.gpu_index == ALL_GPUS

    @property
    def stat(self) -> str:
        # Memory held: the minute's maximum is what matters; utilisation: its mean.
        return "Average" if self.metric == GPU_UTIL else "Maximum"


def list_metric_dimensions(
    cw: CloudWatchClient, namespace: str, metric: str, scope: str, *, recently_active: bool,
    having: tuple[str, str] | None = None,
) -> set[tuple[tuple[str, str], ...]]:
    """Distinct dimension sets of `metric` (ListMetrics, our own NextToken loop); with
    `having` (name, value), only the series that carry that dimension."""
    # Keyed by the sorted set, valued in ListMetrics' own order: CloudWatch matches sets, but
    # moto compares the order too, and asking back with the order it listed works on both.
    found: dict[tuple[tuple[str, str], ...], tuple[tuple[str, str], ...]] = {}
    token: str | None = None
    with aws_call(scope):
        while True:
            kwargs: dict[str, Any] = {"Namespace": namespace, "MetricName": metric}
            if recently_active:
                kwargs["RecentlyActive"] = "PT3H"
            if having is not None:
                kwargs["Dimensions"] = [{"Name": having[0], "Value": having[1]}]
            if token:
                kwargs["NextToken"] = token
            page = cw.list_metrics(**kwargs)
            for m in page.get("Metrics", []):
                dims = tuple((d["Name"], d["Value"]) for d in m.get("Dimensions", []))
                found.setdefault(tuple(sorted(dims)), dims)
            token = page.get("NextToken")
            if not token:
                return set(found.values())


def host_index(hosts: Mapping[str, HostNames]) -> dict[str, str]:
    """`host` dimension value -> instance id; names shared by two instances are dropped."""
    owners: dict[str, set[str]] = {}
    for instance_id, names in hosts.items():
        for name in {names.private_dns, names.hostname} - {None}:
            assert name is not None
            owners.setdefault(name.lower(), set()).add(instance_id)
    return {name: ids.pop() for name, ids in owners.items() if len(ids) == 1}


def attribute_series(
    dimension_sets: Mapping[str, Iterable[tuple[tuple[str, str], ...]]],
    wanted: set[str],
    hosts: Mapping[str, HostNames],
    layout: Layout,
) -> list[Series]:
    """Map each discovered series to (instance, GPU index): every series that claims a GPU
    is read, and where several claim the same one (an InstanceId series and a host series,
    a roll-up and per-GPU series, two that differ in another dimension) the busiest reading
    of each minute wins (`gpu_rows`). Anyone allowed PutMetricData can add a series that
    claims a GPU; picking one of them would let an added one stand in for the agent's
    (zeros in place of a busy GPU), while read together added points can only make a GPU
    look busier. `layout` True reads InstanceId series only, False host series only."""
    by_host = host_index({i: h for i, h in hosts.items() if i in wanted})
    chosen: set[Series] = set()
    for metric, dim_sets in dimension_sets.items():
        for dims in dim_sets:
            d = dict(dims)
            if "InstanceId" in d:
                if layout is False:
                    continue
                instance_id: str | None = d["InstanceId"] if d["InstanceId"] in wanted else None
            else:
                if layout is True or "host" not in d:
                    continue
                instance_id = by_host.get(d["host"].lower())
            if instance_id is None:
                continue
            try:
                index = int(d["index"]) if "index" in d else ALL_GPUS
            except ValueError:
                continue
            chosen.add(Series(instance_id, index, metric, dims))
    return sorted(chosen, key=lambda s: (s.instance_id, s.gpu_index, s.metric, s.dimensions))


def spans(start: datetime, end: datetime, span: timedelta | None, period_s: int
          ) -> list[tuple[datetime, datetime]]:
    """[start, end) cut into spans of at most `span`, each a whole number of periods from
    `start` (so no period straddles two calls); None or a longer span: one piece."""
    if span is None or end - start <= span:
        return [(start, end)]
    period = timedelta(seconds=period_s)
    step = max(period, period * (span // period))
    out: list[tuple[datetime, datetime]] = []
    cursor = start
    while cursor < end:
        out.append((cursor, min(cursor + step, end)))
        cursor += step
    return out


def rollup_series(instance_ids: Iterable[str], metrics: Sequence[str]) -> list[Series]:
    """Each instance's roll-up series (`aggregation_dimensions: [["InstanceId"]]`): its only
    dimension is InstanceId, so it is known without ListMetrics."""
    return [Series(iid, ALL_GPUS, metric, (("InstanceId", iid),))
            for iid in sorted(instance_ids) for metric in metrics]


def get_metric_data(
    cw: CloudWatchClient,
    queries: Sequence[dict[str, Any]],
    start: datetime,
    end: datetime,
    scope: str,
    *,
    span: timedelta | None = None,
) -> tuple[dict[str, list[tuple[datetime, float]]], int]:
    """Run `queries` (each with a unique Id) in calls of 500, one time `span` at a time (see
    `CloudWatchSettings.max_span_minutes`; None: as long as a call's datapoint limit holds);
    returns values by Id and the number of GetMetricData calls made."""
    out: dict[str, list[tuple[datetime, float]]] = {}
    calls = 0
    period_s = min((int(q["MetricStat"]["Period"]) for q in queries), default=PERIOD_S)
    if span is None:
        per_call = max(1, min(len(queries), MAX_QUERIES_PER_CALL))
        span = timedelta(seconds=period_s * (MAX_DATAPOINTS_PER_CALL // per_call))
    with aws_call(scope):
        for span_start, span_end in spans(start, end, span, period_s):
            for first in range(0, len(queries), MAX_QUERIES_PER_CALL):
                batch = list(queries[first : first + MAX_QUERIES_PER_CALL])
                token: str | None = None
                while True:
                    kwargs: dict[str, Any] = {
                        "MetricDataQueries": batch,
                        "StartTime": span_start,
                        "EndTime": span_end,
                        "ScanBy": "TimestampAscending",
                    }
                    if token:
                        kwargs["NextToken"] = token
                    page = cw.get_metric_data(**kwargs)
                    calls += 1
                    for result in page.get("MetricDataResults", []):
                        points = zip(
                            result.get("Timestamps", []), result.get("Values", []), strict=False
                        )
                        out.setdefault(result["Id"], []).extend(
                            (utc(t), float(v)) for t, v in points
                        )
                    token = page.get("NextToken")
                    if not token:
                        break
    return out, calls


def gpu_queries(series: Sequence[Series], namespace: str, period_s: int = PERIOD_S
                ) -> list[dict[str, Any]]:
    """Query `g{n}` per series; every utilisation series also gets `m{n}`, its Maximum,
    which decides idleness (`util_max`).

    A roll-up over several GPUs needs it so that one busy GPU among idle ones is not
    averaged away. A per-GPU series (or a one-GPU roll-up) needs it because anyone allowed
    `cloudwatch:PutMetricData` in the account can add points to it: a thousand zeros
    (or one StatisticValues set with a SampleCount of a million) pull a busy GPU's Average
    under any idle threshold, but added points can only raise its Maximum."""
    out: list[dict[str, Any]] = []
    for n, s in enumerate(series):
        metric = {
            "Namespace": namespace,
            "MetricName": s.metric,
            "Dimensions": [{"Name": k, "Value": v} for k, v in s.dimensions],
        }
        stats = [(f"g{n}", s.stat)]
        if s.metric == GPU_UTIL:
            stats.append((f"m{n}", "Maximum"))
        out += [
            {
                "Id": query_id,
                "MetricStat": {"Metric": metric, "Period": period_s, "Stat": stat},
                "ReturnData": True,
            }
            for query_id, stat in stats
        ]
    return out


def cpu_queries(instance_ids: Sequence[str], period_s: int = PERIOD_S
                ) -> list[dict[str, Any]]:
    return [
        {
            "Id": f"c{n}",
            "MetricStat": {
                "Metric": {
                    "Namespace": CPU_NAMESPACE,
                    "MetricName": CPU_METRIC,
                    "Dimensions": [{"Name": "InstanceId", "Value": instance_id}],
                },
                "Period": period_s,
                "Stat": "Average",
            },
            "ReturnData": True,
        }
        for n, instance_id in enumerate(instance_ids)
    ]


ONE_MINUTE = timedelta(minutes=1)


def minute_of(ts: datetime) -> datetime:
    return utc(ts).replace(second=0, microsecond=0)


def percent(value: float) -> float:
    """Within 0-100; NaN stays NaN (`max(0.0, nan)` is 0.0: a reading of nothing would have
    read as an idle GPU), for validation to refuse (`cloud_readings`)."""
    return value if value != value else min(100.0, max(0.0, value))



def _span_of(ts: datetime, period_s: int, first: datetime | None, last: datetime | None
             ) -> tuple[datetime, int] | None:
    """The minute a datapoint of `period_s` starting at `ts` starts at, and how many whole
    minutes it stands for before `last` (the end of what was asked: a point still filling is
    cut there, and the next fetch replaces it whole). None when it covers no minute of
    [first, last)."""
    start = minute_of(ts)
    span = max(1, period_s // 60)
    if last is not None:
        span = min(span, int((last - start) / ONE_MINUTE))
    if span < 1 or (first is not None and start + span * ONE_MINUTE <= first):
        return None
    return start, span


CPU_LOOKBACK = timedelta(minutes=5)  # EC2 basic monitoring's period


def host_cpu_of(instance_ids: Sequence[str], values: Mapping[str, list[tuple[datetime, float]]]
                ) -> dict[str, list[tuple[datetime, float]]]:
    """`cpu_queries(instance_ids)` results: per instance, (minute, percent) in time order."""
    out: dict[str, list[tuple[datetime, float]]] = {}
    for n, instance_id in enumerate(instance_ids):
        points = sorted((minute_of(ts), percent(v)) for ts, v in values.get(f"c{n}", [])
                        if v == v)  # a NaN is no figure (it would refuse the GPU minutes)
        if points:
            out[instance_id] = points
    return out


def _cpu_at(points: Sequence[tuple[datetime, float]], minute: datetime) -> float | None:
    """The latest CPU point at or before `minute`, if it is less than 5 minutes old."""
    i = bisect_right(points, (minute, math.inf))
    if i and minute - points[i - 1][0] < CPU_LOOKBACK:
        return points[i - 1][1]
    return None


GpuRowKey = tuple[str, int, datetime]  # instance id, GPU index, minute
# what a CloudWatch reading holds, in its row's order (`costguard.minute_rows`), and where
_VALUES = ("util_mean", "util_max", "mem_used_bytes", "mem_total_bytes", "host_cpu_pct",
           "host_iowait_pct", "host_mem_used_bytes", "host_mem_total_bytes")
NAMES = names_of(_VALUES)
assert NAMES[len(LEAD):] == _VALUES
(UTIL_MEAN, UTIL_MAX, MEM_USED, MEM_TOTAL, HOST_CPU, HOST_IOWAIT, HOST_MEM_USED,
 HOST_MEM_TOTAL) = range(len(LEAD), len(NAMES))
_NO_VALUES = [None] * len(_VALUES)
_UNSEEN = (datetime.min, 0)  # a timestamp `_span_of` was not asked about yet


def gpu_rows(
    series: Sequence[Series],
    values: Mapping[str, list[tuple[datetime, float]]],
    *,
    gpu_counts: Mapping[str, int] | None = None,
    period_s: int = PERIOD_S,
    first: datetime | None = None,
    last: datetime | None = None,
    host_cpu: Mapping[str, Sequence[tuple[datetime, float]]] | None = None,
) -> dict[GpuRowKey, list[Any]]:
    """Readings from query results, as rows of `NAMES` (`costguard.minute_rows`; a field
    not given: None), by (instance id, GPU index, minute): one per GPU per datapoint,
    spanning the point's period (`span_minutes`); a roll-up series (`all_gpus`) gives each
    of its instance's GPUs (`gpu_counts`: instance id -> GPUs, default 1) the roll-up's
    values. `host_cpu` (`host_cpu_of`) adds the instance's CPUUtilization to each of its GPU
    minutes. Series that claim the same GPU and minute merge into their busiest figures
    (`cloud_readings.busiest`)."""
    counts = gpu_counts or {}
    rows: dict[GpuRowKey, list[Any]] = {}
    spans: dict[datetime, tuple[datetime, int] | None] = {}  # the series share timestamps
    source = TelemetrySource.CLOUDWATCH
    for n, s in enumerate(series):
        indexes = range(counts.get(s.instance_id, 1)) if s.all_gpus else (s.gpu_index,)
        peaks = dict(values.get(f"m{n}", []))
        for ts, value in values.get(f"g{n}", []):
            covered = spans.get(ts, _UNSEEN)
            if covered is _UNSEEN:
                covered = spans[ts] = _span_of(ts, period_s, first, last)
            if covered is None:
                continue
            minute, span = covered
            figures: tuple[tuple[int, Any], ...]
            if s.metric == GPU_UTIL:
                figures = ((UTIL_MEAN, percent(value)),
                           (UTIL_MAX, percent(peaks.get(ts, value))))
            elif s.metric == GPU_MEM_USED:
                figures = ((MEM_USED, whole_bytes(value * _MIB)),)
            else:
                figures = ((MEM_TOTAL, whole_bytes(value * _MIB)),)
            for index in indexes:
                key = (s.instance_id, index, minute)
                row = rows.get(key)
                if row is None:
                    row = rows[key] = ["aws", s.instance_id, index, minute, source, span, 1,
                                       *_NO_VALUES]
                busiest(row, figures)
    if host_cpu:
        for (instance_id, _, minute), row in rows.items():
            points = host_cpu.get(instance_id)
            if points and (cpu := _cpu_at(points, minute)) is not None:
                row[HOST_CPU] = cpu
    return rows


def as_rows(rows: Mapping[GpuRowKey, list[Any]]) -> list[tuple[Any, ...]]:
    """`gpu_rows`' readings as rows, in the order the answer gave them (each series' points
    together, the same every run), not sorted: nothing after needs an order (the store, the
    window and the classifier key by GPU and minute), and sorting a first cycle's millions
    of keys, a datetime in each, was ~2.5 % of its CPU at organisation scale (as Cloud
    Monitoring's `metrics._minutes`)."""
    return list(map(tuple, rows.values()))


def window(start: datetime, end: datetime) -> tuple[datetime, datetime]:
    """Whole minutes covering [start, end): CloudWatch aligns 60 s periods to the minute."""
    first = minute_of(start)
    last = minute_of(end)
    if last < utc(end):
        last += timedelta(minutes=1)
    if last <= first:
        last = first + timedelta(minutes=1)
    return first, last
