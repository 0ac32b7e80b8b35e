"""Publish the agent's per-minute summaries to CloudWatch instead of the daemon.

The layout is the CloudWatch agent's nvidia_smi plugin (`CWAgent` namespace), which the AWS
provider already reads (costguard/providers/aws/metrics.py): so an instance whose agent
publishes here is measured by the daemon's ordinary CloudWatch polling, with no ingest
endpoint to expose.

    namespace  CWAgent (configurable)
    dimensions InstanceId, index (the GPU)  -- the `append_dimensions: {InstanceId}` layout
    nvidia_smi_utilization_gpu  percent: StatisticValues of the minute (count, sum, max), so
                                Average is the minute's mean and Maximum its peak
    nvidia_smi_memory_used      MiB, the minute's maximum
    nvidia_smi_memory_total     MiB

A summary has no minimum; it is published as 0 when a sample read 0 (util_active_share < 1)
and as the mean otherwise (the provider reads Average and Maximum only). SM activity has no
place in this layout and is not published: the daemon falls back to utilization.gpu for
these instances, as it does for the CloudWatch agent.

Summaries leave the same disk buffer as daemon pushes and are acknowledged per
PutMetricData call, so an outage or a restart loses nothing. Publishing a minute twice
(a crash between the call and its acknowledgement) leaves Average and Maximum unchanged.
"""

from __future__ import annotations

import logging
from typing import Any

from pydantic import ValidationError

from costguard.model import GpuMinute
from costguard.telemetry.agent import FlushResult
from costguard.telemetry.buffer import DiskBuffer, Pending

log = logging.getLogger(__name__)

NAMESPACE = "CWAgent"
GPU_UTIL = "nvidia_smi_utilization_gpu"  # the names costguard.providers.aws.metrics reads
GPU_MEM_USED = "nvidia_smi_memory_used"
GPU_MEM_TOTAL = "nvidia_smi_memory_total"
MAX_DATUMS = 1000  # PutMetricData's limit per call
DATUMS_PER_MINUTE = 3
_MIB = 1024 * 1024
# the request itself is wrong: retrying cannot help (anything else is kept and retried)
_REFUSED = {"InvalidParameterValue", "InvalidParameterCombination", "MissingParameter"}


def minute_datums(m: GpuMinute) -> list[dict[str, Any]]:
    """One summary as PutMetricData datums; fields without a reading are left out."""
    dims = [{"Name": "InstanceId", "Value": m.instance_id},
            {"Name": "index", "Value": str(m.gpu_index)}]
    base = {"Dimensions": dims, "Timestamp": m.minute}
    out: list[dict[str, Any]] = []
    if m.util_mean is not None:
        samples = max(1, m.samples)
        peak = m.util_max if m.util_max is not None else m.util_mean
        low = 0.0 if (m.util_active_share or 0.0) < 1 else m.util_mean
        out.append({**base, "MetricName": GPU_UTIL, "Unit": "Percent", "StatisticValues": {
            "SampleCount": float(samples), "Sum": m.util_mean * samples,
            "Minimum": min(low, m.util_mean), "Maximum": max(peak, m.util_mean)}})
    if m.mem_used_bytes is not None:
        out.append({**base, "MetricName": GPU_MEM_USED, "Unit": "Megabytes",
                    "Value": m.mem_used_bytes / _MIB})
    if m.mem_total_bytes is not None:
        out.append({**base, "MetricName": GPU_MEM_TOTAL, "Unit": "Megabytes",
                    "Value": m.mem_total_bytes / _MIB})
    return out


class CloudWatchPusher:
    """Drop-in for the agent's daemon `Pusher`: same buffer, same `flush()` contract."""

    def __init__(self, client: Any, buffer: DiskBuffer, *, namespace: str = NAMESPACE,
                 batch_size: int = MAX_DATUMS // DATUMS_PER_MINUTE) -> None:
        self.client = client  # swappable: tests point it elsewhere mid-run
        self._buffer = buffer
        self.namespace = namespace
        self.batch_size = max(1, min(batch_size, MAX_DATUMS // DATUMS_PER_MINUTE))

    def flush(self) -> FlushResult:
        from botocore.exceptions import BotoCoreError, ClientError

        result = FlushResult()
        while batch := self._buffer.peek(self.batch_size):
            datums, unreadable = self._datums(batch)
            try:
                if datums:
                    self.client.put_metric_data(Namespace=self.namespace, MetricData=datums)
            except ClientError as exc:
                code = exc.response.get("Error", {}).get("Code", "")
                if code not in _REFUSED:  # throttled, denied, 5xx: keep and retry later
                    result.reachable, result.error = False, f"CloudWatch refused: {exc}"
                    return result
                log.error("CloudWatch refused %d summaries for good: %s", len(batch), exc)
                self._buffer.discard([p.seq for p in batch])
                result.discarded += len(batch)
                continue
            except BotoCoreError as exc:  # no route, no credentials, timeouts
                result.reachable, result.error = False, f"CloudWatch unreachable: {exc}"
                return result
            if unreadable:
                self._buffer.discard(unreadable)
                result.discarded += len(unreadable)
            self._buffer.ack(batch[-1].seq)
            result.sent += len(batch) - len(unreadable)
        return result

    @staticmethod
    def _datums(batch: list[Pending]) -> tuple[list[dict[str, Any]], list[int]]:
        datums: list[dict[str, Any]] = []
        unreadable: list[int] = []
        for p in batch:
            try:
                datums += minute_datums(GpuMinute.model_validate_json(p.body))
            except ValidationError:
                unreadable.append(p.seq)
        return datums, unreadable
