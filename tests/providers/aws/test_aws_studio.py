"""SageMaker Studio's apps through the AWS provider. moto 5.2 does not implement Studio's
apps and spaces: `costguard/demo/aws_studio.py` serves ListApps, DescribeApp, DeleteApp and
a space's tags from moto's own SageMaker endpoint, as the API reference shapes them (moto's
serializer writes them from botocore's service model). An app on an ML instance of its own
is a notebook with its space's tags; stopping the space deletes its app after a fresh read,
only the app decided about; starting one is its user's; the notebook instances beside them
are moto's own."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import boto3
import pytest
from aws_helpers import REGION, ProviderFactory

from costguard.demo.aws_studio import ACCOUNT, Studio, app
from costguard.model import ActionOutcome, InstanceKind, InstanceState
from costguard.providers.aws import studio
from costguard.providers.aws.studio import holder_arn

pytestmark = pytest.mark.usefixtures("moto")
DOMAIN = "d-abcdefghijkl"


@pytest.fixture
def held(studio: Studio) -> Studio:
    return studio


def _governing(provider: Any) -> Any:
    provider.govern(frozenset({"notebook"}))
    return provider


def _space_tags(space: str, **tags: str) -> None:
    boto3.client("sagemaker", region_name=REGION).add_tags(
        ResourceArn=holder_arn(ACCOUNT, REGION, DOMAIN, "space", space),
        Tags=[{"Key": k, "Value": v} for k, v in tags.items()])


def test_apps_on_their_own_instance_are_notebooks_with_their_spaces_tags(
        make_provider: ProviderFactory, held: Studio) -> None:
    held.apps[(ACCOUNT, REGION)] = [
        app(DOMAIN, "ana-lab", "ml.p3.2xlarge"),
        app(DOMAIN, "bo-code", "ml.t3.medium", app_type="CodeEditor"),
        app(DOMAIN, "", "system", app_type="JupyterServer", user="chen"),  # Studio's own
        app(DOMAIN, "old", "ml.p3.2xlarge", status="Deleted"),
        app(DOMAIN, "gone-wrong", "ml.p3.2xlarge", status="Failed"),
        app(DOMAIN, "", "ml.p3.2xlarge", app_type="KernelGateway", name="datascience-gpu",
            user="dee"),
    ]
    _space_tags("ana-lab", team="research", owner="ana@example.com")
    listed = _governing(make_provider()).list_instances()
    assert not listed.gaps
    by_id = {i.instance_id: i for i in listed.instances}
    assert set(by_id) == {f"{DOMAIN}/space/ana-lab/JupyterLab/default",
                          f"{DOMAIN}/space/bo-code/CodeEditor/default",
                          f"{DOMAIN}/user/dee/KernelGateway/datascience-gpu"}
    lab = by_id[f"{DOMAIN}/space/ana-lab/JupyterLab/default"]
    assert (lab.kind, lab.name, lab.instance_type, lab.state, lab.gpu_count, lab.gpu_model) == (
        InstanceKind.NOTEBOOK, "ana-lab", "ml.p3.2xlarge", InstanceState.RUNNING, 1,
        "NVIDIA V100")
    assert lab.tags == {"team": "research", "owner": "ana@example.com"}
    assert studio.is_app(lab) and by_id[f"{DOMAIN}/space/bo-code/CodeEditor/default"].gpu_count == 0


def test_stopping_a_space_deletes_its_app_after_a_fresh_read(
        make_provider: ProviderFactory, held: Studio) -> None:
    held.apps[(ACCOUNT, REGION)] = [app(DOMAIN, "ana-lab", "ml.p3.2xlarge")]
    provider = _governing(make_provider())
    (lab,) = provider.list_instances().instances
    dry = provider.stop(lab, dry_run=True)
    assert dry.outcome is ActionOutcome.DRY_RUN and "would stop Studio space ana-lab" in dry.detail
    assert held.deleted == []
    _space_tags("ana-lab", **{"costguard:protect": "true"})
    fresh = provider.describe_many([lab])[lab.instance_id]  # what the re-check reads
    assert fresh is not None and fresh.tags["costguard:protect"] == "true"
    done = provider.stop_many([lab], dry_run=False)[lab.instance_id]
    assert done.outcome is ActionOutcome.DONE and "DeleteApp" in done.detail
    assert held.deleted == [held.apps[(ACCOUNT, REGION)][0]["AppArn"]]
    again = provider.stop(lab, dry_run=False)
    assert again.outcome is ActionOutcome.SKIPPED and "Deleting now, not InService" in again.detail
    started = provider.start(lab, dry_run=False)
    assert started.outcome is ActionOutcome.SKIPPED and "started from Studio" in started.detail


def test_an_app_made_again_or_gone_is_not_the_one_decided_about(
        make_provider: ProviderFactory, held: Studio) -> None:
    held.apps[(ACCOUNT, REGION)] = [app(DOMAIN, "ana-lab", "ml.p3.2xlarge")]
    provider = _governing(make_provider())
    (lab,) = provider.list_instances().instances
    held.apps[(ACCOUNT, REGION)] = [app(DOMAIN, "ana-lab", "ml.p3.2xlarge",
                                        created=datetime(2026, 12, 1, 9, tzinfo=UTC))]
    remade = provider.stop(lab, dry_run=False)
    assert remade.outcome is ActionOutcome.SKIPPED and "made again" in remade.detail
    held.apps[(ACCOUNT, REGION)] = []
    assert provider.describe(lab) is None
    assert provider.stop(lab, dry_run=False).outcome is ActionOutcome.SKIPPED
    assert held.deleted == []


def test_tags_go_on_the_space(make_provider: ProviderFactory, held: Studio) -> None:
    held.apps[(ACCOUNT, REGION)] = [app(DOMAIN, "ana-lab", "ml.p3.2xlarge")]
    _space_tags("ana-lab", team="research")
    provider = _governing(make_provider())
    (lab,) = provider.list_instances().instances
    done = provider.set_tags(lab, {"costguard:idle-since": "2026-12-01"}, remove=["team"],
                             dry_run=False)
    assert done.outcome is ActionOutcome.DONE
    assert held.tags[holder_arn(ACCOUNT, REGION, DOMAIN, "space", "ana-lab")] == {
        "costguard:idle-since": "2026-12-01"}


def test_names_too_long_to_keep_are_left_out_and_said(
        make_provider: ProviderFactory, held: Studio, caplog: pytest.LogCaptureFixture) -> None:
    held.apps[(ACCOUNT, REGION)] = [app(DOMAIN, "s" * 63, "ml.p3.2xlarge", name="a" * 60),
                                    app(DOMAIN, "ana-lab", "ml.p3.2xlarge")]
    listed = _governing(make_provider()).list_instances()
    assert [i.name for i in listed.instances] == ["ana-lab"]
    assert any("1 Studio apps not listed" in r.getMessage() for r in caplog.records)
