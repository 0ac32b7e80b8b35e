"""One contract, every provider: the simulated cloud, AWS (boto3 against moto in-process) and
GCP (google-cloud-compute / -monitoring against the local fakes) must behave the same way.

Each backend builds the same small scene: a running spot GPU instance `busy` with a `team`
tag and GPU metrics for the last ten minutes, a running on-demand GPU instance `quiet` with no
metrics at all, and a stopped instance `parked`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest

from costguard.clock import ManualClock
from costguard.model import ActionOutcome, Instance, InstanceState, Lifecycle, PriceQuote
from costguard.providers.base import Provider

NOW = datetime.now(UTC).replace(second=0, microsecond=0)
WINDOW = (NOW - timedelta(minutes=10), NOW)


@dataclass
class Scene:
    provider: Provider
    busy: str
    quiet: str
    parked: str

    def listing(self) -> dict[str, Instance]:
        return {i.instance_id: i for i in self.provider.list_instances().instances}

    def get(self, instance_id: str) -> Instance:
        return self.listing()[instance_id]


# -- the three backends ------------------------------------------------------------------


@contextmanager
def _sim_scene() -> Iterator[Scene]:
    from costguard.demo.sim import SimProvider
    from costguard.demo.sim_settings import SimSettings

    clock = ManualClock(NOW)
    sim = SimProvider(SimSettings(seed=3, instances=300, launches_per_day=0), clock)
    hosts = list(sim._hosts.values())  # the fake's own state: choose instances that fit

    def first(match: Callable[[Any], bool]) -> Any:
        return next(h for h in hosts if match(h))

    busy = first(lambda h: h.instance.has_gpu and h.profile == "training"
                 and h.instance.lifecycle is Lifecycle.SPOT and "team" in h.instance.tags)
    quiet = first(lambda h: h.instance.has_gpu and h.profile == "no-agent"
                  and h.instance.lifecycle is Lifecycle.ON_DEMAND)
    parked = first(lambda h: not h.instance.has_gpu)
    sim._set_state(parked, InstanceState.STOPPED, NOW - timedelta(hours=1))
    yield Scene(sim, busy.instance.instance_id, quiet.instance.instance_id,
                parked.instance.instance_id)


@contextmanager
def _aws_scene(monkeypatch: pytest.MonkeyPatch) -> Iterator[Scene]:
    from moto import mock_aws

    from costguard.providers.aws import AwsProvider, AwsSettings
    from tests.providers.aws.aws_helpers import SPOT, run_instances

    for var in ("AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_ROLE_ARN"):
        monkeypatch.delenv(var, raising=False)
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.setenv(var, "testing")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/dev/null")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")
    monkeypatch.setenv("MOTO_EC2_LOAD_DEFAULT_AMIS", "false")
    with mock_aws():
        (busy,) = run_instances(itype="g5.xlarge", **SPOT)
        (quiet,) = run_instances(itype="g4dn.xlarge")
        (parked,) = run_instances(itype="m5.large")
        ec2: Any = boto3.client("ec2", region_name="us-east-1")
        ec2.create_tags(Resources=[busy["InstanceId"]], Tags=[{"Key": "team", "Value": "vision"}])
        ec2.stop_instances(InstanceIds=[parked["InstanceId"]])
        cw: Any = boto3.client("cloudwatch", region_name="us-east-1")
        cw.put_metric_data(Namespace="CWAgent", MetricData=[
            {"MetricName": "nvidia_smi_utilization_gpu", "Value": 70.0,
             "Timestamp": NOW - timedelta(minutes=m),
             "Dimensions": [{"Name": "InstanceId", "Value": busy["InstanceId"]}]}
            for m in range(1, 11)])
        provider = AwsProvider(AwsSettings(regions=["us-east-1"]), clock=ManualClock(NOW),
                               session=boto3.Session(region_name="us-east-1"))
        yield Scene(provider, busy["InstanceId"], quiet["InstanceId"], parked["InstanceId"])


@contextmanager
def _gcp_scene() -> Iterator[Scene]:
    from costguard.demo.gcp_fake.server import FakeGcp
    from costguard.providers.gcp import GcpProvider
    from costguard.providers.gcp.metrics import UTIL

    with FakeGcp() as fake:
        zone = "us-central1-a"
        busy = fake.compute.add_instance("ml-prod", zone, "busy", "a2-highgpu-1g", spot=True,
                                         labels={"team": "vision"},
                                         accelerators=[("nvidia-tesla-a100", 1)])
        quiet = fake.compute.add_instance("ml-prod", zone, "quiet", "g2-standard-8",
                                          accelerators=[("nvidia-l4", 1)])
        parked = fake.compute.add_instance("ml-prod", zone, "parked", "n2-standard-8",
                                           status="TERMINATED")
        fake.monitoring.add_gpu_series(
            "ml-prod", UTIL, str(busy.id),
            [(NOW - timedelta(minutes=m, seconds=30), 70.0) for m in range(0, 10)], zone=zone)
        provider = GcpProvider(fake.settings(projects=["ml-prod"]), clock=ManualClock(NOW))
        try:
            yield Scene(provider, str(busy.id), str(quiet.id), str(parked.id))
        finally:
            provider.close()


@pytest.fixture(params=["sim", "aws", "gcp"])
def scene(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[Scene]:
    if request.param == "sim":
        with _sim_scene() as built:
            yield built
    elif request.param == "aws":
        with _aws_scene(monkeypatch) as built:
            yield built
    else:
        with _gcp_scene() as built:
            yield built


# -- the contract ------------------------------------------------------------------------


def test_listing_gives_instances_with_provider_gpus_lifecycle_tags_and_state(
    scene: Scene,
) -> None:
    inventory = scene.provider.list_instances()
    assert inventory.gaps == []
    seen = {i.instance_id: i for i in inventory.instances}
    assert {i.provider for i in inventory.instances} == {scene.provider.name}
    busy, quiet, parked = seen[scene.busy], seen[scene.quiet], seen[scene.parked]
    assert busy.gpu_count >= 1 and quiet.gpu_count >= 1 and parked.gpu_count == 0
    assert busy.lifecycle is Lifecycle.SPOT and quiet.lifecycle is Lifecycle.ON_DEMAND
    assert busy.tags["team"]
    assert busy.state is InstanceState.RUNNING and parked.state is InstanceState.STOPPED


def test_stopping_a_running_instance_is_done_and_the_next_listing_shows_it_stopped(
    scene: Scene,
) -> None:
    result = scene.provider.stop(scene.get(scene.quiet), dry_run=False)
    assert result.outcome is ActionOutcome.DONE
    assert scene.get(scene.quiet).state is InstanceState.STOPPED


def test_stopping_a_stopped_instance_is_skipped(scene: Scene) -> None:
    result = scene.provider.stop(scene.get(scene.parked), dry_run=False)
    assert result.outcome is ActionOutcome.SKIPPED
    assert scene.get(scene.parked).state is InstanceState.STOPPED


def test_a_dry_run_stop_changes_nothing(scene: Scene) -> None:
    before = scene.get(scene.quiet)
    result = scene.provider.stop(before, dry_run=True)
    assert result.outcome is ActionOutcome.DRY_RUN
    after = scene.get(scene.quiet)
    assert after.state is InstanceState.RUNNING and after.tags == before.tags


def test_set_tags_adds_and_removes(scene: Scene) -> None:
    result = scene.provider.set_tags(scene.get(scene.busy), {"costguard-seen": "yes"},
                                     remove=["team"], dry_run=False)
    assert result.outcome is ActionOutcome.DONE
    tags = scene.get(scene.busy).tags
    assert tags.get("costguard-seen") == "yes" and "team" not in tags


def test_a_known_gpu_type_has_a_price(scene: Scene) -> None:
    quote = scene.provider.price(scene.get(scene.quiet))
    assert isinstance(quote, PriceQuote) and quote.usd_per_hour > 0 and quote.source


def test_gpu_metrics_come_only_for_instances_that_report_them(scene: Scene) -> None:
    listing = scene.listing()
    rows = scene.provider.gpu_metrics([listing[scene.busy], listing[scene.quiet]], *WINDOW)
    assert rows, "the reporting instance has readings"
    assert {r.instance_id for r in rows} == {scene.busy}  # no data is not idle: no rows
    assert {r.provider for r in rows} == {scene.provider.name}
    assert all(WINDOW[0] <= r.minute < WINDOW[1] for r in rows)
