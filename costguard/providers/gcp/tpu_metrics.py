"""Cloud TPU readings from Cloud Monitoring, for the projects that have TPU nodes: per chip
and minute, in the same batched ListTimeSeries calls (one per metric and aligner a project).

What is read, of the metrics Google documents for TPU VMs (monitored resource `tpu_worker`,
labels `project_id`, `zone`, `node_id` = the node's name, `worker_id` = the host's index in
the slice):
- `tpu.googleapis.com/tpu/tensorcore/idle_duration` (GAUGE, INT64 seconds, label `chip`):
  how long the chip's TensorCores have been idle. A minute is read as the share of it that
  was not in the current idle run, `100 x (60 - min(idle, 60)) / 60`, the minute's busiest
  point (its smallest idle time) as its maximum: a chip idle a whole minute reads 0, one
  that ran at any moment of it reads above 0. -> `util_mean` / `util_max`.
- `tpu.googleapis.com/accelerator/tensorcore_utilization` (GAUGE, DOUBLE percent, label
  `accelerator_id`), where the runtime publishes it: the share of the TensorCore in use,
  the TPU's counterpart of SM activity. -> `sm_mean` / `sm_max`.

Not read: `accelerator/duty_cycle` on the `tpu.googleapis.com/GceTpuWorker` resource,
whose labels name no TPU node (no documented way joins its `worker_id` to a node), and host
memory and network, which say nothing of the chips.

A chip is `GpuMinute.gpu_index` = worker x chips a host + chip.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from google.api_core import retry as gretry
from google.cloud import monitoring_v3

from costguard.model import Instance
from costguard.providers.gcp import tpus
from costguard.providers.gcp.series import aligned_request, minute_of, series_filter, value_of

IDLE = "tpu.googleapis.com/tpu/tensorcore/idle_duration"
TENSORCORE = "tpu.googleapis.com/accelerator/tensorcore_utilization"
RESOURCE = "tpu_worker"

_Aligner = monitoring_v3.Aggregation.Aligner
_Key = tuple[str, int, int]  # (instance id, chip index, minute start as epoch seconds)


@dataclass(frozen=True)
class TpuQuery:
    metric_type: str
    aligner: Any
    field: str  # the GpuMinute field (metrics.merge's name) it fills
    idle_seconds: bool  # an idle duration, read as the busy share of the minute


QUERIES: tuple[TpuQuery, ...] = (
    TpuQuery(IDLE, _Aligner.ALIGN_MEAN, "util", True),
    TpuQuery(IDLE, _Aligner.ALIGN_MIN, "util_max", True),  # least idle: the busiest
    TpuQuery(TENSORCORE, _Aligner.ALIGN_MEAN, "sm_v2", False),
    TpuQuery(TENSORCORE, _Aligner.ALIGN_MAX, "sm_v2_max", False),
)


@dataclass(frozen=True)
class Node:
    instance_id: str
    chips_per_host: int
    hosts: int = 1


def nodes_of(instances: list[Instance]) -> dict[tuple[str, str], Node]:
    """(zone, node name) -> the node, of the TPU nodes among `instances`: their chips as
    inventory counted them (a topology's too), over their generation's hosts."""
    out: dict[tuple[str, str], Node] = {}
    for inst in instances:
        gen = tpus.by_model(inst.gpu_model)
        if inst.zone and inst.name and gen is not None and inst.gpu_count > 0:
            hosts = gen.hosts(inst.gpu_count)
            out[(inst.zone, inst.name)] = Node(inst.instance_id,
                                               max(1, inst.gpu_count // hosts), hosts)
    return out


def busy_percent(idle_seconds: float) -> float:
    """The share of a minute outside the chip's current idle run."""
    idle = 0.0 if idle_seconds < 0 else min(idle_seconds, 60.0)
    return 100.0 * (60.0 - idle) / 60.0


def read_series(out: dict[_Key, float], series: Any, query: TpuQuery,
                nodes: dict[tuple[str, str], Node]) -> None:
    raw = monitoring_v3.TimeSeries.pb(series)
    labels = raw.resource.labels
    node = nodes.get((labels.get("zone", ""), labels.get("node_id", "")))
    if node is None:
        return
    metric = raw.metric.labels
    try:
        worker = int(labels.get("worker_id", "0") or 0)
        chip = int(metric.get("chip", metric.get("accelerator_id", "0")) or 0)
    except ValueError:
        return  # not a chip's number: a label anyone may write
    if not 0 <= worker < node.hosts or not 0 <= chip < node.chips_per_host:
        return  # no such host or chip in the node: a series anyone may write
    index = worker * node.chips_per_host + chip
    for point in raw.points:
        value = value_of(point)
        if value is None:
            continue
        value = busy_percent(value) if query.idle_seconds else min(max(value, 0.0), 100.0)
        key = (node.instance_id, index, minute_of(point.interval.end_time.seconds))
        held = out.get(key)
        # another series of the same chip: the busiest wins (as for GPUs, metrics.py)
        if held is None or value != value or (held == held and value > held):
            out[key] = value


def fetch(client: monitoring_v3.MetricServiceClient, project: str,
          nodes: dict[tuple[str, str], Node], start: datetime, end: datetime,
          retry: gretry.Retry, out: dict[str, dict[_Key, float]]) -> None:
    """Add the project's TPU chip-minutes to `out` (metrics.fetch_query's shape); the
    API's errors are raised as they come, for fetch_query to translate."""
    for query in QUERIES:
        request = aligned_request(project, series_filter(query.metric_type, RESOURCE),
                                  query.aligner, start, end)
        for series in client.list_time_series(request=request, retry=retry):
            read_series(out.setdefault(query.field, {}), series, query, nodes)

