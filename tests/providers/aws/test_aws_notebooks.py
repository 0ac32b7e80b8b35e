"""SageMaker notebook instances through the AWS provider, against moto's SageMaker (which
implements notebook instances, their tags and their start/stop): listed beside the EC2
instances as kind `notebook` with the GPUs of the EC2 type they are named after, re-read with
fresh tags, stopped and started only as the notebook decided about, tagged; a role that may
not list them governs none there, any other failure is a gap."""

from __future__ import annotations

import json
import logging
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest
from aws_helpers import REGION, ProviderFactory, run_instances
from botocore.awsrequest import AWSPreparedRequest, AWSResponse
from botocore.compat import HTTPHeaders

from costguard.model import ActionOutcome, InstanceKind, InstanceState
from costguard.providers.aws import notebooks

pytestmark = pytest.mark.usefixtures("moto", "studio")  # Studio: no apps
ROLE = "arn:aws:iam::123456789012:role/service-role/AmazonSageMaker-ExecutionRole"


def _governing(provider: Any) -> Any:
    """The provider as the engine leaves it when a notebook policy names AWS."""
    provider.govern(frozenset({"instance", "notebook"}))
    return provider


def _sm() -> Any:
    return boto3.client("sagemaker", region_name=REGION)


def _notebook(name: str, itype: str = "ml.p3.2xlarge", **tags: str) -> str:
    kwargs: dict[str, Any] = {"Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}
    arn: str = _sm().create_notebook_instance(
        NotebookInstanceName=name, InstanceType=itype, RoleArn=ROLE,
        **(kwargs if tags else {}))["NotebookInstanceArn"]
    return arn


class _Raw:
    def __init__(self, body: bytes) -> None:
        self._body = body

    def stream(self, **_: Any) -> Any:
        yield self._body


def _json_error(request: AWSPreparedRequest, status: int, code: str) -> AWSResponse:
    """A SageMaker (JSON protocol) error, as AWS sends one."""
    body = json.dumps({"__type": code, "message": f"{code} (injected)"}).encode()
    return AWSResponse(request.url, status, HTTPHeaders(), _Raw(body))


def test_notebooks_are_listed_beside_instances_with_their_gpus_tags_and_state(
        make_provider: ProviderFactory) -> None:
    vm = run_instances(itype="g5.xlarge")[0]["InstanceId"]
    arn = _notebook("research-nb", team="research", owner="ana@example.com")
    cpu = _notebook("cpu-nb", "ml.t3.medium")
    _sm().stop_notebook_instance(NotebookInstanceName="cpu-nb")
    listed = _governing(make_provider()).list_instances()
    assert not listed.gaps
    by_id = {i.instance_id: i for i in listed.instances}
    assert set(by_id) == {vm, arn, cpu}
    assert by_id[vm].kind is InstanceKind.INSTANCE
    nb = by_id[arn]
    assert (nb.kind, nb.name, nb.instance_type, nb.state, nb.account, nb.region) == (
        InstanceKind.NOTEBOOK, "research-nb", "ml.p3.2xlarge", InstanceState.RUNNING,
        "123456789012", REGION)
    # the GPUs of p3.2xlarge, the EC2 type the ML type is named after
    assert (nb.gpu_count, nb.gpu_model) == (1, "NVIDIA V100")
    assert nb.tags == {"team": "research", "owner": "ana@example.com"}
    assert nb.owner is None and not nb.managed
    assert (by_id[cpu].gpu_count, by_id[cpu].state) == (0, InstanceState.STOPPED)


def test_a_stop_goes_to_sagemaker_after_a_fresh_read_and_a_dry_run_changes_nothing(
        make_provider: ProviderFactory) -> None:
    arn = _notebook("nb")
    provider = _governing(make_provider())
    nb = next(i for i in provider.list_instances().instances if i.instance_id == arn)
    dry = provider.stop(nb, dry_run=True)
    assert dry.outcome is ActionOutcome.DRY_RUN and "would stop notebook nb" in dry.detail
    assert _sm().describe_notebook_instance(NotebookInstanceName="nb")[
        "NotebookInstanceStatus"] == "InService"
    done = provider.stop_many([nb], dry_run=False)[arn]
    assert done.outcome is ActionOutcome.DONE and "StopNotebookInstance" in done.detail
    assert done.state_after is InstanceState.STOPPED
    again = provider.stop(nb, dry_run=False)
    assert again.outcome is ActionOutcome.SKIPPED and "Stopped now, not InService" in again.detail
    started = provider.start(nb, dry_run=False)
    assert started.outcome is ActionOutcome.DONE
    assert _sm().describe_notebook_instance(NotebookInstanceName="nb")[
        "NotebookInstanceStatus"] == "InService"


def test_a_notebook_recreated_under_its_name_is_not_the_one_decided_about(
        make_provider: ProviderFactory, clock: Any) -> None:
    arn = _notebook("nb")
    provider = _governing(make_provider())
    nb = next(i for i in provider.list_instances().instances if i.instance_id == arn)
    sm = _sm()
    sm.stop_notebook_instance(NotebookInstanceName="nb")
    sm.delete_notebook_instance(NotebookInstanceName="nb")
    assert provider.describe(nb) is None
    assert provider.stop(nb, dry_run=False).outcome is ActionOutcome.SKIPPED
    # the same name again, later: same ARN, another creation time
    recreated = nb.model_copy(update={"launch_time": nb.launch_time.replace(year=2020)})
    _notebook("nb")
    skipped = provider.stop(recreated, dry_run=False)
    assert skipped.outcome is ActionOutcome.SKIPPED and "recreated" in skipped.detail
    assert sm.describe_notebook_instance(NotebookInstanceName="nb")[
        "NotebookInstanceStatus"] == "InService"


def test_the_recheck_reads_tags_again_and_tags_are_set_and_removed(
        make_provider: ProviderFactory) -> None:
    arn = _notebook("nb", team="research")
    provider = _governing(make_provider())
    nb = next(i for i in provider.list_instances().instances if i.instance_id == arn)
    _sm().add_tags(ResourceArn=arn, Tags=[{"Key": "costguard:protect", "Value": "true"}])
    fresh = provider.describe_many([nb])[arn]
    assert fresh is not None and fresh.tags["costguard:protect"] == "true"
    assert fresh.kind is InstanceKind.NOTEBOOK
    tagged = provider.set_tags_many([nb], {"costguard:idle-since": "2026-12-01"},
                                   remove=["team"], dry_run=False)[arn]
    assert tagged.outcome is ActionOutcome.DONE
    tags = {t["Key"]: t["Value"] for t in _sm().list_tags(ResourceArn=arn)["Tags"]}
    assert tags == {"costguard:protect": "true", "costguard:idle-since": "2026-12-01"}
    refused = provider.set_tags(nb, {"aws:x": "1"}, dry_run=False)
    assert refused.outcome is ActionOutcome.FAILED and "reserved" in refused.detail


def test_a_role_that_may_not_list_notebooks_governs_none_and_other_failures_are_gaps(
        make_provider: ProviderFactory, session: boto3.Session,
        caplog: pytest.LogCaptureFixture) -> None:
    run_instances()
    _notebook("nb")
    answer = {"code": "AccessDeniedException", "status": 400}

    def refuse(request: AWSPreparedRequest, **_: Any) -> AWSResponse:
        return _json_error(request, answer["status"], str(answer["code"]))  # type: ignore[arg-type]

    session.events.register_first("before-send.sagemaker.ListNotebookInstances", refuse)
    provider = _governing(make_provider(max_attempts=1))
    with caplog.at_level(logging.WARNING):
        first = provider.list_instances()
        provider.list_instances()
    assert not first.gaps
    assert [i.kind for i in first.instances] == [InstanceKind.INSTANCE]
    said = [r.message for r in caplog.records if "notebook instances not listed" in r.message]
    assert len(said) == 1 and "providers.aws.notebooks: false" in said[0]
    answer.update(code="ServiceUnavailable", status=503)
    broken = provider.list_instances()
    assert [g.scope for g in broken.gaps] == [f"123456789012/{REGION}/notebooks"]
    assert [i.kind for i in broken.instances] == [InstanceKind.INSTANCE]


def test_notebooks_are_listed_only_while_a_notebook_policy_governs_them(
        make_provider: ProviderFactory, session: boto3.Session) -> None:
    _notebook("nb")
    asked: list[str] = []
    session.events.register("before-send.sagemaker", lambda **kw: asked.append(kw["event_name"]))
    assert not [i for i in make_provider().list_instances().instances  # no notebook policy
                if notebooks.is_notebook(i)]
    instances_only = make_provider()
    instances_only.govern(frozenset({"instance"}))
    assert not [i for i in instances_only.list_instances().instances
                if notebooks.is_notebook(i)]
    switched_off = _governing(make_provider(notebooks=False))
    assert not [i for i in switched_off.list_instances().instances if notebooks.is_notebook(i)]
    assert asked == []  # not one SageMaker call


def test_ml_types_are_named_after_ec2_types() -> None:
    assert notebooks.ec2_type("ml.p4d.24xlarge") == "p4d.24xlarge"
    assert notebooks.ec2_type("ml.g6e.2xlarge") == "g6e.2xlarge"
    assert notebooks.ec2_type("g5.xlarge") == "g5.xlarge"


NOTEBOOK_STOP_POLICY = """\
policies:
  - name: idle-notebooks
    resource: notebook
    mode: enforce
    filters: {gpu: true, state: running}
    condition:
      idle: {below: 5, for: 30m}
    actions:
      - notify: {to: owner}
      - stop: {grace: 15m}
"""


def test_an_idle_notebook_is_warned_then_stopped_by_the_engine_and_an_idle_vm_is_not(
        make_provider: ProviderFactory, clock: Any, tmp_path: Path) -> None:
    """End to end: the notebook's agent publishes to CloudWatch by the notebook's ARN
    (`--publish-to cloudwatch --instance-id ARN`), the engine reads it as a notebook's GPU,
    warns, and at the deadline stops the notebook through SageMaker; an EC2 instance as idle
    is no notebook policy's to stop."""
    from costguard.alerts.settings import AlertsSettings
    from costguard.config import Settings
    from costguard.engine import Engine
    from costguard.policy.load import parse_policy_text
    from costguard.store.db import Database

    arn = _notebook("idle-nb")
    vm = run_instances(itype="p3.2xlarge")[0]["InstanceId"]
    cw: Any = boto3.client("cloudwatch", region_name=REGION)

    def idle_minutes(until: datetime) -> None:
        for ago in range(40, 0, -1):
            for who in (arn, vm):
                cw.put_metric_data(Namespace="CWAgent", MetricData=[{
                    "MetricName": "nvidia_smi_utilization_gpu",
                    "Timestamp": until - timedelta(minutes=ago), "Value": 0.0,
                    "Dimensions": [{"Name": "InstanceId", "Value": who},
                                   {"Name": "index", "Value": "0"}]}])

    db = Database(f"sqlite:///{tmp_path / 'cg.db'}")
    engine = Engine(Settings(database_url=db.url, policy_paths=[],
                             alerts=AlertsSettings(console=False)),
                    db, {"aws": make_provider(cloudwatch={"instance_dimension": True})},
                    parse_policy_text(NOTEBOOK_STOP_POLICY, "p.yml"), clock)
    idle_minutes(clock.now().replace(second=0, microsecond=0))
    engine.run_cycle()
    assert _sm().describe_notebook_instance(NotebookInstanceName="idle-nb")[
        "NotebookInstanceStatus"] == "InService"  # warned first
    clock.advance(timedelta(minutes=20))
    idle_minutes(clock.now().replace(second=0, microsecond=0))
    engine.run_cycle()
    assert _sm().describe_notebook_instance(NotebookInstanceName="idle-nb")[
        "NotebookInstanceStatus"] == "Stopped"
    ec2: Any = boto3.client("ec2", region_name=REGION)
    state = ec2.describe_instances(InstanceIds=[vm])["Reservations"][0]["Instances"][0]
    assert state["State"]["Name"] == "running"
    db.dispose()


def test_a_notebook_is_unpriced_until_an_override_gives_its_ml_type_a_rate(
        make_provider: ProviderFactory) -> None:
    """SageMaker's ML prices are not EC2's and costguard ships none: unpriced, never zero,
    until `costs.price_overrides` names the type (docs/notebooks.md, Prices)."""
    from costguard.costs.pricing import PriceCatalog, PriceOverrides

    _notebook("nb")
    provider = _governing(make_provider())
    (nb,) = [i for i in provider.list_instances().instances if notebooks.is_notebook(i)]
    assert provider.price(nb) is None
    assert PriceCatalog({"aws": provider.price}).quote(nb) is None
    overrides = PriceOverrides.model_validate({"prices": [{
        "provider": "aws", "instance_type": "ml.p3.2xlarge", "usd_per_hour": 3.825,
        "note": "SageMaker notebook ml.p3.2xlarge, us-east-1"}]})
    quote = PriceCatalog({"aws": provider.price}, overrides).quote(nb)
    assert quote is not None and quote.usd_per_hour == 3.825


def test_a_record_without_what_costguard_keys_it_by_is_left_out_not_a_crash() -> None:
    """A listing entry without its ARN, name or creation time (the model marks none of them
    required) is not known, so never acted on; the others are listed."""
    from costguard.providers.aws.gpu_types import GpuSpec

    good = {"NotebookInstanceName": "nb", "NotebookInstanceArn": f"arn:aws:sagemaker:{REGION}:"
            "123456789012:notebook-instance/nb", "NotebookInstanceStatus": "InService",
            "InstanceType": "ml.p3.2xlarge", "CreationTime": datetime(2026, 12, 1)}

    class Client:
        def list_notebook_instances(self, **_: Any) -> dict[str, Any]:
            broken = [{k: v for k, v in good.items() if k != key} for key in notebooks.NEEDED]
            return {"NotebookInstances": [*broken, good]}

        def list_tags(self, **_: Any) -> dict[str, Any]:
            return {"Tags": []}

    listed = notebooks.read_scope(Client(), account="123456789012", region=REGION,
                                  gpus=lambda types: {"p3.2xlarge": GpuSpec(1, "V100", 16384)},
                                  observed_at=datetime(2026, 12, 2))
    assert [i.name for i in listed] == ["nb"]
