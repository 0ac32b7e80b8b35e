"""`idle: {evidence: agent}`: a series written whole for an instance that runs no agent, which
anyone allowed PutMetricData can write and no statistic tells apart, makes it idle under the
default evidence; counting only what costguard's agent measured, it does not, and what the
agent measured still does. Through the engine, over moto."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest
from aws_helpers import REGION, ProviderFactory, run_instances

from costguard.clock import ManualClock
from costguard.model import GpuMinute, TelemetrySource
from costguard.providers.aws.metrics import GPU_UTIL
from tests.providers.policies import AGENT_EVIDENCE_POLICY, IDLE_NOTIFY_POLICY, idle_cycle

pytestmark = pytest.mark.usefixtures("moto")


@pytest.mark.parametrize(("policy", "idle"), [
    (IDLE_NOTIFY_POLICY, {"forged", "measured"}),  # the forgery lands
    (AGENT_EVIDENCE_POLICY, {"measured"}),
])
def test_only_the_agents_readings_make_an_instance_idle_when_the_policy_says_so(
    make_provider: ProviderFactory, clock: ManualClock, tmp_path: Path, policy: str,
    idle: set[str]
) -> None:
    forged, measured = run_instances(count=2, itype="g5.xlarge")
    names = {forged["InstanceId"]: "forged", measured["InstanceId"]: "measured"}
    cw: Any = boto3.client("cloudwatch", region_name=REGION)
    now = clock.now().replace(second=0, microsecond=0)
    pushed = []
    for ago in range(30, 0, -1):
        when = now - timedelta(minutes=ago)
        # another host writes an idle-looking series for an instance that runs no agent
        cw.put_metric_data(Namespace="CWAgent", MetricData=[{
            "MetricName": GPU_UTIL, "Timestamp": when, "Value": 1.0,
            "Dimensions": [{"Name": "InstanceId", "Value": forged["InstanceId"]},
                           {"Name": "index", "Value": "0"}]}])
        # the other instance's agent pushed its idle minutes to costguard
        pushed.append(GpuMinute(
            provider="aws", instance_id=measured["InstanceId"], gpu_index=0, minute=when,
            source=TelemetrySource.AGENT, samples=60, util_mean=0.5, util_p95=1.0,
            util_max=1.0, mem_used_bytes=2**29, process_count=0))

    found, stored = idle_cycle("aws", make_provider(cloudwatch={"instance_dimension": True}),
                               clock, tmp_path, forged["InstanceId"], policy=policy,
                               agent=pushed)

    assert {names[i] for i in found} == idle
    # the forged series is still read and kept (reports, spend): it only stops counting as
    # idle evidence
    assert len(stored) == 30 and {r.source for r in stored} == {TelemetrySource.CLOUDWATCH}

