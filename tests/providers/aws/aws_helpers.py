"""Helpers shared by the AWS provider tests (imported by name; not fixtures)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import boto3
from botocore.awsrequest import AWSPreparedRequest, AWSResponse
from botocore.compat import HTTPHeaders

from costguard.providers.aws import AwsProvider
from tests.providers.policies import IDLE_NOTIFY_POLICY as IDLE_NOTIFY_POLICY

REGION = "us-east-1"
AMI = "ami-12c6146b"  # moto's EXAMPLE_AMI_ID

ProviderFactory = Callable[..., AwsProvider]


class Slept:
    """What botocore wanted to wait: retry back-offs and adaptive rate-limiter waits."""

    def __init__(self) -> None:
        self.backoffs: list[float] = []
        self.throttle_waits: list[float] = []


class _Raw:
    def __init__(self, body: bytes) -> None:
        self._body = body

    def stream(self, **_: Any) -> Iterator[bytes]:
        yield self._body


def xml_error(request: AWSPreparedRequest, status: int, code: str, message: str) -> AWSResponse:
    """An EC2/STS-style XML error, as AWS would send it."""
    if "sts." in (request.url or ""):
        body = (
            "<ErrorResponse><Error><Type>Sender</Type>"
            f"<Code>{code}</Code><Message>{message}</Message></Error>"
            "<RequestId>test</RequestId></ErrorResponse>"
        )
    else:
        body = (
            f"<Response><Errors><Error><Code>{code}</Code><Message>{message}</Message>"
            "</Error></Errors><RequestID>test</RequestID></Response>"
        )
    return AWSResponse(request.url, status, HTTPHeaders(), _Raw(body.encode()))


def run_instances(
    region: str = REGION, count: int = 1, itype: str = "g5.xlarge", **kwargs: Any
) -> list[dict[str, Any]]:
    ec2: Any = boto3.client("ec2", region_name=region)
    got: list[dict[str, Any]] = ec2.run_instances(
        ImageId=AMI, MinCount=count, MaxCount=count, InstanceType=itype, **kwargs
    )["Instances"]
    return got


SPOT: dict[str, Any] = {
    "InstanceMarketOptions": {
        "MarketType": "spot",
        "SpotOptions": {"SpotInstanceType": "persistent", "InstanceInterruptionBehavior": "stop"},
    }
}
