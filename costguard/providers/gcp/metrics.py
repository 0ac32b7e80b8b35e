"""GPU readings from Cloud Monitoring, batched: one ListTimeSeries call per project per
metric type (never one per instance), aligned to 60 s on the server.

Sources, most honest first:
- DCGM SM activity from the Ops Agent's dcgm receiver (v2 `gpu.dcgm.sm.utilization`,
  v1 `dcgm.gpu.profiling.sm_utilization`), a 0-1 ratio -> `sm_mean` and `sm_max` in
  percent;
- NVML `agent.googleapis.com/gpu/utilization` (percent of time a kernel ran) -> `util_mean`
  and `util_max` (each signal's minute read as its mean and its maximum: `QUERIES`);
- `agent.googleapis.com/gpu/memory/bytes_used` (state "used") -> `mem_used_bytes`;
- and the host, joined to each of the instance's GPU minutes for the efficiency verdict:
  Compute Engine's own `compute.googleapis.com/instance/cpu/utilization` (a ratio of the
  allocated vCPUs, sampled every minute, no agent needed) -> `host_cpu_pct`; and the Ops
  Agent's `agent.googleapis.com/memory/bytes_used` (state "used", bytes) ->
  `host_mem_used_bytes` and `agent.googleapis.com/cpu/utilization` (cpu_state "wait") ->
  `host_iowait_pct`. The agent's CPU utilization is already the host's: its collector
  divides each CPU's time in a state by that CPU's time in all states (percent), then the
  agent averages over the CPUs, keeping only the state, its `cpu_number` blank
  (GoogleCloudPlatform/ops-agent apps/hostmetrics.go, `AggregateLabels("mean", "state",
  "blank")`; opentelemetry-operations-collector's agentmetricsprocessor); the legacy
  Monitoring agent wrote a series per CPU instead (a `cpu_number`), one core's, not read.

Aligned points carry the END of their 60 s window; `GpuMinute.minute` is its start.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from google.api_core import exceptions as gexc
from google.api_core import retry as gretry
from google.cloud import monitoring_v3

from costguard.clock import utc
from costguard.errors import ProviderError
from costguard.minute_rows import LEAD, MinuteRows, names_of
from costguard.model import INT64, Gap, Instance, TelemetrySource
from costguard.providers.base import Split
from costguard.providers.cloud_readings import Dropped, validated, whole_bytes
from costguard.providers.gcp import tpu_metrics, tpus
from costguard.providers.gcp.errors import from_retry_error, translate
from costguard.providers.gcp.series import aligned_request, minute_of, series_filter, value_of
from costguard.providers.repeats import Receipt

UTIL = "agent.googleapis.com/gpu/utilization"
MEM_USED = "agent.googleapis.com/gpu/memory/bytes_used"
SM_V2 = "workload.googleapis.com/gpu.dcgm.sm.utilization"
SM_V1 = "workload.googleapis.com/dcgm.gpu.profiling.sm_utilization"
HOST_CPU = "compute.googleapis.com/instance/cpu/utilization"
HOST_MEM = "agent.googleapis.com/memory/bytes_used"
HOST_CPU_STATES = "agent.googleapis.com/cpu/utilization"

_Aligner = monitoring_v3.Aggregation.Aligner


@dataclass(frozen=True)
class MetricQuery:
    metric_type: str
    aligner: Any  # monitoring_v3.Aggregation.Aligner
    field: str  # which GpuMinute field it fills
    scale: float  # multiply raw value by this
    percent: bool = True  # kept within 0-100 (memory is bytes)
    # metric labels the series must have, asked of the server (`metric.labels.K = "V"`): a
    # host's memory in one state of five, its CPU in one state of eight
    labels: tuple[tuple[str, str], ...] = ()


# Each signal that can decide idleness is read twice: its mean (the mean in reports and the
# underused verdict) and its maximum, which decides idleness. Anyone allowed
# monitoring.timeSeries.create in the project can add points to a VM's series (each newer than
# its latest): zeros written between the agent's once-a-minute points pull the minute's mean
# down (eleven of them, to a twelfth: a GPU busy at 50 % reads idle), but they can only raise
# its maximum.
QUERIES: tuple[MetricQuery, ...] = (
    MetricQuery(SM_V2, _Aligner.ALIGN_MEAN, "sm_v2", 100.0),
    MetricQuery(SM_V2, _Aligner.ALIGN_MAX, "sm_v2_max", 100.0),
    MetricQuery(SM_V1, _Aligner.ALIGN_MEAN, "sm_v1", 100.0),
    MetricQuery(SM_V1, _Aligner.ALIGN_MAX, "sm_v1_max", 100.0),
    MetricQuery(UTIL, _Aligner.ALIGN_MEAN, "util", 1.0),
    MetricQuery(UTIL, _Aligner.ALIGN_MAX, "util_max", 1.0),
    MetricQuery(MEM_USED, _Aligner.ALIGN_MAX, "mem", 1.0, percent=False),
    # per instance, not per GPU (no gpu_number label: read as GPU 0); never a GPU minute alone
    MetricQuery(HOST_CPU, _Aligner.ALIGN_MEAN, "cpu", 100.0),
    # the Ops Agent's, per instance too: the minute's most memory in use (added series can
    # only raise it, toward "keep the memory"), and its mean I/O wait
    MetricQuery(HOST_MEM, _Aligner.ALIGN_MAX, "host_mem", 1.0, percent=False,
                labels=(("state", "used"),)),
    MetricQuery(HOST_CPU_STATES, _Aligner.ALIGN_MEAN, "iowait", 1.0,
                labels=(("cpu_state", "wait"),)),
)
# the Ops Agent's host queries, asked unless `gcp.host_metrics` is false
AGENT_HOST_FIELDS = frozenset({"host_mem", "iowait"})
# the fields of the host's queries: joined to the instance's GPU minutes, making none
HOST_FIELDS = AGENT_HOST_FIELDS | {"cpu"}

# each query fills a field of its own: a project's queries are read side by side (`gpu_minutes`)
assert len({q.field for q in QUERIES}) == len(QUERIES)

_Key = tuple[str, int, int]  # (instance id, gpu index, minute start as epoch seconds)
# what a Cloud Monitoring reading holds, in its row's order (`costguard.minute_rows`): the
# order `_minutes` writes its values in
_VALUES = ("util_mean", "util_max", "sm_mean", "sm_max", "mem_used_bytes", "host_cpu_pct",
           "host_iowait_pct", "host_mem_used_bytes", "host_mem_total_bytes")
NAMES = names_of(_VALUES)
assert NAMES[len(LEAD):] == _VALUES


def metric_filter(metric_type: str, labels: tuple[tuple[str, str], ...] = ()) -> str:
    return "".join([series_filter(metric_type, "gce_instance"),
                    *(f' AND metric.labels.{k} = "{v}"' for k, v in labels)])


def build_request(
    project: str, query: MetricQuery, start: datetime, end: datetime
) -> monitoring_v3.ListTimeSeriesRequest:
    return aligned_request(project, metric_filter(query.metric_type, query.labels),
                           query.aligner, start, end)


def _read_series(out: dict[_Key, float], series: Any, query: MetricQuery,
                 wanted_ids: set[str]) -> None:
    # The raw protobuf, not proto-plus: wrapping every point and timestamp in proto-plus
    # objects cost most of the time of a 3,000-VM fleet's metrics.
    raw = monitoring_v3.TimeSeries.pb(series)
    instance_id = raw.resource.labels.get("instance_id", "")
    if instance_id not in wanted_ids:
        return
    labels = raw.metric.labels
    if query.field == "mem" and labels.get("memory_state", "used") != "used":
        return
    if any(labels.get(k) != v for k, v in query.labels):
        return  # asked of the server too
    if query.field == "iowait" and labels.get("cpu_number", ""):
        return  # one CPU's (the legacy agent's series per CPU), not the host's
    host = query.field in HOST_FIELDS
    if host:
        gpu = 0  # the host's: joined to each of its GPU minutes
    else:
        try:
            gpu = int(labels.get("gpu_number", "0") or 0)
        except ValueError:
            return  # not a GPU's number: no GPU's series (a label anyone may write)
    scale, percent = query.scale, query.percent
    held_or_set = out.setdefault  # one lookup a point: most keys are new
    for point in raw.points:
        value = value_of(point)
        if value is not None:
            value *= scale
            if host and (not math.isfinite(value)
                         or (not percent and not 0.0 <= value <= INT64)):
                # no figure of the host (a NaN, memory no 64-bit column holds): the GPU's
                # minute stands without it, rather than refused for it (as on AWS)
                continue
            if percent:  # kept within 0-100 here, once a point (NaN passes, as it came)
                value = 0.0 if value < 0.0 else 100.0 if value > 100.0 else value
            key = (instance_id, gpu, minute_of(point.interval.end_time.seconds))
            # another series of the same GPU (labels differ: anyone may write one): the
            # busiest wins, so an added series can never stand in for the agent's as idle;
            # a NaN from either stays, for validation to refuse
            held = held_or_set(key, value)
            if held is not value and (value != value or (held == held and value > held)):
                out[key] = value


def fetch_query(
    client: monitoring_v3.MetricServiceClient,
    project: str,
    query: MetricQuery | None,
    wanted_ids: set[str],
    start: datetime,
    end: datetime,
    retry: gretry.Retry,
    tpu_nodes: dict[tuple[str, str], tpu_metrics.Node] | None = None,
) -> dict[str, dict[_Key, float]]:
    """One query's readings of a project: field name -> {(instance, gpu, minute): value};
    with no `query`, the chips' of `tpu_nodes` (the project's Cloud TPU nodes,
    tpu_metrics.py)."""
    out: dict[str, dict[_Key, float]] = {}
    try:
        if query is None:
            tpu_metrics.fetch(client, project, tpu_nodes or {}, start, end, retry, out)
        else:
            held = out[query.field] = {}
            request = build_request(project, query, start, end)
            for series in client.list_time_series(request=request, retry=retry):
                _read_series(held, series, query, wanted_ids)
    except gexc.GoogleAPICallError as exc:
        raise translate(exc, project, api="monitoring.googleapis.com") from exc
    except gexc.RetryError as exc:
        raise from_retry_error(exc, project, "monitoring.googleapis.com") from exc
    return out


def busiest_into(into: dict[_Key, float], values: dict[_Key, float]) -> None:
    """`values` merged into `into`, key by key as `_read_series` merges two series of one
    GPU: the larger wins, and a NaN from either stays (for validation to refuse). The
    order the reads are merged in changes nothing."""
    for key, value in values.items():
        held = into.setdefault(key, value)
        if held is not value and (value != value or (held == held and value > held)):
            into[key] = value


def merge(readings: dict[str, dict[_Key, float]], start: datetime, end: datetime,
          receipt: Receipt | None = None, split: Split | None = None,
          dropped: Dropped | None = None, memory: Mapping[str, int] | None = None
          ) -> MinuteRows:
    """The GPU-minutes in [start, end) of the projects' series; with a call's `receipt`,
    those handed over and stored before unchanged are left out
    (`costguard.providers.repeats`).
    With `split` (keep_from, decided): the minutes from `keep_from` on, and the older ones
    of the instances that `decided`, handed those, does not name (never built).
    `memory`: each instance's machine type's memory in bytes, the total beside a minute's
    measured host memory (`type_memory`)."""
    memory = memory or {}
    if split is None:
        return _minutes(readings, start, end, receipt, dropped, memory)
    keep_from, decided = split
    recent = _minutes(readings, keep_from, end, receipt, dropped, memory)
    older = _minutes(readings, start, keep_from, receipt, dropped, memory,
                     skip=decided(recent))
    return MinuteRows.joined([older, recent], NAMES)


def type_memory(instances: Iterable[Instance]) -> dict[str, int]:
    """The memory of each instance's machine type, in bytes, where the shipped table knows
    it (the accelerator-optimized types: `catalog.machine_shapes`). The Ops Agent's memory in
    use is of what the kernel sees, a little less than the type's: a total a little high."""
    from costguard.providers.gcp.catalog import machine_shapes

    shapes = machine_shapes()
    return {inst.instance_id: round(shape.memory_gib * 2**30) for inst in instances
            if (shape := shapes.get(inst.instance_type)) is not None}


