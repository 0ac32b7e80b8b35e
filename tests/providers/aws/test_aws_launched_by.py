"""launched_by on AWS: the instance profile ARN from DescribeInstances, no extra call."""

from __future__ import annotations

import boto3
import pytest
from aws_helpers import REGION, ProviderFactory, run_instances

pytestmark = pytest.mark.usefixtures("moto")


def test_launched_by_is_the_instance_profile_arn(make_provider: ProviderFactory) -> None:
    iam = boto3.client("iam", region_name=REGION)
    arn = iam.create_instance_profile(InstanceProfileName="vision-train")["InstanceProfile"]["Arn"]
    (with_profile,) = run_instances(IamInstanceProfile={"Name": "vision-train"})
    (without,) = run_instances()

    provider = make_provider()
    seen = {i.instance_id: i for i in provider.list_instances().instances}

    assert arn.endswith(":instance-profile/vision-train")
    assert seen[with_profile["InstanceId"]].launched_by == arn
    assert seen[without["InstanceId"]].launched_by is None
