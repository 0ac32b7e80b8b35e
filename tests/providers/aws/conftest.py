"""Fixtures for the AWS provider: moto in-process, fault injection through botocore hooks."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import boto3
import pytest
from aws_helpers import REGION, ProviderFactory, Slept
from botocore.retries.bucket import TokenBucket
from moto import mock_aws

from costguard.clock import ManualClock
from costguard.demo.aws_studio import Studio, serving
from costguard.providers.aws import AwsProvider, AwsSettings

_ROOT = Path(__file__).resolve().parents[3]
if str(_ROOT) not in sys.path:  # tests/fakes is not a package on the import path by default
    sys.path.insert(0, str(_ROOT))


@pytest.fixture(autouse=True)
def aws_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fake credentials and no ambient config, so nothing can reach real AWS."""
    for var in ("AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_DEFAULT_PROFILE", "AWS_ROLE_ARN"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/dev/null")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    # moto loads ~1,300 default AMIs per region backend (0.3 s each); the tests need none.
    monkeypatch.setenv("MOTO_EC2_LOAD_DEFAULT_AMIS", "false")


@pytest.fixture
def moto() -> Iterator[None]:
    with mock_aws():
        yield


@pytest.fixture
def studio() -> Iterator[Studio]:
    """moto's SageMaker with Studio's apps and spaces (which moto lacks) served by
    costguard/demo/aws_studio.py, none held until a test adds some."""
    with serving() as held:
        yield held


@pytest.fixture
def no_sleep(monkeypatch: pytest.MonkeyPatch) -> Slept:
    """Record botocore's waits instead of waiting: retry back-off sleeps in the endpoint, and
    the adaptive mode's token bucket (which otherwise blocks on a condition variable)."""
    slept = Slept()
    monkeypatch.setattr("botocore.endpoint.time.sleep", slept.backoffs.append)
    original = TokenBucket._sleep_amount  # type: ignore[attr-defined]

    def no_wait(bucket: TokenBucket, amount: int) -> float:
        wanted = original(bucket, amount)
        if wanted > 0:
            slept.throttle_waits.append(wanted)
        return 0.0

    monkeypatch.setattr(TokenBucket, "_sleep_amount", no_wait)
    return slept


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(datetime.now(UTC))


@pytest.fixture
def session() -> boto3.Session:
    return boto3.Session(region_name=REGION)


@pytest.fixture
def make_provider(clock: ManualClock, session: boto3.Session) -> ProviderFactory:
    def make(**settings: Any) -> AwsProvider:
        settings.setdefault("regions", [REGION])
        return AwsProvider(AwsSettings(**settings), clock=clock, session=session)

    return make


@pytest.fixture
def capacity() -> Iterator[dict[tuple[str, str], list[dict[str, Any]]]]:
    """moto's EC2 answers DescribeCapacityReservations (a fake following the API reference,
    costguard/demo/aws_capacity.py): the test puts records under (account, region)."""
    from costguard.demo.aws_capacity import serving

    with serving() as held:
        yield held