def _minutes(readings: dict[str, dict[_Key, float]], start: datetime, end: datetime,
             receipt: Receipt | None, dropped: Dropped | None, memory: Mapping[str, int],
             skip: Collection[str] = ()) -> MinuteRows:
    """`merge` of [start, end), less the instances in `skip`."""
    lo, hi = utc(start).timestamp(), utc(end).timestamp()
    # in the order the series came (each GPU's minutes together, the same every run), not
    # sorted: sorting a first cycle's minutes (millions at 100,000 instances) cost seconds,
    # and nothing after needs an order (the classifier and the window key by GPU and minute)
    keys: dict[_Key, None] = {}
    for name, values in readings.items():
        if name not in HOST_FIELDS:  # the host's figures join GPU minutes; they make none
            keys.update(dict.fromkeys(
                k for k in values if lo <= k[2] < hi and k[0] not in skip))
    cpu = readings.get("cpu", {})
    iowait, host_mem = readings.get("iowait", {}), readings.get("host_mem", {})
    util, util_max, mem_used = readings["util"], readings["util_max"], readings["mem"]
    sm_v2, sm_v2_max = readings["sm_v2"], readings["sm_v2_max"]
    sm_v1, sm_v1_max = readings["sm_v1"], readings["sm_v1_max"]
    rows: list[tuple[Any, ...]] = []
    stamps: dict[int, datetime] = {}  # each distinct minute converted once
    source = TelemetrySource.CLOUD_MONITORING
    for key in keys:
        instance_id, gpu, epoch = key
        minute = stamps.get(epoch)
        if minute is None:
            minute = stamps[epoch] = datetime.fromtimestamp(epoch, UTC)
        sm, sm_top = sm_v2.get(key), sm_v2_max.get(key)  # the v2 receiver's, else v1's
        if sm is None and sm_top is None:
            sm, sm_top = sm_v1.get(key), sm_v1_max.get(key)
        mem = mem_used.get(key)
        host = (instance_id, 0, epoch)
        host_used = host_mem.get(host)  # finite and within a column (`_read_series`)
        # LEAD's values, then _VALUES'
        rows.append(("gcp", instance_id, gpu, minute, source, 1, 1, util.get(key),
                     util_max.get(key), sm, sm_top, None if mem is None else whole_bytes(mem),
                     cpu.get(host), iowait.get(host),
                     None if host_used is None else int(host_used),
                     None if host_used is None else memory.get(instance_id)))
    fresh = rows if receipt is None else receipt.fresh(rows)
    return validated(NAMES, fresh, "gcp cloud monitoring", dropped)


