"""Accounts share one client per (region, service); each call is signed with its own account's
credentials, and a call without an account is refused, never signed as the ambient one."""

from __future__ import annotations

from typing import Any

import boto3
import pytest
from aws_helpers import REGION, ProviderFactory

from costguard.errors import ProviderError
from costguard.providers.aws.sessions import AccountScope

pytestmark = pytest.mark.usefixtures("moto")

ACCOUNTS = [AccountScope(a, f"arn:aws:iam::{a}:role/CostguardRole")
            for a in ("111111111111", "222222222222")]


def test_accounts_share_clients_and_read_their_own_instances(
    make_provider: ProviderFactory, session: boto3.Session
) -> None:
    provider = make_provider(accounts=[{"id": a.account_id} for a in ACCOUNTS])
    created: list[str] = []
    for service in ("ec2", "sts"):
        session.events.register(f"creating-client-class.{service}",
                                lambda service=service, **_: created.append(service))
    for account in ACCOUNTS:
        ec2 = provider.clients.ec2(account, REGION)
        ec2.run_instances(ImageId="ami-12c6146b", MinCount=1, MaxCount=1,
                          InstanceType="g5.xlarge")
    inventory = provider.list_instances()
    assert sorted({i.account for i in inventory.instances}) == ["111111111111", "222222222222"]
    assert len(inventory.instances) == 2
    # one EC2 client for both accounts, and one STS client assumed both roles
    assert sorted(created) == ["ec2", "sts"]
    assert provider.clients.ec2(ACCOUNTS[0], REGION)._client is \
        provider.clients.ec2(ACCOUNTS[1], REGION)._client  # type: ignore[attr-defined]


def test_each_call_is_signed_with_its_accounts_credentials(
    make_provider: ProviderFactory, session: boto3.Session
) -> None:
    provider = make_provider(accounts=[{"id": a.account_id} for a in ACCOUNTS])
    signed: list[str] = []

    def key_id(request: Any, **_: Any) -> None:
        auth = request.headers.get("Authorization", b"")
        auth = auth.decode() if isinstance(auth, bytes) else auth
        signed.append(auth.split("Credential=")[1].split("/")[0])

    session.events.register("before-send.ec2", key_id)
    keys = [provider.clients.credentials_for(a).get_frozen_credentials().access_key
            for a in ACCOUNTS]
    assert keys[0] != keys[1]
    for account in [*ACCOUNTS, ACCOUNTS[0]]:
        provider.clients.ec2(account, REGION).describe_instances()
    assert signed == [keys[0], keys[1], keys[0]]


def test_a_call_on_a_shared_client_without_an_account_is_refused(
    make_provider: ProviderFactory,
) -> None:
    provider = make_provider(accounts=[{"id": a.account_id} for a in ACCOUNTS])
    bound = provider.clients.ec2(ACCOUNTS[0], REGION)
    shared = bound._client  # type: ignore[attr-defined]
    with pytest.raises(ProviderError, match="without an account"):
        shared.describe_instances()
    bound.describe_instances()  # through the account: signed and answered
