"""`costguard agent --publish-to cloudwatch`: the agent's summaries in the CloudWatch agent's
layout, read back by the daemon's own AWS provider (moto): a round trip, not a format check."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import httpx
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError
from moto import mock_aws

from costguard.clock import ManualClock
from costguard.errors import ConfigError
from costguard.model import GpuMinute, TelemetrySource
from costguard.providers.aws import AwsProvider, AwsSettings
from costguard.telemetry.agent import Agent, AgentSettings
from costguard.telemetry.buffer import DiskBuffer
from costguard.telemetry.cloudwatch import CloudWatchPusher, minute_datums
from costguard.telemetry.commands import run_agent
from costguard.telemetry.identity import Identity
from costguard.telemetry.nvml import NvmlSampler
from tests.fakes.loopback import free_port
from tests.telemetry.agent_helpers import RecordedSampler
from tests.telemetry.fake_nvml import FakeGpu, FakeNvml

REGION = "us-east-1"
AMI = "ami-12c6146b"  # moto's example AMI
# CloudWatch keeps recent datapoints: start the agent a few minutes ago, on a minute
START = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(minutes=10)


@pytest.fixture(autouse=True)
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for var in ("AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_DEFAULT_PROFILE", "AWS_ROLE_ARN"):
        monkeypatch.delenv(var, raising=False)
    for var, value in (("AWS_ACCESS_KEY_ID", "testing"), ("AWS_SECRET_ACCESS_KEY", "testing"),
                       ("AWS_DEFAULT_REGION", REGION), ("AWS_CONFIG_FILE", "/dev/null"),
                       ("AWS_SHARED_CREDENTIALS_FILE", "/dev/null"),
                       ("AWS_EC2_METADATA_DISABLED", "true"),
                       ("MOTO_EC2_LOAD_DEFAULT_AMIS", "false")):
        monkeypatch.setenv(var, value)
    with mock_aws():
        yield


def launch(itype: str = "g5.12xlarge") -> str:
    ec2: Any = boto3.client("ec2", region_name=REGION)
    raw = ec2.run_instances(ImageId=AMI, MinCount=1, MaxCount=1, InstanceType=itype)
    return str(raw["Instances"][0]["InstanceId"])


def cloudwatch_agent(tmp_path: Path, instance_id: str, clock: ManualClock, client: Any,
                     gpus: int = 2) -> tuple[Agent, list[GpuMinute]]:
    """An agent on a recorded workload (GPU 0 busy, the others held-memory idle) publishing
    to `client`; also returns the list its closed minutes are collected in."""
    sampler = RecordedSampler(clock, gpus, lambda g, now: "busy" if g == 0 else "held_memory_idle")
    settings = AgentSettings(url="", token="", buffer_path=tmp_path / "buffer.sqlite3",
                             publish_to="cloudwatch")
    agent = Agent(settings, sampler, Identity(provider="aws", instance_id=instance_id),
                  client=httpx.Client(), clock=clock,
                  sleep=lambda s: clock.advance(timedelta(seconds=s)),
                  publisher=lambda buffer: CloudWatchPusher(client, buffer))
    closed: list[GpuMinute] = []
    close = agent.close_minute

    def keep() -> list[GpuMinute]:
        minutes = close()
        closed.extend(minutes)
        return minutes

    agent.close_minute = keep  # type: ignore[method-assign]
    return agent, closed


def read_back(instance_id: str, minutes: int) -> dict[tuple[int, datetime], GpuMinute]:
    provider = AwsProvider(AwsSettings(regions=[REGION]),
                           clock=ManualClock(START + timedelta(minutes=minutes + 5)),
                           session=boto3.Session(region_name=REGION))
    mine = [i for i in provider.list_instances().instances if i.instance_id == instance_id]
    rows = provider.gpu_metrics(mine, START, START + timedelta(minutes=minutes))
    assert provider.metric_gaps == []
    return {(r.gpu_index, r.minute): r for r in rows}


def test_the_daemon_reads_back_what_the_agent_published(tmp_path: Path) -> None:
    instance_id = launch()
    clock = ManualClock(START)
    agent, closed = cloudwatch_agent(tmp_path, instance_id, clock,
                                     boto3.client("cloudwatch", region_name=REGION))
    agent.run(max_ticks=180)  # three minutes at 1 Hz; shutdown publishes the last one
    assert len(closed) == 6 and len(agent.buffer) == 0

    got = read_back(instance_id, 3)
    assert set(got) == {(m.gpu_index, m.minute) for m in closed}
    for sent in closed:
        back = got[(sent.gpu_index, sent.minute)]
        assert back.source is TelemetrySource.CLOUDWATCH
        assert back.util_mean == pytest.approx(sent.util_mean)
        assert sent.mem_used_bytes is not None and back.mem_used_bytes is not None
        assert abs(back.mem_used_bytes - sent.mem_used_bytes) <= 1  # via MiB, as the plugin
        assert back.mem_total_bytes == pytest.approx(sent.mem_total_bytes, abs=1)
    busy = got[(0, START)]
    held = got[(1, START)]
    assert busy.util_mean is not None and busy.util_mean > 90
    assert held.util_mean is not None and held.util_mean < 1 and held.mem_used_bytes is not None
    assert held.mem_used_bytes > 20 * 10**9  # the recorded 21 GB held with nothing running


def test_an_unreachable_cloudwatch_keeps_every_minute_and_replays_them_in_order(
        tmp_path: Path) -> None:
    instance_id = launch()
    clock = ManualClock(START)
    down = boto3.client("cloudwatch", region_name=REGION,
                        endpoint_url=f"http://127.0.0.1:{free_port()}",
                        config=Config(retries={"total_max_attempts": 1}, connect_timeout=1))
    agent, closed = cloudwatch_agent(tmp_path, instance_id, clock, down)
    agent.run(max_ticks=150)
    assert len(agent.buffer) == 6  # minutes 0, 1 and the partial 2, both GPUs
    assert agent.last_flush.reachable is False
    assert "CloudWatch unreachable" in (agent.last_flush.error or "")

    assert isinstance(agent.pusher, CloudWatchPusher)
    agent.pusher.client = boto3.client("cloudwatch", region_name=REGION)
    result = agent.pusher.flush()
    assert (result.sent, result.discarded, len(agent.buffer)) == (6, 0, 0)
    assert set(read_back(instance_id, 3)) == {(m.gpu_index, m.minute) for m in closed}


class Refusing:
    """A CloudWatch client that answers every PutMetricData with one error code."""

    def __init__(self, code: str) -> None:
        self.code, self.calls = code, 0

    def put_metric_data(self, **_: Any) -> None:
        self.calls += 1
        raise ClientError({"Error": {"Code": self.code, "Message": "no"}}, "PutMetricData")


def _buffer_with(tmp_path: Path, minutes: list[GpuMinute]) -> DiskBuffer:
    buffer = DiskBuffer(tmp_path / "b.sqlite3")
    buffer.append([m.model_dump_json() for m in minutes])
    return buffer


def _minute(k: int, **fields: Any) -> GpuMinute:
    return GpuMinute(provider="aws", instance_id="i-1", gpu_index=0, source="agent",
                     minute=START + timedelta(minutes=k), samples=60, **fields)


@pytest.mark.parametrize(("code", "kept"), [("Throttling", True), ("AccessDenied", True),
                                            ("InvalidParameterValue", False)])
def test_throttled_or_denied_is_kept_and_an_invalid_request_is_dropped_and_counted(
        tmp_path: Path, code: str, kept: bool) -> None:
    buffer = _buffer_with(tmp_path, [_minute(k, util_mean=3.0) for k in range(4)])
    result = CloudWatchPusher(Refusing(code), buffer).flush()
    assert len(buffer) == (4 if kept else 0)
    assert result.reachable is not kept  # kept: back off and retry, as for a down daemon
    assert (result.discarded, buffer.dropped) == ((0, 0) if kept else (4, 4))


def test_one_put_metric_data_call_per_333_minutes_acknowledged_call_by_call(
        tmp_path: Path) -> None:
    buffer = _buffer_with(tmp_path, [_minute(k, util_mean=1.0, mem_used_bytes=2**30,
                                             mem_total_bytes=2**34) for k in range(700)])

    class Counting:
        def __init__(self) -> None:
            self.sizes: list[int] = []

        def put_metric_data(self, *, Namespace: str, MetricData: list[Any]) -> None:
            assert Namespace == "CWAgent"
            self.sizes.append(len(MetricData))
            if len(self.sizes) == 2:
                raise ClientError({"Error": {"Code": "Throttling"}}, "PutMetricData")

    client = Counting()
    first = CloudWatchPusher(client, buffer).flush()
    assert client.sizes == [999, 999] and first.sent == 333 and len(buffer) == 700 - 333
    second = CloudWatchPusher(client, buffer).flush()
    assert second.sent == 700 - 333 and len(buffer) == 0
    assert client.sizes[2:] == [999, 34 * 3]


def test_a_minute_without_readings_publishes_nothing_and_stats_keep_mean_and_peak() -> None:
    assert minute_datums(_minute(0)) == []  # no data stays no data, never a zero
    (util,) = minute_datums(_minute(0, util_mean=12.5, util_max=100.0, util_active_share=0.5))
    stats = util["StatisticValues"]
    assert util["MetricName"] == "nvidia_smi_utilization_gpu"
    assert stats["Sum"] / stats["SampleCount"] == 12.5
    assert (stats["Minimum"], stats["Maximum"]) == (0.0, 100.0)
    assert {d["Name"]: d["Value"] for d in util["Dimensions"]} == {
        "InstanceId": "i-1", "index": "0"}


def test_run_agent_publishes_to_cloudwatch_without_a_daemon_url(tmp_path: Path) -> None:
    instance_id = launch("g5.xlarge")
    clock = ManualClock(START)
    sampler = NvmlSampler(FakeNvml([FakeGpu(util=40, sm_util=30.0)]),
                          clock=lambda: clock.now().timestamp())
    sampler.open()
    settings = AgentSettings(url="", token="", buffer_path=tmp_path / "b.sqlite3",
                             provider="aws", instance_id=instance_id, publish_to="cloudwatch",
                             cloudwatch_region=REGION)
    agent = run_agent(settings, sampler=sampler, clock=clock,
                      sleep=lambda s: clock.advance(timedelta(seconds=s)), max_ticks=120)
    sampler.close()
    assert isinstance(agent.pusher, CloudWatchPusher)
    got = read_back(instance_id, 2)
    assert sorted(got) == [(0, START), (0, START + timedelta(minutes=1))]
    assert all(m.util_mean == 40 for m in got.values())


def test_cloudwatch_publishing_off_aws_is_a_config_error(tmp_path: Path) -> None:
    settings = AgentSettings(url="", token="", buffer_path=tmp_path / "b.sqlite3",
                             provider="gcp", instance_id="1234", publish_to="cloudwatch")
    sampler = NvmlSampler(FakeNvml([FakeGpu()]))
    sampler.open()
    with pytest.raises(ConfigError, match="needs an EC2 instance"):
        run_agent(settings, sampler=sampler, max_ticks=1)
    sampler.close()