def gpu_minutes(
    client: monitoring_v3.MetricServiceClient,
    instances: Sequence[Instance],
    start: datetime,
    end: datetime,
    *,
    retry: gretry.Retry,
    max_workers: int,
    receipt: Receipt | None = None,
    split: Split | None = None,
    dropped: Dropped | None = None,
    host: bool = True,
) -> tuple[MinuteRows, list[Gap]]:
    """Every GPU-minute Cloud Monitoring has for `instances` in [start, end) (less, with a
    call's `receipt`, those handed over and stored before unchanged; with `split`, as
    `merge` says), and the projects that could not be read. If no project at all could be
    read, that raises. `host`: the Ops Agent's host memory and I/O wait are asked too."""
    by_project: dict[str, set[str]] = {}
    tpus_of: dict[str, list[Instance]] = {}  # the projects' Cloud TPU nodes
    for inst in instances:
        if inst.provider == "gcp":
            by_project.setdefault(inst.account, set()).add(inst.instance_id)
            if tpus.is_node(inst):
                tpus_of.setdefault(inst.account, []).append(inst)
    if not by_project:
        return MinuteRows(NAMES, []), []

    # each project's queries, and its TPU chips' (None), asked side by side: asked one after
    # another, a project's eight calls were eight round trips in a row, which at a first
    # cycle's chunk size (a few projects a call) set the pace of Compute Engine's telemetry
    # (10,000 VMs on org-scale's fakes: 30 s of wall, 23 side by side)
    nodes_of = {p: tpu_metrics.nodes_of(members) for p, members in tpus_of.items()}
    asked = [q for q in QUERIES if host or q.field not in AGENT_HOST_FIELDS]
    tasks = [(project, query) for project in by_project
             for query in (*asked, *((None,) if nodes_of.get(project) else ()))]

    def one(task: tuple[str, MetricQuery | None]
            ) -> dict[str, dict[_Key, float]] | ProviderError:
        project, query = task
        nodes = nodes_of[project] if query is None else None
        try:
            return fetch_query(client, project, query, by_project[project], start, end, retry,
                               nodes)
        except ProviderError as exc:
            return exc

    reads: dict[str, list[tuple[MetricQuery | None, dict[str, dict[_Key, float]]]]] = {
        project: [] for project in by_project}
    failed: dict[str, ProviderError] = {}  # a project's first error stands for it
    with ThreadPoolExecutor(max_workers=min(max_workers, len(tasks))) as pool:
        for (project, query), result in zip(tasks, pool.map(one, tasks), strict=True):
            if isinstance(result, ProviderError):
                failed.setdefault(project, result)
            else:
                reads[project].append((query, result))
    merged: dict[str, dict[_Key, float]] = {q.field: {} for q in QUERIES}
    for project, read in reads.items():
        if project in failed:
            continue  # one query unread: none of the project's readings is kept
        for query, out in read:
            for name, values in out.items():
                if query is not None:  # a project's own instances, once each field: new keys
                    merged[name].update(values)
                else:  # its chips', after its GPUs': where a key is both, the busier
                    busiest_into(merged.setdefault(name, {}), values)
    failures = list(failed.values())
    if failures and len(failures) == len(by_project):
        raise failures[0]
    # Missing readings are "no data", never "idle": the other projects' data is still good.
    gaps = [Gap(provider="gcp", scope=f.scope, error=str(f)) for f in failures]
    return merge(merged, start, end, receipt, split, dropped,
                 type_memory(i for i in instances if i.provider == "gcp")), gaps
