"""The host beside the GPUs, as the CloudWatch agent publishes it: memory in use (the `mem`
plugin's `mem_used_percent`) and CPU time waiting on I/O (the `cpu` plugin's
`cpu_usage_iowait`), read where `cloudwatch.host_measurements` names them.

They are found as the GPU series are (`metrics.attribute_series`: InstanceId or host
series, ListMetrics or the `aggregation_dimensions: [["InstanceId"]]` roll-ups), in the same
namespace, and asked for in the same GetMetricData calls. Of `cpu_usage_iowait` only the
all-CPU series is read (`cpu` = `cpu-total`, the agent's `totalcpu: true`, and only those are
listed; or, with `rollup_by_instance`, the instance's roll-up): a per-core series is one
core's. Memory is the minute's Maximum (added
points can only raise it, toward "keep the memory"), I/O wait its Average.

The percentage of memory in use becomes bytes of the instance type's memory (as
DescribeInstanceTypes answered, else the shipped rows: `GpuTypeCatalog.host_memory_mib`):
the agent's percentage is of the
memory the kernel sees, a little less than the type's, so the bytes read slightly high, and
a fit that keeps them keeps a little more memory, never less. A type whose memory is not
known gives I/O wait alone. Each GPU minute takes the host's point of the same minute (the agent
samples both on its one interval)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, MutableSequence, Sequence
from datetime import datetime
from typing import Any

from costguard.providers.aws.inventory import HostNames
from costguard.providers.aws.metrics import (
    HOST_IOWAIT,
    HOST_MEM_TOTAL,
    HOST_MEM_USED,
    GpuRowKey,
    Layout,
    Series,
    attribute_series,
    minute_of,
    percent,
)
from costguard.providers.cloud_readings import busiest

MEM_USED_PERCENT = "mem_used_percent"
IOWAIT = "cpu_usage_iowait"
ALL_CPUS = "cpu-total"
# listed with this dimension only: the agent writes a series per core too (`resources: *`),
# a hundred on a large host, which a listing of them all would page through every hour
LISTED_HAVING = {IOWAIT: ("cpu", ALL_CPUS)}
_MIB = 1024 * 1024


def host_series(dimension_sets: Mapping[str, Iterable[tuple[tuple[str, str], ...]]],
                wanted: set[str], hosts: Mapping[str, HostNames], layout: Layout
                ) -> list[Series]:
    """The host measurements' series of the `wanted` instances (`attribute_series`), of
    `cpu_usage_iowait` only the all-CPU ones."""
    whole = {metric: [d for d in sets if dict(d).get("cpu", ALL_CPUS) == ALL_CPUS]
             for metric, sets in dimension_sets.items()}
    return attribute_series(whole, wanted, hosts, layout)


def host_queries(series: Sequence[Series], namespace: str, period_s: int
                 ) -> list[dict[str, Any]]:
    """Query `h{n}` per series: memory's Maximum, I/O wait's Average."""
    return [{"Id": f"h{n}",
             "MetricStat": {"Metric": {"Namespace": namespace, "MetricName": s.metric,
                                       "Dimensions": [{"Name": k, "Value": v}
                                                      for k, v in s.dimensions]},
                            "Period": period_s,
                            "Stat": "Maximum" if s.metric == MEM_USED_PERCENT else "Average"},
             "ReturnData": True}
            for n, s in enumerate(series)]


HostFigures = dict[str, dict[datetime, list[Any]]]  # instance -> minute -> a row's 3 figures


def host_figures(series: Sequence[Series], values: Mapping[str, list[tuple[datetime, float]]],
                 memory_mib: Mapping[str, int | None]) -> HostFigures:
    """`host_queries(series)` results as each instance's figures by minute: I/O wait (a
    percentage), memory in use and the type's memory (bytes; `memory_mib`: instance id ->
    its type's MiB, None where not known). Series of the same instance and minute merge into
    the larger figure."""
    out: HostFigures = {}
    for n, s in enumerate(series):
        mib = memory_mib.get(s.instance_id)
        total = None if mib is None else mib * _MIB
        if s.metric == MEM_USED_PERCENT and total is None:
            continue  # a percentage of memory not known
        by_minute = out.setdefault(s.instance_id, {})
        for ts, value in values.get(f"h{n}", []):
            if not math.isfinite(value):
                continue  # no figure of the host: the GPU's reading stands without it
            pct = percent(value)
            figures: list[tuple[int, Any]]
            if s.metric == MEM_USED_PERCENT and total is not None:
                figures = [(1, int(total * pct / 100)), (2, total)]
            else:
                figures = [(0, pct)]
            busiest(by_minute.setdefault(minute_of(ts), [None, None, None]), figures)
    return {i: m for i, m in out.items() if m}


def join_host(rows: Mapping[GpuRowKey, MutableSequence[Any]], figures: HostFigures) -> None:
    """Put each instance's host figures of a minute on every GPU row of that minute."""
    for (instance_id, _, minute), row in rows.items():
        held = figures.get(instance_id)
        if held is not None and (at := held.get(minute)) is not None:
            row[HOST_IOWAIT], row[HOST_MEM_USED], row[HOST_MEM_TOTAL] = at
