"""Assumed-role sessions share the base session's data loader: one parse of each service
model per process, whatever the number of accounts."""

from __future__ import annotations

import boto3
import pytest
from aws_helpers import REGION, ProviderFactory

from costguard.providers.aws.sessions import AccountScope

pytestmark = pytest.mark.usefixtures("moto")


def test_accounts_share_the_base_loader_and_read_their_own_instances(
    make_provider: ProviderFactory, session: boto3.Session
) -> None:
    provider = make_provider(accounts=[{"id": "111111111111"}, {"id": "222222222222"}])
    base_loader = session._session.get_component("data_loader")
    paths = list(base_loader.search_paths)
    accounts = [AccountScope(a, f"arn:aws:iam::{a}:role/CostguardRole")
                for a in ("111111111111", "222222222222")]
    sessions = [provider.clients.session_for(a) for a in accounts]
    for assumed in sessions:
        assert assumed is not session
        assert assumed._session.get_component("data_loader") is base_loader
        assert assumed.get_credentials() is not None
    assert base_loader.search_paths == paths  # boto3's data path is not appended again
    for account in accounts:
        ec2 = provider.clients.ec2(account, REGION)
        ec2.run_instances(ImageId="ami-12c6146b", MinCount=1, MaxCount=1,
                          InstanceType="g5.xlarge")
    inventory = provider.list_instances()
    assert sorted({i.account for i in inventory.instances}) == ["111111111111", "222222222222"]
    assert len(inventory.instances) == 2
